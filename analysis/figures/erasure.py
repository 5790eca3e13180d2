"""The LEACE erasure table by depth (:mod:`analysis.causal.erasure`): the loss change beyond the placebo with its
interval, the sizes of the two edits, and the concept's probe before and after, per variant and concept."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.figures.style import TWO_COLUMNS, short_hook, subplots, variant_colours


def _label(hook: str) -> str:
    """``L1 in``, ``L1 mid``, ``L1 out`` for the residual stream; :func:`~analysis.figures.style.short_hook`
    otherwise."""
    parts = hook.split(".")
    if len(parts) == 3 and parts[0] == "blocks":
        name = {"hook_resid_pre": "in", "hook_resid_mid": "mid", "hook_resid_post": "out"}.get(parts[2])
        if name is not None:
            return f"L{parts[1]} {name}"
    return short_hook(hook)


def _positions(df: pd.DataFrame) -> tuple[dict, list[str]]:
    """An x position per hook point, in depth order (hook points off the residual stream after, in given order)."""
    hooks = list(dict.fromkeys(df.hook))
    depth = df.drop_duplicates("hook").set_index("hook").depth
    order = sorted(hooks, key=lambda h: (np.isnan(depth[h]), depth[h] if not np.isnan(depth[h]) else 0,
                                         hooks.index(h)))
    return {h: i for i, h in enumerate(order)}, order


def _variant_lines(ax, bx, cx, g: pd.DataFrame, col, label: str) -> None:
    """One variant's rows ``g`` of one concept in its three panels: the estimand, the edit sizes and the probe."""
    le = g[g.condition == "leace"].sort_values("x")
    err = np.vstack([le.minus_placebo - le.minus_placebo_lo, le.minus_placebo_hi - le.minus_placebo])
    ax.errorbar(le.x, le.minus_placebo, yerr=np.nan_to_num(err), color=col, marker="o", ms=4, capsize=2,
                linewidth=1.2, label=label)
    bx.plot(le.x, le.edit_norm, color=col, marker="o", ms=4, linewidth=1.2)
    pl = g[g.condition == "placebo"]
    bx.scatter(pl.x, pl.edit_norm, facecolors="none", edgecolors=col, s=16, linewidths=0.9)
    mean = pl.groupby("x").edit_norm.mean()
    bx.plot(mean.index, mean.values, color=col, linestyle=":", linewidth=1)
    none = g[g.condition == "none"].sort_values("x")
    cx.plot(none.x, none.probe, color=col, linestyle="--", marker="s", ms=3, linewidth=1)
    cx.plot(le.x, le.probe, color=col, marker="o", ms=4, linewidth=1.2)


def _dress_concept(ax, bx, cx, df: pd.DataFrame, concept: str, pos: dict, order: list[str]) -> None:
    """A concept's column: the majority baseline, the zero line, title, scales, limits, ticks and grid."""
    maj = df[(df.concept == concept) & (df.condition == "leace")].groupby("hook").majority.mean()
    cx.scatter([pos[h] for h in maj.index], maj.values, marker="_", s=260, color="k", linewidths=1.4, zorder=4)
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_title(f"erasing {concept}", fontsize=9)
    bx.set_yscale("log")
    cx.set_xlim(-0.5, len(order) - 0.5)
    cx.set_ylim(0, 1.05)
    cx.set_xticks(range(len(order)), [_label(h) for h in order], fontsize=7)
    cx.set_xlabel("hook point (residual stream)", fontsize=8)
    for a in (ax, bx, cx):
        a.grid(axis="y", color="0.9")
        a.set_axisbelow(True)
        a.tick_params(which="both", labelsize=7)


def _rows_explained(fig, axes, df: pd.DataFrame) -> None:
    """The rows' labels, the figure's one legend (the variants' colours, then each row's marks) and the title."""
    axes[0, 0].set_ylabel("LEACE minus placebo\nloss change (nats/token)", fontsize=8)
    axes[1, 0].set_ylabel("edit size: mean\n||x - x_erased||^2", fontsize=8)
    axes[2, 0].set_ylabel("held-out probe\naccuracy", fontsize=8)
    variants, _ = axes[0, -1].get_legend_handles_labels()
    key = [Line2D([], [], color="k", marker="o", ms=4, label="LEACE (middle row)"),
           Line2D([], [], color="k", marker="o", ms=4, mfc="none", linestyle="none", label="placebo draws (middle)"),
           Line2D([], [], color="k", linestyle=":", label="placebo mean (middle)"),
           Line2D([], [], color="k", linestyle="--", marker="s", ms=3, label="before erasure (bottom row)"),
           Line2D([], [], color="k", marker="o", ms=4, label="after LEACE (bottom)"),
           Line2D([], [], color="k", marker="_", ms=10, mew=1.4, linestyle="none", label="majority baseline (bottom)")]
    fig.legend(handles=variants + key, loc="outside right center", frameon=False, fontsize=7, title_fontsize=7,
               alignment="left", title="colour: variant\n(top row: 95% t interval\nover held-out sequences)")
    first = df.iloc[0]
    draws = int(df[df.condition == "placebo"].draw.nunique())
    fig.suptitle(f"LEACE erasure by depth; placebo: LEACE of {draws} random type-level concepts with the same label "
                 f"distribution\n(fitted on {int(first.n_fit_sequences)} sequences, measured on "
                 f"{int(first.n_test_sequences)} held-out ones)", fontsize=8)


def erasure_depth_figure(df: pd.DataFrame):
    """Three rows per concept (columns): the estimand ``minus_placebo`` (LEACE's loss change minus the placebo's,
    95% t interval over held-out sequences), ``edit_norm`` of LEACE and of each placebo draw (log scale), and the
    concept's held-out probe accuracy before erasure, after LEACE, and the majority baseline; one colour per variant
    (``variant`` column, else ``interface`` from the table's attrs)."""
    df = df.copy()
    if "variant" not in df.columns:
        df["variant"] = df.attrs.get("interface", "model")
    variants = list(dict.fromkeys(df.variant))
    colours = variant_colours(variants)
    concepts = list(dict.fromkeys(df.concept))
    pos, order = _positions(df)
    width = max(TWO_COLUMNS, (0.55 * len(order) + 1.2) * len(concepts) + 2.0)
    fig, axes = subplots(2, height=6.4, nrows=3, ncols=len(concepts), sharex=True)
    fig.set_figwidth(width)
    shift = {v: (i - (len(variants) - 1) / 2) * 0.08 for i, v in enumerate(variants)}
    for c, concept in enumerate(concepts):
        ax, bx, cx = axes[:, c]
        for v in variants:
            g = df[(df.variant == v) & (df.concept == concept)].assign(x=lambda t: t.hook.map(pos) + shift[v])
            _variant_lines(ax, bx, cx, g, colours[v], v)
        _dress_concept(ax, bx, cx, df, concept, pos, order)
    _rows_explained(fig, axes, df)
    return fig


__all__ = ["erasure_depth_figure"]

"""The output side: the logit lens across depth and the head's geometry (:mod:`analysis.readouts.lens`,
:mod:`analysis.readouts.head`)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.figures.style import short_hook, subplots, variant_colours


def lens_figure(frames: dict, *, title: str | None = None):
    """Accuracy and KL to the final distribution against depth, variants side by side on the same axes."""
    colours = variant_colours(frames)
    fig, axes = subplots(2, height=2.6, ncols=2)
    for v, df in frames.items():
        x = df.depth.to_numpy()
        for ax, k in zip(axes[0], ("accuracy", "kl")):
            ax.plot(x, df[k], marker="o", markersize=3, color=colours[v], label=v)
            ax.fill_between(x, df[f"{k}_lo"], df[f"{k}_hi"], color=colours[v], alpha=0.2, linewidth=0)
    hooks = next(iter(frames.values())).hook
    labels = ["input" if h == "blocks.0.hook_resid_pre" else short_hook(h).replace(".hook_resid_post", " out")
              for h in hooks]
    for ax, label in zip(axes[0], ("next-token accuracy of the lens", "KL(final || lens) (nats)")):
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(color="0.9")
    axes[0, 0].legend(fontsize=7, frameon=False)
    n = next(iter(frames.values())).attrs.get("n_tokens")
    fig.suptitle(title or f"logit lens: the final norm and head applied at each depth ({n:,} tokens; bands: 95% "
                 "interval over sequences)", fontsize=9, x=0.02, ha="left")
    return fig


#: How each lens is drawn in :func:`lens_comparison_figure`.
LENS_STYLES = {"logit": dict(ls="--", marker="o", mfc="white"), "tuned": dict(ls="-", marker="o"),
               "jacobian": dict(ls=":", marker="s")}


def lens_comparison_figure(frames: dict, *, title: str | None = None):
    """KL to the final distribution and next-token accuracy against depth: the logit lens (dashed, open markers)
    beside the fitted lenses (tuned solid, Jacobian dotted) of each variant, on the held-out half of the sequences."""
    colours = variant_colours(frames)
    fig, axes = subplots(2, height=2.6, ncols=2)
    first = next(iter(frames.values()))
    kinds = list(dict.fromkeys(first.kind))
    for v, df in frames.items():
        for kind in kinds:
            g = df[df.kind == kind]
            x = g.depth.to_numpy()
            for ax, k in zip(axes[0], ("kl", "accuracy")):
                ax.plot(x, g[k], markersize=3, color=colours[v], label=f"{v}, {kind} lens", **LENS_STYLES[kind])
                ax.fill_between(x, g[f"{k}_lo"], g[f"{k}_hi"], color=colours[v], alpha=0.15, linewidth=0)
    hooks = first[first.kind == "logit"].hook
    labels = ["input" if h == "blocks.0.hook_resid_pre" else short_hook(h).replace(".hook_resid_post", " out")
              for h in hooks]
    for ax, label in zip(axes[0], ("KL(final || lens) (nats)", "next-token accuracy of the lens")):
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("residual stream read", fontsize=7)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(color="0.9")
    axes[0, 1].legend(fontsize=6, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # off the curves
    a = first.attrs
    drawn = {"tuned": "tuned (solid)", "jacobian": "Jacobian (dotted)"}
    fig.suptitle(title or f"logit lens (dashed) beside the {' and '.join(drawn[k] for k in kinds[1:])} lens on "
                 f"{a.get('n_tokens', 0):,} held-out tokens (fitted on {a.get('n_fit_tokens', 0):,} others; bands: "
                 "95% interval over sequences)", fontsize=8, x=0.02, ha="left")
    return fig


_KINDS = {"canonical": dict(hatch=None, fill=True), "own code": dict(hatch="////", fill=True),
          "log-frequency": dict(hatch=None, fill=False)}


def _bars(ax, d, variants, colours, kinds, *, null=False):
    """Grouped bars: one group per variant, one bar per ``basis`` in ``kinds`` (solid: canonical bits, hatched: the
    model's own code, open: log-frequency), 95% intervals as error bars; ``null``: the frequency-binned null's 95%
    range as a grey box over each bar with its mean as a black tick."""
    ticks = []
    x = 0.0
    for v in variants:
        g = d[d.variant == v]
        start = x
        for basis in kinds:
            r = g[g.basis == basis]
            if not len(r):
                continue
            r = r.iloc[0]
            err = [[r.value - r.lo], [r.hi - r.value]] if np.isfinite(r.lo) else None
            style = _KINDS.get(basis, _KINDS["canonical"])
            ax.bar(x, r.value, 0.8, color=colours[v] if style["fill"] else "white",
                   edgecolor="white" if style["hatch"] else colours[v], hatch=style["hatch"],
                   linewidth=0.0 if style["hatch"] else 1.0, yerr=err, capsize=2, error_kw={"linewidth": 0.8})
            if null and np.isfinite(r.null_mean):
                ax.add_patch(plt.Rectangle((x - 0.45, r.null_lo), 0.9, r.null_hi - r.null_lo, color="0.55",
                                           alpha=0.45, linewidth=0, zorder=3))
                ax.plot([x - 0.45, x + 0.45], [r.null_mean] * 2, color="k", linewidth=1.0, zorder=4)
            x += 1
        ticks.append(((start + x - 1) / 2, v))
        x += 0.6
    ax.set_xticks([t for t, _ in ticks], [v for _, v in ticks], rotation=30, ha="right", fontsize=7)
    ax.axhline(0, color="k", linewidth=0.5)
    ax.tick_params(labelsize=7)
    ax.grid(axis="y", color="0.9")
    ax.set_axisbelow(True)


def _head_panels(df: pd.DataFrame) -> tuple[list, pd.DataFrame | None]:
    """``(panels, r2)``: ``(measure, bar kinds, y label, null)`` of each panel the table has rows for, and the R^2
    rows of the bits and of log-frequency under one measure (None for tables without log-frequency)."""
    r2 = None
    panels = [("bits_r2", ["canonical", "own code"], "held-out R^2 of head rows", False)]
    if (df.measure == "logfreq_r2").any():
        r2 = df[df.measure.isin(["bits_r2", "logfreq_r2"])].copy()
        r2["measure"] = "bits_r2"
        panels = [("r2", ["log-frequency", "canonical", "own code"], "held-out R^2 of head rows", False),
                  ("bits_partial_r2", ["canonical", "own code"], "partial R^2 of the bits\nbeyond log-frequency",
                   False)]
    if (df.measure == "debiased_cka_to_learned_input").any():
        panels += [("debiased_cka_to_learned_input", ["W_U vs learned W_E"],
                    "debiased CKA, head rows vs\na learned input table", True)]
    elif (df.measure == "cka_to_learned_input").any():
        panels += [("cka_to_learned_input", ["W_U vs learned W_E"], "linear CKA, head rows vs\nthe learned input "
                    "table", False)]
    if (df.measure == "nn_overlap").any():
        k = df[df.measure == "nn_overlap"].basis.iloc[0].rsplit("k=", 1)[-1]
        panels += [("nn_overlap", list(dict.fromkeys(df[df.measure == "nn_overlap"].basis)),
                    f"nearest-neighbour overlap ({k} nearest)\nwith a learned input table", True)]
    return panels, r2


def _head_handles(df: pd.DataFrame, panels: list) -> list:
    """The legend's entries: the bars' kinds, and the null and chance level where the table has them."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor="0.4", edgecolor="0.4", label="canonical bits"),
               Patch(facecolor="0.4", edgecolor="white", hatch="////", label="the model's own code")]
    if any(m == "r2" for m, *_ in panels):
        handles.insert(0, Patch(facecolor="white", edgecolor="0.4", label="log-frequency alone"))
    if df.null_mean.notna().any():
        handles.append(Patch(facecolor="0.55", alpha=0.45, label="within-frequency-bin null, 95% range (tick: "
                             "mean)"))
    if (df.measure == "nn_overlap_chance").any():
        handles.append(Line2D([], [], color="k", linewidth=0.8, linestyle="--", label="overlap of unrelated "
                              "tables, k/(V-1)"))
    return handles


def _head_title(df: pd.DataFrame) -> str:
    """The default title: what the bars are, and the reference's seeds."""
    refs = df.dropna(subset=["reference_seed"]) if "reference_seed" in df else df.iloc[:0]
    ref = ("; reference: the learned input table of seed " + ", ".join(str(int(s)) for s in
                                                                      dict.fromkeys(refs.reference_seed))
           if len(refs) else "")
    how = ("95% intervals; R^2 out of fold, bootstrap over tokens" if (df.measure == "logfreq_r2").any()
           else "the interval each row records")
    return f"the output head's geometry (bars: {how}{ref})"


def head_figure(df: pd.DataFrame, *, title: str | None = None):
    """Per variant: held-out R^2 of the head rows from code bits and from log-frequency alone, the bits' partial R^2
    beyond log-frequency, and, with a reference (a learned input table of another run), debiased CKA and
    nearest-neighbour overlap with it against the frequency-binned null (and the overlap's plain chance level).
    Tables of earlier versions (``bits_r2`` and biased CKA only) draw as before, without the new panels."""
    variants = list(dict.fromkeys(df.variant))
    colours = variant_colours(variants)
    for c in ("null_mean", "null_lo", "null_hi", "lo", "hi"):
        if c not in df:
            df = df.assign(**{c: np.nan})
    panels, r2 = _head_panels(df)
    ncols = 2 if len(panels) > 2 else len(panels)
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = subplots(2, height=2.5 * nrows, nrows=nrows, ncols=ncols)
    for ax, (measure, kinds, label, null) in zip(axes.flat, panels):
        d = r2 if measure == "r2" else df[df.measure == measure]
        _bars(ax, d, variants, colours, kinds, null=null)
        ax.set_ylabel(label, fontsize=7)
        if measure == "nn_overlap":
            chance = df[df.measure == "nn_overlap_chance"].value
            if len(chance):
                ax.axhline(float(chance.iloc[0]), color="k", linewidth=0.8, linestyle="--")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles = _head_handles(df, panels)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 3), fontsize=6.5,
               frameon=False)
    default = _head_title(df)
    fig.suptitle(title or default, fontsize=8, x=0.02, ha="left")
    return fig

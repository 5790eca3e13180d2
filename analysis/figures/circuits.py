"""Figures of direct logit attribution and path patching (:mod:`analysis.causal.dla`, :mod:`analysis.causal.paths`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm

from analysis.figures.patching import METRIC_LABELS
from analysis.figures.style import TWO_COLUMNS, subplots


def _annotate(ax, grid, fmt="{:+.2f}"):
    """Write each finite cell's value into it when the grid is small enough to read."""
    if grid.size > 96:
        return
    span = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 0.0
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=6,
                    color="white" if span and abs(v) > 0.6 * span else "black")


def _diverging(grid):
    span = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
    span = max(span, 1e-9)
    return TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)


def dla_figure(df: pd.DataFrame, *, title: str | None = None):
    """Two panels: each layer's attention and MLP (and the input) with 95% intervals over pairs, against the logit
    difference they sum to; and every head's direct logit attribution as a layer x head map."""
    if "pair" in df.columns:
        raise ValueError("plot an aggregated result (per_pair=False)")
    a = df.attrs
    L, H = a["n_layers"], a["n_heads"]
    fig, axes = subplots(2, height=max(2.6, 0.32 * L + 1.9), ncols=2, gridspec_kw={"width_ratios": [1.3, 1]})
    ax = axes[0, 0]
    bars = df[df.component.isin(["embed", "attn", "mlp", "ln_final_bias"]) & df["pos"].isna()]
    x = np.arange(len(bars))
    colours = {"embed": "#999999", "attn": "#0072B2", "mlp": "#E69F00", "ln_final_bias": "#CC79A7"}
    err = np.abs(np.stack([bars.value - bars.value_lo, bars.value_hi - bars.value]).astype(float))
    ax.bar(x, bars.value, color=[colours[c] for c in bars.component], yerr=np.nan_to_num(err), capsize=2,
           error_kw={"lw": 0.8})
    ax.axhline(0, color="k", lw=0.6)
    ax.axhline(a["logit_diff"], color="k", lw=0.8, ls="--",
               label=f"logit difference {a['logit_diff']:+.2f}\n(the bars' sum)")
    ax.legend(fontsize=6, loc="best", frameon=False)
    ax.set_xticks(x, [lbl.replace(".", " ") for lbl in bars.label], rotation=60, ha="right", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylabel("direct logit attribution\n(logits, answer - wrong)", fontsize=8)
    ax.set_title("input, attention and MLP per layer", fontsize=8.5)
    ax = axes[0, 1]
    heads = df[(df.component == "head") & df["pos"].isna()]
    grid = np.full((L, H), np.nan)
    grid[heads.layer.to_numpy(int), heads["head"].to_numpy(int)] = heads.value.to_numpy(float)
    im = ax.imshow(grid, cmap="RdBu_r", norm=_diverging(grid), aspect="auto", interpolation="nearest")
    _annotate(ax, grid)
    ax.set_xticks(range(H), [f"H{h}" for h in range(H)], fontsize=7)
    ax.set_yticks(range(L), [f"L{layer}" for layer in range(L)], fontsize=7)
    ax.set_xlabel("head", fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    ax.set_title("per head", fontsize=8.5)
    cb = fig.colorbar(im, ax=ax, fraction=0.06, pad=0.03)
    cb.set_label("logits (answer - wrong)", fontsize=7)
    cb.ax.tick_params(labelsize=6.5)
    fig.suptitle(title or f"direct logit attribution, {a['prompt']} prompts ({a['n_pairs']} pairs, final norm scale "
                 "frozen)", fontsize=9)
    return fig


def dla_positions_figure(df: pd.DataFrame, *, title: str | None = None, top: int = 12):
    """The ``top`` heads of largest direct attribution, split by the source position each moves it from
    (``by_position=True`` results): heads x positions, labelled with the first prompt's tokens."""
    if "pair" in df.columns or not df.attrs.get("by_position"):
        raise ValueError("plot an aggregated result computed with by_position=True")
    a = df.attrs
    heads = df[(df.component == "head") & df["pos"].isna()]
    keep = heads.reindex(heads.value.abs().sort_values(ascending=False).index)[:top].label.tolist()
    pos = df[(df.component == "head") & df["pos"].notna() & df.label.isin(keep)]
    grid = (pos.pivot(index="label", columns="pos", values="value").reindex(keep).to_numpy(float))
    tokens = [f"{t!r}"[1:-1].replace(" ", "\u2423") + f" ({i})" for i, t in enumerate(a["str_tokens"])]
    fig, axes = subplots(2, height=max(2.4, 0.26 * len(keep) + 1.6))
    ax = axes[0, 0]
    im = ax.imshow(grid, cmap="RdBu_r", norm=_diverging(grid), aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(tokens)), tokens, rotation=60, ha="right", fontsize=6.5)
    ax.set_yticks(range(len(keep)), keep, fontsize=7)
    ax.set_xlabel("source position (tokens of pair 0)", fontsize=8)
    ax.set_ylabel("head", fontsize=8)
    cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    cb.set_label("logits (answer - wrong)", fontsize=7)
    cb.ax.tick_params(labelsize=6.5)
    ax.set_title(title or f"direct logit attribution by source position, top {len(keep)} heads", fontsize=9)
    return fig


def paths_figure(df: pd.DataFrame, *, title: str | None = None):
    """Path patching of many senders into one receiver set: the effect (patched minus base run) of each head, each
    MLP and the input as a layer x (heads, MLP) map, down to the last layer with a sender; senders not run are blank."""
    if "pair" in df.columns:
        raise ValueError("plot an aggregated result (per_pair=False)")
    a = df.attrs
    L, H = a["n_layers"], a["n_heads"]
    grid = np.full((L + 1, H + 1), np.nan)  # row 0: the input; column H: the MLP
    eff = (df.value - a["baseline"]).to_numpy(float)
    for (_, r), e in zip(df.iterrows(), eff):
        if r.kind == "embed":
            grid[0, 0] = e
        elif r.kind == "head":
            grid[int(r.layer) + 1, int(r["head"])] = e
        else:
            grid[int(r.layer) + 1, H] = e
    top = int(df.layer.max()) + 1 if df.layer.notna().any() else 0
    grid, L = grid[:top + 1], top  # no rows for layers with no sender (downstream of every receiver)
    width = min(TWO_COLUMNS, 1.6 + 0.55 * (H + 1))
    fig, axes = subplots(1 if width <= 3.4 else 2, height=max(2.4, 0.36 * (L + 1) + 1.6))
    fig.set_size_inches(max(width, 3.4), fig.get_size_inches()[1])
    ax = axes[0, 0]
    im = ax.imshow(grid, cmap="RdBu_r", norm=_diverging(grid), aspect="auto", interpolation="nearest")
    _annotate(ax, grid)
    ax.set_xticks(range(H + 1), [f"H{h}" for h in range(H)] + ["MLP"], fontsize=7)
    ax.set_yticks(range(L + 1), ["input"] + [f"L{layer}" for layer in range(L)], fontsize=7)
    ax.set_xlabel("sender", fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    receivers = ", ".join(a["receivers"])
    if len(receivers) > 48:
        receivers = receivers[:45] + "..."
    head = title or f"path patching ({a['mode']}, {a['n_pairs']} pairs, norm {a['norm']})"
    ax.set_title(f"{head}\ninto {receivers}", fontsize=8)
    cb = fig.colorbar(im, ax=ax, fraction=0.06, pad=0.03)
    cb.set_label(f"effect on {METRIC_LABELS.get(a['metric'], a['metric'])}\n(patched - base run)", fontsize=6.5)
    cb.ax.tick_params(labelsize=6.5)
    return fig


__all__ = ["dla_figure", "dla_positions_figure", "paths_figure"]

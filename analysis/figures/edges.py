"""Figures of edge attribution (:mod:`analysis.causal.edges`): the writer x reader map of edge scores, and the scores
against exact edge patching."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures.circuits import _diverging
from analysis.figures.patching import METRIC_LABELS
from analysis.figures.style import TWO_COLUMNS, subplots


def _order(labels, kinds, layers, reader: bool):
    rank = {"embed": 0, "q": 0, "k": 1, "v": 2, "head": 1, "mlp": 2, "mlp_in": 3, "logits": 4}
    keys = {lab: ((-1 if pd.isna(layer) else int(layer)) if kind != "logits" else 10 ** 6, rank[kind], lab)
            for lab, kind, layer in zip(labels, kinds, layers)}
    return sorted(keys, key=lambda lab: keys[lab])


def _ticks(ax, axis, labels, info, side, most: int = 32):
    """Every label when there are few; otherwise one tick per layer and kind (``L1 q``: every head's query input
    of layer 1), with thin lines between the groups."""
    setter = ax.set_xticks if axis == "x" else ax.set_yticks
    if len(labels) <= most:
        setter(range(len(labels)), labels, fontsize=6, **({"rotation": 90} if axis == "x" else {}))
        return
    names = {"q": "q", "k": "k", "v": "v", "mlp_in": "mlp", "mlp": "mlp", "head": "heads"}
    groups = []
    for i, lab in enumerate(labels):
        kind, layer = info.loc[lab, f"{side}_kind"], info.loc[lab, f"{side}_layer"]
        name = kind if kind in ("embed", "logits") else f"L{int(layer)} {names[kind]}"
        if groups and groups[-1][0] == name:
            groups[-1][2] = i
        else:
            groups.append([name, i, i])
    setter([(a + b) / 2 for _, a, b in groups], [g[0] for g in groups], fontsize=6,
           **({"rotation": 90} if axis == "x" else {}))
    line = ax.axvline if axis == "x" else ax.axhline
    for _, a, _ in groups[1:]:
        line(a - 0.5, color="white", lw=0.6)


def edges_figure(df: pd.DataFrame, exact: pd.DataFrame | None = None, *, title: str | None = None):
    """The map of edge scores (one cell per writer x reader); with ``exact``
    (:func:`~analysis.causal.edges.exact_edge_effects`) a second panel of each edge's score against its exact
    patching effect."""
    if "position" in df.columns:
        raise ValueError("plot scores summed over positions (per_position=False)")
    a = df.attrs
    writers = _order(df.sender, df.sender_kind, df.sender_layer, False)
    readers = _order(df.receiver, df.receiver_kind, df.receiver_layer, True)
    grid = df.pivot_table(index="sender", columns="receiver", values="score", aggfunc="first")
    grid = grid.reindex(index=writers, columns=readers).to_numpy(float)
    panels = 2 if exact is not None else 1
    height = max(2.8, min(8.5, 0.12 * len(writers) + 1.6))
    fig, axes = subplots(2, height=height, ncols=panels, width_ratios=[3, 1.3] if panels == 2 else None)
    ax = axes[0, 0]
    cmap = __import__("matplotlib").colormaps["RdBu_r"].with_extremes(bad="#dddddd")
    im = ax.imshow(grid, cmap=cmap, norm=_diverging(grid), aspect="auto", interpolation="nearest")
    _ticks(ax, "x", readers, df.drop_duplicates("receiver").set_index("receiver"), "receiver")
    _ticks(ax, "y", writers, df.drop_duplicates("sender").set_index("sender"), "sender")
    ax.set_xlabel("reader (receiver)", fontsize=8)
    ax.set_ylabel("writer (sender)", fontsize=8)
    how = a["method"].upper() + (f", {a['steps']} steps over {a['interpolate']}" if a["method"] == "eap-ig" else "")
    ax.set_title(title or f"edge attribution ({how}; {a['mode']}, {a['n_pairs']} pairs)", fontsize=8)
    cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    cb.set_label(f"estimated effect on {METRIC_LABELS.get(a['metric'], a['metric'])}", fontsize=6.5)
    cb.ax.tick_params(labelsize=6.5)
    if exact is not None:
        from analysis.causal.edges import exact_agreement

        ax = axes[0, 1]
        both = df.merge(exact, on=["sender", "receiver"], how="inner")
        agree = exact_agreement(df, exact)
        ax.scatter(both.effect, both.score, s=6, alpha=0.6, color="#444444", linewidths=0)
        lim = float(np.nanmax(np.abs(np.r_[both.effect, both.score]))) * 1.05 or 1.0
        ax.plot([-lim, lim], [-lim, lim], color="#999999", lw=0.8, ls="--", label="estimate = exact")
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_xlabel("exact edge patching effect", fontsize=8)
        ax.set_ylabel("estimated score", fontsize=8)
        ax.set_title(f"{agree['n_edges']} edges: Spearman {agree['spearman']:.2f}\n"
                     f"(|.|: {agree['spearman_abs']:.2f}; top decile shared {agree['top_decile_overlap']:.0%})",
                     fontsize=7.5)
        ax.tick_params(labelsize=6.5)
        ax.legend(fontsize=6.5, frameon=False, loc="upper left")
    fig.set_size_inches(TWO_COLUMNS, height)
    return fig


__all__ = ["edges_figure"]

"""Figures of attribution graphs (:mod:`analysis.causal.attribution_graph`): the pruned graph laid out by position
(x, the prompt's tokens) and depth (y: input, each layer's transcoder features and errors, the logits)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures.style import subplots

#: Marker, colour and size of each kind of node.
NODE_STYLES = {"input": ("s", "#999999", 14), "feature": ("o", "#E69F00", 16), "error": ("D", "#CC79A7", 12),
               "logit": ("^", "#000000", 30)}


def _layout(nodes: pd.DataFrame) -> pd.DataFrame:
    """x: position, with the nodes of one (layer, position) cell spread across it; y: layer (input -1, logits on
    top)."""
    out = nodes.copy()
    out["y"] = out.layer.astype(float)
    x = out.position.astype(float).to_numpy().copy()
    for _, idx in out.groupby(["layer", "position"]).groups.items():
        k = len(idx)
        if k > 1:
            x[out.index.get_indexer(idx)] += np.linspace(-0.35, 0.35, k)
    out["x"] = x
    logits = out.kind == "logit"
    out.loc[logits, "x"] = out.position[logits].max() + np.linspace(-0.3, 0.3, int(logits.sum())) \
        if logits.sum() > 1 else out.loc[logits, "position"]
    return out


#: Colour of an edge by the sign of its weight.
EDGE_COLOURS = {"positive": "#0072B2", "negative": "#D55E00"}


def _key(fig) -> None:
    """The figure's one legend: a marker per kind of node, a colour per sign of edge, what a line's width says."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker=marker, color=colour, ls="", ms=size ** 0.5 + 1, label=kind)
               for kind, (marker, colour, size) in NODE_STYLES.items()]
    handles += [Line2D([], [], color=colour, lw=1.5, label=f"edge, {sign} weight")
                for sign, colour in EDGE_COLOURS.items()]
    fig.legend(handles=handles, fontsize=7, frameon=False, loc="outside lower center", ncols=len(handles),
               title="nodes (square: input code column; circle: transcoder feature; diamond: error; triangle: "
                     "logit) and edges (width and opacity: |weight| over the panel's largest)", title_fontsize=7)


def graph_figure(graphs: dict, *, max_edges: int = 400):
    """The pruned graph of each ``{title: AttributionGraph}``, one panel each: kept nodes (square: input, circle:
    transcoder feature, diamond: error, triangle: logit; input nodes only where a drawn edge leaves them) and the
    ``max_edges`` strongest kept edges (width: the absolute weight relative to the panel's largest; blue positive,
    vermillion negative), with one legend for the figure and each panel's node counts in its title."""
    fig, axes = subplots(2, height=2.3 * len(graphs) + 0.5, nrows=len(graphs))
    for ax, (title, g) in zip(axes[:, 0], graphs.items()):
        kept = g.nodes[g.nodes.kept & (g.nodes.kind != "bias")]
        edges = g.edges[g.edges.kept & g.edges.source.isin(kept.id) & g.edges.target.isin(kept.id)]
        edges = edges.reindex(edges.weight.abs().sort_values(ascending=False).index)[:max_edges]
        drawn = set(edges.source) | set(edges.target)
        nodes = _layout(kept[(kept.kind != "input") | kept.id.isin(drawn)].reset_index(drop=True))
        pos = nodes.set_index("id")[["x", "y"]]
        top = edges.weight.abs().max() if len(edges) else 1.0
        for e in edges[::-1].itertuples():
            (x0, y0), (x1, y1) = pos.loc[e.source], pos.loc[e.target]
            ax.plot([x0, x1], [y0, y1], color=EDGE_COLOURS["positive" if e.weight > 0 else "negative"],
                    lw=0.2 + 2.0 * abs(e.weight) / top, alpha=0.25 + 0.6 * abs(e.weight) / top, zorder=1)
        for kind, (marker, colour, size) in NODE_STYLES.items():
            sel = nodes[nodes.kind == kind]
            ax.scatter(sel.x, sel.y, marker=marker, c=colour, s=size, zorder=2, edgecolors="white", linewidths=0.3)
        prompt = g.attrs["prompt"]
        n_layers = int(g.nodes.layer.max())
        ax.set_xticks(range(len(prompt)), [t.replace("\n", "\\n") for t in prompt], fontsize=7, rotation=45,
                      ha="right")
        ax.set_yticks(range(-1, n_layers + 1), ["input"] + [f"L{i}" for i in range(n_layers)] + ["logits"],
                      fontsize=7)
        ax.set_xlim(-0.7, len(prompt) - 0.3)
        ax.grid(axis="y", color="0.92")
        n_kept = int(g.nodes.kept.sum()) - 1
        counts = ", ".join(f"{int((nodes.kind == k).sum())} {k}" for k in NODE_STYLES)
        ax.set_title(f"{title}: replacement {g.scores['replacement']:.2f}, completeness "
                     f"{g.scores['completeness']:.2f}\n{n_kept} of {len(g.nodes) - 1} nodes kept; drawn: {counts}",
                     fontsize=8)
    _key(fig)
    return fig


__all__ = ["NODE_STYLES", "EDGE_COLOURS", "graph_figure"]

"""Figures of circuits (:mod:`analysis.causal.circuits`): the faithfulness curve, and the circuit as a graph."""

from __future__ import annotations

import pandas as pd
from matplotlib.patches import FancyArrowPatch

from analysis.figures.patching import METRIC_LABELS
from analysis.figures.style import TWO_COLUMNS, subplots, variant_colour


def faithfulness_figure(curves: dict, *, title: str | None = None):
    """Recovered share against the number of edges (or writers) kept, one line per entry of ``curves``
    (``{label: faithfulness_curve(...)}``), with the area under each in the legend."""
    fig, axes = subplots(1, height=2.6)
    ax = axes[0, 0]
    first = next(iter(curves.values()))
    for label, c in curves.items():
        colour = variant_colour(str(label), list(curves))
        ax.plot(c.k, c.recovered, marker="o", ms=2.5, lw=1.2, color=colour,
                label=f"{label} (area {c.attrs['area']:.2f})")
    ax.axhline(1, color="#888888", lw=0.7, ls="--")
    ax.axhline(0, color="#888888", lw=0.7, ls=":")
    ax.set_xscale("symlog", linthresh=1)
    a = first.attrs
    ax.set_xlim(-0.4, a["total"] * 1.4)
    ax.set_xlabel(f"{a['unit']} kept, largest |score| first (of {a['total']})", fontsize=8)
    ax.set_ylabel("recovered share\n(1: clean, 0: corrupted)", fontsize=8)
    ax.set_title(title or f"faithfulness ({a['ablation']} ablation of the rest; {a['n_pairs']} pairs, "
                          f"{METRIC_LABELS.get(a['metric'], a['metric'])})", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6.5, frameon=False)
    return fig


def _positions(n_layers: int, n_heads: int) -> dict:
    pos = {"embed": ((n_heads - 1) / 2, 0.0), "logits": ((n_heads - 1) / 2, -(n_layers + 1.0))}
    for layer in range(n_layers):
        for h in range(n_heads):
            pos[f"L{layer}H{h}"] = (float(h), -(layer + 0.75))
        pos[f"L{layer}.mlp"] = (n_heads + 0.2, -(layer + 1.2))
    return pos


def circuit_figure(circuit: pd.DataFrame, n_layers: int, n_heads: int, *, title: str | None = None):
    """The kept edges (rows of an edge-score table: ``sender``, ``receiver``, ``receiver_kind``, ``score``) as a
    graph over every component of the model; components no kept edge touches are drawn faint."""
    pos = _positions(n_layers, n_heads)
    fig, axes = subplots(2 if n_heads > 6 else 1, height=max(2.8, 0.8 * n_layers + 1.6))
    ax = axes[0, 0]
    touched = set(circuit.sender)
    for r, kind in zip(circuit.receiver, circuit.receiver_kind):
        touched.add(r.split(".")[0] if kind in ("q", "k", "v") else r)
    for name, (x, y) in pos.items():
        on = name in touched
        marker = "s" if name.endswith(".mlp") else ("D" if name in ("embed", "logits") else "o")
        ax.scatter([x], [y], s=70 if on else 30, marker=marker, color="#333333" if on else "#cccccc", zorder=3)
        if on or name in ("embed", "logits"):
            ax.annotate(name, (x, y), xytext=(0, 6), textcoords="offset points", ha="center", fontsize=6, zorder=4)
    span = float(circuit.score.abs().max()) if len(circuit) else 1.0
    offset = {"q": -0.18, "k": 0.0, "v": 0.18}
    for r in circuit.itertuples():
        x0, y0 = pos[r.sender]
        if r.receiver_kind in ("q", "k", "v"):
            head = r.receiver.split(".")[0].replace("KV", "H")
            x1, y1 = pos[head]
            x1 += offset[r.receiver_kind]
            y1 += 0.12
        else:
            x1, y1 = pos[r.receiver]
        colour = "#c0392b" if r.score > 0 else "#2c6fbb"
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), connectionstyle="arc3,rad=0.15", arrowstyle="-|>",
                                     mutation_scale=6, lw=0.4 + 3.0 * abs(r.score) / span, color=colour,
                                     alpha=0.75, zorder=2))
    ax.set_xlim(-0.8, n_heads + 0.9)
    ax.set_ylim(-(n_layers + 1.5), 0.6)
    ax.set_yticks([0] + [-(layer + 0.75) for layer in range(n_layers)] + [-(n_layers + 1.0)],
                  ["input"] + [f"layer {layer}" for layer in range(n_layers)] + ["logits"], fontsize=7)
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.plot([], [], color="#c0392b", label="edge raising the metric")
    ax.plot([], [], color="#2c6fbb", label="edge lowering it")
    for marker, label in (("o", "head"), ("s", "MLP"), ("D", "input code / logits")):
        ax.scatter([], [], marker=marker, color="#333333", s=25, label=label)
    ax.scatter([], [], marker="o", color="#cccccc", s=20, label="untouched by the circuit")
    ax.legend(fontsize=6, frameon=False, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=2)
    ax.set_title(title or f"circuit: {len(circuit)} edges (width: |score|; into a head at its q, k, v)",
                 fontsize=8)
    if n_heads > 6:
        fig.set_size_inches(TWO_COLUMNS, fig.get_size_inches()[1])
    return fig


__all__ = ["faithfulness_figure", "circuit_figure"]

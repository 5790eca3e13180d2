"""Context use: loss against the context kept, and attention vs MLP ablation shares (:mod:`analysis.causal.context`)."""

from __future__ import annotations

import numpy as np

from analysis.figures.style import subplots, variant_colours


def context_figure(curves: dict, shares: dict | None = None):
    """Loss against the context available (log2 axis; the dotted line: the whole window), and the ablation
    shares of attention and MLP by layer, variants side by side."""
    colours = variant_colours(curves)
    fig, axes = subplots(2, height=2.6, ncols=2 if shares else 1)
    ax = axes[0, 0]
    for v, df in curves.items():
        d = df[df.k.notna()]
        ax.plot(d.k, d.loss, marker="o", markersize=3, color=colours[v], label=v)
        ax.fill_between(d.k, d.loss_lo, d.loss_hi, color=colours[v], alpha=0.2, linewidth=0)
        full = df[df.k.isna()]
        if len(full):
            ax.axhline(float(full.loss.iloc[0]), color=colours[v], linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens of context the model sees (k)", fontsize=8)
    ax.set_ylabel("next-token loss (nats)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(color="0.9")
    ax.legend(fontsize=7, frameon=False)
    ax.set_title("the same positions, context cut to k tokens (dotted: whole window)", fontsize=8)
    if shares:
        bx = axes[0, 1]
        variants = list(shares)
        width = 0.8 / len(variants)
        for j, v in enumerate(variants):
            df = shares[v]
            labels = [f"{c} L{int(layer)}" for c, layer in zip(df.component, df.layer)]
            x = np.arange(len(df)) + (j - (len(variants) - 1) / 2) * width
            bx.bar(x, df.share, width, color=colours[v], label=v)
        bx.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        bx.set_ylabel("share of the loss increase", fontsize=8)
        bx.tick_params(labelsize=7)
        bx.grid(axis="y", color="0.9")
        bx.set_axisbelow(True)
        bx.set_title("mean ablation of attention / MLP output by layer", fontsize=8)
    return fig

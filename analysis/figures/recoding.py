"""The loss change of a recoding family per variant (:mod:`analysis.causal.recoding`)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.figures.style import variant_colours

def recoding_plot(df: pd.DataFrame, *, title: str | None = None):
    """Loss change under a recoding family, one colour per variant (``variant`` column, else ``interface``).

    Families with a ladder of ``k`` (transvection walks, token permutations) draw the mean over draws as a line
    with a band from the smallest to the largest draw; ``offset`` draws one bar per code column; the others one
    point per draw and a bar at the mean."""
    family = df.family.iloc[0]
    label = "variant" if "variant" in df.columns else "interface"
    variants = list(dict.fromkeys(df[label]))
    colours = variant_colours(variants)
    if family == "offset":
        fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * df.k.nunique() * len(variants) + 1.5), 3.6))
        width = 0.8 / len(variants)
        for i, v in enumerate(variants):
            g = df[df[label] == v].sort_values("k")
            ax.bar(g.k + (i - (len(variants) - 1) / 2) * width, g.delta_loss, width, color=colours[v], label=v)
        ax.set_xticks(sorted(df.k.unique()))
        ax.set_xlabel("code column flipped for every token (configured bit order)")
    elif family in ("transvection", "token-permutation"):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        ks = sorted(df.k.unique())
        pos = {k: i for i, k in enumerate(ks)}
        for v in variants:
            g = df[df[label] == v].groupby("k").delta_loss.agg(["mean", "min", "max"]).reindex(ks)
            x = [pos[k] for k in g.index]
            ax.plot(x, g["mean"], marker="o", color=colours[v], label=v)
            ax.fill_between(x, g["min"], g["max"], color=colours[v], alpha=0.2, linewidth=0)
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
        ax.set_xlabel("random transvections from the model's own code" if family == "transvection"
                      else "token ids whose input rows are cycled")
    else:
        fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(variants) + 1.5), 3.8))
        for i, v in enumerate(variants):
            g = df[df[label] == v]
            ax.bar(i, g.delta_loss.mean(), 0.6, color=colours[v], alpha=0.35)
            ax.scatter(np.full(len(g), i, dtype=float), g.delta_loss, color=colours[v], s=14, zorder=3)
        ax.set_xticks(range(len(variants)), variants)
        n = df.attrs.get("n_bits", "n")
        ax.set_xlabel({"uniform": f"uniform draws from GL({n}, 2), one point per draw",
                       "permutation": "random bit permutations, one point per draw",
                       "other-variant": "fed the other fixed variant's code"}.get(family, family))
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_ylabel("loss change from the own code (nats/token)")
    if family == "offset":
        ax.legend(frameon=False, fontsize=9)
    elif family in ("transvection", "token-permutation"):
        ax.legend(frameon=False, fontsize=9, title=f"mean, band: range over {df.draw.nunique()} draws",
                  title_fontsize=8, alignment="left")
    ax.set_title(title or f"recoding: {family}", fontsize=10)
    ax.grid(axis="y", color="0.9")
    ax.set_axisbelow(True)
    return fig

"""The loss change of a recoding family per variant (:mod:`analysis.causal.recoding`): against ``k``
(:func:`~analysis.figures.recoding.recoding_plot`), and against the disturbance itself, the frequency-weighted Hamming
distance from each token's own code, with the share of token rows that land on another token's code
(:func:`~analysis.figures.recoding.disturbance_plot`)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
import pandas as pd

from analysis.figures.style import variant_colours

#: Marker of each family in :func:`~analysis.figures.recoding.disturbance_plot`.
FAMILY_MARKERS = {"transvection": "o", "uniform": "D", "permutation": "P", "offset": "s", "other-variant": "*",
                  "token-permutation": "^"}
#: The legend label of each recoding family.
FAMILY_LABELS = {"transvection": "transvection walk: the mean over draws per k\n(faint points: single draws)",
                 "uniform": "uniform draw from GL(n, 2)",
                 "permutation": "bit permutation", "offset": "one column flipped (hollow: a constant column)",
                 "other-variant": "the other variant's code", "token-permutation": "token rows cycled"}


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


def disturbance_plot(df: pd.DataFrame, *, title: str | None = None):
    """Loss change (left) and share of token rows landing on another token's code (right) against the Hamming
    distance from the own code (both frequency-weighted over the measured tokens), every family of ``df`` on one
    axis, one colour per variant (``variant`` column, else ``interface``). Transvection walks are drawn as a line
    through the per-k means (small points: single draws); every other recoding is one marker. Rows without a
    Hamming distance (variants without an n-bit code) are left out."""
    label = "variant" if "variant" in df.columns else "interface"
    d = df[df.hamming.notna()]
    variants = list(dict.fromkeys(d[label]))
    colours = variant_colours(variants)
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.9), layout="constrained")
    families = [f for f in FAMILY_MARKERS if f in set(d.family)]
    for ax, col in zip(axes, ("delta_loss", "on_support")):
        for v in variants:
            g = d[d[label] == v]
            c = colours[v]
            for fam in families:
                f = g[g.family == fam]
                if not len(f):
                    continue
                mk = FAMILY_MARKERS[fam]
                if fam == "transvection":
                    means = f.groupby("k")[["hamming", col]].mean().sort_values("hamming")
                    ax.plot(means.hamming, means[col], marker=mk, ms=5, color=c, lw=1.4)
                    ax.scatter(f.hamming, f[col], color=c, s=8, alpha=0.35, linewidths=0)
                elif fam == "offset" and "bit_constant" in f:
                    const = f.bit_constant.fillna(False).astype(bool)
                    ax.scatter(f.hamming[~const], f[col][~const], marker=mk, s=28, color=c, alpha=0.8)
                    ax.scatter(f.hamming[const], f[col][const], marker=mk, s=28, facecolors="none", edgecolors=c)
                else:
                    ax.scatter(f.hamming, f[col], marker=mk, s=60 if mk == "*" else 30, color=c, alpha=0.85,
                               edgecolors="white", linewidths=0.5)
        ax.grid(color="0.92")
        ax.set_axisbelow(True)
    fig.supxlabel("mean Hamming distance of the recoded code from the own code (bits; token rows weighted by their "
                  "frequency in the measured data)", fontsize=9)
    axes[0].axhline(0, color="0.5", linewidth=0.8)
    axes[0].set_ylabel("loss change from the own code (nats/token)")
    axes[1].set_ylabel("token rows on another token's code (share)")
    axes[1].set_ylim(-0.03, 1.03)
    handles = [Line2D([], [], color=colours[v], lw=2, label=v) for v in variants]
    handles += [Line2D([], [], color="0.35", marker=FAMILY_MARKERS[f], ls="-" if f == "transvection" else "",
                       label=FAMILY_LABELS[f]) for f in families]
    axes[1].legend(handles=handles, frameon=False, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title or "Recodings at matched disturbance: loss change and code support against the Hamming "
                 "distance", fontsize=10)
    return fig

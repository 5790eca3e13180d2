"""Figures of crosscoders (:mod:`analysis.features.crosscoder`): where each latent's decoder norm goes (a histogram of
the share for two models, a ternary plot for three), with its references drawn on it, and class fractions by depth."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.features.crosscoder_read import EXCLUSIVE
from analysis.figures.style import short_hook, subplots, variant_colours

#: The references' line styles on a share histogram.
NULL_STYLES = {"two seeds": dict(color="0.2", ls="-"), "turned copy": dict(color="0.45", ls="--"),
               "random init": dict(color="0.6", ls=":")}
#: The class colours of a ternary plot.
CLASS_COLOURS = {"shared": "0.35"}


def share_histogram(latents: pd.DataFrame, models, nulls: dict | None = None, *, title: str | None = None):
    """Two models: the share of model A in each live latent's decoder norm (0: B alone, 1: A alone), the class
    thresholds marked, and each reference's shares as a line (``nulls``: ``{name: shares}``)."""
    a, b = models
    live = latents[latents.live]
    fig, axes = subplots(1, height=2.6)
    ax = axes[0, 0]
    bins = np.linspace(0, 1, 41)
    ax.hist(live[f"share_{a}"], bins=bins, color=variant_colours([a, b])[a], alpha=0.75,
            label=f"{a} + {b} ({len(live)} live latents)")
    for name, shares in (nulls or {}).items():
        counts, edges = np.histogram(shares, bins=bins)
        ax.step(edges[:-1], counts * len(live) / max(len(shares), 1), where="post", lw=1.1,
                label=f"reference: {name}", **NULL_STYLES.get(name, {}))
    for x in (1 - EXCLUSIVE, EXCLUSIVE):
        ax.axvline(x, color="0.5", lw=0.6, ls=":")
    ax.set_xlabel(f"share of {a} in the latent's decoder norm\n(0: {b} only, 1: {a} only; dotted: class thresholds)",
                  fontsize=8)
    ax.set_ylabel("live latents", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6.5, frameon=False, loc="upper left")
    ax.set_title(title or "Which model a latent writes into", fontsize=9)
    return fig


def ternary(latents: pd.DataFrame, models, *, title: str | None = None):
    """Three models: each live latent as a point of the simplex of its decoder-norm shares, coloured by its class
    (a model's own colour where exclusive to it, grey where shared, black where shared by two)."""
    live = latents[latents.live]
    shares = live[[f"share_{m}" for m in models]].to_numpy()
    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])
    xy = shares @ corners
    colours = variant_colours(models)
    fig, axes = subplots(1, height=3.2)
    ax = axes[0, 0]
    ax.plot(*np.vstack([corners, corners[:1]]).T, color="0.3", lw=0.8)
    for m, (cx, cy) in zip(models, corners):
        ax.text(cx, cy + (0.04 if cy else -0.06), f"{m} only", ha="center", fontsize=8, color=colours[m])
    cls = live["class"].to_numpy()
    point = [colours[c[:-5]] if c.endswith(" only") and c[:-5] in colours else
             CLASS_COLOURS.get(c, "0.0") for c in cls]
    ax.scatter(xy[:, 0], xy[:, 1], s=6, c=point, alpha=0.7, lw=0)
    counts = live["class"].value_counts()
    key = "; ".join(f"{c} {n}" for c, n in counts.items())
    ax.set_title((title or "Where each latent's decoder norm goes") + f"\n{len(live)} live latents: {key}",
                 fontsize=8)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def fractions_by_depth(df: pd.DataFrame, *, title: str | None = None):
    """Per pair of variants (a panel each), against depth: the shared fraction of live latents, each variant's
    exclusive fraction and the lopsided fraction (share outside [0.3, 0.7]), means over seeds with each seed faint; the
    band is the two-seed reference's lopsided range (two seeds of either variant of the panel, every seed pair). ``df``:
    rows ``pair, model_a, model_b, depth, hook, seed, shared, exclusive_a, exclusive_b, lopsided``, the references'
    with ``pair`` = ``<variant> seeds``."""
    pairs = [p for p in dict.fromkeys(df.pair) if not p.endswith(" seeds")]
    fig, axes = subplots(2, height=2.5, ncols=len(pairs), sharey=True)
    for ax, pair in zip(axes[0], pairs):
        g = df[df.pair == pair]
        a, b = g.model_a.iloc[0], g.model_b.iloc[0]
        colours = variant_colours([a, b])
        nulls = df[df.pair.isin([f"{a} seeds", f"{b} seeds"])]
        if len(nulls):
            band = nulls.groupby("depth").lopsided.agg(["min", "max"])
            ax.fill_between(band.index, band["min"], band["max"], color="0.85",
                            label="lopsided, two seeds of one variant")
        lines = (("shared", "shared", dict(color="0.3")), ("lopsided", "lopsided", dict(color="k", ls="--")),
                 ("exclusive_a", f"{a} only", dict(color=colours[a])),
                 ("exclusive_b", f"{b} only", dict(color=colours[b])))
        for col, label, style in lines:
            for _, one in g.groupby("seed"):
                ax.plot(one.depth, one[col], lw=0.5, alpha=0.4, **style)
            mean = g.groupby("depth")[col].mean()
            ax.plot(mean.index, mean.to_numpy(), lw=1.5, marker="o", ms=3, label=label, **style)
        sites = g.drop_duplicates("depth").sort_values("depth")
        ax.set_xticks(sites.depth, [short_hook(h) for h in sites.hook], fontsize=7, rotation=30)
        ax.set_title(f"{a} vs {b}", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("fraction of live latents", fontsize=8)
    axes[0, 0].legend(fontsize=6, frameon=False, loc="center left")
    fig.suptitle(title or "Shared, lopsided and exclusive latents across depth (a crosscoder per pair of variants; "
                 "mean over seeds)", fontsize=9)
    return fig


__all__ = ["CLASS_COLOURS", "NULL_STYLES", "fractions_by_depth", "share_histogram", "ternary"]

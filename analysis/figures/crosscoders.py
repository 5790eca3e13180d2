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


#: The references' colours on a ternary plot.
NULL_COLOURS = ("#9ecae1", "#fdd0a2", "#c7e9c0", "#dadaeb")
CORNERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])


def _simplex(ax, latents: pd.DataFrame, models, nulls: dict | None) -> str:
    """Draw one ternary panel on ``ax``; return the class key of its live latents (``class n; ...``)."""
    live = latents[latents.live]
    colours = variant_colours(models)
    ax.plot(*np.vstack([CORNERS, CORNERS[:1]]).T, color="0.3", lw=0.8)
    for m, (cx, cy) in zip(models, CORNERS):
        ax.text(cx, cy + (0.04 if cy else -0.1), f"{m} only", ha="center", fontsize=7.5, color=colours[m])
    for shares, colour in zip((nulls or {}).values(), NULL_COLOURS):
        ax.scatter(*(np.asarray(shares) @ CORNERS).T, s=5, c=colour, lw=0, zorder=1)
    cls = live["class"].to_numpy()
    point = [colours[c[:-5]] if c.endswith(" only") and c[:-5] in colours else
             CLASS_COLOURS.get(c, "0.0") for c in cls]
    xy = live[[f"share_{m}" for m in models]].to_numpy() @ CORNERS
    ax.scatter(xy[:, 0], xy[:, 1], s=6, c=point, alpha=0.7, lw=0, zorder=2)
    ax.set_aspect("equal")
    ax.axis("off")
    return "; ".join(f"{c} {n}" for c, n in live["class"].value_counts().items())


def _class_key(fig, models, references=()) -> None:
    """The figure's one legend: the class colours, and the ``references`` drawn (in :data:`NULL_COLOURS` order)."""
    from matplotlib.lines import Line2D

    colours = variant_colours(models)
    dot = dict(marker="o", ls="", ms=4)
    handles = [Line2D([], [], color=CLASS_COLOURS["shared"], label="shared", **dot),
               Line2D([], [], color="0.0", label="shared by two, or mostly one", **dot)]
    handles += [Line2D([], [], color=colours[m], label=f"{m} only", **dot) for m in models]
    handles += [Line2D([], [], color=c, label=f"reference: {name}", **dot) for name, c in zip(references, NULL_COLOURS)]
    fig.legend(handles=handles, fontsize=7, frameon=False, loc="outside lower center", ncols=min(len(handles), 4))


def ternary(latents: pd.DataFrame, models, nulls: dict | None = None, *, title: str | None = None):
    """Three models: each live latent as a point of the simplex of its decoder-norm shares, coloured by its class
    (a model's own colour where exclusive to it, grey where shared, black where shared by two or mostly one's), over
    each reference's latents (``nulls``: ``{name: [n, 3] shares}``, e.g. three seeds of one variant) in light
    colours."""
    fig, axes = subplots(1, height=3.4)
    key = _simplex(axes[0, 0], latents, models, nulls)
    axes[0, 0].set_title((title or "Where each latent's decoder norm goes")
                         + f"\n{int(latents.live.sum())} live latents: {key}", fontsize=8)
    _class_key(fig, models, list(nulls or {}))
    return fig


def ternaries(panels: dict, models, nulls: dict | None = None, *, title: str | None = None):
    """:func:`ternary` three to a row: ``panels`` ``{panel title: latent table}`` (e.g. one per depth), ``nulls``
    ``{panel title: {name: [n, 3] shares}}``."""
    ncols = min(len(panels), 3)
    nrows = -(-len(panels) // ncols)
    fig, axes = subplots(2, height=2.5 * nrows + 0.5, nrows=nrows, ncols=ncols)
    for ax, (name, latents) in zip(axes.flat, panels.items()):
        _simplex(ax, latents, models, (nulls or {}).get(name))
        live = latents[latents.live]
        ax.set_title(f"{name}: {(live['class'] == 'shared').sum()} of {len(live)} live latents shared", fontsize=8,
                     pad=12)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    _class_key(fig, models, list(dict.fromkeys(n for panel in (nulls or {}).values() for n in panel)))
    fig.suptitle(title or "Where each latent's decoder norm goes", fontsize=9)
    return fig


def fractions_by_depth(df: pd.DataFrame, *, title: str | None = None):
    """Per pair of variants (a column each), against depth: the shared fraction of live latents (top row), and, on a
    scale of their own (bottom row), the lopsided fraction (share outside [0.3, 0.7]) and each variant's exclusive
    fraction; means over seeds with each seed faint. The grey band is the two-seed reference's lopsided range (two
    seeds of either variant of the column, every seed pair). ``df``: rows ``pair, model_a, model_b, depth, hook, seed,
    shared, exclusive_a, exclusive_b, lopsided``, the references' with ``pair`` = ``<variant> seeds``."""
    pairs = [p for p in dict.fromkeys(df.pair) if not p.endswith(" seeds")]
    fig, axes = subplots(2, height=3.8, nrows=2, ncols=len(pairs), sharey="row", sharex="col",
                         gridspec_kw={"height_ratios": [1, 2]})
    for col, pair in enumerate(pairs):
        g = df[df.pair == pair]
        a, b = g.model_a.iloc[0], g.model_b.iloc[0]
        colours = variant_colours([a, b])
        nulls = df[df.pair.isin([f"{a} seeds", f"{b} seeds"])]
        if len(nulls):
            band = nulls.groupby("depth").lopsided.agg(["min", "max"])
            axes[1, col].fill_between(band.index, band["min"], band["max"], color="0.85",
                                      label="lopsided, two seeds of one variant (range)")
        lines = ((0, "shared", "shared", dict(color="0.3")),
                 (1, "lopsided", "lopsided", dict(color="k", ls="--")),
                 (1, "exclusive_a", f"{a} only", dict(color=colours[a])),
                 (1, "exclusive_b", f"{b} only", dict(color=colours[b])))
        for row, column, label, style in lines:
            ax = axes[row, col]
            for _, one in g.groupby("seed"):
                ax.plot(one.depth, one[column], lw=0.5, alpha=0.4, **style)
            mean = g.groupby("depth")[column].mean()
            ax.plot(mean.index, mean.to_numpy(), lw=1.5, marker="o", ms=3, label=label, **style)
        sites = g.drop_duplicates("depth").sort_values("depth")
        axes[1, col].set_xticks(sites.depth, [short_hook(h) for h in sites.hook], fontsize=7, rotation=30)
        axes[0, col].set_title(f"{a} vs {b}", fontsize=9)
        axes[0, col].set_ylim(0, 1.02)
        for ax in axes[:, col]:
            ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("shared\n(fraction of live latents)", fontsize=8)
    axes[1, 0].set_ylabel("lopsided or exclusive\n(fraction of live latents)", fontsize=8)
    axes[1, 0].set_ylim(bottom=0)
    handles = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), fontsize=6.5, frameon=False, loc="outside lower center",
               ncols=min(len(handles), 4))
    fig.suptitle(title or "Shared, lopsided and exclusive latents across depth (a crosscoder per pair of variants; "
                 "mean over seeds)", fontsize=9)
    return fig


__all__ = ["CLASS_COLOURS", "NULL_COLOURS", "NULL_STYLES", "fractions_by_depth", "share_histogram", "ternaries",
           "ternary"]

"""Attention patterns drawn: a static figure for papers (chosen heads, or all, of each variant side by side) and the
views of the interactive CircuitsVis page (:func:`~analysis.figures.attention.views_from`)."""

from __future__ import annotations

import numpy as np

from analysis.errors import AnalysisError
from analysis.interop.circuitsvis_view import View
from analysis.readouts.attention import pattern_array

#: Tokens beyond which the axes carry positions instead of token strings.
MAX_LABELLED = 24


def _heads(df, heads):
    pat, layers = pattern_array(df), df.attrs["layers"]
    names = [f"L{layer}H{h}" for layer in layers for h in range(pat.shape[1])]
    flat = pat.reshape(-1, pat.shape[2], pat.shape[3])
    return {n: flat[i] for i, n in enumerate(names) if heads is None or n in heads}


def views_from(patterns: dict, *, heads=None) -> list[View]:
    """One view per variant from ``{variant: attention_patterns(...) table}``: every layer's heads in one selector
    (``heads``: a subset of names such as ``["L1H3", "L2H0"]``)."""
    out = []
    for name, df in patterns.items():
        pat, layers = pattern_array(df), df.attrs["layers"]
        names = [f"L{layer}H{h}" for layer in layers for h in range(pat.shape[1])]
        flat = pat.reshape(-1, pat.shape[2], pat.shape[3])
        if heads is not None:
            unknown = sorted(set(heads) - set(names))
            if unknown:
                raise AnalysisError(f"{name}: no head {', '.join(unknown)} (heads are L<layer>H<head>, e.g. "
                                    f"{names[0]})")
            keep = [names.index(h) for h in heads]
            flat, names = flat[keep], [names[i] for i in keep]
        out.append(View(str(name), flat, list(df.attrs["str_tokens"]), names))
    return out


def attention_figure(patterns: dict, *, heads=None, title: str | None = None):
    """``patterns``: ``{variant: attention_patterns(...) table}`` on the same prompt; ``heads``: names to draw
    (default every head of every layer: a grid that is only legible for small models)."""
    import matplotlib.pyplot as plt

    from analysis.figures.style import TWO_COLUMNS

    per = {v: _heads(df, heads) for v, df in patterns.items()}
    names = list(next(iter(per.values())))
    variants = list(per)
    tokens = list(next(iter(patterns.values())).attrs["str_tokens"])
    T = len(tokens)
    label = T <= MAX_LABELLED
    size = min(2.4, TWO_COLUMNS / len(variants))
    fig, axes = plt.subplots(len(names), len(variants), figsize=(size * len(variants) + 0.9, size * len(names) + 0.6),
                             squeeze=False, layout="constrained")
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    im = None
    for j, v in enumerate(variants):
        for i, n in enumerate(names):
            ax = axes[i, j]
            im = ax.imshow(np.ma.masked_array(per[v][n], mask), vmin=0, vmax=1, cmap="Blues", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(v, fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{n}\ndestination", fontsize=7)
            if label and i == len(names) - 1:
                ax.set_xticks(range(T), [t.strip() or repr(t) for t in tokens], rotation=90, fontsize=6)
            if label and j == 0:
                ax.set_yticks(range(T), [t.strip() or repr(t) for t in tokens], fontsize=6)
    fig.supxlabel("source position (the token attended to)", fontsize=7)
    bar = fig.colorbar(im, ax=axes, shrink=0.6)
    bar.set_label("attention weight (each destination's row sums to 1)", fontsize=7)
    bar.ax.tick_params(labelsize=7)
    fig.suptitle(title or "attention patterns (rows: heads; columns: variants; same prompt)", fontsize=9)
    return fig


__all__ = ["attention_figure", "views_from"]

"""Paper-ready figures of patching and recoding results, saved as PNG and PDF (atomically)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm

from analysis.causal.patching import to_tensor

#: The colour-bar label of each patching metric.
METRIC_LABELS = {"logit_diff": "logit difference (answer - wrong)",
                 "normalized_logit_diff": "normalised logit difference (corrupt = 0, clean = 1)",
                 "answer_prob": "p(answer)", "answer_loss": "-log p(answer) (nats)"}
#: The title's words for each patching site.
SITE_LABELS = {"embed": "input code (hook_embed)", "resid_pre": "residual stream before block",
               "resid_mid": "residual stream after attention", "resid_post": "residual stream after block",
               "attn_out": "attention output", "mlp_out": "MLP output", "z": "head output z (by position)",
               "z_all_pos": "head output z (all positions)"}


def _grid(df: pd.DataFrame) -> tuple[np.ndarray, list[str], list[str]]:
    """(matrix, row labels, column labels) of an aggregated result."""
    a, site = df.attrs, df.attrs["site"]
    t = to_tensor(df).numpy()
    if site == "z":
        rows = [f"L{layer} H{h}" for layer in range(a["n_layers"]) for h in range(a["n_heads"])]
        return t.transpose(0, 2, 1).reshape(-1, t.shape[1]), rows, _token_labels(a)
    if site == "z_all_pos":
        return t, [f"L{layer}" for layer in range(a["n_layers"])], [f"H{h}" for h in range(a["n_heads"])]
    if site == "embed":
        return t, ["input"], _token_labels(a)
    return t, [f"L{layer}" for layer in range(t.shape[0])], _token_labels(a)


def _token_labels(attrs) -> list[str]:
    return [f"{tok!r}"[1:-1].replace(" ", "\u2423") + f" ({i})" for i, tok in enumerate(attrs["str_tokens"])]


def _norm(values: np.ndarray, center: float, other: float, metric: str = "") -> TwoSlopeNorm:
    """Diverging scale around ``center`` (the patched run's baseline; ``other`` is the other baseline). A
    normalised metric gets a fixed range (+-1.25 of the clean-corrupt gap) so that maps stay comparable and a model
    without the behaviour (a gap near zero, hence huge normalised values) cannot wash the others out; values
    beyond the range are drawn in the end colours."""
    if metric == "normalized_logit_diff":
        span = 1.25
    else:
        span = max(np.nanmax(np.abs(values - center)), abs(other - center), 1e-6)
    return TwoSlopeNorm(vcenter=center, vmin=center - span, vmax=center + span)


def _other(attrs) -> float:
    """The baseline that the patched run is not (the one a full patch would reach)."""
    return attrs["clean"] if attrs["mode"] == "denoise" else attrs["corrupt"]


def _colorbar(fig, im, axes, attrs, **kw):
    """A colour bar labelled with the metric, with both baselines drawn on it and named among its tick labels
    (``clean 1``, ``corrupt 0 (patched run)``), ticks too close to a baseline's label dropped."""
    cb = fig.colorbar(im, ax=axes, extend="both", **kw)
    label = METRIC_LABELS.get(attrs["metric"], attrs["metric"])
    cb.set_label(label.replace(" (", "\n(", 1) if len(label) > 30 else label, fontsize=8)
    lo, hi = cb.ax.get_ylim()
    named = {}
    for name in ("clean", "corrupt"):
        v = attrs[name]
        if lo <= v <= hi:
            cb.ax.axhline(v, color="k", lw=1)
            patched = (name == "corrupt") == (attrs["mode"] == "denoise")
            named[v] = f"{name} {v:.3g}" + (" (patched run)" if patched else "")
    ticks = [t for t in cb.get_ticks() if lo <= t <= hi and all(abs(t - v) > 0.12 * (hi - lo) for v in named)]
    values = sorted(ticks + list(named))
    cb.set_ticks(values, labels=[named.get(v, f"{v:g}") for v in values])
    cb.ax.tick_params(labelsize=7)
    return cb


def heatmap(df: pd.DataFrame, ax=None, *, title: str | None = None, norm=None, colorbar: bool = True):
    """Draw one patching result on ``ax`` (a new figure if None). Returns the image."""
    if "pair" in df.columns:
        raise ValueError("plot an aggregated result (per_pair=False)")
    grid, rows, cols = _grid(df)
    a = df.attrs
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(cols) + 2.5), max(2.5, 0.38 * len(rows) + 1.8)))
    norm = norm or _norm(grid, a["baseline"], _other(a), a["metric"])
    im = ax.imshow(grid, cmap="RdBu_r", norm=norm, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xlabel("head" if a["site"] == "z_all_pos" else
                  "position (token)" if a["n_pairs"] == 1 else "position (tokens of pair 0)")
    ax.set_ylabel("layer" if a["site"] != "z" else "layer, head")
    ax.set_title(title or f"{a['method']} patching, {a['mode']}: {SITE_LABELS[a['site']]}", fontsize=10)
    if colorbar:
        _colorbar(ax.figure, im, ax, a, fraction=0.046, pad=0.02)
    return im


def side_by_side(results: dict[str, pd.DataFrame], *, suptitle: str | None = None,
                 titles: dict[str, str] | None = None):
    """One heatmap per labelled result, on a shared colour scale, in one row (``titles`` overrides the labels)."""
    grids = [_grid(df)[0] for df in results.values()]
    first = next(iter(results.values())).attrs
    centre = float(np.mean([df.attrs["baseline"] for df in results.values()]))
    other = float(np.mean([_other(df.attrs) for df in results.values()]))
    norm = _norm(np.concatenate([g.ravel() for g in grids]), centre, other, first["metric"])
    n_rows, n_cols = grids[0].shape
    fig, axes = plt.subplots(1, len(results), figsize=(len(results) * max(2.4, 0.17 * n_cols + 0.6) + 1.4,
                                                       max(2.8, 0.3 * n_rows + 2.0)), squeeze=False, sharey=True,
                             layout="constrained")
    im = None
    for i, (ax, (label, df)) in enumerate(zip(axes[0], results.items())):
        im = heatmap(df, ax, title=(titles or {}).get(label, label), norm=norm, colorbar=False)
        ax.tick_params(labelsize=7)
        ax.xaxis.label.set_fontsize(8)
        ax.yaxis.label.set_fontsize(8)
        if i:
            ax.set_ylabel("")
    _colorbar(fig, im, list(axes[0]), first, fraction=0.05, pad=0.02)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig



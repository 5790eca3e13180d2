"""Paper-ready figures of patching and recoding results, saved as PNG and PDF (atomically).

Heatmaps put layers on the vertical axis (layer 0 at the top, as a reader follows the forward pass) and the
prompt's tokens on the horizontal axis. The colour scale is diverging and centred on the baseline of the run being
patched (the corrupted run in ``denoise`` mode, the clean run in ``noise`` mode), so white means "no effect" in
either mode; the colour bar marks and names both the clean and the corrupted baseline.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402

from .style import variant_colours  # noqa: E402

from fixedid.atomic import atomic_path  # noqa: E402

from .patching import to_tensor  # noqa: E402

METRIC_LABELS = {"logit_diff": "logit difference (answer - wrong)",
                 "normalized_logit_diff": "normalised logit difference (corrupt = 0, clean = 1)",
                 "answer_prob": "p(answer)", "answer_loss": "-log p(answer) (nats)"}
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
    """A colour bar labelled with the metric, with both baselines drawn and named on it."""
    cb = fig.colorbar(im, ax=axes, extend="both", **kw)
    cb.set_label(METRIC_LABELS.get(attrs["metric"], attrs["metric"]), fontsize=8)
    cb.ax.tick_params(labelsize=7)
    lo, hi = cb.ax.get_ylim()
    for name in ("clean", "corrupt"):
        v = attrs[name]
        if lo <= v <= hi:
            cb.ax.axhline(v, color="k", lw=1)
            patched = (name == "corrupt") == (attrs["mode"] == "denoise")
            cb.ax.text(-0.15, v, f"{name}{' (patched run)' if patched else ''}", transform=cb.ax.get_yaxis_transform(),
                       ha="right", va="center", fontsize=6.5)
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
    n_cols = grids[0].shape[1]
    fig, axes = plt.subplots(1, len(results), figsize=(len(results) * max(4.5, 0.42 * n_cols + 1.5),
                                                       max(3.0, 0.45 * grids[0].shape[0] + 2.2)), squeeze=False)
    im = None
    for ax, (label, df) in zip(axes[0], results.items()):
        im = heatmap(df, ax, title=(titles or {}).get(label, label), norm=norm, colorbar=False)
    _colorbar(fig, im, list(axes[0]), first, fraction=0.025, pad=0.04)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    return fig


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
        ax.set_xlabel({"uniform": "uniform draws from GL(16, 2), one point per draw",
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


def save_figure(fig, out_dir, stem: str) -> list[Path]:
    """Write ``stem.png`` (200 dpi) and ``stem.pdf`` under ``out_dir``, each through a temp file and a rename."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        with atomic_path(out_dir / f"{stem}.{ext}") as tmp:
            fig.savefig(tmp, dpi=200, bbox_inches="tight", format=ext)
        paths.append(out_dir / f"{stem}.{ext}")
    plt.close(fig)
    return paths


def write_csv(df: pd.DataFrame, path) -> Path:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return Path(path)

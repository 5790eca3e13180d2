"""Figures of sparse dictionaries (:mod:`analysis.features`): training curves, and features read against the code."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.features.code_reading import bit_groups
from analysis.figures.style import short_hook, subplots, variant_colours

_LINES = ("-", "--", ":", "-.")


def _smooth(y: np.ndarray, n: int = 9) -> np.ndarray:
    if len(y) < n:
        return y
    pad = np.pad(y, (n // 2, n - 1 - n // 2), mode="edge")
    return np.convolve(pad, np.ones(n) / n, mode="valid")


def training_figure(history: pd.DataFrame, metrics: pd.DataFrame):
    """Training FVU and L0 against training tokens, one line per dictionary (colour: variant, line style: hook),
    the held-out FVU of each marked at its end."""
    colours = variant_colours(history.variant)
    hooks = list(dict.fromkeys(history.hook))
    fig, axes = subplots(2, height=2.5, ncols=2)
    held = metrics.pivot_table(index=["variant", "hook"], columns="metric", values="value")
    for (variant, hook), g in history.groupby(["variant", "hook"], sort=False):
        style = dict(color=colours[variant], ls=_LINES[hooks.index(hook) % len(_LINES)], lw=1.2,
                     label=f"{variant} {short_hook(hook)}")
        x = g.tokens.to_numpy() / 1e3
        axes[0, 0].plot(x, _smooth(g.fvu.to_numpy()), **style)
        axes[0, 1].plot(x, _smooth(g.l0.to_numpy()), **style)
        if (variant, hook) in held.index:
            axes[0, 0].plot([x[-1]], [held.loc[(variant, hook), "fvu"]], marker="o", ms=4, color=colours[variant])
    axes[0, 0].set_yscale("log")
    for ax, label in zip(axes[0], ("FVU (training batches; dot: held out)", "L0 (active latents per token)")):
        ax.set_xlabel("training tokens (thousands)", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(which="both", labelsize=7)
        ax.grid(color="0.9")
    axes[0, 1].set_ylim(bottom=0)
    axes[0, 0].legend(fontsize=6, frameon=False)
    first = metrics.iloc[0]
    fig.suptitle(f"sparse dictionaries: {first['kind']} {first['arch']}, {first['d_sae']} latents "
                 f"({first['d_sae'] // first['d_in']}x); 9-step running mean", fontsize=9, x=0.02, ha="left")
    return fig


def _depth_axis(ax, df: pd.DataFrame) -> None:
    """Depth on x, each site labelled as the rest of the figures label hooks."""
    sites = df.drop_duplicates("hook").sort_values("depth")
    ax.set_xticks(sites.depth.to_numpy(), [short_hook(h) for h in sites.hook], fontsize=7, rotation=30)
    ax.set_xlabel("site (residual stream)", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(color="0.9")


def _band(ax, per_model: pd.DataFrame, value: str, **style) -> None:
    """The mean over models at each depth as a line, their range as a band."""
    g = per_model.groupby("depth")[value]
    x, mean, lo, hi = g.mean().index.to_numpy(), g.mean().to_numpy(), g.min().to_numpy(), g.max().to_numpy()
    ax.plot(x, mean, marker="o", ms=3, lw=1.3, **style)
    if (hi > lo).any():
        ax.fill_between(x, lo, hi, color=style.get("color"), alpha=0.15, lw=0)


def code_figure(code: pd.DataFrame):
    """The best single latent's AUROC for a bit, mean over the bits that vary, across depth: one panel per
    interface; the code's bits, the id's bits (its top varying bit apart: with frequency-ranked ids it is a frequency
    split), the ``perm`` reference bits, and the same in a dictionary of the random-initialisation twin (dashed).
    Lines: mean over the models of the interface (seeds); bands: their range."""
    code = code[~code.constant].assign(group=lambda d: bit_groups(d))
    top_bit = int(code[code.group == "top"].bit.max()) if (code.group == "top").any() else None
    interfaces = list(dict.fromkeys(code.interface))
    colours = variant_colours(interfaces)
    fig, axes = subplots(2, height=2.8, ncols=len(interfaces), sharey=True)
    for ax, iface in zip(axes[0], interfaces):
        d = code[code.interface == iface]
        per = d.groupby(["model", "init", "dict_seed", "group", "depth"], as_index=False).auroc.mean()
        per = per.groupby(["model", "init", "group", "depth"], as_index=False).auroc.mean()  # over dictionary seeds
        lines = [("code", dict(color=colours[iface])), ("id", dict(color=colours[iface], ls="-.")),
                 ("top", dict(color="0.2", ls=":")), ("perm", dict(color="0.55"))]
        for group, style in lines:
            for init in ("trained", "random_init"):
                sel = per[(per.init == init) & (per.group == group)]
                if init == "random_init" and group in ("top", "perm"):
                    continue  # the twin's own top bit and perm bits: in the tables, not drawn
                if len(sel):
                    _band(ax, sel, "auroc", **(dict(style, ls="--", alpha=0.8) if init == "random_init" else style))
        _depth_axis(ax, d)
        n = d.model.nunique()
        ax.set_title(f"{iface} ({n} model{'s' if n > 1 else ''})", fontsize=8)
    handles = [Line2D([], [], color="0.3", label="code bits (colour: variant)"),
               Line2D([], [], color="0.3", ls="-.", label=f"id bits 0-{top_bit - 1}" if top_bit else "id bits"),
               Line2D([], [], color="0.2", ls=":", label=f"id bit {top_bit} (a frequency split)"),
               Line2D([], [], color="0.55", label="perm bits (reference)"),
               Line2D([], [], color="0.3", ls="--", label="random init, code or id bits")]
    fig.legend(handles=handles[:2] + handles[2 if top_bit is not None else 3:], loc="outside lower center",
               ncols=5, fontsize=6.5, frameon=False)
    axes[0, 0].set_ylabel("best latent's AUROC for a bit\n(mean over bits)", fontsize=8)
    axes[0, 0].set_ylim(0.5, 1.0)
    fig.suptitle(f"which latent reads which bit: TopK SAEs, {code.n_tokens.iloc[0]:,} held-out tokens; "
                 "AUROC folded to >= 0.5", fontsize=9, x=0.02, ha="left")
    return fig


def token_feature_figure(tokens: pd.DataFrame):
    """The share of latents that fire on one token type (>= ``purity`` of their firings), across depth, per
    interface: trained (solid) and random-init twin (dashed); bands: the range over models (seeds)."""
    colours = variant_colours(tokens.interface)
    fig, axes = subplots(1, height=2.6)
    ax = axes[0, 0]
    per = tokens.groupby(["model", "interface", "init", "depth"], as_index=False).share.mean()
    for iface in dict.fromkeys(tokens.interface):
        for init, ls in (("trained", "-"), ("random_init", "--")):
            sel = per[(per.interface == iface) & (per.init == init)].assign(share=lambda d: 100 * d.share)
            if len(sel):
                _band(ax, sel, "share", color=colours[iface], ls=ls,
                      label=iface + ("" if init == "trained" else ", random init"))
    _depth_axis(ax, tokens)
    ax.set_ylabel("token features (% of latents\nfiring >= "
                  f"{tokens.min_fires.iloc[0]} times)", fontsize=8)
    ax.set_ylim(bottom=0)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=6.5, frameon=False)
    ax.set_title(f"latents with >= {tokens.purity.iloc[0]:.0%} of firings on one token type", fontsize=8)
    return fig


#: Line style of each kind of dictionary pair in :func:`matching_figure`.
PAIR_STYLES = {"dictionary seed": dict(color="#000000", ls="-"), "seed": dict(color="#CC79A7", ls="-"),
               "variant": dict(color="#D55E00", ls="-"), "random init": dict(color="#999999", ls="--"),
               "other checkpoint": dict(color="#56B4E9", ls="-")}


def matching_figure(matching: pd.DataFrame, stat: str = "max_mean"):
    """Latent matching across depth (``stat``: ``max_mean`` or ``hungarian_mean``): by activation correlation and
    by decoder cosine, one line per kind of pair (the mean over its pairs; band: their range) and the statistic's null
    (dotted)."""
    d = matching[matching.stat == stat]
    fig, axes = subplots(2, height=2.6, ncols=2)
    for ax, measure, label in zip(axes[0], ("activation_correlation", "decoder_cosine"),
                                  ("activation correlation", "decoder cosine")):
        m = d[d.measure == measure]
        for kind in [k for k in PAIR_STYLES if k in set(m.pair)]:
            sel = m[m.pair == kind].assign(model=lambda x: x.a + "|" + x.b)
            _band(ax, sel, "value", label=f"{kind} ({sel.model.nunique()})", **PAIR_STYLES[kind])
        null = m.groupby("depth").null.mean()
        ax.plot(null.index, null.to_numpy(), color="0.6", ls=":", lw=1.2, label="null")
        _depth_axis(ax, m)
        best = "best match" if stat == "max_mean" else "one-to-one match"
        ax.set_ylabel(f"{label}, {best}\n(mean over latents)", fontsize=8)
        ax.set_ylim(0, 1.02)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncols=5, fontsize=6.5,
               frameon=False, title="pairs of dictionaries (how many)", title_fontsize=6.5)
    axes[0, 1].set_title("shared basis needed: read beside the null", fontsize=8)
    axes[0, 0].set_title("basis-free", fontsize=8)
    return fig

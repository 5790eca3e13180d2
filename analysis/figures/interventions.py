"""Figures of interventions: per-bit and per-position edit effects, noise curves, ablation maps and bit x layer maps."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Patch

from analysis.figures.style import variant_colours


#: The axis label of each measure of an input-edit result.
MEASURE_LABELS = {"delta_loss": "loss change (nats/token)", "kl": "KL(unedited || edited) (nats)",
                  "delta_logit_diff": "logit-difference change (answer - wrong)", "correct": "accuracy",
                  "loss": "loss (nats/token)", "logit_diff": "logit difference (answer - wrong)"}


def effect_measure(summary: pd.DataFrame) -> str:
    """The column a summary of edits measures: ``delta_loss`` for corpus edits, ``delta_logit_diff`` for task
    prompts."""
    return "delta_loss" if "delta_loss" in summary.columns else "delta_logit_diff"


def _colours(variants):
    return variant_colours(variants)


def _errorbars(g, measure):
    m = g[measure].to_numpy(float)
    lo, hi = g[f"{measure}_lo"].to_numpy(float), g[f"{measure}_hi"].to_numpy(float)
    return m, np.vstack([m - lo, hi - m])


def effect_plot(summaries: dict, *, measure: str | None = None, title: str | None = None, str_tokens=None):
    """One figure of an input sweep or an ablation across variants (see the module docstring)."""
    first = next(iter(summaries.values()))
    measure = measure or effect_measure(first)
    kind = first.kind.iloc[0]
    component = first["component"].iloc[0] if "component" in first else None
    variants = list(summaries)
    colours = _colours(variants)
    if kind == "ablate" and component == "head":
        return _head_maps(summaries, measure, title)
    if kind == "noise":
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for v, s in summaries.items():
            g = s.groupby("scale")[[measure]].mean().reset_index()
            ax.plot(g.scale, g[measure], marker="o", color=colours[v], label=v)
            ax.scatter(s.scale, s[measure], color=colours[v], s=10, alpha=0.5)
        ax.set_xlabel("noise s.d. (relative to the RMS of the model's input rows)")
        ax.legend(frameon=False, fontsize=9, title="mean over draws (points: draws)", title_fontsize=8)
    else:
        key = {"bitflip": "bit", "midpoint": "bit", "swap": "pos", "ablate": "layer"}[kind]
        ticks = sorted(set().union(*[set(s[key].dropna().astype(int)) for s in summaries.values()]))
        x = {t: i for i, t in enumerate(ticks)}
        fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(ticks) * max(1, len(variants)) + 1.8), 3.9))
        width = 0.8 / len(variants)
        for i, (v, s) in enumerate(summaries.items()):
            g = s.dropna(subset=[key]).sort_values(key)
            m, err = _errorbars(g, measure)
            xs = np.array([x[int(t)] for t in g[key]]) + (i - (len(variants) - 1) / 2) * width
            bars = ax.bar(xs, m, width, color=colours[v], label=v, yerr=err, error_kw=dict(lw=0.8, capsize=1.5))
            if key == "bit" and "bit_constant" in g:
                for bar, const in zip(bars, g.bit_constant.fillna(False).astype(bool)):
                    if const:
                        bar.set_hatch("////")
                        bar.set_edgecolor("white")
        labels = [str(t) for t in ticks]
        if kind == "swap" and str_tokens is not None:
            labels = [f"{str_tokens[t]!r}"[1:-1].replace(" ", "\u2423") + f" ({t})" for t in ticks]
        ax.set_xticks(range(len(ticks)), labels, rotation=90 if kind == "swap" else 0)
        ax.set_xlabel({"bit": "code column edited (configured bit order; every repeated copy)",
                       "pos": "position whose input row is swapped for another token's" + (
                           " (tokens of the first prompt)" if str_tokens is not None else ""),
                       "layer": f"layer whose {component} is ablated ({first['ablation'].iloc[0]})"
                       if kind == "ablate" else ""}[key])
        handles = [Patch(facecolor=colours[v], label=v) for v in variants]
        if key == "bit" and any(s.get("bit_constant", pd.Series(dtype=bool)).fillna(False).astype(bool).any()
                                for s in summaries.values()):
            handles.append(Patch(facecolor="0.6", edgecolor="white", hatch="////",
                                 label="column constant over the vocabulary"))
        ax.legend(handles=handles, frameon=False, fontsize=9, title="error bars: 95% interval of the mean",
                  title_fontsize=8)
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_ylabel(MEASURE_LABELS.get(measure, measure))
    ax.set_title(title or kind, fontsize=10)
    ax.grid(axis="y", color="0.9")
    ax.set_axisbelow(True)
    return fig


def _head_maps(summaries, measure, title):
    n = len(summaries)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n + 1.2, 3.2), squeeze=False, layout="constrained")
    mats = {}
    for v, s in summaries.items():
        mats[v] = s.pivot_table(index="layer", columns="head", values=measure)
    vmax = max(float(np.nanmax(np.abs(m.to_numpy()))) for m in mats.values()) or 1.0
    norm = TwoSlopeNorm(0.0, -vmax, vmax)
    for ax, (v, m) in zip(axes[0], mats.items()):
        im = ax.imshow(m.to_numpy(), cmap="RdBu_r", norm=norm, aspect="auto")
        ax.set_xticks(range(m.shape[1]), [f"H{h}" for h in m.columns], fontsize=8)
        ax.set_yticks(range(m.shape[0]), [f"L{layer}" for layer in m.index], fontsize=8)
        ax.set_title(v, fontsize=10)
        ax.set_xlabel("head")
    axes[0, 0].set_ylabel("layer")
    bar = fig.colorbar(im, ax=list(axes[0]), shrink=0.9)
    bar.set_label(MEASURE_LABELS.get(measure, measure), fontsize=8)
    first = next(iter(summaries.values()))
    fig.suptitle(title or f"{first.ablation.iloc[0]} ablation of each attention head", fontsize=10)
    return fig


def bit_layer_figure(maps: dict, *, title: str | None = None):
    """Rows: variants; columns: the fraction of a bit flip's effect restored by patching the clean activation at
    the flipped position, and at the final position, per bit (vertical) and layer (horizontal)."""
    n = len(maps)
    first = next(iter(maps.values()))
    n_bits = len(first.attrs["bits"])
    fig, axes = plt.subplots(n, 2, figsize=(8.0, 0.17 * n_bits * n + 1.3 * n + 0.6), squeeze=False,
                             layout="constrained")
    norm = TwoSlopeNorm(0.0, -1.0, 1.0)
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="0.75")  # bits whose flip barely moves the output
    for row, (v, df) in enumerate(maps.items()):
        a = df.attrs
        p, last = a["flip_pos"], a["n_pos"] - 1
        for col, (q, what) in enumerate([(p, "at the flipped position"), (last, "at the final position")]):
            ax = axes[row, col]
            m = df[df.pos == q].pivot_table(index="bit", columns="layer", values="restored", dropna=False)
            im = ax.imshow(m.to_numpy(), cmap=cmap, norm=norm, aspect="auto")
            tok = f"{a['str_tokens'][q]!r}"[1:-1].replace(" ", "\u2423")
            ax.set_title(f"patched {what}: {q} {tok}", fontsize=9)
            ax.set_xticks(range(m.shape[1]), [f"L{layer}" for layer in m.columns], fontsize=8)
            ax.set_yticks(range(m.shape[0]), [str(b) for b in m.index], fontsize=7)
            ax.set_xlabel("layer patched (residual stream entering it)" if a["site"] == "resid_pre"
                          else f"layer patched ({a['site']})", fontsize=8)
            if col == 0:
                ax.set_ylabel(f"{v}\nbit flipped (code column)", fontsize=9)
    bar = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.5)
    bar.set_label(f"fraction of the flip's effect restored ({first.attrs['metric']})", fontsize=8)
    tok = f"{first.attrs['str_tokens'][first.attrs['flip_pos']]!r}"[1:-1]
    fig.suptitle(title or f"bit flipped at position {first.attrs['flip_pos']} ({tok!r}); white: nothing restored, "
                 "grey: the flip barely moves the output", fontsize=10)
    return fig




def noise_decode_plot(summaries: dict, *, measure: str | None = None, title: str | None = None):
    """Input noise at matched decodability: the effect against ``decode_acc`` (the share of noised rows whose
    nearest input-table row is still their own), one line per variant through the per-scale means over draws,
    labelled with the noise scale; the x axis runs from 1 (every row still decodes) down to 0."""
    first = next(iter(summaries.values()))
    measure = measure or effect_measure(first)
    colours = _colours(list(summaries))
    fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    offsets = [(4, 4), (4, -10), (-16, 4), (-16, -10)]  # scale labels of different variants apart
    for i, (v, s) in enumerate(summaries.items()):
        g = s.groupby("scale")[[measure, "decode_acc"]].mean().reset_index()
        ax.plot(g.decode_acc, g[measure], marker="o", color=colours[v], label=v)
        ax.scatter(s.decode_acc, s[measure], color=colours[v], s=10, alpha=0.5)
        whole = g[g.decode_acc >= 0.995]  # scales at which every row still decodes: one label, "<= the largest"
        for r in g.itertuples():
            if len(whole) > 1 and r.scale in set(whole.scale) and r.scale != whole.scale.max():
                continue
            text = f"\u2264{r.scale:g}" if len(whole) > 1 and r.scale == whole.scale.max() else f"{r.scale:g}"
            ax.annotate(text, (r.decode_acc, getattr(r, measure)), textcoords="offset points",
                        xytext=offsets[i % len(offsets)], fontsize=7, color=colours[v])
    ax.set_xlim(1.07, -0.03)
    ax.set_xlabel("nearest-row decoding accuracy of the noised input rows (share still nearest their own row)")
    ax.set_ylabel(MEASURE_LABELS.get(measure, measure))
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.legend(frameon=False, fontsize=9, title="labels: noise s.d. / RMS of the input rows\n(\u2264s: every scale up "
              "to s, all rows still decoding)\nsmall points: single draws", title_fontsize=8, alignment="left")
    ax.set_title(title or "Input noise at matched decodability", fontsize=10)
    ax.grid(color="0.92")
    ax.set_axisbelow(True)
    return fig


#: The bars of a flip split, in order: (column of the split table, legend label).
SPLIT_BARS = (("flip", "whole flip"), ("on", "on-support part (= swap to the landing token)"),
              ("off", "off-support part"), ("random", "random swap at the on-support positions"))


def flip_split_plot(split: pd.DataFrame, *, title: str | None = None, measure_label: str = "delta_loss"):
    """One panel per variant of a :func:`analysis.causal.flipsplit.split_table` (``variant`` column optional): per
    code column that varies over the vocabulary, the whole flip's effect, its on- and off-support parts and a swap
    to random tokens at the on-support positions; the share of rows on support is printed under each bit."""
    split = split if "variant" in split.columns else split.assign(variant="model")
    split = split[~split.bit_constant.astype(bool)]
    variants = list(dict.fromkeys(split.variant))
    colours = _colours(variants)
    n_bits = max(len(g) for _, g in split.groupby("variant"))
    fig, axes = plt.subplots(len(variants), 1, figsize=(max(6.4, 0.55 * n_bits + 2.5), 2.6 * len(variants) + 0.6),
                             squeeze=False, layout="constrained")
    width = 0.2
    styles = {"flip": dict(hatch=None, alpha=1.0), "on": dict(hatch="///", alpha=0.55),
              "off": dict(hatch="...", alpha=0.3), "random": dict(hatch=None, alpha=1.0)}
    for ax, v in zip(axes[:, 0], variants):
        g = split[split.variant == v].sort_values("bit")
        x = np.arange(len(g))
        for i, (col, name) in enumerate(SPLIT_BARS):
            colour = "0.55" if col == "random" else colours[v]
            ax.bar(x + (i - 1.5) * width, g[col], width, color=colour, edgecolor="0.25", linewidth=0.4,
                   label=name, **styles[col])
        ax.set_xticks(x, [f"{int(b)}\n{100 * o:.0f}%" for b, o in zip(g.bit, g.on_support)], fontsize=8)
        ax.axhline(0, color="0.5", linewidth=0.8)
        ax.set_ylabel(f"{v}\n" + MEASURE_LABELS.get(measure_label, measure_label), fontsize=8)
        ax.grid(axis="y", color="0.92")
        ax.set_axisbelow(True)
    axes[-1, 0].set_xlabel("code column flipped (varying columns only) / share of its rows landing on a token's code")
    handles = [Patch(facecolor="0.3" if col != "random" else "0.55", edgecolor="0.25", linewidth=0.4, label=name,
                     hatch=styles[col]["hatch"], alpha=styles[col]["alpha"]) for col, name in SPLIT_BARS]
    axes[0, 0].legend(handles=handles, frameon=False, fontsize=7.5, ncol=2, loc="lower left",
                      bbox_to_anchor=(0.0, 1.0))
    fig.suptitle(title or "A bit flip split by where it lands", fontsize=10)
    return fig

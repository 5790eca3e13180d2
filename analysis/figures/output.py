"""The output side: the logit lens across depth and the head's geometry (:mod:`analysis.readouts.lens`,
:mod:`analysis.readouts.head`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures.style import short_hook, subplots, variant_colours


def lens_figure(frames: dict, *, title: str | None = None):
    """Accuracy and KL to the final distribution against depth, variants side by side on the same axes."""
    colours = variant_colours(frames)
    fig, axes = subplots(2, height=2.6, ncols=2)
    for v, df in frames.items():
        x = df.depth.to_numpy()
        for ax, k in zip(axes[0], ("accuracy", "kl")):
            ax.plot(x, df[k], marker="o", markersize=3, color=colours[v], label=v)
            ax.fill_between(x, df[f"{k}_lo"], df[f"{k}_hi"], color=colours[v], alpha=0.2, linewidth=0)
    hooks = next(iter(frames.values())).hook
    labels = ["input" if h == "blocks.0.hook_resid_pre" else short_hook(h).replace(".hook_resid_post", " out")
              for h in hooks]
    for ax, label in zip(axes[0], ("next-token accuracy of the lens", "KL(final || lens) (nats)")):
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(color="0.9")
    axes[0, 0].legend(fontsize=7, frameon=False)
    n = next(iter(frames.values())).attrs.get("n_tokens")
    fig.suptitle(title or f"logit lens: the final norm and head applied at each depth ({n:,} tokens; bands: 95% "
                 "interval over sequences)", fontsize=9, x=0.02, ha="left")
    return fig


def head_figure(df: pd.DataFrame, *, title: str | None = None):
    """Bars per variant: R^2 of the head rows from code bits (canonical and own code), and, with a reference,
    CKA and nearest-neighbour overlap with the learned input table (chance marked)."""
    variants = list(dict.fromkeys(df.variant))
    colours = variant_colours(variants)
    panels = [("bits_r2", "R^2 of head rows from code bits\n(hatched: the model's own code)")]
    if (df.measure == "cka_to_learned_input").any():
        panels += [("cka_to_learned_input", "linear CKA, head rows vs\nthe learned input table"),
                   ("nn_overlap", "nearest-neighbour overlap with\nthe learned input table")]
    fig, axes = subplots(2, height=2.6, ncols=len(panels))
    for ax, (measure, label) in zip(axes[0], panels):
        d = df[df.measure == measure]
        x = 0
        ticks, names = [], []
        for v in variants:
            g = d[d.variant == v]
            for r in g.itertuples():
                err = None if not np.isfinite(r.lo) else [[r.value - r.lo], [r.hi - r.value]]
                ax.bar(x, r.value, 0.8, color=colours[v], hatch="//" if r.basis == "own code" else None,
                       edgecolor="white", yerr=err, capsize=2)
                ticks.append(x)
                names.append(v if r.basis != "own code" else f"{v}\n(own code)")
                x += 1
            x += 0.4
        if measure == "nn_overlap":
            chance = df[df.measure == "nn_overlap_chance"].value
            if len(chance):
                ax.axhline(float(chance.iloc[0]), color="k", linewidth=0.8, linestyle="--")
                ax.text(0, float(chance.iloc[0]), " chance", fontsize=6, va="bottom")
        ax.set_xticks(ticks, names, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(label, fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(axis="y", color="0.9")
        ax.set_axisbelow(True)
    fig.suptitle(title or "the output head's geometry (R^2: range over random token splits; overlap: 95% interval "
                 "over tokens)", fontsize=9, x=0.02, ha="left")
    return fig

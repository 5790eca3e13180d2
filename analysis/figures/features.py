"""Figures of sparse dictionaries (:mod:`analysis.features`): training curves, and features read against the code."""

from __future__ import annotations

import numpy as np
import pandas as pd

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

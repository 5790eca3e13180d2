"""The demo's bit-flip section: what flipping one code bit costs each fixed-code variant, the input-noise analogue
that every variant has, and where the information a bit carries moves across layers on the IOI prompts."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from analysis.causal.bitmap import bit_layer_map
from analysis.corpus import corpus_tokens
from analysis.errors import AnalysisWarning
from analysis.causal.interventions import input_intervention

TOKENS = 8192  # validation tokens
NOISE_SCALES = (0.25, 0.5, 1.0)


def bitflip_tables(models: dict, pairs):
    """(per-bit flip summary of the fixed variants, noise summary of all variants, bit x layer maps by variant)."""
    flips, noise, maps = [], [], {}
    for v, m in models.items():
        x = corpus_tokens(m, tokens=TOKENS)
        if m.cfg.has_code:
            flips.append(input_intervention(m, "bitflip", x).summary.assign(variant=v))
            with warnings.catch_warnings():  # bits whose flip moves nothing are NaN and left out of the means
                warnings.simplefilter("ignore", AnalysisWarning)
                maps[v] = bit_layer_map(m, pairs)
        noise.append(input_intervention(m, "noise", x, scales=NOISE_SCALES).summary.assign(variant=v))
    first = lambda df: df[["variant"] + [c for c in df.columns if c != "variant"]]  # noqa: E731
    return (first(pd.concat(flips, ignore_index=True)).dropna(axis=1, how="all"),
            first(pd.concat(noise, ignore_index=True)).dropna(axis=1, how="all"), maps)


def bitflip_reading(flips: pd.DataFrame, noise: pd.DataFrame, maps: dict) -> list[str]:
    """Report lines generated from the tables."""
    lines = ["## Bit flips: how each fixed-code variant reads its code", "",
             f"Each code column (bit, in the configured order, every repeated copy) flipped for every token of "
             f"{TOKENS:,} validation tokens; loss change in nats per token, mean over sequences with its 95% "
             f"interval. The learned variant has no bits; its analogue is Gaussian noise on the input rows "
             f"(relative to the RMS of the rows), which every variant gets.", "",
             "![loss change per flipped bit](bitflips.png)", ""]
    for v, g in flips.groupby("variant", sort=False):
        top = g.sort_values("delta_loss", ascending=False).iloc[0]
        const, vary = g[g.bit_constant.astype(bool)], g[~g.bit_constant.astype(bool)]
        s = (f"- {v}: flipping one bit costs {g.delta_loss.mean():+.2f} nats on average over the {len(g)} bits (range "
             f"{g.delta_loss.min():+.2f} to {g.delta_loss.max():+.2f}; largest: bit {int(top.bit)}, "
             f"{top.delta_loss:+.2f} [{top.delta_loss_lo:+.2f}, {top.delta_loss_hi:+.2f}])")
        if len(const):
            s += (f"; the {len(const)} columns that are constant over the vocabulary (no token id in use sets them "
                  f"differently) cost {const.delta_loss.mean():+.2f} on average, the {len(vary)} that vary "
                  f"{vary.delta_loss.mean():+.2f}")
        else:
            s += f"; every one of the {len(g)} columns varies over the vocabulary"
        lines.append(s + ".")
    lines += ["", "| variant | " + " | ".join(f"noise {s:g}" for s in NOISE_SCALES) + " |",
              "|---|" + "---:|" * len(NOISE_SCALES)]
    for v, g in noise.groupby("variant", sort=False):
        g = g.set_index("scale")
        lines.append(f"| {v} | " + " | ".join(f"{g.loc[s, 'delta_loss']:+.2f}" for s in NOISE_SCALES) + " |")
    lines += ["", "Noise cells: loss change (nats per token) with input-row noise of that relative s.d.", ""]
    if maps:
        a = next(iter(maps.values())).attrs
        p, last = a["flip_pos"], a["n_pos"] - 1
        lines += [f"### Where a bit's information goes (IOI prompts, bit flipped at position {p}, "
                  f"{a['str_tokens'][p]!r})", "",
                  f"Each bit flipped at position {p} of the {a['n_items']} patched IOI prompts; the clean residual "
                  "stream entering each layer is written back at one position, and the fraction of the flip's effect "
                  "on the final distribution (KL from the clean run) that this removes is measured. Mean over the "
                  "bits whose flip moves the output:", "",
                  "![bit x layer maps](bit_layer.png)", "",
                  "| variant | layer | at the flipped position | at the final position |", "|---|---:|---:|---:|"]
        for v, df in maps.items():
            for layer in range(a["n_layers"]):
                at_p = df[(df.layer == layer) & (df.pos == p)].restored.mean()
                at_f = df[(df.layer == layer) & (df.pos == last)].restored.mean()
                lines.append(f"| {v} | {layer} | {at_p:.2f} | {at_f:.2f} |")
        lines.append("")
        for v, df in maps.items():
            lines.append("- " + _moved(v, df, p, last))
        lines += ["", "A flipped bit makes an input row that may be another token's code or none, so these maps show "
                  "where the *difference* the flip made travels, not what the model computes from one bit alone; "
                  "one seed per variant.", ""]
    return lines


def _moved(v, df, p, last) -> str:
    layers = sorted(df.layer.unique())
    at_p = np.array([df[(df.layer == layer) & (df.pos == p)].restored.mean() for layer in layers])
    at_f = np.array([df[(df.layer == layer) & (df.pos == last)].restored.mean() for layer in layers])
    if np.isnan(at_p).all() or np.isnan(at_f).all():
        return f"{v}: no bit's flip at this position moves the output enough to follow it."
    moved = [layer for layer in layers if at_f[layer] > at_p[layer]]
    if not moved:
        return (f"{v}: entering every layer, patching the flipped position restores more than patching the final "
                f"position (entering the last block: {at_p[-1]:.2f} against {at_f[-1]:.2f}); the information is "
                "still at the flipped position there, so the last block moves it.")
    m = moved[0]
    return (f"{v}: entering layer {m}, patching the final position restores {at_f[m]:.2f} of the flip's effect and "
            f"patching the flipped position {at_p[m]:.2f}: the information has moved on by then"
            + (f" (entering layer {m - 1}: {at_f[m - 1]:.2f} and {at_p[m - 1]:.2f}"
               + (", the latter by construction" if m == 1 else "") + ")." if m else "."))

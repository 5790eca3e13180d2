"""The demo's bit-flip section: what flipping one code bit costs each fixed-code variant, split by where the flip
lands (another token's code, or none); the input-noise analogue that every variant has, compared at matched
nearest-row decodability; and where the information a bit carries moves across layers on the IOI prompts."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from analysis.causal.bitmap import bit_layer_map
from analysis.causal.flipsplit import flip_split, split_table
from analysis.causal.landing import matched_landing, split_parts
from analysis.causal.interventions import bit_groups, input_intervention, matched_decoding
from analysis.corpus import corpus_tokens
from analysis.errors import AnalysisWarning

TOKENS = 8192  # validation tokens
NOISE_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)  # wide enough for the learned table's rows to stop decoding too
DECODE_LEVELS = (0.9, 0.5)  # nearest-row decoding accuracies at which the variants' noise effects are compared
EQUAL_SCALE = 0.5  # the scale the study compares the variants at (the unmatched comparison)


def bitflip_tables(models: dict, pairs):
    """(per-bit flip summary of the fixed variants, noise summary of all variants, bit x layer maps by variant).

    The flip summary carries, in ``attrs["split"]`` (as records: ``pd.DataFrame(flips.attrs["split"])``), the
    :func:`analysis.causal.flipsplit.split_table` of every fixed variant's varying columns (one row per variant and
    bit: ``flip, on, off, landing, random, interaction, on_support, hamming_random, bit_constant``), which
    :func:`bitflip_reading` reports."""
    flips, noise, maps, splits = [], [], {}, []
    for v, m in models.items():
        x = corpus_tokens(m, tokens=TOKENS)
        if m.cfg.has_code:
            s = input_intervention(m, "bitflip", x).summary
            flips.append(s.assign(variant=v))
            varying = [int(b) for b in s.bit[~s.bit_constant.astype(bool)]]
            if varying:
                splits.append(split_table(flip_split(m, x, bits=varying).summary).assign(variant=v))
            with warnings.catch_warnings():  # bits whose flip moves nothing are NaN and left out of the means
                warnings.simplefilter("ignore", AnalysisWarning)
                maps[v] = bit_layer_map(m, pairs)
        noise.append(input_intervention(m, "noise", x, scales=NOISE_SCALES).summary.assign(variant=v))
    first = lambda df: df[["variant"] + [c for c in df.columns if c != "variant"]]  # noqa: E731
    flips = first(pd.concat(flips, ignore_index=True)).dropna(axis=1, how="all")
    # as records (plain data): pandas copies attrs on every operation and compares them when it concatenates
    flips.attrs["split"] = first(pd.concat(splits, ignore_index=True)).to_dict("records") if splits else None
    return flips, first(pd.concat(noise, ignore_index=True)).dropna(axis=1, how="all"), maps


def _pct(x) -> str:
    return "n/a" if pd.isna(x) else f"{100 * x:.0f}%"


def flip_lines(flips: pd.DataFrame) -> list[str]:
    """One line per variant: mean and largest flip over the varying columns, their code support, the constant
    columns apart."""
    lines = []
    for v, g in flips.groupby("variant", sort=False):
        b = bit_groups(g).set_index("group")
        if "varying" in b.index:
            r = b.loc["varying"]
            vary = g[~g.bit_constant.astype(bool)]
            s = (f"- {v}: flipping one of its {int(r.n_bits)} varying columns costs {r.mean_delta_loss:+.2f} nats on "
                 f"average (range {vary.delta_loss.min():+.2f} to {vary.delta_loss.max():+.2f}; largest: bit "
                 f"{int(r.max_bit)}, {r.max_delta_loss:+.2f} [{r.max_delta_loss_lo:+.2f}, {r.max_delta_loss_hi:+.2f}]);"
                 f" the flipped code is another token's for {_pct(vary.on_support.mean())} of the token rows on "
                 f"average (per column {_pct(vary.on_support.min())} to {_pct(vary.on_support.max())})")
        else:
            s = f"- {v}: no column varies over the vocabulary"
        if "constant" in b.index:
            c = b.loc["constant"]
            s += (f"; its {int(c.n_bits)} columns that are constant over the vocabulary (no token id in use sets "
                  f"them differently: the flip gives no token's code) cost {c.mean_delta_loss:+.2f} on average, "
                  "reported apart")
        else:
            s += "; every column varies over the vocabulary"
        lines.append(s + ".")
    return lines


def split_lines(split: pd.DataFrame | None, flips: pd.DataFrame) -> list[str]:
    """The flips split into their on- and off-support parts, and what the unmatched comparison hid."""
    if split is None or not len(split):
        return []
    lines = ["### A flip split by where it lands", "",
             "Each varying column's flip run three more ways: only where the flipped code is another token's (the "
             "on-support part: exactly a swap to that token, checked against a swap built from the token ids), only "
             "where it is no token's (the off-support part), and, at the on-support positions, a swap to a random "
             "other token. Loss change in nats per token; the first five columns are means over the varying "
             "columns, the last three over the columns whose flip lands on a token for some rows:", "",
             "| variant | rows on support | whole flip | on-support part | off-support part | flip - (on + off) | "
             "columns landing on tokens | landing token there | random token there | bits to the random token |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    means = {}
    for v, g in split.groupby("variant", sort=False):
        g = g[~g.bit_constant.astype(bool)]
        some = g[g.on_support > 0]
        m = dict(on_support=g.on_support.mean(), flip=g.flip.mean(), on=g.on.mean(), off=g.off.mean(),
                 inter=g.interaction.mean(), random=some.random.mean() if len(some) else np.nan,
                 landing=some.landing.mean() if len(some) else np.nan,
                 ham=some.hamming_random.mean() if len(some) else np.nan, n_some=len(some), n=len(g))
        means[v] = m
        fmt = lambda x, f="+.3f": "n/a" if np.isnan(x) else format(x, f)  # noqa: E731
        lines.append(f"| {v} | {_pct(m['on_support'])} | {m['flip']:+.3f} | {m['on']:+.3f} | {m['off']:+.3f} | "
                     f"{m['inter']:+.3f} | {m['n_some']} of {m['n']} | {fmt(m['landing'])} | {fmt(m['random'])} | "
                     f"{fmt(m['ham'], '.1f')} |")
    lines.append("")
    for v, m in means.items():
        if m["n_some"] == 0:
            lines.append(f"- {v}: no flip of a varying column gives another token's code here, so every flip is "
                         "a row the model never saw in training.")
            continue
        nearer = "less" if m["landing"] < m["random"] else "more"
        lines.append(f"- {v}: over the {m['n_some']} columns whose flip lands on tokens, reading the token one bit "
                     f"away costs {m['landing']:+.3f} nats and a random token at the same positions "
                     f"{m['random']:+.3f} (on average {m['ham']:.1f} bits away): by point estimate a code neighbour "
                     f"is {nearer} harmful than an arbitrary token.")
    if len(means) > 1:
        shares = ", ".join(f"{v} {_pct(m['on_support'])}" for v, m in means.items())
        lines += ["", f"What this changes: the per-bit comparison above sets flips of equal size (one bit) side by "
                  f"side, but the share of flipped rows that are another token's code differs ({shares}), so it "
                  "compares token swaps in one variant with unseen code rows in another. Neither the whole flips nor "
                  "their parts are matched across variants (the parts act on different shares of the rows); what is "
                  "matched is within a variant: the token one bit away against a random token at the same "
                  "positions, and the off-support part ("
                  + ", ".join(f"{v} {m['off']:+.3f}" for v, m in means.items())
                  + ") as the effect of code rows no token has."]
        lines += ["", landing_line(split)]
    return lines + [""]


def landing_line(split: pd.DataFrame) -> str:
    """The variants' mean flips standardised to one landing share (:func:`analysis.causal.landing.matched_landing`
    over the varying columns), beside the sum of their parts at their own share."""
    g = split[~split.bit_constant.astype(bool)]
    m = matched_landing(split_parts(g).assign(delta_loss=g.flip), by="variant")
    parts = g.assign(parts=g.on + g.off).groupby("variant").parts.mean()
    at = m.landing_at.iloc[0]
    cells = ", ".join((f"{r.variant} n/a (no flip of it lands on a token)" if np.isnan(r.delta_loss)
                       else f"{r.variant} {r.delta_loss:+.3f}")
                      + f" (at its own {_pct(r.landing_own)}: {parts[r.variant]:+.3f})" for r in m.itertuples())
    return (f"At a matched landing share: each variant's on- and off-support parts, pooled over its varying columns "
            f"and scaled to {_pct(at)} of the flipped rows landing on another token's code (the mean of the variants' "
            f"own shares; analysis.causal.landing, which assumes each part scales with the share of rows it moves), "
            f"the mean flip costs {cells}. Matched on landing share, not on distance: every flip moves one bit.")


def noise_lines(noise: pd.DataFrame) -> list[str]:
    """Noise per scale with its decoding accuracy, then the variants at matched decodability."""
    g = noise.groupby(["variant", "scale"], sort=False)[["delta_loss", "decode_acc"]].mean()
    variants = list(dict.fromkeys(noise.variant))
    lines = ["", "### Input noise: the analogue every variant has", "",
             "| variant | " + " | ".join(f"noise {s:g}" for s in NOISE_SCALES) + " |",
             "|---|" + "---:|" * len(NOISE_SCALES)]
    for v in variants:
        cells = [f"{g.loc[(v, s), 'delta_loss']:+.2f} ({_pct(g.loc[(v, s), 'decode_acc'])})" for s in NOISE_SCALES]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += ["", "Noise cells: loss change (nats per token) with input-row noise of that s.d. relative to the RMS of "
              "the rows, and in brackets the share of noised rows whose nearest row of the variant's input table is "
              "still its own (nearest-row decoding accuracy). One relative scale is not one disturbance: the "
              "learned table's rows lie further apart than code rows that differ in one bit.", ""]
    matched = matched_decoding(noise, DECODE_LEVELS).set_index(["variant", "decode_acc"])
    lines += ["| variant | " + " | ".join(f"decoding {_pct(d)}" for d in DECODE_LEVELS) + " |",
              "|---|" + "---:|" * len(DECODE_LEVELS)]
    for v in variants:
        cells = []
        for d in DECODE_LEVELS:
            r = matched.loc[(v, d)]
            cells.append("not reached" if np.isnan(r.delta_loss) else f"{r.delta_loss:+.3f} (scale {r.scale:.2g})")
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += ["", "Matched cells: the loss change interpolated at that nearest-row decoding accuracy (and the noise "
              "scale it takes), so the variants are compared at equal decodability of their inputs."]
    at_equal = {v: g.loc[(v, EQUAL_SCALE), "delta_loss"] for v in variants if (v, EQUAL_SCALE) in g.index}
    level = DECODE_LEVELS[-1]
    at_matched = {v: matched.loc[(v, level), "delta_loss"] for v in variants}
    if len(at_equal) > 1 and all(np.isfinite(list(at_matched.values()))):
        order = lambda d: " > ".join(sorted(d, key=lambda v: -d[v]))  # noqa: E731
        same = order(at_equal) == order(at_matched)
        decoded = ", ".join(f"{v} {_pct(g.loc[(v, EQUAL_SCALE), 'decode_acc'])}" for v in at_equal)
        lines += ["", f"What this changes: at equal scale {EQUAL_SCALE:g} (the unmatched comparison) the rows still "
                  f"decoding were {decoded}, and the costs ("
                  + ", ".join(f"{v} {x:+.3f}" for v, x in at_equal.items()) + f") rank {order(at_equal)}; at "
                  f"equal decoding accuracy {_pct(level)} ("
                  + ", ".join(f"{v} {x:+.3f}" for v, x in at_matched.items()) + f") they rank {order(at_matched)}"
                  + (" - the same order." if same else " - the order changes, so the equal-scale comparison "
                     "measured how far apart each table's rows are as much as how the model reads them.")
                  + " (Point estimates of one draw per scale and one seed per variant.)"]
    return lines + [""]


def bitflip_reading(flips: pd.DataFrame, noise: pd.DataFrame, maps: dict, split: pd.DataFrame | None = None,
                    split_figure: str | None = None, noise_figure: str | None = None) -> list[str]:
    """Report lines generated from the tables; ``split`` defaults to ``flips.attrs["split"]``; ``split_figure`` and
    ``noise_figure``: file names of the flip-split and noise-against-decoding figures to link, if written."""
    if split is None and flips.attrs.get("split"):
        split = pd.DataFrame(flips.attrs["split"])
    lines = ["## Bit flips: how each fixed-code variant reads its code", "",
             f"Each code column (bit, in the configured order, every repeated copy) flipped for every token of "
             f"{TOKENS:,} validation tokens; loss change in nats per token, mean over sequences with its 95% "
             f"interval. The learned variant has no bits; its analogue is Gaussian noise on the input rows, which "
             f"every variant gets. Shares of token rows are weighted by the tokens' frequencies in these windows.", "",
             "![loss change per flipped bit](bitflips.png)", ""]
    lines += flip_lines(flips)
    lines += [""] + split_lines(split, flips)
    if split_figure:
        lines += [f"![a bit flip split by where it lands]({split_figure})", ""]
    lines += noise_lines(noise)
    if noise_figure:
        lines += [f"![input noise against nearest-row decoding accuracy]({noise_figure})", ""]
    if maps:
        lines += _map_lines(maps)
    return lines


def _map_lines(maps: dict) -> list[str]:
    a = next(iter(maps.values())).attrs
    p, last = a["flip_pos"], a["n_pos"] - 1
    lines = [f"### Where a bit's information goes (IOI prompts, bit flipped at position {p}, "
             f"{a['str_tokens'][p]!r})", "",
             f"Each bit flipped at position {p} of the {a['n_items']} patched IOI prompts; the clean residual "
             "stream entering each layer is written back at one position, and the fraction of the flip's effect "
             "on the final distribution (KL from the clean run) that this removes is measured. Mean over the "
             "varying bits whose flip moves the output (columns constant over the vocabulary left out):", "",
             "![bit x layer maps](bit_layer.png)", "",
             "| variant | layer | at the flipped position | at the final position |", "|---|---:|---:|---:|"]
    varying = {v: df[~df.bit_constant.astype(bool)] for v, df in maps.items()}
    for v, df in varying.items():
        for layer in range(a["n_layers"]):
            at_p = df[(df.layer == layer) & (df.pos == p)].restored.mean()
            at_f = df[(df.layer == layer) & (df.pos == last)].restored.mean()
            lines.append(f"| {v} | {layer} | {at_p:.2f} | {at_f:.2f} |")
    lines.append("")
    for v, df in varying.items():
        on = df.groupby("bit").on_support.first().mean() if "on_support" in df else np.nan
        lines.append("- " + _moved(v, df, p, last) + (f" A flip at position {p} gives another token's code for "
                                                      f"{_pct(on)} of the prompts (mean over the varying bits)."
                                                      if np.isfinite(on) else ""))
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

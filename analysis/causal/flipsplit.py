"""A bit flip split by where it lands: on another token's code, or off the code's support."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from analysis.causal.interventions import _bit_mask, _fixed, _InputEdit, _np, input_rms, run_input_edits
from analysis.causal.support import CodeSupport, bit_values, popcount
from analysis.corpus import MEASURE_TOKENS
from analysis.engine.effects import InterventionResult, check_eval, nonempty, position, result, target
from analysis.errors import AnalysisError

#: The edits of one bit in :func:`~analysis.causal.flipsplit.flip_split` (a result's ``kind``), in the order of the
#: module docstring.
PARTS = ("bitflip", "flip-on-support", "flip-off-support", "swap-landing", "swap-random")
#: The column of each part in :func:`~analysis.causal.flipsplit.split_table`.
SPLIT_COLUMNS = {"bitflip": "flip", "flip-on-support": "on", "flip-off-support": "off", "swap-landing": "landing",
                 "swap-random": "random"}


def random_others(vocab: int, own: np.ndarray, seed: int, bit: int, seq: int) -> np.ndarray:
    """A uniformly drawn other id for each token of one sequence ``own`` ``[T]`` (never the token itself), fixed by
    (seed, bit, sequence)."""
    t = np.random.default_rng([seed, bit, seq, 7]).integers(vocab - 1, size=len(own))
    return t + (t >= own)


def _split_edit(model, part: str, bit: int, pos, seed: int, sup: CodeSupport):
    mask = _bit_mask(model, bit)
    a, b = bit_values(model)
    vocab = model.cfg.vocab_size

    def selected(tokens):  # [n, T] bool: the positions this part edits, and the landing tokens there
        t = _np(tokens)
        landing = sup.landing(sup.keys[t] ^ (1 << int(bit)))
        on = landing >= 0
        sel = np.ones_like(on) if part == "bitflip" else on if part in ("flip-on-support", "swap-landing",
                                                                         "swap-random") else ~on
        if pos is not None:
            keep = np.zeros_like(sel)
            keep[:, pos] = True
            sel &= keep
        return t, landing, on, sel

    def new_tokens(t, landing, seq):
        if part == "swap-landing":
            return np.where(landing >= 0, landing, t)
        return np.stack([random_others(vocab, row, seed, bit, int(s)) for row, s in zip(t, seq.tolist())])

    def apply(x, tokens, seq):
        t, landing, _, sel = selected(tokens)
        w = torch.from_numpy(sel).to(x.device)[..., None]
        if part.startswith("swap"):
            rows = model.embed(torch.from_numpy(new_tokens(t, landing, seq)).to(tokens.device))
            return torch.where(w, rows, x)
        return torch.where(w, x + mask * ((a + b) - 2 * x), x)

    def support(tokens, seq):
        t, landing, on, sel = selected(tokens)
        rows = float(sel.sum())
        if part.startswith("swap"):
            new = new_tokens(t, landing, seq)
            return dict(rows=rows, on=rows, ham=float(popcount(sup.keys[t] ^ sup.keys[new])[sel].sum()))
        return dict(rows=rows, on=float((on & sel).sum()), ham=rows)
    return _InputEdit(dict(kind=part, bit=int(bit), pos=pos), pos or 0, apply, support)


@torch.no_grad()
def flip_split(model, data=None, *, task: str | None = None, bits=None, pos=None, seed: int = 0,
               tokens: int = MEASURE_TOKENS, n_pairs: int = 64, max_batch: int = 128,
               progress: bool = False) -> InterventionResult:
    """Each bit flip of ``bits`` (default every bit) at position ``pos`` (default every position) with its on- and
    off-support parts and the two swaps at its on-support positions (see the module docstring). Data as
    :func:`analysis.causal.interventions.input_intervention` (corpus windows, a task's prompts or a PairBatch)."""
    check_eval(model)
    _fixed(model, "bit-flip split")
    tgt = target(model, data, task, tokens, n_pairs, seed)
    n, T = tgt.tokens.shape
    pos = position(pos, T)
    bits = range(model.cfg.n_bits) if bits is None else nonempty(bits, "bits")
    sup = CodeSupport(model)
    for b in bits:
        _bit_mask(model, b)  # range check before any run
    edits = [_split_edit(model, part, b, pos, seed, sup) for b in bits for part in PARTS]
    values, columns = run_input_edits(model, tgt, edits, what="bit-flip split", max_batch=max_batch,
                                      progress=progress)
    attrs = dict(kind="flip-split", pos=pos, seed=seed, input_rms=input_rms(model))
    return result(model, [e.ids for e in edits], values, tgt, attrs, columns)


def split_table(summary: pd.DataFrame, measure: str | None = None) -> pd.DataFrame:
    """One row per bit (and per ``variant`` if present) of a :func:`~analysis.causal.flipsplit.flip_split` summary: the
    ``measure`` (default ``delta_loss``, or ``delta_logit_diff`` on prompts) of each part as ``flip``, ``on``, ``off``,
    ``landing``, ``random``; ``interaction`` (``flip - on - off``); ``on_support`` (of the whole flip),
    ``hamming_random`` (bits between a token and its random substitute) and ``bit_constant``."""
    measure = measure or ("delta_loss" if "delta_loss" in summary.columns else "delta_logit_diff")
    missing = {"kind", "bit", "bit_constant", "on_support", "hamming", measure} - set(summary.columns)
    parts = set(summary.get("kind", pd.Series(dtype=str)))
    if missing or any(p not in parts for p in PARTS):
        raise AnalysisError("split_table reads the summary of flip_split (every part of every bit: "
                            f"{', '.join(PARTS)}); this one lacks {sorted(missing) or sorted(set(PARTS) - parts)}")
    keys = (["variant"] if "variant" in summary.columns else []) + ["bit"]
    wide = summary.pivot_table(index=keys, columns="kind", values=measure, sort=False).rename(columns=SPLIT_COLUMNS)
    wide = wide[[SPLIT_COLUMNS[p] for p in PARTS]]
    wide["interaction"] = wide["flip"] - wide["on"] - wide["off"]
    full = summary[summary.kind == "bitflip"].set_index(keys)
    wide["on_support"] = full["on_support"]
    wide["hamming_random"] = summary[summary.kind == "swap-random"].set_index(keys)["hamming"]
    wide["bit_constant"] = full["bit_constant"].astype(bool)
    wide.columns.name = None
    return wide.reset_index()


__all__ = ["PARTS", "flip_split", "split_table", "random_others"]

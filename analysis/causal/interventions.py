"""Causal interventions on the input: edits of the code rows (or embedding rows) the model reads.

Input edits act on what enters the residual stream (``hook_embed``). For the fixed-code variants bit ``j`` is
column ``j`` of the code in the model's configured bit order, and an edit acts on every repeated copy of it:

- ``bitflip``: flip bit ``j`` (negate for ``pm1``, complement for ``01``), every bit in one batched sweep;
- ``midpoint``: set bit ``j`` to the midpoint of its two values (0 for ``pm1``);
- ``swap``: at one position, the input row of another token (given, or drawn per sequence), the token id and
  everything else unchanged; one edit per position;
- ``noise``: Gaussian noise on the code bits (each repeated copy gets the same draw) or, for the learned variant, on
  the embedding row; ``scale`` is relative to the RMS of the model's input rows over the vocabulary, so the
  variants are comparable.

Bit edits on the learned variant are refused (it has no bits); ``swap`` and ``noise`` are its analogues, so every
variant has a row in every comparison. Component ablations are in :mod:`analysis.causal.ablation`.

Measured (see :mod:`analysis.engine.effects`) on corpus windows (:func:`analysis.corpus.corpus_tokens`): per sequence,
``loss``, ``delta_loss`` and ``kl``; on task prompts (a built-in task name or a :class:`~analysis.pairs.PairBatch`;
the clean prompts are edited): per pair, ``logit_diff``, ``delta_logit_diff``, ``correct`` and ``kl`` at the final
position. A result (:class:`~analysis.engine.effects.InterventionResult`) holds the per-item values (``items``) and one
summary row per edit (``summary``: each measure's mean and 95% t-interval over items).

Speed: every edit of a sweep shares batched forwards (rows = edits x sequences, ``max_batch`` at a time). An edit
that first touches position ``p`` leaves earlier positions as they are in the unedited run, so it runs positions
``p..`` only, from the unedited run's cached keys and values.

What a result does NOT establish: a large effect of an edit shows the model's output depends on what was edited,
*off its training distribution*; a bit flip makes a code row that may belong to another token (or to none), so it
mixes "the bit matters" with "the model sees a different token".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from analysis import engine
from analysis.corpus import DEFAULT_TOKENS
from analysis.engine.effects import InterventionResult, Measurer, check_eval, chunks, nonempty, position, result, rows_per_forward, target
from analysis.errors import AnalysisError

KINDS = ("bitflip", "midpoint", "swap", "noise")
DEFAULT_SCALES = (0.1, 0.25, 0.5, 1.0)


# ---------------------------------------------------------------------------------------------- input edits
def _fixed(model, kind):
    if not model.cfg.has_code:
        raise AnalysisError(f"a {kind} edit acts on code bits; the {model.cfg.interface} variant has none (use kind "
                            "'swap' or 'noise', which act on its input row)")


def _bit_values(model) -> tuple[float, float]:
    s = float(model.cfg.code_scale)
    return (-s, s) if model.cfg.value_map == "pm1" else (0.0, s)


def _bit_mask(model, bit: int) -> torch.Tensor:
    n = model.cfg.n_bits
    if not isinstance(bit, (int, np.integer)) or isinstance(bit, (bool, np.bool_)) or not 0 <= bit < n:
        raise AnalysisError(f"bit {bit!r} is out of range for a {n}-bit code (0..{n - 1})")
    e = torch.zeros(n, device=model.embed.code.device, dtype=model.embed.code.dtype)
    e[int(bit)] = 1
    return model.embed.widen(e)


def input_rms(model) -> float:
    """RMS of the model's input rows over the vocabulary (the unit of ``noise`` scales)."""
    table = model.embed.code if model.cfg.is_fixed else model.embed.W_E
    return float(table.detach().float().pow(2).mean().sqrt())


@dataclass
class _InputEdit:
    ids: dict  # the identifying columns
    start: int  # first edited position
    apply: object  # (x [n, T, d] embedded input, tokens [n, T], seq index [n]) -> edited x (a new tensor)


def _bit_edit(model, kind, bit, pos):
    mask = _bit_mask(model, bit)
    a, b = _bit_values(model)
    sl = slice(None) if pos is None else slice(pos, pos + 1)

    def apply(x, tokens, seq):
        x = x.clone()
        part = x[:, sl]
        target = (a + b) - part if kind == "bitflip" else torch.full_like(part, (a + b) / 2)
        x[:, sl] = part + mask * (target - part)
        return x
    return _InputEdit(dict(kind=kind, bit=int(bit), pos=pos), pos or 0, apply)


def _swap_edit(model, pos, token, seed):
    vocab = model.cfg.vocab_size
    if token is not None and (not isinstance(token, (int, np.integer)) or isinstance(token, (bool, np.bool_))
                              or not 0 <= token < vocab):
        raise AnalysisError(f"swap token {token!r} is not an id of this model's vocabulary (0..{vocab - 1})")

    def apply(x, tokens, seq):
        x = x.clone()
        if token is None:  # a random other token per sequence, fixed by (seed, sequence, position)
            new = torch.tensor([_other_token(vocab, int(tokens[i, pos]), seed, int(s), pos)
                                for i, s in enumerate(seq.tolist())], device=tokens.device)
        else:
            new = torch.full((tokens.shape[0],), int(token), device=tokens.device)
        x[:, pos] = model.embed(new)
        return x
    return _InputEdit(dict(kind="swap", pos=pos, token=token), pos, apply)


def _other_token(vocab, own, seed, seq, pos):
    t = int(np.random.default_rng([seed, seq, pos]).integers(vocab - 1))
    return t + (t >= own)


def _noise_edit(model, scale, draw, pos, seed):
    if not isinstance(scale, (int, float, np.floating)) or isinstance(scale, bool) or not 0 <= scale < float("inf"):
        raise AnalysisError(f"a noise scale is a finite non-negative number, got {scale!r}")
    sd = float(scale) * input_rms(model)
    width = model.embed.code.shape[-1] if model.cfg.is_fixed else model.cfg.d_model
    sl = slice(None) if pos is None else slice(pos, pos + 1)

    def apply(x, tokens, seq):
        x = x.clone()
        n, T = x[:, sl].shape[:2]
        z = torch.stack([torch.randn(T, width, generator=torch.Generator().manual_seed(
            int(np.random.default_rng([seed, draw, int(s)]).integers(1 << 62)))) for s in seq.tolist()])
        z = (z * sd).to(x.device, x.dtype)
        x[:, sl] = x[:, sl] + (model.embed.widen(z) if model.cfg.is_fixed else z)
        return x
    return _InputEdit(dict(kind="noise", pos=pos, scale=float(scale), draw=int(draw)), pos or 0, apply)


def input_edits(model, kind: str, *, bits=None, pos=None, positions=None, token=None, scales=DEFAULT_SCALES,
                draws: int = 1, seed: int = 0, n_pos: int):
    """The edits of one input sweep (see :func:`input_intervention`)."""
    if kind in ("bitflip", "midpoint"):
        _fixed(model, kind)
        bits = range(model.cfg.n_bits) if bits is None else nonempty(bits, "bits")
        return [_bit_edit(model, kind, b, pos) for b in bits]
    if kind == "swap":
        positions = range(n_pos) if positions is None else [position(p, n_pos)
                                                            for p in nonempty(positions, "positions")]
        return [_swap_edit(model, p, token, seed) for p in positions]
    if kind == "noise":
        if not isinstance(draws, int) or draws < 1:
            raise AnalysisError(f"draws must be a positive integer, got {draws!r}")
        return [_noise_edit(model, s, d, pos, seed) for s in nonempty(scales, "noise scales") for d in range(draws)]
    raise AnalysisError(f"unknown input edit {kind!r}; use one of bitflip, midpoint, swap, noise")


# ------------------------------------------------------------------------------------------------ input sweeps
@torch.no_grad()
def input_intervention(model, kind: str, data=None, *, task: str | None = None, bits=None, pos=None,
                       positions=None, token=None, scales=DEFAULT_SCALES, draws: int = 1, seed: int = 0,
                       tokens: int = DEFAULT_TOKENS, n_pairs: int = 64, max_batch: int = 128,
                       progress: bool = False) -> InterventionResult:
    """Edit the input rows and measure (see the module docstring).

    ``kind``: ``bitflip`` / ``midpoint`` (one edit per bit of ``bits``, default every bit, at position ``pos``,
    default every position), ``swap`` (one edit per position of ``positions``, default each; the row of ``token``,
    default a random other token per sequence), ``noise`` (one edit per scale and draw, at ``pos``). Data: corpus
    windows (``data``: None, a file, or token ids; ``tokens``) or the prompts of ``task`` (``n_pairs``, ``seed``) or
    a :class:`PairBatch` as ``data``. Negative positions count from the end. ``max_batch``: rows per forward.
    """
    check_eval(model)
    tgt = target(model, data, task, tokens, n_pairs, seed)
    n, T = tgt.tokens.shape
    pos = position(pos, T)
    edits = input_edits(model, kind, bits=bits, pos=pos, positions=positions, token=token, scales=scales,
                        draws=draws, seed=seed, n_pos=T)
    n_layers = model.cfg.n_layers
    values = {me: np.full((len(edits), n), np.nan) for me in tgt.measures}
    bar = tqdm(total=len(edits) * n, desc=f"{kind} edits", unit="seq", disable=not progress, leave=False)
    rows = rows_per_forward(tgt, model.cfg.vocab_size, max_batch)
    for seq in chunks(n, rows):
        toks = tgt.tokens[seq]
        m = len(seq)
        base_logits, cache = engine.cache_run(model, toks, engine.kv_names(n_layers))
        measure = Measurer(tgt, seq, base_logits)
        x0 = model.input_code(toks)
        # an edit from position s leaves earlier positions as they are: run s.. from the cached keys and values
        starts = [min(e.start, T - 1) for e in edits]
        for s, group in engine.groups(starts, m, rows):
            k = len(group)
            x = torch.cat([edits[g].apply(x0, toks, seq)[:, s:] for g in group])
            logits = engine.run_from(model, x, 0, past=engine.past_kv(cache, 0, n_layers, s, k), last_only=tgt.pairs)
            for me, v in measure(logits, k, s).items():
                values[me][np.ix_(group, seq.numpy())] = v.double().cpu().numpy()
            bar.update(k * m)
    bar.close()
    attrs = dict(kind=kind, pos=pos, seed=seed, input_rms=input_rms(model))
    return result(model, [e.ids for e in edits], values, tgt, attrs)


__all__ = ["KINDS", "DEFAULT_SCALES", "InterventionResult", "input_intervention", "input_edits", "input_rms"]

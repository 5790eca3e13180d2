"""Causal interventions: edits of the input code (or embedding row) and component ablations.

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
variant has a row in every comparison. Component ablations (every variant): ``zero``, ``mean`` (over a reference
sample: over sequences and positions for corpus windows, per position for task prompts) and ``resample`` (the
activation of another sequence of the reference sample) of one attention ``head`` (its ``hook_z``), one ``attn``
output, one ``mlp`` output or one whole ``block`` (its write ``resid_post - resid_pre``), at every position or one.

Measured on corpus windows (:func:`analysis.corpus.corpus_tokens`): per sequence, ``loss`` (mean next-token
cross-entropy over its predicted positions), ``delta_loss`` and ``kl`` (mean over positions of KL(unedited ||
edited), nats). On task prompts (a built-in task name or a :class:`~analysis.pairs.PairBatch`; the clean prompts are
edited): per pair, ``logit_diff`` (answer minus wrong at the final position), ``delta_logit_diff``, ``correct``
and ``kl`` at the final position. A result (:class:`InterventionResult`) holds the per-item values (``items``)
and one summary row per edit (``summary``: each measure's mean and 95% t-interval over items).

Speed: every edit of a sweep shares batched forwards (rows = edits x sequences, ``max_batch`` at a time). An edit
that first touches position ``p`` leaves earlier positions as they are in the unedited run, so it runs positions
``p..`` only, from the unedited run's cached keys and values; an ablation at layer ``l`` starts from the cached
residual stream entering ``l``.

What a result does NOT establish: a large effect of an edit shows the model's output depends on what was edited
*off its training distribution*; a bit flip makes a code row that may belong to another token (or to none), so it
mixes "the bit matters" with "the model sees a different token". Mean and zero ablations move activations off
distribution too; resampling keeps them on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from . import engine
from .corpus import DEFAULT_TOKENS, corpus_tokens
from .errors import AnalysisError
from .pairs import PairBatch
from .tasks import task_pairs

KINDS = ("bitflip", "midpoint", "swap", "noise", "ablate")
COMPONENTS = {"head": "z_all_pos", "attn": "attn_out", "mlp": "mlp_out", "block": "block"}
ABLATIONS = ("zero", "mean", "resample")
DEFAULT_SCALES = (0.1, 0.25, 0.5, 1.0)
ID_COLUMNS = ["interface", "kind", "bit", "pos", "layer", "head", "component", "ablation", "token", "scale", "draw"]


# ------------------------------------------------------------------------------------------------------ result
@dataclass
class InterventionResult:
    """``items``: one row per edit and sequence (``item``), with every measure; ``summary``: one row per edit, each
    measure's mean with a 95% interval (``<measure>_lo``/``_hi``, Student t over items) and ``n``. ``attrs``: the
    unedited baselines and the settings."""

    items: pd.DataFrame
    summary: pd.DataFrame
    attrs: dict

    def _repr_html_(self):
        return self.summary._repr_html_()

    def __repr__(self):
        return f"InterventionResult({len(self.summary)} edits x {self.attrs['n_items']} items)\n{self.summary!r}"


def confidence(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and the Student-t interval of the mean (NaN bounds for fewer than two finite values)."""
    from scipy import stats

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(v.mean())
    if len(v) < 2:
        return m, float("nan"), float("nan")
    half = float(stats.t.ppf(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return m, m - half, m + half


def _summarize(items: pd.DataFrame, measures: list[str]) -> pd.DataFrame:
    rows = []
    for _, g in items.groupby("edit", sort=True):
        row = {c: g[c].iloc[0] for c in ID_COLUMNS}
        row["n"] = len(g)
        for m in measures:
            row[m], row[f"{m}_lo"], row[f"{m}_hi"] = confidence(g[m].to_numpy())
        rows.append(row)
    out = pd.DataFrame(rows)
    return _typed(out)


def _typed(df):
    for c in ("bit", "pos", "layer", "head", "token", "draw"):
        df[c] = df[c].astype("Int64")
    df["scale"] = df["scale"].astype(float)
    return df


# ------------------------------------------------------------------------------------------------------- data
@dataclass
class _Target:
    tokens: torch.Tensor  # [n, T]
    answer: torch.Tensor | None
    wrong: torch.Tensor | None

    @property
    def pairs(self) -> bool:
        return self.answer is not None


def _target(model, data, task, tokens, n_pairs, seed) -> _Target:
    if task is not None and data is not None:
        raise AnalysisError("give either data (corpus windows) or task (prompt pairs), not both")
    if isinstance(data, PairBatch):
        return _Target(data.clean, data.answer, data.wrong)
    if task is not None:
        b = task_pairs(model, task, n_pairs, seed=seed)
        return _Target(b.clean, b.answer, b.wrong)
    return _Target(corpus_tokens(model, data, tokens=tokens), None, None)


def _pos(pos, T: int) -> int | None:
    if pos is None:
        return None
    if not isinstance(pos, (int, np.integer)) or not -T <= pos < T:
        raise AnalysisError(f"position {pos!r} is out of range for sequences of {T} tokens ({-T}..{T - 1})")
    return int(pos) % T


# ---------------------------------------------------------------------------------------------- input edits
def _fixed(model, kind):
    if not model.cfg.is_fixed:
        raise AnalysisError(f"a {kind} edit acts on code bits; the learned variant has none (use kind 'swap' or "
                            "'noise', which act on its embedding row)")


def _bit_values(model) -> tuple[float, float]:
    s = float(model.cfg.code_scale)
    return (-s, s) if model.cfg.value_map == "pm1" else (0.0, s)


def _bit_mask(model, bit: int) -> torch.Tensor:
    n = model.cfg.n_bits
    if not isinstance(bit, (int, np.integer)) or not 0 <= bit < n:
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
    if token is not None and not (isinstance(token, (int, np.integer)) and 0 <= token < vocab):
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
    if not isinstance(scale, (int, float)) or not scale >= 0:
        raise AnalysisError(f"a noise scale is a non-negative number, got {scale!r}")
    sd = float(scale) * input_rms(model)
    width = model.cfg.n_bits if model.cfg.is_fixed else model.cfg.d_model
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
        bits = range(model.cfg.n_bits) if bits is None else bits
        return [_bit_edit(model, kind, b, pos) for b in bits]
    if kind == "swap":
        positions = range(n_pos) if positions is None else [_pos(p, n_pos) for p in positions]
        return [_swap_edit(model, p, token, seed) for p in positions]
    if kind == "noise":
        if not isinstance(draws, int) or draws < 1:
            raise AnalysisError(f"draws must be a positive integer, got {draws!r}")
        return [_noise_edit(model, s, d, pos, seed) for s in scales for d in range(draws)]
    raise AnalysisError(f"unknown input edit {kind!r}; use one of bitflip, midpoint, swap, noise")


# -------------------------------------------------------------------------------------------------- measuring
def _measure(logits, base_logits, target, rows_seq, start):
    """Per-row measures of edited ``logits`` (positions ``start..``, or the final one for pairs) against the
    unedited run's ``base_logits`` of the same sequences (full length, or final position)."""
    if target.pairs:
        last, base = logits[:, -1].float(), base_logits[:, -1].float()
        a, w = target.answer[rows_seq], target.wrong[rows_seq]
        ld = last.gather(1, a[:, None])[:, 0] - last.gather(1, w[:, None])[:, 0]
        base_ld = base.gather(1, a[:, None])[:, 0] - base.gather(1, w[:, None])[:, 0]
        kl = _kl(base, last)
        return {"logit_diff": ld, "delta_logit_diff": ld - base_ld, "correct": (ld > 0).float(), "kl": kl}
    toks = target.tokens[rows_seq]
    T = toks.shape[1]
    base = base_logits.float()
    ce_base = F.cross_entropy(base[:, :-1].transpose(1, 2), toks[:, 1:], reduction="none")  # [n, T-1]
    ce = ce_base.clone()
    kl = torch.zeros_like(ce)
    edited = logits.float()[:, : T - 1 - start] if start < T - 1 else None
    if edited is not None:
        ce[:, start:] = F.cross_entropy(edited.transpose(1, 2), toks[:, start + 1:], reduction="none")
        kl[:, start:] = _kl(base[:, start:-1], edited)
    loss = ce.mean(1)
    return {"loss": loss, "delta_loss": loss - ce_base.mean(1), "kl": kl.mean(1)}


def _kl(p_logits, q_logits):
    lp, lq = p_logits.log_softmax(-1), q_logits.log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1)


MEASURES_CORPUS = ["loss", "delta_loss", "kl"]
MEASURES_PAIRS = ["logit_diff", "delta_logit_diff", "correct", "kl"]


def _frame(model, rows, measures, target, attrs):
    items = pd.DataFrame(rows)
    for c in ID_COLUMNS:
        if c not in items:
            items[c] = None
    items["interface"] = model.cfg.interface
    items = _typed(items[["edit"] + ID_COLUMNS + ["item"] + measures])
    summary = _summarize(items, measures).sort_values(["layer", "head", "bit", "pos", "scale", "draw"],
                                                      na_position="first", kind="stable").reset_index(drop=True)
    attrs.update(n_items=int(target.tokens.shape[0]), n_pos=int(target.tokens.shape[1]), measures=measures,
                 data="pairs" if target.pairs else "corpus", n_tokens=int(target.tokens.numel()))
    return InterventionResult(items.drop(columns="edit"), summary, attrs)


def _chunks(n, max_batch):
    step = max(1, max_batch)
    return [torch.arange(i, min(n, i + step)) for i in range(0, n, step)]


# ------------------------------------------------------------------------------------------------ input sweeps
@torch.no_grad()
def input_intervention(model, kind: str, data=None, *, task: str | None = None, bits=None, pos=None,
                       positions=None, token=None, scales=DEFAULT_SCALES, draws: int = 1, seed: int = 0,
                       tokens: int = DEFAULT_TOKENS, n_pairs: int = 64, max_batch: int = 256,
                       progress: bool = False) -> InterventionResult:
    """Edit the input rows and measure (see the module docstring).

    ``kind``: ``bitflip`` / ``midpoint`` (one edit per bit of ``bits``, default every bit, at position ``pos``,
    default every position), ``swap`` (one edit per position of ``positions``, default each; the row of ``token``,
    default a random other token per sequence), ``noise`` (one edit per scale and draw, at ``pos``). Data: corpus
    windows (``data``: None, a file, or token ids; ``tokens``) or the prompts of ``task`` (``n_pairs``, ``seed``) or
    a :class:`PairBatch` as ``data``. Negative positions count from the end.
    """
    _check(model)
    target = _target(model, data, task, tokens, n_pairs, seed)
    n, T = target.tokens.shape
    pos = _pos(pos, T)
    edits = input_edits(model, kind, bits=bits, pos=pos, positions=positions, token=token, scales=scales,
                        draws=draws, seed=seed, n_pos=T)
    measures = MEASURES_PAIRS if target.pairs else MEASURES_CORPUS
    n_layers = model.cfg.n_layers
    rows = []
    bar = tqdm(total=len(edits) * n, desc=f"{kind} edits", unit="seq", disable=not progress, leave=False)
    emb = engine.site("embed")
    for seq in _chunks(n, max_batch):
        toks = target.tokens[seq]
        m = len(seq)
        base_logits, cache = model.run_with_cache(toks, names_filter=lambda nm: nm in _KV[n_layers])
        x0 = model.input_code(toks)
        starts = [min(e.start, T - 1) if target.pairs else e.start for e in edits]
        for s, group in engine.groups(starts, m, max_batch):
            k = len(group)
            if not target.pairs and s >= T - 1:  # only the final position, which predicts nothing
                out = {me: torch.zeros(k * m) for me in measures}
                out["loss"] = F.cross_entropy(base_logits[:, :-1].float().transpose(1, 2), toks[:, 1:],
                                              reduction="none").mean(1).repeat(k)
            else:
                x = torch.cat([edits[g].apply(x0, toks, seq)[:, s:] for g in group])
                logits = engine.run_edits(model, x, 0, emb, [], past=engine.past_kv(cache, 0, n_layers, s, k),
                                          offset=s, last_only=target.pairs)
                out = _measure(logits, base_logits.repeat(k, 1, 1), target, seq.repeat(k), s)
            for j, g in enumerate(group):
                for i in range(m):
                    r = j * m + i
                    rows.append({"edit": g, **edits[g].ids, "item": int(seq[i]),
                                 **{me: float(out[me][r]) for me in measures}})
            bar.update(k * m)
    bar.close()
    attrs = dict(kind=kind, pos=pos, seed=seed, input_rms=input_rms(model))
    return _frame(model, rows, measures, target, attrs)


class _KVNames(dict):
    def __missing__(self, n_layers):
        self[n_layers] = set(engine.kv_names(n_layers))
        return self[n_layers]


_KV = _KVNames()


def _check(model):
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() (analysis.load returns it in eval mode)")


# -------------------------------------------------------------------------------------------------- ablations
@torch.no_grad()
def ablation(model, data=None, *, task: str | None = None, component: str = "head", how: str = "mean",
             layers=None, heads=None, pos=None, reference=None, seed: int = 0, tokens: int = DEFAULT_TOKENS,
             n_pairs: int = 64, max_batch: int = 256, progress: bool = False) -> InterventionResult:
    """Zero, mean or resample ablation of every ``component`` (``head``, ``attn``, ``mlp``, ``block``) of the chosen
    ``layers`` (default all; ``heads`` default all), at every position or at ``pos``. ``reference``: token ids
    ``[n, T]`` of the sample that ``mean`` averages and ``resample`` draws from (default: the data itself; for
    prompts it must have their length)."""
    _check(model)
    if component not in COMPONENTS:
        raise AnalysisError(f"unknown component {component!r}; use one of {', '.join(COMPONENTS)}")
    if how not in ABLATIONS:
        raise AnalysisError(f"unknown ablation {how!r}; use one of {', '.join(ABLATIONS)}")
    cfg = model.cfg
    site = engine.site(COMPONENTS[component])
    layers = list(range(cfg.n_layers)) if layers is None else list(layers)
    for layer in layers:
        if not isinstance(layer, (int, np.integer)) or not 0 <= layer < cfg.n_layers:
            raise AnalysisError(f"layer {layer!r} is out of range for a {cfg.n_layers}-layer model (0..{cfg.n_layers - 1})")
    heads = list(range(cfg.n_heads)) if heads is None else list(heads)
    for h in heads:
        if not isinstance(h, (int, np.integer)) or not 0 <= h < cfg.n_heads:
            raise AnalysisError(f"head {h!r} is out of range for a model with {cfg.n_heads} heads (0..{cfg.n_heads - 1})")
    target = _target(model, data, task, tokens, n_pairs, seed)
    n, T = target.tokens.shape
    pos = _pos(pos, T)
    ref = target.tokens if reference is None else torch.as_tensor(reference).long()
    if ref.dim() != 2 or ((target.pairs or how == "resample") and ref.shape[1] != T) or \
            int(ref.max()) >= cfg.vocab_size or int(ref.min()) < 0:
        raise AnalysisError(f"reference must be token ids [n, {T}] of this model's vocabulary (the data's length)")
    if how == "resample" and ref.shape[0] < 2:
        raise AnalysisError("resample ablation needs a reference sample of at least two sequences")
    units = [(pos, h) for h in heads] if site.per_head else [(pos, None)]
    names = site.cache_names(layers)
    ref_act = {}
    if how != "zero":
        _, rc = model.run_with_cache(ref, names_filter=lambda nm: nm in set(names))
        for layer in layers:
            a = site.read(rc, layer)
            ref_act[layer] = a.mean(0) if target.pairs else a.mean((0, 1))
            if how == "resample":
                ref_act[layer] = a
        del rc
    perm = _resample_order(n, ref.shape[0], seed, same=reference is None) if how == "resample" else None
    measures = MEASURES_PAIRS if target.pairs else MEASURES_CORPUS
    n_layers = cfg.n_layers
    start = pos or 0
    rows = []
    want = _KV[n_layers] | {f"blocks.{layer}.hook_resid_pre" for layer in layers}
    bar = tqdm(total=len(layers) * len(units) * n, desc=f"{how} ablation of {component}", unit="seq",
               disable=not progress, leave=False)
    for seq in _chunks(n, max_batch):
        toks = target.tokens[seq]
        m = len(seq)
        base_logits, cache = model.run_with_cache(toks, names_filter=lambda nm: nm in want)
        for li, layer in enumerate(layers):
            x_in = cache[f"blocks.{layer}.hook_resid_pre"]
            for _, group in engine.groups([start] * len(units), m, max_batch):
                k = len(group)
                edits = []
                for j, g in enumerate(group):
                    u = units[g]
                    rs = slice(j * m, (j + 1) * m)
                    if how == "zero":
                        value = 0.0
                    elif how == "mean":
                        a = ref_act[layer]
                        value = a[(*site.index(u),)] if target.pairs else (a if u[1] is None else a[u[1]])
                        if target.pairs and u[0] is None:
                            value = value[start:]
                    else:
                        a = ref_act[layer][perm[seq]]
                        value = a[(slice(None), *site.index(u))]
                        if u[0] is None:
                            value = value[:, start:]
                    edits.append((rs, u, value))
                logits = engine.run_edits(model, x_in[:, start:].repeat(k, 1, 1), layer, site, edits,
                                          past=engine.past_kv(cache, layer, n_layers, start, k), offset=start,
                                          last_only=target.pairs)
                out = _measure(logits, base_logits.repeat(k, 1, 1), target, seq.repeat(k), start)
                for j, g in enumerate(group):
                    u = units[g]
                    for i in range(m):
                        rows.append({"edit": li * len(units) + g, "kind": "ablate", "component": component,
                                     "ablation": how, "layer": layer, "head": u[1], "pos": pos,
                                     "item": int(seq[i]), **{me: float(out[me][j * m + i]) for me in measures}})
                bar.update(k * m)
    bar.close()
    attrs = dict(kind="ablate", component=component, ablation=how, pos=pos, seed=seed,
                 n_reference=int(ref.shape[0]), resample_order=None if perm is None else perm.tolist())
    return _frame(model, rows, measures, target, attrs)


def _resample_order(n, n_ref, seed, same: bool) -> torch.Tensor:
    """For each of ``n`` sequences, the reference sequence it takes its activation from: another sequence of the
    same sample when the reference is the data itself (a random derangement), else a uniform draw."""
    rng = np.random.default_rng([seed, 7])
    if not same:
        return torch.as_tensor(rng.integers(n_ref, size=n))
    shift = rng.permutation(n)
    order = np.empty(n, dtype=np.int64)
    order[shift] = np.roll(shift, 1)  # a single cycle through a random order: no sequence keeps its own
    return torch.as_tensor(order)


__all__ = ["KINDS", "COMPONENTS", "ABLATIONS", "InterventionResult", "input_intervention", "ablation",
           "input_edits", "input_rms", "confidence"]

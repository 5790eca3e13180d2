"""Component ablations: replace one attention head, attention output, MLP output or whole block, and measure."""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from analysis import engine
from analysis.corpus import MEASURE_TOKENS
from analysis.engine.effects import (InterventionResult, Measurer, check_eval, chunks, nonempty, position, result, rows_per_forward,
                      target)
from analysis.errors import AnalysisError
from analysis.engine import names as hooknames

#: The components :func:`~analysis.causal.ablation.ablation` replaces, each with the engine site it writes (``head``:
#: one head's ``hook_z``; ``block``: the block's whole write, ``resid_post - resid_pre``).
COMPONENTS = {"head": "z_all_pos", "attn": "attn_out", "mlp": "mlp_out", "block": "block"}
#: What :func:`~analysis.causal.ablation.ablation` writes in place of a component: zeros, the mean over the reference
#: sample, or another sequence's activation.
ABLATIONS = ("zero", "mean", "resample")


def _in_range(values, n: int, what: str, whose: str) -> list[int]:
    """Distinct indices in order, each checked to lie in ``0..n-1``; an empty selection is refused."""
    for v in nonempty(values, f"{what}s"):
        if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) or not 0 <= v < n:
            raise AnalysisError(f"{what} {v!r} is out of range for {whose} (0..{n - 1})")
    return sorted({int(v) for v in values})


@torch.no_grad()
def ablation(model, data=None, *, task: str | None = None, component: str = "head", how: str = "mean",
             layers=None, heads=None, pos=None, reference=None, seed: int = 0, tokens: int = MEASURE_TOKENS,
             n_pairs: int = 64, max_batch: int = 128, progress: bool = False) -> InterventionResult:
    """Ablate every ``component`` of the chosen ``layers`` (default all; ``heads`` default all), one at a time, at
    every position or at ``pos``. ``reference``: token ids ``[n, T]`` that ``mean`` averages and ``resample`` draws
    from (default: the data itself). Data as :func:`analysis.causal.interventions.input_intervention`."""
    check_eval(model)
    if component not in COMPONENTS:
        raise AnalysisError(f"unknown component {component!r}; use one of {', '.join(COMPONENTS)}")
    if how not in ABLATIONS:
        raise AnalysisError(f"unknown ablation {how!r}; use one of {', '.join(ABLATIONS)}")
    cfg = model.cfg
    site = engine.site(COMPONENTS[component])
    layers = list(range(cfg.n_layers)) if layers is None else list(layers)
    layers = _in_range(layers, cfg.n_layers, "layer", f"a {cfg.n_layers}-layer model")  # in order of layer
    heads = list(range(cfg.n_heads)) if heads is None else list(heads)
    heads = _in_range(heads, cfg.n_heads, "head", f"a model with {cfg.n_heads} heads")
    tgt = target(model, data, task, tokens, n_pairs, seed)
    n, T = tgt.tokens.shape
    pos = position(pos, T)
    ref = tgt.tokens if reference is None else _reference(reference, cfg, T, fixed_length=tgt.pairs or
                                                          how == "resample")
    if how == "resample" and ref.shape[0] < 2:
        raise AnalysisError("resample ablation needs a reference sample of at least two sequences")
    rows = rows_per_forward(tgt, cfg.vocab_size, max_batch)
    ref_act = _reference_activations(model, site, layers, ref, how, per_position=tgt.pairs, rows=rows)
    order = resample_order(n, ref.shape[0], seed, same=reference is None) if how == "resample" else None
    units = [(pos, h) for h in heads] if site.per_head else [(pos, None)]
    entries = [(layer, u) for layer in layers for u in units]
    start = pos or 0
    want = set(engine.kv_names(cfg.n_layers)) | {hooknames.resid_pre(layer) for layer in layers}
    values = {me: np.full((len(entries), n), np.nan) for me in tgt.measures}
    bar = tqdm(total=len(entries) * n, desc=f"{how} ablation of {component}", unit="seq", disable=not progress,
               leave=False)
    for seq in chunks(n, rows):
        m = len(seq)
        base_logits, cache = engine.cache_run(model, tgt.tokens[seq], want)
        measure = Measurer(tgt, seq, base_logits)
        for _, group in engine.groups([start] * len(entries), m, rows):
            stages = []
            for layer in dict.fromkeys(entries[g][0] for g in group):  # entries are in order of layer
                members = [g for g in group if entries[g][0] == layer]
                edits = [(slice(j * m, (j + 1) * m), entries[g][1],
                          _value(how, ref_act.get(layer), entries[g][1], site, tgt.pairs, start,
                                 None if order is None else order[seq]))
                         for j, g in enumerate(members)]
                x = cache[hooknames.resid_pre(layer)][:, start:].repeat(len(members), 1, 1)
                stages.append(engine.Stage(layer, x, edits, torch.arange(m).repeat(len(members))))
            logits = engine.run_stages(model, site, stages, kv_cache=cache, offset=start, last_only=tgt.pairs)
            for me, v in measure(logits, len(group), start).items():
                values[me][np.ix_(group, seq.numpy())] = v.double().cpu().numpy()
            bar.update(len(group) * m)
    bar.close()
    ids = [dict(kind="ablate", component=component, ablation=how, layer=layer, head=u[1], pos=pos)
           for layer, u in entries]
    attrs = dict(kind="ablate", component=component, ablation=how, pos=pos, seed=seed,
                 n_reference=int(ref.shape[0]), resample_order=None if order is None else order.tolist())
    return result(model, ids, values, tgt, attrs)


def _reference(reference, cfg, T: int, fixed_length: bool) -> torch.Tensor:
    ref = torch.as_tensor(reference)
    if ref.dim() != 2 or ref.dtype not in (torch.int64, torch.int32) or ref.numel() == 0:
        raise AnalysisError(f"reference must be a non-empty integer array of token ids [n, pos], got "
                            f"{tuple(ref.shape)} {ref.dtype}")
    if fixed_length and ref.shape[1] != T:
        raise AnalysisError(f"reference sequences must have the data's length {T} (got {ref.shape[1]}): a "
                            "resampled or per-position mean activation is taken position by position")
    if ref.shape[1] > cfg.context:
        raise AnalysisError(f"reference sequences of {ref.shape[1]} tokens exceed the model's context {cfg.context}")
    if int(ref.min()) < 0 or int(ref.max()) >= cfg.vocab_size:
        raise AnalysisError(f"reference holds token ids outside this model's vocabulary (0..{cfg.vocab_size - 1})")
    return ref.long()


@torch.no_grad()
def _reference_activations(model, site, layers, ref, how, per_position: bool, rows: int) -> dict:
    """Per layer: the reference sample's activations (resample), their mean (per position for prompts, pooled
    for corpus windows), or nothing (zero). Runs in chunks, and only up to the last ablated layer."""
    if how == "zero":
        return {}
    ref = ref.to(model.unembed.weight.device)
    names = site.cache_names(layers)
    parts: dict[int, list] = {layer: [] for layer in layers}
    for idx in chunks(ref.shape[0], rows):
        _, rc = engine.cache_run(model, ref[idx], names, stop_at_layer=max(layers) + 1)
        for layer in layers:
            a = site.read(rc, layer)
            parts[layer].append(a if how == "resample" else (a.sum(0) if per_position else a.sum((0, 1))))
    n = ref.shape[0] * (1 if per_position else ref.shape[1])
    if how == "resample":
        return {layer: torch.cat(p) for layer, p in parts.items()}
    return {layer: torch.stack(p).sum(0) / n for layer, p in parts.items()}


def _value(how, act, unit, site, per_position, start, order):
    """The value written into ``unit`` (see :func:`~analysis.engine.staged.run_stages`), positions from ``start``."""
    if how == "zero":
        return 0.0
    if how == "mean":
        if not per_position:  # one vector (per head) for every position
            return act if unit[1] is None else act[unit[1]]
        v = act[site.index(unit)]
        return v[start:] if unit[0] is None else v
    v = act[order][(slice(None), *site.index(unit))]
    return v[:, start:] if unit[0] is None else v


def resample_order(n: int, n_ref: int, seed: int, same: bool) -> torch.Tensor:
    """For each of ``n`` sequences, the reference sequence whose activation it receives: when the reference is the
    data itself, a single random cycle through all sequences (no sequence keeps its own); else a uniform draw."""
    rng = np.random.default_rng([seed, 7])
    if not same:
        return torch.as_tensor(rng.integers(n_ref, size=n))
    shift = rng.permutation(n)
    order = np.empty(n, dtype=np.int64)
    order[shift] = np.roll(shift, 1)
    return torch.as_tensor(order)


__all__ = ["COMPONENTS", "ABLATIONS", "ablation", "resample_order"]

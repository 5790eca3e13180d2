"""Bit x layer maps: where does the information one code bit carries at one position go?"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from fixedid.model import constant_code_bits

from analysis import engine
from analysis.errors import AnalysisError, AnalysisWarning
from analysis.engine.effects import nonempty, position as _pos
from analysis.causal.interventions import _bit_mask, _bit_values
from analysis.causal.support import CodeSupport
from analysis.pairs import PairBatch
from analysis.causal.patching import MIN_GAP
from analysis.tasks import task_pairs
from analysis.engine import names as hooknames

#: The sites a bit x layer map patches, one layer and position at a time: the residual stream and the attention and
#: MLP outputs.
MAP_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
#: What a map measures: ``kl`` (KL(clean || run) at the final position, any token windows) or ``logit_diff`` (task
#: prompts only).
MAP_METRICS = ("kl", "logit_diff")
#: A flip that moves the final distribution by less than this KL (nats) leaves nothing to restore.
MIN_FLIP_KL = 1e-3


def _data(model, data, n_pairs, seed):
    device = model.unembed.weight.device
    if isinstance(data, str):
        b = task_pairs(model, data, n_pairs, seed=seed)
        return b.clean, b.answer, b.wrong, b
    if isinstance(data, PairBatch):
        b = data.to(device)
        return b.clean, b.answer, b.wrong, b
    if isinstance(data, torch.Tensor) and data.dim() == 2 and data.dtype in (torch.int64, torch.int32):
        from analysis.corpus import corpus_tokens
        return corpus_tokens(model, data).to(device), None, None, None
    raise AnalysisError("data must be a built-in task name, a PairBatch or token ids [n, pos]")


def _row_chunks(n: int, rows: int):
    step = max(1, rows)
    return [torch.arange(i, min(n, i + step)) for i in range(0, n, step)]


def _metric(metric, logits, clean_last, answer, wrong):
    last = logits[:, -1].float()
    if metric == "kl":
        lp, lq = clean_last.log_softmax(-1), last.log_softmax(-1)
        return (lp.exp() * (lp - lq)).sum(-1)
    return last.gather(1, answer[:, None])[:, 0] - last.gather(1, wrong[:, None])[:, 0]


def _check_map_args(model, site: str, metric: str) -> None:
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() before patching")
    if not model.cfg.has_code:
        raise AnalysisError(f"bit x layer maps flip code bits; the {model.cfg.interface} variant has none (its "
                            "analogues are the 'swap' and 'noise' input edits)")
    if site not in MAP_SITES:
        raise AnalysisError(f"bit x layer maps patch one position at a time; site must be one of {list(MAP_SITES)}")
    if metric not in MAP_METRICS:
        raise AnalysisError(f"unknown metric {metric!r}; use one of {list(MAP_METRICS)}")


def _flipped_runs(model, tokens, p: int, bits, names, max_batch: int):
    """The runs with each bit of ``bits`` flipped at position ``p`` (bit-major rows: bit j is rows j*n..(j+1)*n-1):
    their caches of ``names`` and of the keys and values, and their final-position logits."""
    n, L = tokens.shape[0], model.cfg.n_layers
    masks = torch.stack([_bit_mask(model, b) for b in bits])  # [B, d]
    a, b = _bit_values(model)
    x_flip = model.input_code(tokens).repeat(len(bits), 1, 1)
    part = x_flip[:, p]
    m = masks.repeat_interleave(n, 0)
    x_flip[:, p] = part + m * ((a + b) - 2 * part)
    want = names | set(engine.kv_names(L))
    flip_cache, last = {}, []
    for idx in _row_chunks(len(bits) * n, max_batch):  # final-position logits only: the metric reads nothing else
        resid, c = engine.cache_run(model, x_flip[idx], want, start_at_layer=0, stop_at_layer=L)
        last.append(model.unembed(model.ln_final(resid[:, -1:])))
        for k, v in c.items():
            flip_cache.setdefault(k, []).append(v)
    return {k: torch.cat(v) for k, v in flip_cache.items()}, torch.cat(last)


def _patch_sweep(model, s, clean_cache, flip_cache, clean_last, ans, wr, metric, values, p, B, n, max_batch,
                 progress):
    """Fill ``values[layer, q, j]`` (``q >= p``): the metric with the clean ``s`` activation at (layer, q) patched
    into the run with bit j flipped, batched by start position and staged by layer."""
    L, T = values.shape[:2]
    bar = tqdm(total=L * (T - p) * B, desc="bit x layer map", unit="patch", disable=not progress, leave=False)
    entries = [(layer, j, q) for layer in range(L) for q in range(p, T) for j in range(B)]
    srcs = {layer: s.read(clean_cache, layer) for layer in range(L)}
    for d, group in engine.groups([q for _, _, q in entries], n, max_batch):
        group = sorted(group, key=lambda g: entries[g][0])  # stages in order of layer
        stages = []
        for layer in dict.fromkeys(entries[g][0] for g in group):
            members = [g for g in group if entries[g][0] == layer]
            rows = torch.cat([torch.arange(entries[g][1] * n, (entries[g][1] + 1) * n) for g in members])
            edits = [(slice(i * n, (i + 1) * n), (entries[g][2], None), srcs[layer][:, entries[g][2]])
                     for i, g in enumerate(members)]
            stages.append(engine.Stage(layer, flip_cache[hooknames.resid_pre(layer)][rows, d:], edits, rows))
        logits = engine.run_stages(model, s, stages, kv_cache=flip_cache, offset=d, last_only=True)
        rows = torch.cat([st.past_rows for st in stages])
        v = _metric(metric, logits, clean_last.repeat(len(group), 1), None if ans is None else ans[rows],
                    None if wr is None else wr[rows]).view(len(group), n).cpu()
        for i, g in enumerate(group):
            layer, j, q = entries[g]
            values[layer, q, j] = v[i]
        bar.update(len(group))
    bar.close()


def _restored(mean_v, mean_flip, mean_clean: float, metric: str, bits, p: int):
    """The fraction of the flip's effect a patch removes; NaN (with a warning) for bits whose flip barely moves the
    output."""
    if metric == "kl":
        weak = mean_flip < MIN_FLIP_KL
        restored = 1 - mean_v / mean_flip
    else:
        weak = (mean_clean - mean_flip).abs() < MIN_GAP
        restored = (mean_v - mean_flip) / (mean_clean - mean_flip)
    restored = restored.masked_fill(weak[None, None], float("nan"))
    if weak.any():
        names_weak = [bits[i] for i in np.flatnonzero(weak.numpy())]
        warnings.warn(f"flipping bit(s) {names_weak} at position {p} barely moves the output ({metric}); their "
                      "'restored' values are NaN", AnalysisWarning, stacklevel=4)
    return restored


@torch.no_grad()
def bit_layer_map(model, data="ioi", *, pos=None, bits=None, site: str = "resid_pre", metric: str = "kl",
                  n_pairs: int = 64, seed: int = 0, max_batch: int = 512, progress: bool = False) -> pd.DataFrame:
    """Patch the clean activation of ``site`` at every (layer, position) into the run with bit ``k`` flipped at
    ``pos``, for every bit of ``bits`` (default all); see the module docstring. ``data``: a built-in task name
    (``n_pairs`` prompts, ``seed``), a :class:`~analysis.pairs.PairBatch` (clean prompts) or token ids ``[n, pos]``.
    ``pos`` defaults to the first position where a task's clean and corrupt prompts differ (required for token ids);
    negative positions count from the end."""
    _check_map_args(model, site, metric)
    tokens, answer, wrong, batch = _data(model, data, n_pairs, seed)
    if metric == "logit_diff" and answer is None:
        raise AnalysisError("metric 'logit_diff' needs prompt pairs (a task or a PairBatch); use 'kl' on token ids")
    n, T = tokens.shape
    if pos is None:
        if batch is None:
            raise AnalysisError("give pos (the position whose bits are flipped) for token ids")
        pos = engine.first_difference(batch.clean[..., None], batch.corrupt[..., None])
        pos = min(pos, T - 1)
    p = _pos(pos, T)
    bits = list(range(model.cfg.n_bits)) if bits is None else nonempty(bits, "bits")
    B, L = len(bits), model.cfg.n_layers
    s = engine.site(site)
    names = set(s.cache_names(range(L))) | {hooknames.resid_pre(i) for i in range(L)}
    clean_logits, clean_cache = engine.cache_run(model, tokens, names)
    clean_last = clean_logits[:, -1].float()
    flip_cache, flip_logits = _flipped_runs(model, tokens, p, bits, names, max_batch)
    ans = None if answer is None else answer.repeat(B)
    wr = None if wrong is None else wrong.repeat(B)
    flipped = _metric(metric, flip_logits, clean_last.repeat(B, 1), ans, wr).view(B, n)
    clean_metric = torch.zeros(n) if metric == "kl" else _metric(metric, clean_logits, clean_last, answer, wrong)
    values = torch.empty(L, T, B, n)
    values[:, :p] = flipped.cpu()[None, None]  # positions before p: exact no-ops
    _patch_sweep(model, s, clean_cache, flip_cache, clean_last, ans, wr, metric, values, p, B, n, max_batch,
                 progress)
    mean_v = values.mean(-1)  # [L, T, B]
    mean_flip = flipped.mean(-1).cpu()  # [B]
    mean_clean = float(clean_metric.mean())
    restored = _restored(mean_v, mean_flip, mean_clean, metric, bits, p)
    li, qi, bi = np.meshgrid(np.arange(L), np.arange(T), np.arange(B), indexing="ij")
    df = pd.DataFrame({"bit": np.asarray(bits)[bi.ravel()], "layer": li.ravel(), "pos": qi.ravel(),
                       "value": mean_v.numpy().ravel(), "flipped": mean_flip.numpy()[bi.ravel()],
                       "restored": restored.numpy().ravel()})
    df = df.sort_values(["bit", "layer", "pos"], kind="stable").reset_index(drop=True)
    df["bit_constant"] = df["bit"].isin(constant_code_bits(model.cfg))  # the bit is the same for every token
    sup = CodeSupport(model)
    own = sup.keys[tokens[:, p].cpu().numpy().astype(np.int64)]
    on = {int(b): float((sup.landing(own ^ (1 << int(b))) >= 0).mean()) for b in bits}
    df["on_support"] = df["bit"].map(on).astype(float)
    df["hamming"] = 1.0
    tok = getattr(model, "tokenizer", None)
    str_tokens = [tok.decode([int(i)]) if tok is not None else str(int(i)) for i in tokens[0]]
    df.attrs.update(interface=model.cfg.interface, site=site, metric=metric, flip_pos=p, clean=mean_clean,
                    n_items=n, n_pos=T, n_layers=L, bits=bits, str_tokens=str_tokens)
    return df


__all__ = ["bit_layer_map", "MAP_SITES", "MAP_METRICS", "MIN_FLIP_KL"]

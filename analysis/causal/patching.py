"""Activation and attribution patching on a FixedIdLM."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis import engine
from analysis.errors import AnalysisError, AnalysisWarning
from analysis.engine.metrics import DEFAULT_METRIC, normalize, resolve
from analysis.pairs import make_pairs
from analysis.engine import names as hooknames

#: The sites :func:`~analysis.causal.patching.activation_patching` patches (see the module docstring's table); ``z`` per
#: head and position, ``z_all_pos`` per head at every position at once.
SITES = ("embed", "resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z", "z_all_pos")
#: ``denoise``: clean activations into the corrupted run; ``noise``: corrupted ones into the clean run.
MODES = ("denoise", "noise")
#: Below this clean-corrupt logit-difference gap (logits) a normalised value divides by noise: a pair's normalised
#: values become NaN, and a mean gap this small raises an :class:`~analysis.errors.AnalysisWarning`.
MIN_GAP = 0.25


def hook_name(site: str, layer: int) -> str:
    """The hook point a patching ``site`` reads at ``layer``, e.g. ``hook_name("z", 1)`` is
    ``"blocks.1.attn.hook_z"``."""
    return engine.site(site).hook_name(layer)


def _check(model, site, mode):
    if site not in SITES:
        raise AnalysisError(f"unknown site {site!r}; use one of {list(SITES)}")
    if mode not in MODES:
        raise AnalysisError(f"unknown mode {mode!r}; use 'denoise' (clean into corrupt) or 'noise' (corrupt into "
                            "clean)")
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() before patching")


def _runs(model, batch, mode, names, last_only=False):
    """Cache ``names`` on both prompts; return (base tokens, base cache, source cache, clean logits, corrupt logits).
    ``last_only``: logits of the final position only (what a built-in metric reads)."""
    n = len(batch)
    both = torch.cat([batch.clean, batch.corrupt])
    with torch.no_grad():  # both prompts in one batched forward
        if last_only:
            resid, cache = engine.cache_run(model, both, names, stop_at_layer=model.cfg.n_layers)
            logits = model.unembed(model.ln_final(resid[:, -1:]))
        else:
            logits, cache = engine.cache_run(model, both, names)
    clean_logits, corrupt_logits = logits[:n], logits[n:]
    clean_cache = {k: v[:n] for k, v in cache.items()}
    corrupt_cache = {k: v[n:] for k, v in cache.items()}
    if mode == "denoise":
        return batch.corrupt, corrupt_cache, clean_cache, clean_logits, corrupt_logits
    return batch.clean, clean_cache, corrupt_cache, clean_logits, corrupt_logits


def _frame(model, site, units_per_layer, values, batch, mode, metric_name, base_clean, base_corrupt, per_pair,
           norm, method, stacklevel):
    """values: {layer: tensor [n_units, n_pairs]} of raw metric values -> tidy DataFrame. Warnings point
    ``stacklevel`` frames up (the caller of the public function)."""
    gap = base_clean - base_corrupt  # per pair
    if norm:
        mean_gap = float(gap.mean())
        if abs(mean_gap) < MIN_GAP:
            warnings.warn(f"the mean clean-corrupt logit difference gap is {mean_gap:.3f} (below {MIN_GAP}): the "
                          "model barely separates the prompts, so the normalised values divide by noise; read the "
                          "raw logit differences instead", AnalysisWarning, stacklevel=stacklevel)
        tiny = gap.abs() < MIN_GAP
        if per_pair and tiny.any():
            warnings.warn(f"{int(tiny.sum())} of {len(gap)} pairs have a clean-corrupt gap below {MIN_GAP} logits; "
                          "their normalised per-pair values are NaN", AnalysisWarning, stacklevel=stacklevel)
    U = len(units_per_layer)
    pos_u = np.array([-1 if p is None else p for p, _ in units_per_layer])
    head_u = np.array([-1 if h is None else h for _, h in units_per_layer])
    layer_c, value_c = [], []
    for layer, v in values.items():
        if norm:
            agg = normalize(v.mean(1), base_clean.mean(), base_corrupt.mean())
            v = normalize(v, base_clean[None], base_corrupt[None]).masked_fill(tiny[None], float("nan"))
        else:
            agg = v.mean(1)
        value_c.append((v.reshape(-1) if per_pair else agg).double().numpy())  # per pair: unit-major
        layer_c.append(np.full(len(value_c[-1]), layer))
    reps = v.shape[1] if per_pair else 1
    n_layers_run = len(values)
    cols = {"site": site, "layer": _int64(np.concatenate(layer_c)),
            "pos": _int64(np.tile(np.repeat(pos_u, reps), n_layers_run)),
            "head": _int64(np.tile(np.repeat(head_u, reps), n_layers_run))}
    if per_pair:
        cols["pair"] = np.tile(np.arange(reps), U * n_layers_run)
    cols["value"] = np.concatenate(value_c)
    df = pd.DataFrame(cols)
    raw_clean, raw_corrupt = float(base_clean.mean()), float(base_corrupt.mean())
    clean_v, corrupt_v = (1.0, 0.0) if norm else (raw_clean, raw_corrupt)
    df.attrs.update(site=site, mode=mode, metric=metric_name, method=method, clean=clean_v, corrupt=corrupt_v,
                    baseline=corrupt_v if mode == "denoise" else clean_v, raw_clean=raw_clean,
                    raw_corrupt=raw_corrupt, n_pairs=len(batch), n_layers=model.cfg.n_layers,
                    n_heads=model.cfg.n_heads, n_pos=batch.n_pos, str_tokens=_str_tokens(model, batch.clean[0]),
                    texts=batch.texts)
    return df


def _int64(values) -> pd.arrays.IntegerArray:
    """A nullable Int64 column; negative entries (here: 'not applicable') become NA."""
    v = np.asarray(values, dtype=np.int64)
    return pd.arrays.IntegerArray(v, v < 0)


def _str_tokens(model, ids):
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return [str(int(i)) for i in ids]
    return [tok.decode([int(i)], skip_special_tokens=False) for i in ids]


def activation_patching(model, pairs, site: str = "resid_pre", mode: str = "denoise", metric=DEFAULT_METRIC, *,
                        per_pair: bool = False, max_batch: int = 512, progress: bool = False) -> pd.DataFrame:
    """Patch every unit of ``site`` at every layer, one at a time; see the module docstring for the output."""
    with torch.no_grad():
        return _activation_patching(model, pairs, site, mode, metric, per_pair, max_batch, progress)


def _activation_patching(model, pairs, site, mode, metric, per_pair, max_batch, progress):
    _check(model, site, mode)
    metric_name, fn, norm = resolve(metric)
    batch = make_pairs(model, pairs)
    n, T = len(batch), batch.n_pos
    s = engine.site(site)
    layers = s.layers(model.cfg)
    n_layers = model.cfg.n_layers
    # a built-in metric reads the final position only, so a patch that first touches position q leaves positions
    # before q as they are in the base run: those are replaced by its cached keys and values (a suffix run from q,
    # exact up to fp noise), and only the final position is unembedded
    suffix = not callable(metric)
    names = s.cache_names(layers) + [hooknames.resid_pre(layer) for layer in layers]
    if suffix:
        names += engine.kv_names(n_layers)
    _, base_cache, src_cache, clean_logits, corrupt_logits = _runs(model, batch, mode, names, last_only=suffix)
    base_clean, base_corrupt = fn(clean_logits, batch.answer, batch.wrong), fn(corrupt_logits, batch.answer,
                                                                               batch.wrong)
    units = s.units(model.cfg, T)
    base_metric = base_corrupt if mode == "denoise" else base_clean
    # every live unit of every layer, with the first position it touches; units of several layers share a staged
    # forward (a unit's rows join at its layer) when they start at (nearly) the same position
    entries, srcs, values = [], {}, {}
    for layer in layers:
        src, base = s.read(src_cache, layer), s.read(base_cache, layer)
        srcs[layer] = src
        # a unit whose source and base activations are equal in every pair is a no-op: its value is the base
        # metric, exactly (e.g. every position before the first token where clean and corrupt differ)
        live = s.live(src, base, units)
        values[layer] = base_metric[None].repeat(len(units), 1)
        first = min(engine.first_difference(src, base), T - 1) if suffix and live else 0
        entries += [(layer, i, engine.unit_start(units[i], first) if suffix else 0) for i in live]
    bar = tqdm(total=len(entries), desc=f"patching {site}", unit="patch", disable=not progress, leave=False)
    for d, group in engine.groups([e[2] for e in entries], n, max_batch):
        group = sorted(group, key=lambda g: entries[g][0])  # stages in order of layer
        stages = []
        for layer in dict.fromkeys(entries[g][0] for g in group):
            members = [g for g in group if entries[g][0] == layer]
            edits = []
            for j, g in enumerate(members):
                unit = units[entries[g][1]]
                value = srcs[layer][(slice(None), *s.index(unit))]
                edits.append((slice(j * n, (j + 1) * n), unit, value[:, d:] if unit[0] is None else value))
            x = base_cache[hooknames.resid_pre(layer)][:, d:].repeat(len(members), 1, 1)
            stages.append(engine.Stage(layer, x, edits, torch.arange(n).repeat(len(members))))
        logits = engine.run_stages(model, s, stages, kv_cache=base_cache, offset=d, last_only=suffix)
        k = len(group)
        v = fn(logits, batch.answer.repeat(k), batch.wrong.repeat(k)).view(k, n)
        for j, g in enumerate(group):
            values[entries[g][0]][entries[g][1]] = v[j]
        bar.update(k)
    bar.close()
    values = {layer: v.cpu() for layer, v in values.items()}
    return _frame(model, site, units, values, batch, mode, metric_name, base_clean.cpu(), base_corrupt.cpu(),
                  per_pair, norm, "activation", stacklevel=4)


def attribution_patching(model, pairs, site: str = "resid_pre", mode: str = "denoise", metric=DEFAULT_METRIC, *,
                         per_pair: bool = False, max_batch: int = 512, progress: bool = False) -> pd.DataFrame:
    """First-order estimate of :func:`~analysis.causal.patching.activation_patching`: one forward and one backward per
    chunk of at most ``max_batch`` pairs. Gradients are taken with respect to the activations only
    (``torch.autograd.grad``), so the model's parameters are left without ``.grad``."""
    _check(model, site, mode)
    metric_name, fn, norm = resolve(metric)
    batch = make_pairs(model, pairs)
    layers = engine.site(site).layers(model.cfg)
    names = [hook_name(site, layer) for layer in layers]
    base_tokens, _, src_cache, clean_logits, corrupt_logits = _runs(model, batch, mode, names)
    base_clean = fn(clean_logits, batch.answer, batch.wrong).detach()
    base_corrupt = fn(corrupt_logits, batch.answer, batch.wrong).detach()
    base_metric = base_corrupt if mode == "denoise" else base_clean
    units = engine.site(site).units(model.cfg, batch.n_pos)
    parts: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    chunks = range(0, len(batch), max(1, max_batch))
    for c in tqdm(chunks, desc=f"attribution {site}", unit="chunk", disable=not progress, leave=False):
        rows = slice(c, c + max(1, max_batch))
        acts: dict[str, torch.Tensor] = {}

        def capture(act, hook):
            if hook.name == "hook_embed":  # the fixed code has no graph above it: make it a leaf
                act = act.detach().requires_grad_(True)
            acts[hook.name] = act
            return act

        hooks = [(nm, capture) for nm in names] + ([] if site == "embed" else [("hook_embed", _requires_grad)])
        with torch.enable_grad():
            logits = model.run_with_hooks(base_tokens[rows], fwd_hooks=hooks)
            total = fn(logits, batch.answer[rows], batch.wrong[rows]).sum()
            grads = torch.autograd.grad(total, [acts[nm] for nm in names])
        for layer, name, grad in zip(layers, names, grads):
            delta = (src_cache[name][rows] - acts[name].detach()) * grad  # [n, pos, ...]
            if site == "z":
                v = delta.sum(-1).permute(1, 2, 0).reshape(-1, delta.shape[0])  # unit-major (pos, head)
            elif site == "z_all_pos":
                v = delta.sum((1, 3)).T  # [head, n]
            else:
                v = delta.sum(-1).T  # [pos, n]
            parts[layer].append(v.detach())
    values = {layer: (base_metric[None] + torch.cat(parts[layer], dim=1)).cpu() for layer in layers}
    return _frame(model, site, units, values, batch, mode, metric_name, base_clean.cpu(), base_corrupt.cpu(),
                  per_pair, norm, "attribution", stacklevel=3)


def _requires_grad(act, hook):
    return act.detach().requires_grad_(True)


def to_tensor(df: pd.DataFrame) -> torch.Tensor:
    """The TransformerLens-shaped view of a result: ``[n_layers, pos]``, ``[n_layers, pos, n_heads]`` (``z``),
    ``[n_layers, n_heads]`` (``z_all_pos``) or ``[1, pos]`` (``embed``); per-pair results get a leading
    ``[n_pairs]`` axis."""
    a, site = df.attrs, df.attrs["site"]
    n_layers = 1 if site == "embed" else a["n_layers"]
    if site == "z":
        shape, cols = (n_layers, a["n_pos"], a["n_heads"]), ["layer", "pos", "head"]
    elif site == "z_all_pos":
        shape, cols = (n_layers, a["n_heads"]), ["layer", "head"]
    else:
        shape, cols = (n_layers, a["n_pos"]), ["layer", "pos"]
    if "pair" in df.columns:
        shape, cols = (a["n_pairs"], *shape), ["pair", *cols]
    out = torch.full(shape, float("nan"))
    index = tuple(torch.tensor(df[c].to_numpy(dtype="int64")) for c in cols)
    out[index] = torch.tensor(df["value"].to_numpy(dtype="float32"))
    return out

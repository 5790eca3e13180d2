"""Path patching: the effect of one sender's write that reaches chosen receivers directly, every other path frozen."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from analysis import engine
from analysis.causal.patching import MIN_GAP, MODES
from analysis.engine.hooks import module_hooks
from analysis.engine.metrics import DEFAULT_METRIC, normalize, resolve
from analysis.errors import AnalysisError, AnalysisWarning
from analysis.pairs import make_pairs
from analysis.stats import t_intervals
from analysis.engine import names as hooknames

#: How a receiver's norm treats the patched stream: its scale recomputed (``recompute``, the default) or kept from the
#: unpatched input (``frozen``; see the module docstring).
NORMS = ("recompute", "frozen")
#: The sender sets :func:`~analysis.causal.paths.parse_senders` accepts besides labels: every writer (``embed``
#: included), the heads, or the MLPs.
SENDER_SETS = ("all", "heads", "mlps")
_HEAD = re.compile(r"L(\d+)H(\d+|\*)")
_HEAD_IN = re.compile(r"L(\d+)H(\d+|\*)\.([qkv]+)")
_MLP = re.compile(r"L(\d+)\.mlp")


@dataclass(frozen=True)
class Node:
    """A sender (``kind`` embed, head, mlp) or a receiver (``kind`` q, k, v, mlp_in, logits)."""

    kind: str
    layer: int | None = None
    head: int | None = None

    @property
    def label(self) -> str:
        """The node's name in tables and figures: ``embed``, ``logits``, ``L<layer>H<head>[.q|.k|.v]`` or
        ``L<layer>.mlp``."""
        if self.kind in ("embed", "logits"):
            return self.kind
        if self.kind in ("mlp", "mlp_in"):
            return f"L{self.layer}.mlp"
        if self.kind == "head":
            return f"L{self.layer}H{self.head}"
        return f"L{self.layer}H{self.head}.{self.kind}"

    @property
    def time(self) -> float:
        """Where the node sits in the forward: a sender writes at its time, a receiver reads at its time, and a
        sender reaches a receiver iff it writes earlier than the receiver reads."""
        return {"embed": 0, "head": 2 * (self.layer or 0) + 1, "mlp": 2 * (self.layer or 0) + 2,
                "q": 2 * (self.layer or 0) + 0.5, "k": 2 * (self.layer or 0) + 0.5, "v": 2 * (self.layer or 0) + 0.5,
                "mlp_in": 2 * (self.layer or 0) + 1.5, "logits": float("inf")}[self.kind]


def _items(spec, what):
    if isinstance(spec, str):
        spec = spec.split(",")
    try:
        items = [str(s).strip() for s in spec]
    except TypeError:
        raise AnalysisError(f"{what} must be a string of comma-separated labels or a list of them") from None
    items = [s for s in items if s]
    if not items:
        raise AnalysisError(f"no {what} given")
    return items


def _layer(cfg, text, label):
    layer = int(text)
    if layer >= cfg.n_layers:
        raise AnalysisError(f"{label!r}: layer {layer} is out of range (the model has layers 0..{cfg.n_layers - 1})")
    return layer


def _heads(cfg, text, label):
    if text == "*":
        return list(range(cfg.n_heads))
    head = int(text)
    if head >= cfg.n_heads:
        raise AnalysisError(f"{label!r}: head {head} is out of range (the model has heads 0..{cfg.n_heads - 1})")
    return [head]


def parse_receivers(model, spec) -> list[Node]:
    """Receiver labels (a comma-separated string or a list): ``logits``, ``L1H2.q`` / ``.k`` / ``.v`` / ``.qkv``,
    ``L1H*.q`` (every head of layer 1), ``L1.mlp`` (the MLP's input)."""
    cfg, out = model.cfg, []
    for item in _items(spec, "receivers"):
        if item == "logits":
            out.append(Node("logits"))
        elif m := _HEAD_IN.fullmatch(item):
            layer = _layer(cfg, m[1], item)
            for h in _heads(cfg, m[2], item):
                out += [Node(c, layer, h) for c in "qkv" if c in m[3]]
        elif m := _MLP.fullmatch(item):
            out.append(Node("mlp_in", _layer(cfg, m[1], item)))
        else:
            raise AnalysisError(f"unknown receiver {item!r}; use logits, L<layer>H<head>.q|k|v (e.g. L1H2.q, "
                                "L1H2.qkv, L1H*.v) or L<layer>.mlp")
    out = list(dict.fromkeys(out))
    if cfg.kv_heads != cfg.n_heads and any(r.kind in ("k", "v") for r in out):
        raise AnalysisError(f"this model shares keys and values between query heads ({cfg.n_heads} heads, "
                            f"{cfg.kv_heads} key/value heads), so a path into one head's key or value is not "
                            "defined; use .q receivers")
    return out


def parse_senders(model, spec, receivers: list[Node]) -> list[Node]:
    """Sender labels (``embed``, ``L0H3``, ``L0H*``, ``L0.mlp``) or a set: ``all`` (None), ``heads``, ``mlps`` - a
    set keeps the senders upstream of every receiver; a label that is not upstream of one is an error."""
    cfg = model.cfg
    first = min(r.time for r in receivers)
    if spec is None or (isinstance(spec, str) and spec in SENDER_SETS):
        which = spec or "all"
        pool = ([Node("embed")] if which == "all" else []) + [
            node for layer in range(cfg.n_layers)
            for node in ([Node("head", layer, h) for h in range(cfg.n_heads)] if which != "mlps" else [])
            + ([Node("mlp", layer)] if which != "heads" else [])]
        out = [s for s in pool if s.time < first]
        if not out:
            raise AnalysisError(f"no sender of the set {which!r} lies upstream of every receiver "
                                f"({', '.join(r.label for r in receivers)})")
        return out
    out = []
    for item in _items(spec, "senders"):
        if item == "embed":
            out.append(Node("embed"))
        elif m := _HEAD.fullmatch(item):
            layer = _layer(cfg, m[1], item)
            out += [Node("head", layer, h) for h in _heads(cfg, m[2], item)]
        elif m := _MLP.fullmatch(item):
            out.append(Node("mlp", _layer(cfg, m[1], item)))
        else:
            raise AnalysisError(f"unknown sender {item!r}; use embed, L<layer>H<head> (e.g. L0H3, L0H*), "
                                f"L<layer>.mlp, or a set: {', '.join(SENDER_SETS)}")
    out = list(dict.fromkeys(out))
    for s in out:
        late = [r.label for r in receivers if s.time >= r.time]
        if late:
            raise AnalysisError(f"sender {s.label} does not reach receiver(s) {', '.join(late)}: a head reads the "
                                "stream entering its block and an MLP the stream after its own attention, so a "
                                "sender must sit in an earlier layer (an MLP: the same layer for a head sender)")
    return out


def _write_hook(s: Node) -> str:
    return {"embed": hooknames.EMBED, "head": hooknames.attn(s.layer, "z"),
            "mlp": hooknames.mlp_out(s.layer)}[s.kind]


def _raw(cache, s: Node):
    """The cached activation a sender's write is made of (its head's z for a head)."""
    act = cache[_write_hook(s)]
    return act[:, :, s.head] if s.kind == "head" else act


def _write(model, cache, s: Node, pos: slice):
    """A sender's write into the residual stream ``[n, pos, d_model]`` at positions ``pos``."""
    act = _raw(cache, s)[:, pos]
    if s.kind != "head":
        return act
    attn = model.blocks[s.layer].attn
    W_O = attn.o_proj.weight.view(model.cfg.d_model, attn.n_heads, attn.d_head)[:, s.head]  # [d_model, d_head]
    return act @ W_O.T


# ------------------------------------------------------------------------------------------------- the norms
def _scale(mod, x):
    """The norm's scale of ``x`` exactly as fixedid's RMSNorm / LayerNorm computes it, and ``x`` centred or not."""
    if hasattr(mod, "b"):
        x = x - x.mean(-1, keepdim=True)
    return (x.pow(2).mean(-1, keepdim=True) + mod.eps).sqrt(), x


def _normed(mod, x):
    """fixedid's norm of ``x`` without calling the module (so its hook points do not fire again)."""
    scale, xc = _scale(mod, x)
    out = xc / scale * mod.w
    return out + mod.b if hasattr(mod, "b") else out


def _patched_norm(mod, x, out, delta, norm):
    """The norm's output for ``x + delta``: recomputed, or with the scale of ``x`` kept (``out`` = the norm of x)."""
    if norm == "recompute":
        return _normed(mod, x + delta)
    scale, _ = _scale(mod, x)
    if hasattr(mod, "b"):
        delta = delta - delta.mean(-1, keepdim=True)
    return out + delta / scale * mod.w


def _receiver_hooks(model, receivers, delta, norm):
    """Forward hooks that add ``delta`` (``[rows, pos, d_model]``) to the input of each receiver only."""
    hooks = []
    for layer in sorted({r.layer for r in receivers if r.kind != "logits"}):
        here = [r for r in receivers if r.layer == layer]
        qkv = {c: [r.head for r in here if r.kind == c] for c in "qkv"}
        if any(qkv.values()):
            state = {}

            def ln1(mod, inp, out, state=state):
                state["normed"] = _patched_norm(mod, inp[0], out, delta, norm)

            hooks.append((hooknames.norm(layer, "ln1"), ln1))
            attn = model.blocks[layer].attn
            for c, heads in qkv.items():
                if not heads:
                    continue
                proj = getattr(attn, f"{c}_proj")

                def write(mod, inp, out, heads=heads, proj=proj, state=state):
                    out = out.clone()
                    dh = out.shape[-1]
                    for h in heads:
                        b = None if proj.bias is None else proj.bias[h * dh:(h + 1) * dh]
                        out[:, :, h] = F.linear(state["normed"], proj.weight[h * dh:(h + 1) * dh], b)
                    return out

                hooks.append((hooknames.attn(layer, c), write))
        if any(r.kind == "mlp_in" for r in here):
            hooks.append((hooknames.norm(layer, "ln2"),
                          lambda mod, inp, out: _patched_norm(mod, inp[0], out, delta, norm)))
    return hooks


def _readout(model, final, delta, norm):
    """Logits of the final stream, with ``delta`` added to the final norm's input when not None."""
    ln = model.ln_final
    normed = ln(final) if delta is None else _patched_norm(ln, final, _normed(ln, final), delta, norm)
    return model.unembed(normed)


# --------------------------------------------------------------------------------------------------- the sweep
def path_patching(model, pairs, senders="all", receivers="logits", mode: str = "denoise", metric=DEFAULT_METRIC, *,
                  norm: str = "recompute", per_pair: bool = False, max_batch: int = 512,
                  progress: bool = False) -> pd.DataFrame:
    """Patch each sender's source-minus-base write into ``receivers`` only; see the module docstring."""
    with torch.no_grad():
        return _path_patching(model, pairs, senders, receivers, mode, metric, norm, per_pair, max_batch, progress)


def _check_request(model, mode: str, norm: str) -> None:
    if mode not in MODES:
        raise AnalysisError(f"unknown mode {mode!r}; use 'denoise' (clean into corrupt) or 'noise' (corrupt into "
                            "clean)")
    if norm not in NORMS:
        raise AnalysisError(f"unknown norm convention {norm!r}; use 'recompute' (the receiver's norm reads the "
                            "patched stream) or 'frozen' (its scale stays the unpatched one)")
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() before path patching")


@dataclass(frozen=True)
class _Route:
    """How a patched write reaches the metric: the receivers in the residual stream (``stream``) and the first layer
    they sit in (``L0``, None without any), whether the logits receive it, the receivers' norm convention, and
    whether only the final position is read (``suffix``: the built-in metrics)."""

    stream: list
    L0: int | None
    into_logits: bool
    norm: str
    suffix: bool


def _route(recv: list[Node], norm: str, suffix: bool) -> _Route:
    stream = [r for r in recv if r.kind != "logits"]
    into_logits = any(r.kind == "logits" for r in recv)
    L0 = min(r.layer for r in stream) if stream else None
    return _Route(stream, L0, into_logits, norm, suffix)


@dataclass(frozen=True)
class _Runs:
    """The clean and corrupted runs as the run patched into (``base``: its cache, final stream and metric) and the run
    whose writes are patched in (``src``), with both runs' metrics."""

    base_cache: dict
    src_cache: dict
    base_final: torch.Tensor
    base_m: torch.Tensor
    clean_m: torch.Tensor
    corrupt_m: torch.Tensor


def _runs(model, batch, snd: list[Node], route: _Route, fn, mode: str) -> _Runs:
    """Run the clean and corrupted prompts together, caching the senders' writes and what the receivers' reruns
    start from."""
    L, n = model.cfg.n_layers, len(batch)
    names = [_write_hook(s) for s in snd]
    if route.L0 is not None:
        names.append(hooknames.resid_pre(route.L0))
        if route.suffix:
            names += engine.kv_names(L)[2 * route.L0:]
    both = torch.cat([batch.clean, batch.corrupt])
    final, cache = engine.cache_run(model, both, names, stop_at_layer=L)
    logits = model.unembed(model.ln_final(final[:, -1:] if route.suffix else final))
    clean_m, corrupt_m = fn(logits[:n], batch.answer, batch.wrong), fn(logits[n:], batch.answer, batch.wrong)
    half = (slice(n, 2 * n), slice(0, n)) if mode == "denoise" else (slice(0, n), slice(n, 2 * n))
    return _Runs(base_cache={k: v[half[0]] for k, v in cache.items()},
                 src_cache={k: v[half[1]] for k, v in cache.items()}, base_final=final[half[0]],
                 base_m=corrupt_m if mode == "denoise" else clean_m, clean_m=clean_m, corrupt_m=corrupt_m)


def _live_senders(snd: list[Node], runs: _Runs, route: _Route, T: int) -> list[tuple[int, int]]:
    """``(sender index, first position patched)`` of the senders whose write differs between the runs."""
    entries = []
    for i, s in enumerate(snd):
        src, base = _raw(runs.src_cache, s), _raw(runs.base_cache, s)
        if route.suffix and not route.stream:
            live = bool((src[:, -1] != base[:, -1]).any())
            start = T - 1
        else:
            first = engine.first_difference(src, base)
            live = first < T
            start = min(first, T - 1) if route.suffix else 0
        if live:
            entries.append((i, start))
    return entries


def _group_values(model, batch, runs: _Runs, route: _Route, members: list[Node], d: int, fn) -> torch.Tensor:
    """``[senders, pairs]`` metric values with each of ``members``' writes from position ``d`` on patched into the
    receivers only, all members in one batch."""
    L, n, k = model.cfg.n_layers, len(batch), len(members)
    pos = slice(d, None)
    delta = torch.cat([_write(model, runs.src_cache, s, pos) - _write(model, runs.base_cache, s, pos)
                       for s in members])
    if route.stream:
        x = runs.base_cache[hooknames.resid_pre(route.L0)][:, pos].repeat(k, 1, 1)
        past = engine.past_kv(runs.base_cache, route.L0, L, d, repeat=k)
        with module_hooks(model, _receiver_hooks(model, route.stream, delta, route.norm)):
            out = model(x, start_at_layer=route.L0, stop_at_layer=L, past_kv=past)
    else:
        out = runs.base_final[:, pos].repeat(k, 1, 1)
    if route.suffix:
        out, delta = out[:, -1:], delta[:, -1:]
    lg = _readout(model, out, delta if route.into_logits else None, route.norm)
    return fn(lg, batch.answer.repeat(k), batch.wrong.repeat(k)).view(k, n)


def _path_patching(model, pairs, senders, receivers, mode, metric, norm, per_pair, max_batch, progress):
    _check_request(model, mode, norm)
    metric_name, fn, norm_metric = resolve(metric)
    batch = make_pairs(model, pairs)
    recv = parse_receivers(model, receivers)
    snd = parse_senders(model, senders, recv)
    route = _route(recv, norm, suffix=not callable(metric))  # built-in metrics read the final position only
    runs = _runs(model, batch, snd, route, fn, mode)
    entries = _live_senders(snd, runs, route, batch.n_pos)
    values = runs.base_m[None].repeat(len(snd), 1)
    bar = tqdm(total=len(entries), desc="path patching", unit="sender", disable=not progress, leave=False)
    for d, group in engine.groups([e[1] for e in entries], len(batch), max_batch):
        v = _group_values(model, batch, runs, route, [snd[entries[g][0]] for g in group], d, fn)
        for j, g in enumerate(group):
            values[entries[g][0]] = v[j]
        bar.update(len(group))
    bar.close()
    return _frame(model, batch, snd, recv, values.cpu(), runs.clean_m.cpu(), runs.corrupt_m.cpu(), mode, metric_name,
                  norm, norm_metric, per_pair)


def _frame(model, batch, snd, recv, values, clean_m, corrupt_m, mode, metric_name, norm, norm_metric, per_pair):
    v = values.double().numpy()  # [senders, pairs] raw metric values
    clean, corrupt = clean_m.double().numpy(), corrupt_m.double().numpy()
    n = v.shape[1]
    raw_clean, raw_corrupt = float(clean.mean()), float(corrupt.mean())
    mean, lo, hi = t_intervals(v)
    if norm_metric:
        gap = clean - corrupt
        if abs(gap.mean()) < MIN_GAP:
            warnings.warn(f"the mean clean-corrupt logit difference gap is {gap.mean():.3f} (below {MIN_GAP}): the "
                          "normalised values divide by noise; read the raw logit differences instead",
                          AnalysisWarning, stacklevel=4)
        tiny = np.abs(gap) < MIN_GAP
        if per_pair and tiny.any():
            warnings.warn(f"{int(tiny.sum())} of {n} pairs have a clean-corrupt gap below {MIN_GAP} logits; their "
                          "normalised per-pair values are NaN", AnalysisWarning, stacklevel=4)
        v = np.where(tiny[None], np.nan, normalize(v, clean[None], corrupt[None]))
        ends = normalize(np.stack([mean, lo, hi]), raw_clean, raw_corrupt)
        mean, lo, hi = ends[0], np.minimum(ends[1], ends[2]), np.maximum(ends[1], ends[2])
    frame = pd.DataFrame({"sender": [s.label for s in snd], "kind": [s.kind for s in snd],
                          "layer": pd.array([s.layer for s in snd], dtype="Int64"),
                          "head": pd.array([s.head for s in snd], dtype="Int64"),
                          "receivers": ",".join(r.label for r in recv)})
    if per_pair:
        out = frame.iloc[np.repeat(np.arange(len(frame)), n)].reset_index(drop=True)
        out["pair"] = np.tile(np.arange(n), len(frame))
        out["value"] = v.reshape(-1)
    else:
        out = frame
        out["value"], out["value_lo"], out["value_hi"], out["n"] = mean, lo, hi, n
    clean_v, corrupt_v = (1.0, 0.0) if norm_metric else (raw_clean, raw_corrupt)
    tok = getattr(model, "tokenizer", None)
    ids = batch.clean[0].tolist()
    out.attrs.update(mode=mode, metric=metric_name, norm=norm, receivers=[r.label for r in recv], clean=clean_v,
                     corrupt=corrupt_v, baseline=corrupt_v if mode == "denoise" else clean_v, raw_clean=raw_clean,
                     raw_corrupt=raw_corrupt, n_pairs=n, n_layers=model.cfg.n_layers, n_heads=model.cfg.n_heads,
                     n_pos=batch.n_pos, texts=batch.texts,
                     str_tokens=[tok.decode([i], skip_special_tokens=False) if tok else str(i) for i in ids])
    return out


__all__ = ["path_patching", "parse_receivers", "parse_senders", "Node", "NORMS", "SENDER_SETS"]

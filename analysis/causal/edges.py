"""Edge attribution: a gradient estimate of every edge's path-patching effect, in a constant number of passes."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy import stats
from tqdm.auto import tqdm

from analysis import engine
from analysis.causal.patching import MIN_GAP, MODES
from analysis.causal.paths import Node, _scale, path_patching
from analysis.engine.metrics import DEFAULT_METRIC, resolve
from analysis.errors import AnalysisError
from analysis.pairs import make_pairs
from analysis.stats import t_intervals
from analysis.engine import names as hooknames

#: The edge scores: ``eap`` (the gradient at the base run) or ``eap-ig`` (averaged along the path from the base run to
#: the source; see the module docstring).
METHODS = ("eap", "eap-ig")
#: bytes of one chunk's deltas, gradients and activations (``pair_bytes``); the pairs per chunk shrink below
#: ``max_batch`` to stay within it
EDGE_BUDGET = 2 << 30
#: What ``eap-ig`` moves along its path: the input code rows (``inputs``) or every writer's output (``activations``).
INTERPOLATIONS = ("inputs", "activations")
#: The sign convention of a score, in words; a result's ``attrs["convention"]``.
CONVENTION = ("score(u -> v) = sum over positions of (write_u(source) - write_u(base)) . d metric / d (input of v); "
              "denoise: base = corrupted, source = clean; the first-order estimate of patching that edge alone")


@dataclass(frozen=True)
class GraphNode(Node):
    """A writer (``kind`` embed, head, mlp) or a reader (``kind`` q, k, v, mlp_in, logits) of
    :class:`analysis.causal.paths.Node`; ``head`` is the key/value head for k and v under grouped queries
    (``grouped``, labelled ``L1KV0.k``)."""

    grouped: bool = False

    @property
    def label(self) -> str:
        """The node's name in tables and figures; a grouped key/value input is ``L<layer>KV<group>.<k|v>``."""
        if self.grouped:
            return f"L{self.layer}KV{self.head}.{self.kind}"
        return super().label


def graph(model) -> tuple[list[GraphNode], list[GraphNode]]:
    """The writers and readers of ``model``'s graph, in forward order."""
    cfg = model.cfg
    grouped = cfg.kv_heads != cfg.n_heads
    writers = [GraphNode("embed")]
    readers = []
    for layer in range(cfg.n_layers):
        readers += [GraphNode("q", layer, h) for h in range(cfg.n_heads)]
        readers += [GraphNode(c, layer, g, grouped) for c in "kv" for g in range(cfg.kv_heads)]
        readers.append(GraphNode("mlp_in", layer))
        writers += [GraphNode("head", layer, h) for h in range(cfg.n_heads)] + [GraphNode("mlp", layer)]
    readers.append(GraphNode("logits"))
    return writers, readers


# ---------------------------------------------------------------------------------------------- the writes
def _write_names(n_layers: int) -> list[str]:
    return [hooknames.EMBED] + [n for i in range(n_layers) for n in (hooknames.attn(i, "z"), hooknames.attn_out(i),
                                                                   hooknames.mlp_out(i))]


def _writes(model, cache, writers_first: bool = False) -> torch.Tensor:
    """Every writer's write ``[rows, pos, writers, d_model]`` from a cache of ``_write_names`` (``[rows, writers,
    pos, d_model]`` with ``writers_first``, made in that layout rather than copied into it)."""
    w = 1 if writers_first else 2
    parts = [cache["hook_embed"].unsqueeze(w)]
    for i, block in enumerate(model.blocks):
        attn = block.attn
        W_O = attn.o_proj.weight.view(model.cfg.d_model, attn.n_heads, attn.d_head)
        parts.append(torch.einsum("bthe,dhe->bhtd" if writers_first else "bthe,dhe->bthd",
                                  cache[hooknames.attn(i, "z")], W_O))
        parts.append(cache[hooknames.mlp_out(i)].unsqueeze(w))
    return torch.cat(parts, w)


def _logits(model, final, suffix: bool):
    """The logits from the residual stream after the last block: at the final position only with ``suffix`` (the
    built-in metrics read nothing else), so the unembedding of the other positions is never computed."""
    return model.unembed(model.ln_final(final[:, -1:] if suffix else final))


def _source_run(model, tokens, names, fn, answer, wrong, suffix: bool) -> tuple[dict, torch.Tensor]:
    """One inference forward of ``tokens``: its activations at the hook points ``names`` and its metric per row
    (``suffix``: as in :func:`_logits`)."""
    with torch.no_grad():
        final, cache = engine.cache_run(model, tokens, names, stop_at_layer=model.cfg.n_layers)
        return cache, fn(_logits(model, final, suffix), answer, wrong).float()


def _pair_runs(model, clean, corrupt, names, fn, answer, wrong, suffix: bool = False):
    """One forward of the clean and corrupted prompts together: ``(clean cache, corrupted cache, clean metric,
    corrupted metric)``, the caches holding the hook points ``names`` (``suffix``: as in :func:`_logits`)."""
    n = len(clean)
    cache, m = _source_run(model, torch.cat([clean, corrupt]), names, fn, answer.repeat(2), wrong.repeat(2), suffix)
    halves = ({k: v[:n] for k, v in cache.items()}, {k: v[n:] for k, v in cache.items()})
    return (*halves, m[:n], m[n:])


# ------------------------------------------------------------------------------------------- the gradients
def _norm_factors(norms, inputs) -> list[tuple]:
    """Per norm of ``norms`` (each read at its input ``inputs[i]``, ``[rows, pos, d]``; one kind and ``eps``, as
    every norm of a fixedid model is made by one ``_norm(cfg)``), what the derivative through it needs, computed for
    all in one stacked pass: ``(w_inv, xs, v, centred)`` with ``s`` the norm's scale of the (centred) input,
    ``w_inv = w / s``, ``xs`` the input over ``s``, ``v = w_inv xs / d`` and ``centred`` for LayerNorm."""
    x = torch.stack([x.detach() for x in inputs])
    scale, xc = _scale(norms[0], x)
    inv = 1 / scale  # [norms, rows, pos, 1]
    xs = xc * inv  # the normalised inputs
    w_inv = torch.stack([n.w.detach() for n in norms])[:, None, None] * inv
    v = w_inv * xs / x.shape[-1]
    centred = hasattr(norms[0], "b")
    return [(*f, centred) for f in zip(w_inv, xs, v)]


def _through_norm(factors, g):
    """The derivative by a norm's input of ``<g, norm(x)>``, per copy (``g``: ``[copies, rows, pos, d]``), in place
    in ``g``, from the norm's :func:`_norm_factors`: with ``u = g w / s``, ``u - xs <u, xs> / d``, centred again for
    LayerNorm."""
    w_inv, xs, v, centred = factors
    c = (g * v).sum(-1, keepdim=True)  # <u, xs> / d, [copies, rows, pos, 1]
    g.mul_(w_inv).addcmul_(xs, c, value=-1)
    if centred:
        g.sub_(g.mean(-1, keepdim=True))
    return g


def _reader_grads(model, base_tokens, fn, answer, wrong, overrides, record=(), suffix: bool = False) -> tuple[
        torch.Tensor, dict, torch.Tensor]:
    """One forward of ``base_tokens`` (the hook points in ``overrides`` replaced by their given values, the
    derivative still flowing through the component that computed them) and one backward of the summed metric;
    returns every reader's input gradient ``[readers, rows, pos, d_model]`` (:func:`_readers_from_stream`), the run's
    activations at the hook points ``record`` (detached) and its metric per row (``suffix``: as in :func:`_logits`;
    the logits' reader then has a gradient at the final position only, as the metric reads no other)."""
    cfg = model.cfg
    L = cfg.n_layers
    mods, kept, handles, cache = model.mod_dict, {}, [], {}

    def keep(name):
        def hook(mod, inp, out):
            kept[name] = (inp[0], out)
        return hook

    def replace(value):
        def hook(mod, inp, out):
            return out + (value - out).detach()
        return hook

    overrides = dict(overrides)
    embed = overrides.pop("hook_embed", None)

    def leaf(mod, inp, out):  # the stream requires grad from the input on, whatever the parameters do
        return (out if embed is None else embed).detach().requires_grad_(True)

    try:
        handles.append(mods["hook_embed"].register_forward_hook(leaf))
        for name in record:  # registered after the embed's leaf hook, so they see what the run uses
            handles.append(mods[name].register_forward_hook(
                lambda mod, inp, out, name=name: cache.__setitem__(name, out.detach())))
        for name, value in overrides.items():
            handles.append(mods[name].register_forward_hook(replace(value)))
        for i in range(L):
            for c in "qkv":
                handles.append(mods[hooknames.attn(i, c)].register_forward_hook(keep(f"{i}.{c}")))
            handles.append(model.blocks[i].ln1.register_forward_hook(keep(f"{i}.ln1")))
            handles.append(model.blocks[i].ln2.register_forward_hook(keep(f"{i}.ln2")))
        handles.append(model.ln_final.register_forward_hook(keep("final")))
        with torch.enable_grad():
            m = fn(_logits(model, model(base_tokens, stop_at_layer=L), suffix), answer, wrong)
            names = [f"{i}.{c}" for i in range(L) for c in "qkv"] + [f"{i}.ln2" for i in range(L)] + ["final"]
            grads = dict(zip(names, torch.autograd.grad(m.sum(), [kept[n][1] for n in names], allow_unused=True)))
    finally:
        for h in handles:
            h.remove()
    return _readers_from_stream(model, kept, grads), cache, m.detach().float()


@torch.no_grad()  # the readers' gradients from the stream's: no graph of their own
def _readers_from_stream(model, kept, grads) -> torch.Tensor:
    """Every reader's input gradient ``[readers, rows, pos, d_model]``, in the readers' order (per layer the q/k/v
    heads, each through its projection and then its norm, and the MLP input; the logits last), from the gradients at
    the projections' outputs and the norms' outputs (``grads``) and the norms' inputs (``kept``). Each reader is
    made in place in one buffer, readers first, so every step reads and writes contiguous memory."""
    cfg = model.cfg
    x = kept["final"][0]  # [rows, pos or 1, d]: the final norm's input, at every position or the final one
    rows, pos, d = kept["0.ln1"][0].shape
    heads = cfg.n_heads + 2 * cfg.kv_heads
    out = torch.empty(cfg.n_layers * (heads + 1) + 1, rows, pos, d, dtype=x.dtype, device=x.device)
    norms = [n for b in model.blocks for n in (b.ln1, b.ln2)] + [model.ln_final]
    inputs = [kept[f"{i}.{n}"][0] for i in range(cfg.n_layers) for n in ("ln1", "ln2")]
    factors = _norm_factors(norms[:-1], inputs) + _norm_factors(norms[-1:], [x])  # x may be the final position only
    for i, block in enumerate(model.blocks):
        attn, gs, Ws = block.attn, [], []
        for c, n in (("q", cfg.n_heads), ("k", cfg.kv_heads), ("v", cfg.kv_heads)):
            g, act = grads[f"{i}.{c}"], kept[f"{i}.{c}"][1]
            gs.append((torch.zeros_like(act) if g is None else g).permute(2, 0, 1, 3))  # [n, rows, pos, d_head]
            Ws.append(getattr(attn, f"{c}_proj").weight.view(n, cfg.d_head, cfg.d_model))
        col = i * (heads + 1)
        qkv = out[col:col + heads]
        torch.bmm(torch.cat(gs).view(heads, rows * pos, cfg.d_head), torch.cat(Ws),
                  out=qkv.view(heads, rows * pos, d))  # every q/k/v head's projection at once
        _through_norm(factors[2 * i], qkv)
        out[col + heads] = grads[f"{i}.ln2"]
        _through_norm(factors[2 * i + 1], out[col + heads:col + heads + 1])
    first = pos - x.shape[1]  # the first position the logits are read at
    out[-1, :, :first] = 0.0
    out[-1, :, first:] = grads["final"]
    _through_norm(factors[-1], out[-1:, :, first:])
    return out


# ------------------------------------------------------------------------------------------------ the sweep
def pair_bytes(model, n_pos: int) -> int:
    """What one pair of ``n_pos`` tokens adds to a chunk, estimated: per token the writers' deltas (float64) and
    the two runs' writes they come from (float32), the readers' input gradients (float32), and the backward's
    activations (about ``16 d_model + 3 d_ff`` floats per layer)."""
    writers, readers = graph(model)
    c = model.cfg
    per_token = len(writers) * c.d_model * (8 + 4 + 4) + len(readers) * c.d_model * 4 \
        + c.n_layers * (16 * c.d_model + 3 * c.d_ff) * 4
    return n_pos * per_token


def _check_arguments(model, mode, method, interpolate, steps, max_batch) -> None:
    if mode not in MODES:
        raise AnalysisError(f"unknown mode {mode!r}; use 'denoise' (clean into corrupt) or 'noise' (corrupt into "
                            "clean)")
    if method not in METHODS:
        raise AnalysisError(f"unknown method {method!r}; use 'eap' (the gradient at the base run) or 'eap-ig' "
                            "(integrated over the path to the source)")
    if interpolate not in INTERPOLATIONS:
        raise AnalysisError(f"unknown interpolation {interpolate!r}; use 'inputs' (the input code rows) or "
                            "'activations' (every writer's output)")
    if method == "eap-ig" and (not isinstance(steps, int) or steps < 1):
        raise AnalysisError(f"steps must be a positive integer for eap-ig, got {steps!r}")
    if not isinstance(max_batch, int) or max_batch < 1:
        raise AnalysisError(f"max_batch must be a positive integer, got {max_batch!r}")
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() before edge attribution")


def edge_attribution(model, pairs, mode: str = "denoise", metric=DEFAULT_METRIC, *, method: str = "eap",
                     steps: int = 5, interpolate: str = "inputs", per_position: bool = False, max_batch: int = 16,
                     progress: bool = False) -> pd.DataFrame:
    """Score every edge of ``model``'s graph on ``pairs``; see the module docstring. One row per edge (and position,
    with ``per_position``): ``sender``, ``receiver``, their ``sender_kind``/``sender_layer``/``sender_head`` and
    ``receiver_kind``/``receiver_layer``/``receiver_head``, ``score`` with ``score_lo``/``score_hi`` (95% over
    pairs) and ``n``."""
    _check_arguments(model, mode, method, interpolate, steps, max_batch)
    metric_name, fn, norm_metric = resolve(metric)
    suffix = not callable(metric)  # the built-in metrics read the final position only
    batch = make_pairs(model, pairs)
    writers, readers = graph(model)
    n, T, L = len(batch), batch.n_pos, model.cfg.n_layers
    alphas = [0.0] if method == "eap" else [(k + 0.5) / steps for k in range(steps)]
    names = _write_names(L)
    written = [k for k in names if not k.endswith("hook_attn_out")]  # what _writes reads
    device = batch.clean.device
    scores = torch.zeros(n, T if per_position else 1, len(writers), len(readers), dtype=torch.float64, device=device)
    clean_m, corrupt_m = torch.zeros(n, device=device), torch.zeros(n, device=device)
    per_chunk = max(1, min(max_batch, EDGE_BUDGET // pair_bytes(model, T)))
    chunks = range(0, n, per_chunk)
    bar = tqdm(total=len(chunks) * len(alphas), desc=f"edge attribution ({method})", unit="pass",
               disable=not progress, leave=False)
    for start in chunks:
        rows = slice(start, min(start + per_chunk, n))
        answer, wrong = batch.answer[rows], batch.wrong[rows]
        src_tokens, base_tokens = batch.clean[rows], batch.corrupt[rows]
        if mode == "noise":
            src_tokens, base_tokens = base_tokens, src_tokens
        src_m, base_m = (clean_m, corrupt_m) if mode == "denoise" else (corrupt_m, clean_m)
        if method == "eap":  # the source's writes from a forward of its own; the base's from the gradient run
            src, src_m[rows] = _source_run(model, src_tokens, written, fn, answer, wrong, suffix)
            grads, base, base_m[rows] = _reader_grads(model, base_tokens, fn, answer, wrong, {}, written, suffix)
        else:
            cc, kc, clean_m[rows], corrupt_m[rows] = _pair_runs(model, batch.clean[rows], batch.corrupt[rows],
                                                                names, fn, answer, wrong, suffix)
            src, base = (cc, kc) if mode == "denoise" else (kc, cc)
        with torch.no_grad():  # [rows, writers, pos, d]: writes are linear in the cached activations
            delta = _writes(model, {k: src[k] - base[k] for k in written}, writers_first=True)
        for alpha in alphas:
            if alpha:  # EAP-IG: a gradient run at this point of the path (EAP's, at the base, ran above)
                moved = ["hook_embed"] if interpolate == "inputs" else [k for k in names if not k.endswith("hook_z")]
                overrides = {k: base[k] + alpha * (src[k] - base[k]) for k in moved}
                grads, _, _ = _reader_grads(model, base_tokens, fn, answer, wrong, overrides, suffix=suffix)
            # one contraction of every reader's input gradient with every writer's delta (the pairs of a writer
            # that does not reach a reader are computed too, and left out of the table)
            scores[rows] += _contract(delta, grads, per_position).double()
            bar.update()
    bar.close()
    scores /= len(alphas)
    return _frame(model, batch, writers, readers, scores, clean_m, corrupt_m, mode, metric_name, norm_metric,
                  method, steps if method == "eap-ig" else 0, interpolate if method == "eap-ig" else "", per_position)


def _contract(delta, grads, per_position):
    """``delta [rows, w, pos, d] . grads [r, rows, pos, d]`` -> ``[rows, pos or 1, w, r]``: one batched matrix
    product, over positions and the model width together (both laid out so that is a view) unless
    ``per_position``."""
    g = grads.to(delta.dtype)
    b, w, t, d = delta.shape
    if per_position:
        return torch.matmul(delta.transpose(1, 2), g.permute(1, 2, 3, 0))
    return torch.bmm(delta.reshape(b, w, t * d), g.view(-1, b, t * d).permute(1, 2, 0))[:, None]


def _frame(model, batch, writers, readers, scores, clean_m, corrupt_m, mode, metric_name, norm_metric, method,
           steps, interpolate, per_position):
    s = scores.cpu().numpy()  # [pairs, pos or 1, writers, readers]
    n, P = s.shape[0], s.shape[1]
    clean, corrupt = clean_m.double().cpu().numpy(), corrupt_m.double().cpu().numpy()
    gap = float(clean.mean() - corrupt.mean())
    if norm_metric:
        if abs(gap) < MIN_GAP:
            raise AnalysisError(f"the mean clean-corrupt logit difference gap is {gap:.3f} (below {MIN_GAP}): "
                                "normalised scores would divide by noise; use metric='logit_diff'")
        s = s / gap
    wi, ri, labels = _edge_labels(tuple(writers), tuple(readers), P if per_position else 0)
    flat = s[:, :, wi, ri].reshape(n, -1)  # [pairs, pos x edges]
    mean, lo, hi = t_intervals(flat.T)
    values = pd.DataFrame({"score": mean, "score_lo": lo, "score_hi": hi, "n": np.full(len(mean), n)},
                          index=labels.index)
    out = pd.concat([labels, values], axis=1)  # the cached label columns are shared (copy-on-write)
    raw_clean, raw_corrupt = float(clean.mean()), float(corrupt.mean())
    out.attrs.update(method=method, steps=steps, interpolate=interpolate, mode=mode, metric=metric_name,
                     convention=CONVENTION, raw_clean=raw_clean, raw_corrupt=raw_corrupt,
                     clean=1.0 if norm_metric else raw_clean, corrupt=0.0 if norm_metric else raw_corrupt,
                     n_pairs=n, n_pos=batch.n_pos, n_edges=len(wi), n_layers=model.cfg.n_layers,
                     n_heads=model.cfg.n_heads)
    return out


@functools.lru_cache(maxsize=16)
def _edge_labels(writers: tuple, readers: tuple, positions: int) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """The edges of a graph (a writer before a reader): their writer and reader indices and the table's label
    columns (``positions`` > 0: one row per edge and position, with ``position``), the same for every call on one
    graph and so made once."""
    wi, ri = np.nonzero(np.array([w.time for w in writers])[:, None] < np.array([r.time for r in readers])[None])
    e = np.tile(np.arange(len(wi)), max(positions, 1))
    cols = {}
    for side, nodes, idx in (("sender", writers, wi[e]), ("receiver", readers, ri[e])):  # per node once, then indexed
        cols[side] = np.array([x.label for x in nodes], dtype=object)[idx]
        cols[f"{side}_kind"] = np.array([x.kind for x in nodes], dtype=object)[idx]
        for attr in ("layer", "head"):
            cols[f"{side}_{attr}"] = pd.array([getattr(x, attr) for x in nodes], dtype="Int64")[idx]
    out = pd.DataFrame({k: cols[k] for k in ("sender", "receiver", "sender_kind", "sender_layer", "sender_head",
                                             "receiver_kind", "receiver_layer", "receiver_head")})
    if positions:
        out.insert(2, "position", np.repeat(np.arange(positions), len(wi)))
    return wi, ri, out


def node_scores(edges: pd.DataFrame) -> pd.DataFrame:
    """Each writer's score: the sum of its outgoing edges (every reader downstream of it included, so this is the
    first-order effect of patching the writer's whole write), one row per sender."""
    keys = ["sender", "sender_kind", "sender_layer", "sender_head"] + (["position"] if "position" in edges else [])
    out = edges.groupby(keys, sort=False, dropna=False).score.sum().reset_index()
    out.attrs.update(edges.attrs)
    return out


# ------------------------------------------------------------------------------------------- exact patching
def exact_edge_effects(model, pairs, mode: str = "denoise", metric=DEFAULT_METRIC, *, receivers=None,
                       max_batch: int = 512, progress: bool = False) -> pd.DataFrame:
    """The exact effect of patching each edge alone - path patching of its sender into its receiver, the norm
    recomputed (:func:`analysis.causal.paths.path_patching`), minus the base run's metric - for every edge into
    ``receivers`` (reader labels; None: every reader but grouped keys and values, which path patching does not
    define). Columns ``sender``, ``receiver``, ``effect``, ``effect_lo``, ``effect_hi``: one path-patching call per
    receiver, all its senders batched."""
    _, readers = graph(model)
    chosen = [r for r in readers if not r.grouped] if receivers is None else []
    if receivers is not None:
        by_label = {r.label: r for r in readers}
        items = receivers.split(",") if isinstance(receivers, str) else list(receivers)
        for item in (str(x).strip() for x in items):
            if item not in by_label or by_label[item].grouped:
                raise AnalysisError(f"unknown receiver {item!r} for exact edge effects; use a reader label such as "
                                    "L1H0.q, L1.mlp or logits (grouped keys and values are not defined)")
            chosen.append(by_label[item])
    frames = []
    for r in tqdm(chosen, desc="exact edges", unit="receiver", disable=not progress, leave=False):
        pp = path_patching(model, pairs, senders="all", receivers=r.label, mode=mode, metric=metric,
                           max_batch=max_batch)
        base = pp.attrs["baseline"]
        frames.append(pd.DataFrame({"sender": pp.sender, "receiver": r.label, "effect": pp.value - base,
                                    "effect_lo": pp.value_lo - base, "effect_hi": pp.value_hi - base}))
    out = pd.concat(frames, ignore_index=True)
    out.attrs.update(mode=mode, metric=resolve(metric)[0])
    return out


def exact_agreement(scores: pd.DataFrame, exact: pd.DataFrame) -> dict:
    """How well the estimated scores rank the edges that :func:`~analysis.causal.edges.exact_edge_effects` measured:
    Spearman's rank correlation of score and exact effect (signed, and of their magnitudes), Pearson's r, and the share
    of the exact top decile (by magnitude) that the estimate also puts in its top decile."""
    if "position" in scores:
        raise AnalysisError("give scores summed over positions (per_position=False) to compare with exact effects")
    both = scores.merge(exact, on=["sender", "receiver"], how="inner")
    if len(both) < 3:
        raise AnalysisError(f"only {len(both)} edges are both scored and measured; measure more receivers")
    k = max(1, len(both) // 10)
    top_exact = set(both.effect.abs().nlargest(k).index)
    top_score = set(both.score.abs().nlargest(k).index)
    return {"n_edges": len(both), "spearman": float(stats.spearmanr(both.score, both.effect).statistic),
            "spearman_abs": float(stats.spearmanr(both.score.abs(), both.effect.abs()).statistic),
            "pearson": float(np.corrcoef(both.score, both.effect)[0, 1]),
            "top_decile_overlap": len(top_exact & top_score) / k}


__all__ = ["edge_attribution", "node_scores", "exact_edge_effects", "exact_agreement", "graph", "GraphNode",
           "METHODS", "INTERPOLATIONS", "CONVENTION"]

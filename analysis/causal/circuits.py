"""Circuits from edge scores: keep the top-k edges (or writers), ablate every other edge, and measure how much of the
behaviour the kept ones carry - the faithfulness curve, its area, and the minimality and complement checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis.causal.edges import _pair_runs, _write_names, _writes, graph, node_scores
from analysis.causal.paths import _normed
from analysis.engine.metrics import DEFAULT_METRIC, resolve
from analysis.errors import AnalysisError
from analysis.pairs import make_pairs
from analysis.engine import names as hooknames

#: What replaces the write of an ablated edge: the pair's own corrupted write (the default), another pair's, the mean
#: corrupted write per position, or zero (see the module docstring).
ABLATIONS = ("corrupt", "resample", "mean", "zero")
#: What the top ``k`` of a circuit counts: ``edges``, or ``nodes`` (writers, each kept with all its outgoing edges).
UNITS = ("edges", "nodes")


# ----------------------------------------------------------------------------------------- the ablated run
def _edge_index(model):
    writers, readers = graph(model)
    wi = {w.label: i for i, w in enumerate(writers)}
    ri = {r.label: i for i, r in enumerate(readers)}
    valid = torch.tensor([[w.time < r.time for r in readers] for w in writers])
    return writers, readers, wi, ri, valid


def _replacements(model, corrupt_writes, ablation, seed):
    """The write that replaces each ablated writer, per pair ``[pairs, pos, writers, d]``."""
    if ablation == "corrupt":
        return corrupt_writes
    if ablation == "zero":
        return torch.zeros_like(corrupt_writes)
    if ablation == "mean":
        return corrupt_writes.mean(0, keepdim=True).expand_as(corrupt_writes)
    n = corrupt_writes.shape[0]
    if n < 2:
        raise AnalysisError("resample ablation needs at least 2 pairs (each takes another pair's corrupted prompt)")
    perm = np.random.default_rng(seed).permutation(n)
    perm = np.where(perm == np.arange(n), np.roll(perm, 1), perm)  # no pair keeps its own
    while (perm == np.arange(n)).any():
        perm = np.roll(perm, 1)
    return corrupt_writes[torch.as_tensor(perm)]


def _layer_hooks(model, layer: int, delta: torch.Tensor, repl: torch.Tensor, m: torch.Tensor, state: dict) -> list:
    """The hooks of one block: its heads' and MLP's writes recorded in ``delta`` (their write minus the replacement),
    and its norms' inputs (one per head and q/k/v reader, then the MLP's) corrected by the ablated edges' deltas."""
    cfg = model.cfg
    H, K, dh, D = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model
    attn = model.blocks[layer].attn
    w_heads = 1 + layer * (H + 1)
    r0 = layer * (H + 2 * K + 1)
    W_O = attn.o_proj.weight.view(D, H, dh)

    def z(mod, inp, out, w0=w_heads, W_O=W_O):
        delta[:, :, w0:w0 + H] = torch.einsum("bthe,dhe->bthd", out, W_O) - repl[:, :, w0:w0 + H]

    def mlp_out(mod, inp, out, w=w_heads + H):
        delta[:, :, w] = out - repl[:, :, w]

    def ln1(mod, inp, out, w0=w_heads, r0=r0, layer=layer):
        corr = torch.einsum("btwd,bwr->btrd", delta[:, :, :w0], m[:, :w0, r0:r0 + H + 2 * K])
        state[layer] = _normed(mod, inp[0][:, :, None] - corr)  # [rows, pos, H + 2K, d]

    def proj(c_, n_heads, offset, layer=layer, attn=attn):
        lin = getattr(attn, f"{c_}_proj")

        def hook(mod, inp, out):
            x = state[layer][:, :, offset:offset + n_heads]
            y = torch.einsum("btre,rfe->btrf", x, lin.weight.view(n_heads, dh, D))
            return y if lin.bias is None else y + lin.bias.view(n_heads, dh)
        return hook

    def ln2(mod, inp, out, w=w_heads + H, r=r0 + H + 2 * K):
        corr = torch.einsum("btwd,bw->btd", delta[:, :, :w], m[:, :w, r])
        return _normed(mod, inp[0] - corr)

    return [(hooknames.attn(layer, "z"), z), (hooknames.mlp_out(layer), mlp_out),
            (hooknames.norm(layer, "ln1"), ln1), (hooknames.attn(layer, "q"), proj("q", H, 0)),
            (hooknames.attn(layer, "k"), proj("k", K, H)),
            (hooknames.attn(layer, "v"), proj("v", K, H + K)), (hooknames.norm(layer, "ln2"), ln2)]


def _hooked_logits(model, hooks: list, tokens: torch.Tensor) -> torch.Tensor:
    """The logits of ``tokens`` with the forward ``hooks`` (``(module name, hook)``) installed, removed after."""
    mods, handles = model.mod_dict, []
    try:
        for name, hook in hooks:
            handles.append(mods[name].register_forward_hook(hook))
        with torch.no_grad():
            return model(tokens)
    finally:
        for h in handles:
            h.remove()


def _ablated_metric(model, tokens, repl, masks, fn, answer, wrong):
    """``m`` of the clean ``tokens`` (``[pairs, pos]``) under each ablation mask (``[circuits, writers, readers]``,
    True: the edge is ablated), all circuits in one forward; returns ``[circuits, pairs]``."""
    c, n = masks.shape[0], tokens.shape[0]
    m = masks.to(repl.device, torch.float32).repeat_interleave(n, 0)  # [rows, W, R]
    repl = repl.repeat(c, 1, 1, 1)
    delta = torch.zeros_like(repl)  # write(this run) - replacement, filled as the writers fire
    state, hooks = {}, []

    def embed(mod, inp, out):
        delta[:, :, 0] = out - repl[:, :, 0]

    hooks.append(("hook_embed", embed))
    for layer in range(len(model.blocks)):
        hooks += _layer_hooks(model, layer, delta, repl, m, state)

    def ln_final(mod, inp, out):
        return _normed(mod, inp[0] - torch.einsum("btwd,bw->btd", delta, m[:, :, -1]))

    hooks.append(("ln_final", ln_final))
    logits = _hooked_logits(model, hooks, tokens.repeat(c, 1))
    return fn(logits, answer.repeat(c), wrong.repeat(c)).float().view(c, n)


class _Runner:
    """The pairs, their clean and corrupted metrics and the replacement writes, ready to ablate."""

    def __init__(self, model, pairs, metric, ablation, seed, max_batch):
        if ablation not in ABLATIONS:
            raise AnalysisError(f"unknown ablation {ablation!r}; use one of {', '.join(ABLATIONS)}")
        if model.training:
            raise AnalysisError("the model is in train mode; call model.eval() before measuring a circuit")
        if not isinstance(max_batch, int) or max_batch < 1:
            raise AnalysisError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.model, self.ablation, self.max_batch = model, ablation, max_batch
        self.metric, self.fn, _ = resolve(metric)
        self.batch = make_pairs(model, pairs)
        self.writers, self.readers, self.wi, self.ri, self.valid = _edge_index(model)
        b = self.batch
        _, kc, clean_m, corrupt_m = _pair_runs(model, b.clean, b.corrupt, _write_names(model.cfg.n_layers), self.fn,
                                               b.answer, b.wrong)
        self.clean_m, self.corrupt_m = clean_m.double(), corrupt_m.double()
        with torch.no_grad():
            self.repl = _replacements(model, _writes(model, kc), ablation, seed)
        self.gap = float(self.clean_m.mean() - self.corrupt_m.mean())
        if abs(self.gap) < 1e-6:
            raise AnalysisError("the clean and corrupted prompts give the same metric, so the recovered share is "
                                "undefined; choose pairs the metric separates")

    def recovered(self, masks, desc="circuits", progress=False) -> np.ndarray:
        """``[circuits]`` recovered shares of the ablation masks ``[circuits, writers, readers]``."""
        n = len(self.batch)
        per = max(1, self.max_batch // n)
        out = []
        for start in tqdm(range(0, len(masks), per), desc=desc, unit="forward", disable=not progress, leave=False):
            v = _ablated_metric(self.model, self.batch.clean, self.repl, masks[start:start + per], self.fn,
                                self.batch.answer, self.batch.wrong)
            out.append(v.double().mean(1))
        m = torch.cat(out).cpu().numpy()
        return (m - float(self.corrupt_m.mean().cpu())) / self.gap

    def mask_keeping(self, kept: list[tuple[str, str]]) -> torch.Tensor:
        """The ablation mask that keeps exactly the edges ``kept`` (sender, receiver labels)."""
        keep = torch.zeros_like(self.valid)
        for s, r in kept:
            if s not in self.wi or r not in self.ri or not self.valid[self.wi[s], self.ri[r]]:
                raise AnalysisError(f"{s} -> {r} is not an edge of this model's graph (see analysis.causal.edges)")
            keep[self.wi[s], self.ri[r]] = True
        return self.valid & ~keep


def _ranked(scores: pd.DataFrame, unit: str) -> list:
    """Edges (or writers) by descending ``|score|``."""
    if "position" in scores:
        raise AnalysisError("give edge scores summed over positions (per_position=False)")
    if unit == "nodes":
        ns = node_scores(scores)
        return list(ns.loc[ns.score.abs().sort_values(ascending=False, kind="stable").index, "sender"])
    order = scores.score.abs().sort_values(ascending=False, kind="stable").index
    return list(zip(scores.loc[order, "sender"], scores.loc[order, "receiver"]))


def _edges_of(runner, unit, items) -> list[tuple[str, str]]:
    if unit == "edges":
        return list(items)
    return [(w.label, r.label) for w in runner.writers if w.label in set(items) for r in runner.readers
            if w.time < r.time]


def default_ks(total: int) -> list[int]:
    """0, then powers of two, then every edge."""
    ks, k = [0], 1
    while k < total:
        ks.append(k)
        k *= 2
    return ks + [total]


def faithfulness_curve(model, pairs, scores: pd.DataFrame, ks=None, *, unit: str = "edges",
                       ablation: str = "corrupt", metric=DEFAULT_METRIC, seed: int = 0, max_batch: int = 256,
                       progress: bool = False) -> pd.DataFrame:
    """Recovered share when keeping the top ``k`` edges (``unit="nodes"``: writers, with all their outgoing
    edges) by ``|score|`` (``scores`` from :func:`analysis.causal.edges.edge_attribution`) for each ``k`` of ``ks``
    (None: :func:`~analysis.causal.circuits.default_ks`). Columns ``k``, ``fraction`` (of edges or writers kept),
    ``n_edges`` (edges kept), ``recovered``; ``attrs``: ``area`` (trapezoid over ``fraction``), ``clean``, ``corrupt``,
    ``ablation``, ``unit``, ``metric``, ``method`` (of the scores)."""
    if unit not in UNITS:
        raise AnalysisError(f"unknown unit {unit!r}; use 'edges' or 'nodes'")
    runner = _Runner(model, pairs, metric, ablation, seed, max_batch)
    ranked = _ranked(scores, unit)
    total = len(ranked)
    ks = default_ks(total) if ks is None else sorted({int(k) for k in ks})
    if not ks or ks[0] < 0 or ks[-1] > total:
        raise AnalysisError(f"every k must lie in 0..{total} (the {unit} of this graph)")
    masks = torch.stack([runner.mask_keeping(_edges_of(runner, unit, ranked[:k])) for k in ks])
    rec = runner.recovered(masks, desc="faithfulness", progress=progress)
    kept_edges = [int((runner.valid & ~mk).sum()) for mk in masks]
    out = pd.DataFrame({"k": ks, "fraction": np.asarray(ks) / total, "n_edges": kept_edges, "recovered": rec})
    area = float(np.trapezoid(out.recovered, out.fraction)) if len(out) > 1 else float("nan")
    out.attrs.update(area=area, clean=float(runner.clean_m.mean()), corrupt=float(runner.corrupt_m.mean()),
                     ablation=ablation, unit=unit, metric=runner.metric, method=scores.attrs.get("method", ""),
                     n_pairs=len(runner.batch), total=total)
    return out


def circuit_checks(model, pairs, circuit, *, ablation: str = "corrupt", metric=DEFAULT_METRIC, seed: int = 0,
                   minimality: bool = True, max_batch: int = 256, progress: bool = False) -> pd.DataFrame:
    """Minimality and completeness of one circuit (a list of ``(sender, receiver)`` labels, or an edge-score
    table's rows): one row per kept edge with ``drop_in_recovered`` (recovered with the circuit minus the same with
    that edge ablated too; ``minimality=False``: not measured, NaN, one forward instead of one per edge);
    ``attrs``: ``recovered`` (the circuit), ``complement`` (its edges ablated, all others kept), ``n_edges``,
    ``ablation``."""
    runner = _Runner(model, pairs, metric, ablation, seed, max_batch)
    if isinstance(circuit, pd.DataFrame):
        circuit = list(zip(circuit.sender, circuit.receiver))
    circuit = list(dict.fromkeys((str(s), str(r)) for s, r in circuit))
    if not circuit:
        raise AnalysisError("the circuit holds no edge")
    full = runner.mask_keeping(circuit)
    masks = [full, runner.valid & ~full]  # the circuit; its complement kept
    for s, r in circuit if minimality else ():
        one = full.clone()
        one[runner.wi[s], runner.ri[r]] = True
        masks.append(one)
    rec = runner.recovered(torch.stack(masks), desc="circuit checks", progress=progress)
    out = pd.DataFrame({"sender": [s for s, _ in circuit], "receiver": [r for _, r in circuit],
                        "drop_in_recovered": rec[0] - rec[2:] if minimality else np.nan})
    out.attrs.update(recovered=float(rec[0]), complement=float(rec[1]), n_edges=len(circuit), ablation=ablation,
                     metric=runner.metric, n_pairs=len(runner.batch))
    return out


__all__ = ["faithfulness_curve", "circuit_checks", "default_ks", "ABLATIONS", "UNITS"]

"""Attribution graphs: one prompt's prediction traced through a local replacement model built from transcoders, from
the input code's bits to the logits (the method of Ameisen et al., 2025, "Circuit Tracing")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from analysis.causal.graph_influence import graph_scores, influence, normalize_rows, prune
from analysis.errors import AnalysisError
from analysis.features.dictionary import SparseDictionary
from analysis.engine import names as hooknames


@dataclass
class AttributionGraph:
    """One prompt's graph: ``nodes`` and ``edges`` (module docstring), the dense ``adjacency`` (targets x sources,
    the nodes in ``nodes``' order, bias left out), ``scores`` (replacement, completeness) and ``logits`` (the real
    model's logits of the logit targets)."""

    nodes: pd.DataFrame
    edges: pd.DataFrame
    adjacency: np.ndarray
    scores: dict
    logits: np.ndarray
    attrs: dict = field(default_factory=dict)


def _check(model, transcoders: dict) -> None:
    n = model.cfg.n_layers
    if sorted(transcoders) != list(range(n)):
        raise AnalysisError(f"an attribution graph needs one transcoder per layer 0..{n - 1}, got layers "
                            f"{sorted(transcoders)}")
    for layer, d in transcoders.items():
        want = (hooknames.mlp_in(layer), hooknames.mlp_out(layer))
        if d.cfg.kind == "sae" or (d.cfg.hook_name, d.cfg.hook_name_out) != want:
            raise AnalysisError(f"the transcoder of layer {layer} must read {want[0]} and predict {want[1]}, got "
                                f"a {d.cfg.kind} of {d.cfg.hook_name} -> {d.cfg.hook_name_out}")


def _input_columns(model) -> torch.Tensor | None:
    """``[n_bits, d_model]``: which columns of ``hook_embed`` carry each code column (None without a code)."""
    if not model.cfg.has_code:
        return None
    eye = torch.eye(model.cfg.n_bits, device=model.unembed.weight.device)
    return model.embed.widen(eye)


@torch.no_grad()
def _clean(model, tokens, transcoders):
    """The real run: embedding, the transcoders' activations and errors per layer, the last position's logits, and
    the norms' scales and attention patterns (what the replacement freezes)."""
    hooks = ["hook_embed", "ln_final.hook_scale"] + [
        h for L in range(model.cfg.n_layers)
        for h in (hooknames.mlp_in(L), hooknames.mlp_out(L), hooknames.norm_hook(L, "ln1", "scale"),
                  hooknames.norm_hook(L, "ln2", "scale"), hooknames.attn(L, "pattern"))]
    logits, cache = model.run_with_cache(tokens[None], names_filter=hooks)
    acts, errs = [], []
    for L in range(model.cfg.n_layers):
        x, y = cache[hooknames.mlp_in(L)][0].float(), cache[hooknames.mlp_out(L)][0].float()
        a = transcoders[L].encode(x)
        acts.append(a)
        errs.append(y - transcoders[L].decode(a, x))
    frozen = {k: v for k, v in cache.items() if k.endswith(("hook_scale", "hook_pattern"))}
    return cache["hook_embed"][0].float(), acts, errs, logits[0, -1].float(), frozen


def _replacement(model, tokens, transcoders, frozen, embed, acts, errs, targets):
    """One pass of the frozen replacement on ``B`` copies of the prompt with the nodes given (``[B, ...]`` leaves)
    and the clean run's scales and patterns (``frozen``); returns each copy's target value ``[B]``. ``targets``:
    ``(kind, layer, position, index)`` per copy."""
    B = embed.shape[0]
    mlp_in: dict[int, torch.Tensor] = {}

    def freeze(t, hook):
        return frozen[hook.name].expand_as(t).to(t.dtype)

    fwd = [("hook_embed", lambda t, hook: embed)]
    for L in range(model.cfg.n_layers):
        d = transcoders[L]

        def keep_in(t, hook, L=L):
            mlp_in[L] = t
            return t

        def replace(t, hook, L=L, d=d):
            out = acts[L] @ d.W_dec + d.b_dec + errs[L]
            if d.W_skip is not None:
                out = out + mlp_in[L] @ d.W_skip.T
            return out.to(t.dtype)

        fwd += [(hooknames.norm_hook(L, "ln1", "scale"), freeze), (hooknames.norm_hook(L, "ln2", "scale"), freeze),
                (hooknames.attn(L, "pattern"), freeze),
                (hooknames.mlp_in(L), keep_in), (hooknames.mlp_out(L), replace)]
    fwd.append(("ln_final.hook_scale", freeze))
    logits = model.run_with_hooks(tokens[None].expand(B, -1), fwd_hooks=fwd).float()
    values = []
    for b, (kind, layer, pos, idx) in enumerate(targets):
        if kind == "logit":
            values.append(logits[b, pos, idx])
        else:
            d = transcoders[layer]
            values.append(mlp_in[layer][b, pos].float() @ d.W_enc[:, idx] + d.b_enc[idx])
    return torch.stack(values)


def _node_table(model, tokens, embed, acts, errs, cols, probs, top) -> tuple[pd.DataFrame, list[str]]:
    """The nodes in the adjacency's order - features, errors, inputs, logits - with ``id``, ``kind``, ``layer``,
    ``position``, ``feature``, ``activation`` and ``token``; and the prompt's tokens as strings."""
    T, n_layers = len(tokens), model.cfg.n_layers
    rows = [{"id": f"F{L}:{p}:{f}", "kind": "feature", "layer": L, "position": p, "feature": f,
             "activation": float(acts[L][p, f])} for L in range(n_layers) for p, f in acts[L].nonzero().tolist()]
    rows += [{"id": f"E{L}:{p}", "kind": "error", "layer": L, "position": p, "feature": -1,
              "activation": float(errs[L][p].norm())} for L in range(n_layers) for p in range(T)]
    if cols is not None:
        rows += [{"id": f"I{p}:b{j}", "kind": "input", "layer": -1, "position": p, "feature": j,
                  "activation": float(embed[p][cols[j].bool()][0])} for p in range(T) for j in range(len(cols))]
    else:
        rows += [{"id": f"I{p}", "kind": "input", "layer": -1, "position": p, "feature": -1,
                  "activation": float(embed[p].norm())} for p in range(T)]
    rows += [{"id": f"L{int(v)}", "kind": "logit", "layer": n_layers, "position": T - 1, "feature": int(v),
              "activation": float(probs[v])} for v in top]
    nodes = pd.DataFrame(rows)
    has_tokenizer = getattr(model, "tokenizer", None) is not None
    prompt = model.to_str_tokens(tokens) if has_tokenizer else [str(int(t)) for t in tokens]
    nodes["token"] = [prompt[p] for p in nodes.position]
    if has_tokenizer:  # a logit node's token is the one it predicts
        nodes.loc[nodes.kind == "logit", "token"] = model.to_str_tokens(top)
    return nodes, prompt


def _source_weights(model, tokens, transcoders, frozen, embed, acts, errs, cols, chunk):
    """For a batch of targets: the edge weights from every source ``[B, n_features + n_errors + n_inputs]`` (the
    adjacency's column order), each target's value with the nodes as they are, and with every node at zero."""
    B, T = len(chunk), len(tokens)
    e = embed[None].expand(B, -1, -1).clone().requires_grad_(True)
    a = [x[None].expand(B, -1, -1).clone().requires_grad_(True) for x in acts]
    r = [x[None].expand(B, -1, -1).clone().requires_grad_(True) for x in errs]
    with torch.enable_grad():
        out = _replacement(model, tokens, transcoders, frozen, e, a, r, chunk)
        grads = torch.autograd.grad(out.sum(), [e, *a, *r], allow_unused=True)
    with torch.no_grad():
        zero = _replacement(model, tokens, transcoders, frozen, torch.zeros_like(e),
                            [torch.zeros_like(x) for x in a], [torch.zeros_like(x) for x in r], chunk)
    n_layers = len(acts)
    g_e, g_a, g_r = grads[0], grads[1:1 + n_layers], grads[1 + n_layers:]
    w_in = e.detach() * g_e if g_e is not None else torch.zeros_like(e)
    w_in = (w_in @ cols.T).reshape(B, -1) if cols is not None else w_in.sum(-1)
    w_err = torch.stack([(g * x).sum(-1) if g is not None else torch.zeros(B, T, device=x.device)
                         for g, x in zip(g_r, errs)], 1).reshape(B, -1)
    w_feat = []  # features in the node table's order: by layer, then (position, feature) as nonzero() lists them
    for g, x in zip(g_a, acts):
        nz = x.nonzero()
        w_feat.append(g[:, nz[:, 0], nz[:, 1]] * x[nz[:, 0], nz[:, 1]] if g is not None
                      else torch.zeros(B, len(nz), device=x.device))
    return torch.cat([*w_feat, w_err, w_in], 1), out.detach(), zero


def _tables(nodes: pd.DataFrame, adjacency: np.ndarray, edge_keep: np.ndarray, bias: np.ndarray):
    """``(nodes, edges)``: every nonzero entry of the adjacency as an edge, and the ``bias`` node with one edge into
    each target (the targets are the nodes with an ``input``)."""
    t_idx, s_idx = np.nonzero(adjacency)
    ids = nodes.id.to_numpy()
    targets = nodes.input.notna().to_numpy()
    edges = pd.concat([pd.DataFrame({"source": ids[s_idx], "target": ids[t_idx], "weight": adjacency[t_idx, s_idx],
                                     "kept": edge_keep[t_idx, s_idx]}),
                       pd.DataFrame({"source": "bias", "target": ids[targets], "weight": bias[targets],
                                     "kept": nodes.kept.to_numpy()[targets]})], ignore_index=True)
    bias_node = pd.DataFrame([{"id": "bias", "kind": "bias", "layer": -1, "position": -1, "feature": -1,
                               "activation": 1.0, "token": "", "kept": True}])
    return pd.concat([nodes, bias_node], ignore_index=True), edges


def attribution_graph(model, tokens, transcoders: dict[int, SparseDictionary], *, max_logits: int = 10,
                      desired_prob: float = 0.95, batch: int = 64, prune_graph: bool = True,
                      node_threshold: float = 0.8, edge_threshold: float = 0.98,
                      progress: bool = False) -> AttributionGraph:
    """The attribution graph (module docstring) of the prompt ``tokens`` (a 1-D tensor of ids, or a string for a
    model with a tokenizer) through ``transcoders`` (``{layer: transcoder}``, one per layer)."""
    from tqdm.auto import tqdm

    _check(model, transcoders)
    if isinstance(tokens, str):
        tokens = model.to_tokens(tokens)[0]
    device = model.unembed.weight.device
    tokens = torch.as_tensor(tokens, device=device).long()
    if tokens.dim() != 1 or len(tokens) < 1:
        raise AnalysisError(f"a prompt is a 1-D tensor of token ids, got shape {tuple(tokens.shape)}")
    if not 1 <= max_logits or not 0 < desired_prob <= 1:
        raise AnalysisError(f"max_logits must be >= 1 and desired_prob in (0, 1], got {max_logits}, {desired_prob}")
    transcoders = {L: d.to(device).eval() for L, d in transcoders.items()}
    embed, acts, errs, last, frozen = _clean(model, tokens, transcoders)
    probs = last.softmax(-1)
    top = probs.argsort(descending=True)[:max_logits]
    top = top[:int(min(len(top), int((probs[top].cumsum(0) < desired_prob).sum()) + 1))]
    cols = _input_columns(model)
    nodes, prompt = _node_table(model, tokens, embed, acts, errs, cols, probs, top)
    kinds = nodes.kind.to_numpy()
    N, n_sources = len(nodes), int((kinds != "logit").sum())
    adjacency, bias, value = np.zeros((N, N)), np.zeros(N), np.full(N, np.nan)
    feats = nodes[kinds == "feature"]
    targets = [("feature", L, p, f) for L, p, f in zip(feats.layer, feats.position, feats.feature)]
    targets += [("logit", model.cfg.n_layers, len(tokens) - 1, int(v)) for v in top]
    target_rows = np.flatnonzero((kinds == "feature") | (kinds == "logit"))
    for start in tqdm(range(0, len(targets), batch), disable=not progress, desc="graph", unit="batch"):
        rows = target_rows[start:start + batch]
        w, out, zero = _source_weights(model, tokens, transcoders, frozen, embed, acts, errs, cols,
                                       targets[start:start + batch])
        adjacency[rows, :n_sources] = w.double().cpu().numpy()
        value[rows] = out.double().cpu().numpy()
        bias[rows] = zero.double().cpu().numpy()

    logit_weights = np.zeros(N)
    logit_weights[kinds == "logit"] = probs[top].double().cpu().numpy()
    if prune_graph:
        keep, edge_keep, node_inf = prune(adjacency, logit_weights, kinds, node_threshold=node_threshold,
                                          edge_threshold=edge_threshold)
    else:
        node_inf = influence(normalize_rows(adjacency), logit_weights)
        keep, edge_keep = np.ones(N, bool), adjacency != 0
    nodes, edges = _tables(nodes.assign(input=value, influence=node_inf, kept=keep), adjacency, edge_keep, bias)
    counts = {f"n_{k}s": int((kinds == k).sum()) for k in ("feature", "error", "input", "logit")}
    return AttributionGraph(nodes, edges, adjacency, graph_scores(adjacency, logit_weights, kinds),
                            last[top].double().cpu().numpy(),
                            {**counts, "prompt": prompt, "token_ids": tokens.tolist(), "pruned": prune_graph})


def logit_shares(graph: AttributionGraph) -> dict:
    """Where the logits' direct attribution comes from: the share of the logit nodes' absolute incoming edge weight
    (each logit weighted by its probability) from input, feature and error nodes (``direct_input``,
    ``direct_feature``, ``direct_error``, summing to 1), and the same split of the total influence on the logits
    through every path (``influence_input``, ``influence_feature``, ``influence_error``)."""
    kinds = graph.nodes.kind.to_numpy()[:graph.adjacency.shape[0]]
    logit = kinds == "logit"
    w = graph.nodes.activation.to_numpy()[:len(kinds)][logit]
    rows = np.abs(graph.adjacency[logit])
    rows = rows / np.maximum(rows.sum(1, keepdims=True), 1e-30) * w[:, None]
    direct = {k: rows[:, kinds == k].sum() for k in ("input", "feature", "error")}
    inf = graph.nodes.influence.to_numpy()[:len(kinds)]
    total = {k: inf[kinds == k].sum() for k in ("input", "feature", "error")}
    out = {f"direct_{k}": float(v / max(sum(direct.values()), 1e-30)) for k, v in direct.items()}
    out.update({f"influence_{k}": float(v / max(sum(total.values()), 1e-30)) for k, v in total.items()})
    return out


def input_influence(graph: AttributionGraph) -> pd.DataFrame:
    """The input nodes' influence on the logits by code column (``feature``; -1 for a model without a code) summed
    over positions, and its share of all input influence: which bits of the barcode the prediction rests on."""
    inp = graph.nodes[graph.nodes.kind == "input"]
    df = inp.groupby("feature", as_index=False).influence.sum()
    df["share"] = df.influence / max(df.influence.sum(), 1e-30)
    return df.rename(columns={"feature": "code_column"})


__all__ = ["AttributionGraph", "attribution_graph", "logit_shares", "input_influence"]

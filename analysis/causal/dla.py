"""Direct logit attribution: how much each component writes, straight into the logit difference, at the final position."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis.engine.effects import check_eval
from analysis.engine.hooks import module_hooks
from analysis.errors import AnalysisError
from analysis.pairs import PairBatch, make_pairs
from analysis.stats import t_intervals
from analysis.engine import names as hooknames

#: The components whose values sum to the logit difference (head rows: those with ``pos`` NA).
PARTITIONS = {"layer": ("embed", "attn", "mlp", "ln_final_bias"),
              "head": ("embed", "head", "attn_bias", "mlp", "ln_final_bias")}
#: The prompt of each pair :func:`~analysis.causal.dla.direct_logit_attribution` attributes.
PROMPTS = ("clean", "corrupt")
#: Elements of one layer's attention pattern ``[rows, heads, T, T]`` that a ``by_position`` forward may hold (fp32:
#: 1 GiB); the rows per forward shrink below ``max_batch`` to stay within it (at least one row).
PATTERN_BUDGET = 1 << 28


def prompt_batch(model, data) -> PairBatch:
    """A :class:`~analysis.pairs.PairBatch` of what :func:`~analysis.causal.dla.direct_logit_attribution` takes: pairs
    (anything :func:`analysis.pairs.make_pairs` takes) or prompts - dicts ``{"prompt", "answer", "wrong"}`` (a prompt is
    then both the clean and the corrupt prompt of its pair)."""
    if isinstance(data, PairBatch):
        return data
    items = [data] if isinstance(data, dict) else data
    if isinstance(items, (list, tuple)) and items and all(isinstance(d, dict) and "prompt" in d for d in items):
        items = [dict(clean=d["prompt"], corrupt=d["prompt"], answer=d.get("answer"), wrong=d.get("wrong"))
                 for d in items]
    return make_pairs(model, items)


def direct_logit_attribution(model, pairs, *, prompt: str = "clean", by_position: bool = False,
                             per_pair: bool = False, max_batch: int = 256, progress: bool = False) -> pd.DataFrame:
    """Direct logit attribution of the logit difference (answer - wrong) at the final position of each ``prompt``
    (``clean`` or ``corrupt``) of ``pairs``; see the module docstring for the rows and conventions."""
    check_eval(model)
    if prompt not in PROMPTS:
        raise AnalysisError(f"prompt must be 'clean' or 'corrupt', got {prompt!r}")
    batch = prompt_batch(model, pairs)
    tokens = batch.clean if prompt == "clean" else batch.corrupt
    n, T = len(batch), tokens.shape[1]
    step = max(1, max_batch)
    if by_position:  # explicit attention holds one layer's [rows, heads, T, T] pattern at a time
        step = max(1, min(step, PATTERN_BUDGET // (model.cfg.n_heads * T * T)))
    parts, lds = [], []
    for c in tqdm(range(0, n, step), desc="direct logit attribution", unit="chunk", disable=not progress,
                  leave=False):
        rows = slice(c, c + step)
        with torch.no_grad():
            labels, values, ld = _attribute(model, tokens[rows], batch.answer[rows], batch.wrong[rows], by_position)
        parts.append(values)
        lds.append(ld)
    values = np.concatenate(parts, axis=1)  # [components, pairs]
    ld = np.concatenate(lds)
    frame = pd.DataFrame(labels, columns=["component", "label", "layer", "head", "pos"])
    for col in ("layer", "head", "pos"):
        frame[col] = frame[col].astype("Int64")
    err = 0.0
    for comps in PARTITIONS.values():
        keep = frame.component.isin(comps).to_numpy() & frame["pos"].isna().to_numpy()
        err = max(err, float(np.abs(values[keep].sum(0) - ld).max()))
    ld_mean, ld_lo, ld_hi = t_intervals(ld[None])
    attrs = dict(logit_diff=float(ld_mean[0]), logit_diff_lo=float(ld_lo[0]), logit_diff_hi=float(ld_hi[0]),
                 max_sum_error=err, prompt=prompt, n_pairs=n, n_layers=model.cfg.n_layers, n_heads=model.cfg.n_heads,
                 n_pos=int(tokens.shape[1]), str_tokens=_str_tokens(model, tokens[0]),
                 interface=model.cfg.interface, by_position=bool(by_position))
    if per_pair:
        out = frame.iloc[np.repeat(np.arange(len(frame)), n)].reset_index(drop=True)
        out["pair"] = np.tile(np.arange(n), len(frame))
        out["value"] = values.reshape(-1)
    else:
        out = frame.copy()
        out["value"], out["value_lo"], out["value_hi"] = t_intervals(values)
        out["n"] = n
    out.attrs.update(attrs)
    return out


def _final_position_cache(model, tokens, by_position: bool) -> tuple[dict, torch.Tensor]:
    """``(cache, resid)``: the writes of the embedding, every head's ``z`` and every MLP at the final position (with
    ``by_position``, each head's pattern row of the final query and its values at every key), and the final
    residual stream."""
    L = model.cfg.n_layers
    # keep the final query position only (the pattern: its row; the values: every key position)
    last = {"hook_embed": (slice(None), -1)}
    for layer in range(L):
        last[hooknames.attn(layer, "z")] = last[hooknames.mlp_out(layer)] = (slice(None), -1)
        if by_position:  # hooking the pattern switches that layer to explicit attention
            last[hooknames.attn(layer, "pattern")] = (slice(None), slice(None), -1)
            last[hooknames.attn(layer, "v")] = (slice(None),)
    cache = {}

    def keep(name, index):
        return lambda mod, inp, out: cache.__setitem__(name, out[index].detach())

    with module_hooks(model, [(name, keep(name, index)) for name, index in last.items()]):
        resid = model(tokens, stop_at_layer=L)
    return cache, resid


def _readout_direction(model, resid, answer, wrong):
    """``(ld, g, diff)``: the model's own logit differences, the answer-minus-wrong direction seen through the final
    norm at its frozen per-token scale (``[n, d_model]``), and the plain unembedding difference."""
    seen = {}  # the final norm's scale as the model computes it, on the final position only (the real readout)
    with module_hooks(model, [("ln_final.hook_scale", lambda mod, inp, out: seen.__setitem__("scale", out))]):
        logits = model.unembed(model.ln_final(resid[:, -1])).double()
    ar = torch.arange(len(resid), device=logits.device)
    ld = (logits[ar, answer] - logits[ar, wrong]).cpu().numpy()
    W_U = model.unembed.weight.double()  # [vocab, d_model]
    diff = W_U[answer] - W_U[wrong]  # [n, d_model]
    norm = model.ln_final
    g = diff * norm.w.double()
    if hasattr(norm, "b"):  # LayerNorm: the mean subtraction is linear; centring the direction is the same
        g = g - g.mean(-1, keepdim=True)
    g = g / seen["scale"].double()  # [n, d_model], the frozen per-token scale
    return ld, g, diff


def _layer_terms(model, layer: int, cache: dict, g, by_position: bool) -> tuple[list, list]:
    """The row labels and values of one layer: each head (and, ``by_position``, each head by key position), the
    output bias, the attention total and the MLP."""
    cfg = model.cfg
    H, dh = cfg.n_heads, cfg.d_head
    labels, values = [], []
    attn = model.blocks[layer].attn
    W_O = attn.o_proj.weight.double().view(cfg.d_model, H, dh)  # [d_model, head, d_head]
    g_h = torch.einsum("nd,dhe->nhe", g, W_O)  # the direction seen from each head's z
    z = cache[hooknames.attn(layer, "z")].double()  # [n, head, d_head]
    heads = (z * g_h).sum(-1)  # [n, head]
    if by_position:
        p = cache[hooknames.attn(layer, "pattern")].double()  # [n, head, key]
        v = cache[hooknames.attn(layer, "v")].double()  # [n, key, kv_head, d_head]
        v = v.repeat_interleave(H // attn.n_kv, dim=2)
        by_pos = p * torch.einsum("nkhe,nhe->nhk", v, g_h)  # [n, head, key]
    for h in range(H):
        labels.append(("head", f"L{layer}H{h}", layer, h, None))
        values.append(heads[:, h])
        if by_position:
            for k in range(by_pos.shape[-1]):
                labels.append(("head", f"L{layer}H{h}", layer, h, k))
                values.append(by_pos[:, h, k])
    total = heads.sum(-1)
    if attn.o_proj.bias is not None:
        b = (attn.o_proj.bias.double()[None] * g).sum(-1)
        labels.append(("attn_bias", f"L{layer}.attn_b", layer, None, None))
        values.append(b)
        total = total + b
    labels.append(("attn", f"L{layer}.attn", layer, None, None))
    values.append(total)
    labels.append(("mlp", f"L{layer}.mlp", layer, None, None))
    values.append((cache[hooknames.mlp_out(layer)].double() * g).sum(-1))
    return labels, values


def _attribute(model, tokens, answer, wrong, by_position):
    """(row labels, values [components, pairs] float64, the model's own logit differences [pairs]) of one chunk."""
    cache, resid = _final_position_cache(model, tokens, by_position)
    ld, g, diff = _readout_direction(model, resid, answer, wrong)
    labels, values = [("embed", "embed", None, None, None)], [(cache["hook_embed"].double() * g).sum(-1)]
    for layer in range(model.cfg.n_layers):
        layer_labels, layer_values = _layer_terms(model, layer, cache, g, by_position)
        labels += layer_labels
        values += layer_values
    norm = model.ln_final
    if hasattr(norm, "b"):
        labels.append(("ln_final_bias", "ln_final", None, None, None))
        values.append((norm.b.double()[None] * diff).sum(-1))
    labels = [tuple(pd.NA if v is None else v for v in row) for row in labels]
    return labels, torch.stack(values).cpu().numpy(), ld


def partition(df: pd.DataFrame, unit: str = "head") -> pd.DataFrame:
    """The rows of a result whose values sum to the logit difference: :data:`~analysis.causal.dla.PARTITIONS`
    ``[unit]``, head rows without a position."""
    if unit not in PARTITIONS:
        raise AnalysisError(f"unit must be one of {list(PARTITIONS)}, got {unit!r}")
    return df[df.component.isin(PARTITIONS[unit]) & df["pos"].isna()]


def _str_tokens(model, ids):
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return [str(int(i)) for i in ids]
    return [tok.decode([int(i)], skip_special_tokens=False) for i in ids]


__all__ = ["direct_logit_attribution", "partition", "prompt_batch", "PARTITIONS"]

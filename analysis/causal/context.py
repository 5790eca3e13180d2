"""Context use and segmentation: how much does each variant lean on context, and on how its text is split?

The study's explanation of the fixed-code gap is that a frozen table cannot smooth over how text is split into
tokens, so attention must do more of the disambiguation. Three measurements per checkpoint:

- :func:`context_curve`: next-token loss and accuracy at the same positions (the last ``positions`` predictions of
  each validation window) when the model sees only the last ``k`` tokens, for each ``k`` (``k = None``: the whole
  window, the model as used). Means over windows with Student-t 95% intervals.
- :func:`component_shares`: the next-token loss increase when the attention output or the MLP output of each layer
  is mean-ablated (:func:`analysis.causal.ablation.ablation`), and each one's share of the total over all of them.
- :func:`segmentation_cost`: the loss of the same text under an alternative segmentation - words the tokenizer
  writes as one token written instead as two smaller pieces of the same tokenizer - in nats per split word, beside
  the loss of those words under the default segmentation. A tokenizer without smaller pieces of its words (the
  word-level tokenizer of the tiny recipe) has no alternative segmentation: refused.

What these do NOT establish: a steeper context curve shows a variant's predictions depend more on context, not that
the input table is the reason; ablation shares measure damage on removal, which other paths may hide or inflate;
segmentation costs mix the model's robustness with how rare the alternative pieces were in training.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis.engine.effects import check_eval
from analysis.stats import t_intervals
from analysis.errors import AnalysisError

DEFAULT_KS = (1, 2, 4, 8, 16, 32)


@torch.no_grad()
def context_curve(model, data=None, *, ks=DEFAULT_KS, positions: int = 32, tokens: int = 16384,
                  max_batch: int = 256, progress: bool = False) -> pd.DataFrame:
    """One row per ``k`` (and ``k = NaN`` for the full window): ``k, loss, accuracy`` with ``_lo``/``_hi``."""
    from analysis.corpus import corpus_tokens

    check_eval(model)
    x = data if isinstance(data, torch.Tensor) else corpus_tokens(model, data, tokens=tokens)
    N, T = x.shape
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise AnalysisError(f"context lengths must be positive integers, got {ks}")
    if not 1 <= positions <= T - 1:
        raise AnalysisError(f"positions must be in 1..{T - 1} (the windows have {T} tokens)")
    ks = [k for k in ks if k <= T - positions]  # every measured position has at least k tokens before it
    if not ks:
        raise AnalysisError(f"no context length fits: windows of {T} tokens with {positions} measured positions leave "
                            f"at most {T - positions} tokens of context")
    device = model.unembed.weight.device
    first = T - 1 - positions  # predictions at positions first..T-2 (targets first+1..T-1)
    rows = []
    for k in tqdm([None] + ks, desc="context lengths", unit="k", disable=not progress, leave=False):
        losses, hits = [], []
        if k is None:
            for i in range(0, N, max_batch):
                xb = x[i:i + max_batch].to(device)
                lp = torch.log_softmax(model(xb)[:, first:T - 1].float(), -1)
                tgt = xb[:, first + 1:]
                losses.append(-lp.gather(-1, tgt[..., None])[..., 0].mean(1).cpu())
                hits.append((lp.argmax(-1) == tgt).float().mean(1).cpu())
        else:
            win = x.unfold(1, k + 1, 1)[:, first - k + 1:T - k]  # [N, positions, k + 1]: k inputs and the target
            flat = win.reshape(-1, k + 1)
            loss_flat, hit_flat = [], []
            for i in range(0, len(flat), max_batch * max(1, 64 // k)):
                wb = flat[i:i + max_batch * max(1, 64 // k)].to(device)
                lp = torch.log_softmax(model(wb[:, :-1])[:, -1].float(), -1)
                loss_flat.append(-lp.gather(-1, wb[:, -1:])[:, 0].cpu())
                hit_flat.append((lp.argmax(-1) == wb[:, -1]).float().cpu())
            losses.append(torch.cat(loss_flat).view(N, positions).mean(1))
            hits.append(torch.cat(hit_flat).view(N, positions).mean(1))
        row = {"k": np.nan if k is None else k}
        for name, parts in (("loss", losses), ("accuracy", hits)):
            m, lo, hi = t_intervals(torch.cat(parts).numpy()[None, :])
            row.update({name: float(m[0]), f"{name}_lo": float(lo[0]), f"{name}_hi": float(hi[0])})
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(n_windows=int(N), window=int(T), positions=int(positions))
    return df


def component_shares(model, data=None, *, tokens: int = 8192, how: str = "mean", progress: bool = False):
    """One row per (component, layer): the loss change when that layer's ``attn`` or ``mlp`` output is ablated
    (``how``), its 95% interval, and ``share`` of the sum over every row."""
    from analysis.causal.ablation import ablation

    frames = []
    for component in ("attn", "mlp"):
        s = ablation(model, data, component=component, how=how, tokens=tokens, progress=progress).summary
        frames.append(s.assign(component=component))
    df = pd.concat(frames, ignore_index=True)
    df = df[["component", "layer", "delta_loss", "delta_loss_lo", "delta_loss_hi"]].copy()
    total = df.delta_loss.clip(lower=0).sum()
    df["share"] = df.delta_loss.clip(lower=0) / total if total > 0 else np.nan
    return df


def _alternatives(tok, token_id: int) -> list[int] | None:
    """The ids of one token's piece split into two pieces of the same tokenizer (the cut closest to the middle
    whose halves are both tokens), or None when no such split exists. Pieces are the tokenizer's own strings, so
    the two ids decode to the same text as the one."""
    piece = tok.id_to_token(token_id)
    unk = tok.token_to_id("<|unk|>")
    if piece is None or len(piece) < 2:
        return None
    for cut in sorted(range(1, len(piece)), key=lambda c: abs(c - len(piece) / 2)):
        a, b = tok.token_to_id(piece[:cut]), tok.token_to_id(piece[cut:])
        if a is not None and b is not None and unk not in (a, b):
            return [a, b]
    return None


@torch.no_grad()
def segmentation_cost(model, texts, *, max_words: int = 2000) -> pd.DataFrame:
    """Per split word: the nats the model assigns the word under the default segmentation (one token) and under
    the alternative (two pieces), in the same context; summary in ``attrs``."""
    tok = model.tokenizer
    if tok is None:
        raise AnalysisError("segmentation needs the checkpoint's tokenizer")
    rows = []
    device = model.unembed.weight.device
    for ti, text in enumerate(texts):
        enc = tok.encode(text, add_special_tokens=False)
        ids = enc.ids[:model.cfg.context - 1]
        for j in range(1, len(ids)):
            alt = _alternatives(tok, ids[j])
            if alt is None:
                continue
            ctx = ids[:j]
            # one forward over the context and the first piece gives both segmentations' log-probabilities:
            # position j-1 predicts the whole token or the first piece, position j the second piece
            lp = torch.log_softmax(model(torch.tensor([ctx + alt[:1]], device=device))[0].float(), -1)
            one = lp[-2, ids[j]]
            two = lp[-2, alt[0]] + lp[-1, alt[1]]
            rows.append({"text": ti, "pos": j, "word": tok.decode([ids[j]]), "default_nats": float(-one),
                         "split_nats": float(-two)})
            if len(rows) >= max_words:
                break
        if len(rows) >= max_words:
            break
    if not rows:
        raise AnalysisError("no word of the text has an alternative segmentation into two smaller pieces of this "
                            "tokenizer (a word-level tokenizer has none); use a BPE checkpoint")
    df = pd.DataFrame(rows)
    df["extra_nats"] = df.split_nats - df.default_nats
    m, lo, hi = t_intervals(df.extra_nats.to_numpy()[None, :])
    df.attrs.update(n_words=len(df), extra_nats=float(m[0]), extra_nats_lo=float(lo[0]), extra_nats_hi=float(hi[0]))
    return df


__all__ = ["context_curve", "component_shares", "segmentation_cost", "DEFAULT_KS"]

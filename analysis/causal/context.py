"""Context use and segmentation: how much does each variant lean on context, and on how its text is split?"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis.causal.components import component_effects, component_shares, hooked
from analysis.engine.effects import check_eval
from analysis.errors import AnalysisError
from analysis.stats import t_intervals
from analysis.engine import names as hooknames

#: The context lengths ``k`` (tokens) :func:`~analysis.causal.context.context_curve` measures by default.
DEFAULT_KS = (1, 2, 4, 8, 16, 32)
#: The context restrictions of :func:`~analysis.causal.context.context_curve`: a sliding-window attention mask in every
#: layer, or the last ``k`` tokens run alone (see the module docstring).
MASKS = ("window", "crop")
#: Attention scores materialised per forward under a window mask (batch x heads x T x T floats).
SCORE_BUDGET = 1 << 25


def window_hooks(model, k: int) -> dict:
    """``{hook name: function}`` for every layer's ``attn.hook_attn_scores``: the scores of keys ``k`` or more
    positions before the query set to -inf, so each query attends to its last ``k`` positions, itself included, at
    their true positions (the causal mask already hides later keys). Attach with
    :func:`~analysis.causal.components.hooked`; hooking the scores makes the model take its explicit attention path."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise AnalysisError(f"a window of k tokens needs an integer k >= 1, got {k!r}")

    def mask(scores):
        tq, tk = scores.shape[-2:]
        q = torch.arange(tk - tq, tk, device=scores.device)  # query positions (after any cached past)
        far = q[:, None] - torch.arange(tk, device=scores.device)[None, :] >= k
        return scores.masked_fill(far, float("-inf"))

    return {hooknames.attn(i, "attn_scores"): mask for i in range(model.cfg.n_layers)}


def _masks(mask) -> list[str]:
    masks = [mask] if isinstance(mask, str) else list(mask)
    bad = [m for m in masks if m not in MASKS]
    if not masks or bad:
        raise AnalysisError(f"unknown context mask {bad[0] if bad else mask!r}; use one or more of {', '.join(MASKS)}")
    return list(dict.fromkeys(masks))


def _scored(lp: torch.Tensor, tgt: torch.Tensor):
    """Per-row mean loss and accuracy of log-probabilities ``[rows, pos, vocab]`` against targets ``[rows, pos]``."""
    return -lp.gather(-1, tgt[..., None])[..., 0].mean(1).cpu(), (lp.argmax(-1) == tgt).float().mean(1).cpu()


@torch.no_grad()
def context_curve(model, data=None, *, ks=DEFAULT_KS, positions: int = 32, tokens: int = 16384, mask=MASKS,
                  max_batch: int = 256, progress: bool = False) -> pd.DataFrame:
    """One row per (``mask``, ``k``) and one for the whole window (``mask = "none"``, ``k = NaN``): ``mask, k,
    reach, loss, accuracy`` with ``_lo``/``_hi``. ``mask``: ``"window"``, ``"crop"`` or both (see the module
    docstring). Only the ``k`` that leave every measured prediction ``k`` tokens are kept."""
    from analysis.corpus import corpus_tokens

    check_eval(model)
    masks = _masks(mask)
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
    L = model.cfg.n_layers
    runs = [("none", None)] + [(m, k) for m in masks for k in ks]
    rows = []
    for m, k in tqdm(runs, desc="context lengths", unit="k", disable=not progress, leave=False):
        losses, hits = [], []
        if m in ("none", "window"):
            step = max_batch if m == "none" else max(1, min(max_batch, SCORE_BUDGET // (model.cfg.n_heads * T * T)))
            with hooked(model, {} if m == "none" else window_hooks(model, k)):
                for i in range(0, N, step):
                    xb = x[i:i + step].to(device)
                    lo, hi = _scored(torch.log_softmax(model(xb)[:, first:T - 1].float(), -1), xb[:, first + 1:])
                    losses.append(lo)
                    hits.append(hi)
        else:  # crop: the k-token window alone (the same function as masking earlier keys at the true positions)
            win = x.unfold(1, k + 1, 1)[:, first - k + 1:T - k]  # [N, positions, k + 1]: k inputs and the target
            flat = win.reshape(-1, k + 1)
            step = max_batch * max(1, 64 // k)
            lf, hf = [], []
            for i in range(0, len(flat), step):
                wb = flat[i:i + step].to(device)
                lo, hi = _scored(torch.log_softmax(model(wb[:, :-1])[:, -1:].float(), -1), wb[:, -1:])
                lf.append(lo)
                hf.append(hi)
            losses.append(torch.cat(lf).view(N, positions).mean(1))
            hits.append(torch.cat(hf).view(N, positions).mean(1))
        reach = np.nan if k is None else (k if m == "crop" else L * (k - 1) + 1)
        row = {"mask": m, "k": np.nan if k is None else k, "reach": reach}
        for name, parts in (("loss", losses), ("accuracy", hits)):
            mean, lo, hi = t_intervals(torch.cat(parts).numpy()[None, :])
            row.update({name: float(mean[0]), f"{name}_lo": float(lo[0]), f"{name}_hi": float(hi[0])})
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(n_windows=int(N), window=int(T), positions=int(positions), n_layers=int(L))
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


__all__ = ["context_curve", "window_hooks", "hooked", "component_effects", "component_shares", "segmentation_cost",
           "DEFAULT_KS", "MASKS"]

"""Representational similarity across layers and variants: linear CKA and its debiased form."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from analysis.readouts.activations import collect
from analysis.corpus import corpus_tokens
from analysis.errors import AnalysisError


def _as64(x) -> np.ndarray:
    a = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    if a.ndim != 2:
        raise AnalysisError(f"activations must be [n_tokens, width], got shape {a.shape}")
    return a


def _pair(x, y):
    x, y = _as64(x), _as64(y)
    if x.shape[0] != y.shape[0]:
        raise AnalysisError(f"CKA compares the same tokens: {x.shape[0]} rows against {y.shape[0]}")
    return x, y


def linear_cka(x, y) -> float:
    """Linear CKA of ``x`` ``[n, p]`` and ``y`` ``[n, q]`` (rows: the same tokens)."""
    x, y = _pair(x, y)
    x, y = x - x.mean(0), y - y.mean(0)
    cross = np.linalg.norm(x.T @ y) ** 2
    denom = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    return float(cross / denom) if denom > 0 else float("nan")


def _hsic1(x, y) -> float:
    """Unbiased HSIC of the linear kernels of ``x`` and ``y`` (Song et al., 2012), without forming ``n x n``."""
    n = x.shape[0]
    kd, ld = (x * x).sum(1), (y * y).sum(1)  # the Gram diagonals
    tr_kl = np.linalg.norm(x.T @ y) ** 2 - float(kd @ ld)  # tr(K~ L~), K~ = K with a zero diagonal
    k1 = x @ x.sum(0) - kd  # K~ 1
    l1 = y @ y.sum(0) - ld
    return (tr_kl + k1.sum() * l1.sum() / ((n - 1) * (n - 2)) - 2 * float(k1 @ l1) / (n - 2)) / (n * (n - 3))


def debiased_cka(x, y) -> float:
    """Debiased linear CKA: unbiased HSIC(x, y) / sqrt(HSIC(x, x) HSIC(y, y)); needs at least 4 tokens."""
    x, y = _pair(x, y)
    if x.shape[0] < 4:
        raise AnalysisError(f"debiased CKA needs at least 4 tokens, got {x.shape[0]}")
    x, y = x - x.mean(0), y - y.mean(0)  # not needed by the estimator; improves its numerics
    denom = _hsic1(x, x) * _hsic1(y, y)
    return float(_hsic1(x, y) / np.sqrt(denom)) if denom > 0 else float("nan")


def layer_activations(model, tokens: torch.Tensor, hooks=None, *, max_batch: int = 64,
                      progress: bool = False) -> dict[str, np.ndarray]:
    """``{hook: [n_sequences * seq_len, width]}`` (float32) over token ids ``[n, T]``, in order of sequence then
    position (:func:`analysis.readouts.activations.collect`, whose default hooks are the input, the residual stream entering
    every block and the final norm)."""
    return collect(model, tokens, hooks=hooks, max_batch=max_batch, progress=progress).acts


def cka_matrix(model_a, model_b, data=None, *, hooks=None, tokens: int = 8192, max_batch: int = 64,
               skip_first: bool = False, progress: bool = False) -> pd.DataFrame:
    """CKA between every hook point of ``model_a`` and every hook point of ``model_b`` on the same token windows
    (``data`` as :func:`analysis.corpus.corpus_tokens`, tokenised by ``model_a``; the two models must share a
    vocabulary). Columns: ``hook_a, layer_a, hook_b, layer_b, cka, debiased``; ``layer`` is the hook's depth index
    (0 = ``hook_embed``). ``skip_first``: leave each window's position 0 (an attention sink in a trained model) out
    of the comparison (:mod:`analysis.readouts.references` explains why it does so by default; here the default
    keeps every position, as before)."""
    va, vb = model_a.cfg.vocab_size, model_b.cfg.vocab_size
    ta, tb = getattr(model_a, "tokenizer", None), getattr(model_b, "tokenizer", None)
    if va != vb or (ta is not None and tb is not None and ta.get_vocab() != tb.get_vocab()):
        raise AnalysisError("the two checkpoints have different tokenizers: CKA needs the same tokens in both")
    x = corpus_tokens(model_a, data, tokens=tokens)
    acts_a = layer_activations(model_a, x, hooks, max_batch=max_batch, progress=progress)
    acts_b = layer_activations(model_b, x, hooks, max_batch=max_batch, progress=progress)
    if skip_first:
        if x.shape[1] < 2:
            raise AnalysisError("windows of one token leave nothing once position 0 is skipped")
        keep = np.arange(x.numel()) % x.shape[1] != 0
        acts_a, acts_b = ({h: a[keep] for h, a in acts.items()} for acts in (acts_a, acts_b))
    rows = []
    for i, (ha, a) in enumerate(acts_a.items()):
        for j, (hb, b) in enumerate(acts_b.items()):
            rows.append({"hook_a": ha, "layer_a": i, "hook_b": hb, "layer_b": j, "cka": linear_cka(a, b),
                         "debiased": debiased_cka(a, b)})
    df = pd.DataFrame(rows)
    df.attrs.update(n_tokens=int(x.numel()) - int(skip_first) * x.shape[0], skip_first=skip_first,
                    interface_a=model_a.cfg.interface, interface_b=model_b.cfg.interface)
    return df


__all__ = ["linear_cka", "debiased_cka", "layer_activations", "cka_matrix"]

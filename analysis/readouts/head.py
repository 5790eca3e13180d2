"""Head geometry: what the learned output head holds, now that the input can no longer learn anything.

Per checkpoint (rows ``variant, measure, basis, value``, and ``lo``/``hi`` where an interval applies):

- ``bits_r2``: how much of each head row ``W_U[t]`` is linearly predictable from token ``t``'s code bits - a ridge
  regression (``alpha``, intercept) from the 16 bits to the ``d_model`` row, fitted on a random 80% of the tokens and
  scored on the rest (variance-weighted R^2 over the row's coordinates), mean over ``splits`` random splits, with
  their range as ``lo``/``hi``. ``basis``: ``canonical`` (the token id's bits, every variant) and ``own code`` (the bits the model
  itself reads; equal to canonical for the canonical variant, a GF(2) recoding of them for gf2);
- with a reference (the learned variant's input table ``W_E``): ``cka_to_learned_input`` (linear CKA between the
  head rows and the learned input rows over the same tokens), ``nn_overlap`` (for each token, the share of its k
  nearest neighbours by cosine that the two tables agree on, mean over tokens) and ``nn_overlap_chance`` (k /
  (vocab - 1), what unrelated tables share).

Rows are restricted to the ids the tokenizer uses (all of ``vocab_size``). What this does NOT establish: a head row
that bits predict poorly may still be a nonlinear function of them; similarity to the learned input table says the
two tables order tokens alike, not that they play the same role.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from fixedid.codes import ids_to_bits

from analysis.stats import t_interval
from analysis.errors import AnalysisError
from analysis.readouts.similarity import linear_cka


def _ridge_r2(X: np.ndarray, Y: np.ndarray, alpha: float, splits: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(splits):
        test = rng.random(len(X)) < 0.2
        xm, ym = X[~test].mean(0), Y[~test].mean(0)
        A, B = X[~test] - xm, Y[~test] - ym
        W = np.linalg.solve(A.T @ A + alpha * np.eye(A.shape[1]), A.T @ B)
        pred = (X[test] - xm) @ W + ym
        ss_res = ((Y[test] - pred) ** 2).sum()
        ss_tot = ((Y[test] - Y[test].mean(0)) ** 2).sum()
        out.append(1 - ss_res / ss_tot)
    return np.array(out)


def _own_bits(model) -> np.ndarray | None:
    if not model.cfg.has_code:
        return None
    c = model.cfg
    code = model.embed.code.detach().cpu().numpy()  # [vocab, n_bits] in the configured order, values per value_map
    return (code > code.min()).astype(float) if c.value_map == "01" else (code > 0).astype(float)


def _nearest(rows: np.ndarray, k: int) -> np.ndarray:
    z = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    sim = z @ z.T
    np.fill_diagonal(sim, -np.inf)
    return np.argpartition(-sim, k, axis=1)[:, :k]


def head_geometry(model, reference=None, *, alpha: float = 1.0, splits: int = 5, k: int = 10,
                  seed: int = 0) -> pd.DataFrame:
    """The head-geometry rows of one checkpoint (see the module docstring); ``reference``: a learned-interface
    model of the same tokenizer whose input table the head is compared with."""
    W = model.unembed.weight.detach().float().cpu().numpy()
    V = W.shape[0]
    if V < 10:
        raise AnalysisError(f"a vocabulary of {V} tokens is too small for head geometry")
    rows = []
    bases = {"canonical": ids_to_bits(np.arange(V), model.cfg.n_bits).astype(float)}
    own = _own_bits(model)
    if own is not None:
        bases["own code"] = own
    for basis, X in bases.items():
        X = X[:, X.std(0) > 0]  # constant bits (ids above the vocabulary) carry nothing
        r2 = _ridge_r2(X, W, alpha, splits, seed)
        rows.append({"measure": "bits_r2", "basis": basis, "value": float(r2.mean()), "lo": float(r2.min()),
                     "hi": float(r2.max())})
    if reference is not None:
        if reference.cfg.is_fixed:
            raise AnalysisError("the reference must be a learned-interface checkpoint (its input table is compared)")
        if reference.cfg.vocab_size != V:
            raise AnalysisError(f"the reference has {reference.cfg.vocab_size} tokens but this model {V}: they "
                                "need the same tokenizer")
        E = reference.embed.W_E.detach().float().cpu().numpy()
        rows.append({"measure": "cka_to_learned_input", "basis": "W_U vs learned W_E",
                     "value": float(linear_cka(torch.from_numpy(W), torch.from_numpy(E)))})
        kk = min(k, V - 2)
        a, b = _nearest(W, kk), _nearest(E, kk)
        overlap = np.array([len(set(x) & set(y)) / kk for x, y in zip(a, b)])
        m, lo, hi = t_interval(overlap)
        rows.append({"measure": "nn_overlap", "basis": f"W_U vs learned W_E, k={kk}", "value": m, "lo": lo,
                     "hi": hi})
        rows.append({"measure": "nn_overlap_chance", "basis": f"k={kk}", "value": kk / (V - 1)})
    df = pd.DataFrame(rows, columns=["measure", "basis", "value", "lo", "hi"])
    df.attrs.update(vocab_size=V, interface=model.cfg.interface)
    return df


__all__ = ["head_geometry"]

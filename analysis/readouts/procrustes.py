"""Orthogonal Procrustes similarity of two representations of the same tokens: a second measure beside CKA.

For activations ``X`` ``[n, p]`` and ``Y`` ``[n, q]`` of the same ``n`` tokens, each centred (column means removed)
and scaled to unit Frobenius norm (``Xn``, ``Yn``):

- ``procrustes_similarity = ||Xn^T Yn||_*`` (the nuclear norm: the sum of the singular values), in ``[0, 1]``;
- ``procrustes_distance = min_Q ||Xn Q - Yn||_F = sqrt(2 - 2 * similarity)``, in ``[0, sqrt(2)]``, the minimum over
  orthogonal ``Q`` (the narrower side padded with zero columns when ``p != q``; Schoenemann, 1966), so
  ``similarity = 1 - distance^2 / 2``. ``arccos(similarity)`` is the angular shape metric of Williams et al. (2021).

Similarity 1 means ``Y`` is a rotation (or reflection) of ``X`` up to a shift and an isotropic scale. Unlike CKA,
which weighs directions by their variance squared, Procrustes weighs them by their variance, so a few high-variance
directions dominate it less; like linear CKA it is biased upwards for few tokens and wide layers (two independent
Gaussian matrices have similarity well above 0), which is why :mod:`analysis.readouts.references` reads it
against a row-permutation null.

What it does NOT establish: that the two models use these directions the same way downstream, or anything about a
nonlinear relation between the representations.
"""

from __future__ import annotations

import numpy as np

from analysis.errors import AnalysisError
from analysis.readouts.similarity import _pair


def _unit(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    a = a - a.mean(0)
    norm = np.linalg.norm(a)
    return a / norm if norm > 0 else a


def procrustes_similarity(x, y) -> float:
    """``||Xn^T Yn||_*`` of centred, unit-Frobenius ``x`` ``[n, p]`` and ``y`` ``[n, q]`` (NaN if one is constant)."""
    x, y = _pair(x, y)
    if x.shape[0] < 2:
        raise AnalysisError(f"Procrustes similarity needs at least 2 tokens, got {x.shape[0]}")
    xn, yn = _unit(x), _unit(y)
    if not (np.any(xn) and np.any(yn)):
        return float("nan")
    return float(np.linalg.svd(xn.T @ yn, compute_uv=False).sum())


def procrustes_distance(x, y) -> float:
    """``min_Q ||Xn Q - Yn||_F`` over orthogonal ``Q``: ``sqrt(2 - 2 * procrustes_similarity(x, y))``."""
    return float(np.sqrt(max(0.0, 2.0 - 2.0 * procrustes_similarity(x, y))))


__all__ = ["procrustes_similarity", "procrustes_distance"]

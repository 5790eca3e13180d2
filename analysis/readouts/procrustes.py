"""Orthogonal Procrustes similarity of two representations of the same tokens: a second measure beside CKA."""

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

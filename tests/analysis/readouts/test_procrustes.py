"""Orthogonal Procrustes similarity: 1 for a rotated, shifted, scaled copy, and equal to what scipy's
orthogonal_procrustes leaves as the residual of the best rotation."""

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes

from analysis import AnalysisError
from analysis.readouts.procrustes import procrustes_distance, procrustes_similarity


def _unit(a):
    a = a - a.mean(0)
    return a / np.linalg.norm(a)


def test_a_rotated_shifted_scaled_copy_is_at_distance_zero():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6))
    q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    assert procrustes_similarity(x, 3.0 * x @ q + 5.0) == pytest.approx(1.0)
    assert procrustes_distance(x, 3.0 * x @ q + 5.0) == pytest.approx(0.0, abs=1e-6)
    # into a wider space: x Q with Q [6, 9] of orthonormal rows keeps every distance
    wide, _ = np.linalg.qr(rng.normal(size=(9, 6)))
    assert procrustes_similarity(x, x @ wide.T) == pytest.approx(1.0)


@pytest.mark.parametrize("q", [5, 3])
def test_the_similarity_is_what_the_best_rotation_leaves(q):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 5))
    y = np.tanh(x[:, :q] @ rng.normal(size=(q, q))) + 0.5 * rng.normal(size=(40, q))
    xn, yn = _unit(x), np.pad(_unit(y), ((0, 0), (0, 5 - q)))  # the narrower side padded with zero columns
    r, _ = orthogonal_procrustes(xn, yn)                       # argmin_R ||xn R - yn||_F over orthogonal R
    residual = np.linalg.norm(xn @ r - yn) ** 2
    assert procrustes_distance(x, y) == pytest.approx(np.sqrt(residual))
    assert procrustes_similarity(x, y) == pytest.approx(1 - residual / 2)
    assert 0 < procrustes_similarity(x, y) < 1
    assert procrustes_similarity(y, x) == pytest.approx(procrustes_similarity(x, y))  # symmetric


def test_constant_and_bad_input():
    rng = np.random.default_rng(2)
    assert np.isnan(procrustes_similarity(np.ones((10, 3)), rng.normal(size=(10, 2))))
    with pytest.raises(AnalysisError, match="same tokens"):
        procrustes_similarity(np.zeros((5, 2)), np.zeros((6, 2)))
    with pytest.raises(AnalysisError, match="at least 2"):
        procrustes_similarity(np.ones((1, 2)), np.ones((1, 2)))
    with pytest.raises(AnalysisError, match=r"\[n_tokens, width\]"):
        procrustes_similarity(np.zeros(5), np.zeros(5))

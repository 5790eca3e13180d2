"""Resampled similarity from per-window sums: every window once is the statistic itself; a resample is the statistic
of its duplicated rows (debiased CKA: the U-statistic over distinct tokens, enumerated by brute force); the
bootstrap centres on the estimate and narrows with more windows; the permutation null of debiased CKA has mean 0."""

import itertools

import numpy as np
import pytest

from analysis import AnalysisError
from analysis.readouts import resampling
from analysis.readouts.procrustes import procrustes_similarity
from analysis.readouts.resampling import Pair, Side, measures, permuted, window_counts
from analysis.readouts.similarity import debiased_cka, linear_cka


def related(rng, n, t, p, q, noise=1.0):
    x = rng.normal(size=(n, t, p))
    y = np.tanh(x[..., :q] @ rng.normal(size=(q, q))) + noise * rng.normal(size=(n, t, q))
    return x, y


def resampled(x, y, counts, via=None):
    a, b = Side(x), Side(y)
    return measures(Pair(a, b, via=via).evaluate(counts), Pair(a, a, nuclear=False, via=via).evaluate(counts),
                    Pair(b, b, nuclear=False, via=via).evaluate(counts))


def u_statistic_hsic(x, y, w):
    """Unbiased HSIC by enumeration: the mean over ordered 4-tuples of distinct tokens of
    K_ij L_ij + K_ij L_kl - 2 K_ij L_ik, a tuple weighted by the product of its tokens' multiplicities."""
    k, l_ = x @ x.T, y @ y.T
    num = den = 0.0
    for i, j, a, b in itertools.permutations(range(len(w)), 4):
        weight = w[i] * w[j] * w[a] * w[b]
        num += weight * (k[i, j] * l_[i, j] + k[i, j] * l_[a, b] - 2 * k[i, j] * l_[i, a])
        den += weight
    return num / den


@pytest.mark.parametrize("via", ["windows", "tokens"])
def test_every_window_once_is_the_statistic_itself(via):
    x, y = related(np.random.default_rng(0), 9, 7, 6, 4)
    got = resampled(x, y, np.ones((9, 1)), via)
    xf, yf = x.reshape(-1, 6), y.reshape(-1, 4)
    assert got["debiased_cka"][0] == pytest.approx(debiased_cka(xf, yf))
    assert got["linear_cka"][0] == pytest.approx(linear_cka(xf, yf))
    assert got["procrustes"][0] == pytest.approx(procrustes_similarity(xf, yf))
    a, b = Side(x), Side(y)
    point = measures(a.point(b), a.point(a), b.point(b))
    assert {k: float(v) for k, v in point.items()} == pytest.approx({k: v[0] for k, v in got.items()})


@pytest.mark.parametrize("via", ["windows", "tokens"])
def test_a_resample_is_the_statistic_of_its_duplicated_rows(via):
    n, t, p, q = 5, 2, 3, 2
    x, y = related(np.random.default_rng(1), n, t, p, q, noise=0.5)
    counts = window_counts(n, 3, seed=4)
    assert (counts.sum(0) == n).all() and counts.max() > 1  # ties, which the test is about
    got = resampled(x, y, counts, via)
    for b in range(3):
        rows = np.repeat(np.arange(n), counts[:, b].astype(int))
        xr, yr = x[rows].reshape(-1, p), y[rows].reshape(-1, q)
        assert got["linear_cka"][b] == pytest.approx(linear_cka(xr, yr))
        assert got["procrustes"][b] == pytest.approx(procrustes_similarity(xr, yr))
        # debiased: the U-statistic over distinct tokens of the original data, on raw, shifted rows
        w = np.repeat(counts[:, b], t)
        xs, ys = x.reshape(-1, p) + 3.0, y.reshape(-1, q) - 2.0
        want = u_statistic_hsic(xs, ys, w) / np.sqrt(u_statistic_hsic(xs, xs, w) * u_statistic_hsic(ys, ys, w))
        assert got["debiased_cka"][b] == pytest.approx(want)


def test_ties_count_once_so_the_bootstrap_centres_on_the_estimate():
    rng = np.random.default_rng(2)
    n, t, p = 40, 16, 64
    x, y = rng.normal(size=(n, t, p)), rng.normal(size=(n, t, p))  # independent, wide: debiasing matters
    xf, yf = x.reshape(-1, p), y.reshape(-1, p)
    counts = window_counts(n, 300, seed=0)
    boot = resampled(x, y, counts)["debiased_cka"]
    estimate = debiased_cka(xf, yf)
    spread = boot.std()
    assert abs(boot.mean() - estimate) < 0.3 * spread
    lo, hi = np.quantile(boot, [0.025, 0.975])
    assert lo < estimate < hi
    # recomputing debiased CKA on the duplicated rows counts each copy as a new token: biased upwards
    naive = [debiased_cka(x[r].reshape(-1, p), y[r].reshape(-1, p))
             for r in (np.repeat(np.arange(n), counts[:, b].astype(int)) for b in range(30))]
    assert np.mean(naive) - estimate > 5 * spread


def test_the_interval_narrows_with_more_windows():
    widths = {}
    for n in (16, 128):
        x, y = related(np.random.default_rng(3), n, 8, 6, 4)
        boot = resampled(x, y, window_counts(n, 400, seed=1))["debiased_cka"]
        lo, hi = np.quantile(boot, [0.025, 0.975])
        estimate = debiased_cka(x.reshape(-1, 6), y.reshape(-1, 4))
        assert lo <= estimate <= hi
        widths[n] = hi - lo
    assert widths[128] < widths[16] / 2  # ~ 1 / sqrt(n): 8x the windows, ~2.8x narrower


def test_the_permutation_null_of_debiased_cka_has_mean_zero():
    x, y = related(np.random.default_rng(4), 1, 7, 3, 2, noise=0.2)
    a, b = Side(x), Side(y)
    hsic = [a.point(b, np.array(perm))["hsic"] for perm in itertools.permutations(range(7))]  # all 5,040
    assert abs(np.mean(hsic)) < 1e-12 * np.abs(hsic).max()
    # sampled: debiased CKA's null centres on 0, linear CKA's on its small-sample bias, above 0
    x, y = related(np.random.default_rng(5), 20, 10, 8, 8, noise=0.2)
    a, b = Side(x), Side(y)
    null = measures(permuted(a, b, 200, seed=0), a.point(a), b.point(b))
    assert abs(null["debiased_cka"].mean()) < 3 * null["debiased_cka"].std() / np.sqrt(200)
    assert null["linear_cka"].mean() > 10 * null["linear_cka"].std() / np.sqrt(200)
    assert (measures(a.point(b), a.point(a), b.point(b))["debiased_cka"] > null["debiased_cka"]).all()


def test_counts_and_bad_input(monkeypatch):
    c = window_counts(10, 5, seed=3)
    assert c.shape == (10, 5) and (c.sum(0) == 10).all() and np.array_equal(c, window_counts(10, 5, seed=3))
    with pytest.raises(AnalysisError, match="at least 2 windows"):
        window_counts(1, 5)
    with pytest.raises(AnalysisError, match="different windows"):
        Pair(Side(np.zeros((3, 4, 2))), Side(np.zeros((3, 5, 2))))
    with pytest.raises(AnalysisError, match=r"\[n_windows, tokens, width\]"):
        Side(np.zeros((3, 4)))
    with pytest.raises(AnalysisError, match="multiplicities"):
        Pair(Side(np.ones((3, 4, 2))), Side(np.ones((3, 4, 2)))).evaluate(np.ones((4, 2)))
    monkeypatch.setattr(resampling, "MAX_BYTES", 100)
    with pytest.raises(AnalysisError, match="fewer tokens"):
        Pair(Side(np.ones((3, 4, 2))), Side(np.ones((3, 4, 5))))

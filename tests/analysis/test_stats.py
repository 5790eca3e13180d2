import math

import numpy as np
import pytest

from analysis.stats import paired_difference, t_interval, t_intervals, wilson

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
T95_DF3 = 3.182446305284263  # Student t, 3 degrees of freedom, 97.5% quantile (printed tables: 3.182)


def test_t_interval_by_hand():
    # [1, 2, 3, 4]: mean 2.5, sample s.d. sqrt(5/3), standard error sqrt(5/3)/2
    m, lo, hi = t_interval([1, 2, 3, 4])
    half = T95_DF3 * math.sqrt(5 / 3) / 2
    assert (m, lo, hi) == pytest.approx((2.5, 2.5 - half, 2.5 + half), rel=1e-12)
    assert t_interval([1.0, np.nan, 2, 3, 4]) == pytest.approx((m, lo, hi))  # non-finite values are left out
    m1, lo1, hi1 = t_interval([3.0])
    assert m1 == 3.0 and math.isnan(lo1) and math.isnan(hi1)
    assert all(math.isnan(x) for x in t_interval([]))
    rows = t_intervals(np.array([[1, 2, 3, 4], [2, 4, 6, 8]], float))
    assert rows[0] == pytest.approx([2.5, 5.0]) and rows[2][1] - rows[0][1] == pytest.approx(2 * half)
    # whole rows take a shorter path; a column of NaN sends the same values down the masked one: equal to the bit
    v = np.random.default_rng(0).normal(size=(50, 16))
    for whole, masked in zip(t_intervals(np.asfortranarray(v)), t_intervals(np.hstack([v, np.full((50, 1), np.nan)]))):
        np.testing.assert_array_equal(whole, masked)


@pytest.mark.parametrize("k,n", [(0, 10), (7, 10), (60, 64), (64, 64), (1, 3)])
def test_wilson_bounds_solve_the_score_equation(k, n):
    # the Wilson interval is {p : |k/n - p| <= z sqrt(p (1 - p) / n)}: both bounds make it an equality
    lo, hi = wilson(k, n)
    assert 0 <= lo <= k / n <= hi <= 1
    for p in (lo, hi):
        assert abs(k / n - p) == pytest.approx(Z95 * math.sqrt(p * (1 - p) / n), abs=1e-9)
    assert all(math.isnan(x) for x in wilson(0, 0))


def test_wilson_textbook_value():
    assert wilson(0, 10) == pytest.approx((0.0, 0.27753279), abs=1e-7)  # Newcombe (1998), 0/10


def test_paired_difference():
    a, b = np.array([1.0, 2.0, 3.0, 5.0, np.nan]), np.array([0.0, 0.0, 1.0, 1.0, 2.0])
    r = paired_difference(a, b)  # differences 1, 2, 2, 4: the NaN pair is dropped
    assert r["n"] == 4 and r["diff"] == pytest.approx(2.25)
    assert (r["lo"], r["hi"]) == pytest.approx(t_interval([1, 2, 2, 4])[1:]) and r["exceeds"]
    same = paired_difference([1.0, 2.0], [1.0, 2.0])
    assert same["diff"] == 0 and not same["exceeds"]
    assert not paired_difference([1.0], [0.0])["exceeds"]  # one pair has no interval


def test_paired_difference_reports_both_p_values_and_never_flags_identical_differences():
    from scipy import stats as sps

    r = paired_difference([3.0, 4.0, 6.0], [1.0, 1.0, 1.0])  # differences 2, 3, 5
    assert r["p"] == pytest.approx(sps.ttest_1samp([2, 3, 5], 0).pvalue) and r["p_sign"] == pytest.approx(0.25)
    same = paired_difference([2.0, 3.0, 4.0], [1.0, 2.0, 3.0])  # +1 on every seed: a zero-width interval
    assert same["identical"] and not same["exceeds"] and math.isnan(same["p"]) and same["p_sign"] == 0.25


def test_t_test_p_is_scipys_one_sample_t_test():
    from scipy import stats as sps

    from analysis.stats import t_test_p

    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 12, 40):
        for shift in (0.0, 0.3, 3.0):
            d = rng.normal(shift, 1.0, n)
            assert t_test_p(d) == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-10, abs=1e-300)


def _sign_flip_by_hand(d):
    # every one of the 2^n sign vectors, written out as a loop over integers' bits
    n, obs, hits = len(d), abs(sum(d) / len(d)), 0
    for mask in range(2 ** n):
        s = sum(x if (mask >> i) & 1 else -x for i, x in enumerate(d)) / n
        hits += abs(s) >= obs - 1e-12
    return hits / 2 ** n


@pytest.mark.parametrize("d", [[1.0, 2.0, 3.0], [1.0, -1.0, 2.0], [0.3, -0.1, 0.4, 0.2, 0.5], [0.0, 0.0],
                               list(np.random.default_rng(1).normal(0.3, 1, 9))])
def test_sign_flip_p_is_the_exact_permutation_p_value(d):
    from scipy import stats as sps

    from analysis.stats import sign_flip_p

    p = sign_flip_p(d)
    assert p == pytest.approx(_sign_flip_by_hand(d))
    if len(d) >= 3 and np.ptp(d) > 0:  # scipy's own sign-flip test (permutation_type="samples" on one sample)
        ref = sps.permutation_test((np.asarray(d),), np.mean, permutation_type="samples", n_resamples=np.inf,
                                   alternative="two-sided").pvalue
        assert p == pytest.approx(ref)
    assert sign_flip_p([5.0, 6.0, 7.0]) == 0.25  # 3 seeds cannot go below 2 / 8
    assert sign_flip_p([1.0] * 5) == pytest.approx(2 / 32)


def test_holm_and_bh_by_hand():
    from analysis.stats import bh, holm

    p = [0.01, 0.04, 0.03, 0.005, np.nan]
    # Holm: sorted 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> running max 0.06
    assert holm(p)[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and math.isnan(holm(p)[4])
    # BH: 4/1 x 0.005 = 0.02, 4/2 x 0.01 = 0.02, 4/3 x 0.03 = 0.04, 4/4 x 0.04 = 0.04 -> running min from the top
    assert bh(p)[:4] == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_crossed_bootstrap_covers_both_factors():
    """Prompts shared by every seed: a [seeds, prompts] table with a large prompt effect and no seed effect. The
    mean's standard deviation is then sigma_item / sqrt(items) (closed form); the bootstrap's interval must reach
    it, which a bootstrap over seeds alone (each seed's mean) cannot (it sees no variance at all)."""
    from analysis.stats import crossed_bootstrap

    rng = np.random.default_rng(0)
    units, items, sigma = 5, 200, 2.0
    item = rng.normal(0, sigma, items)
    table = np.tile(item, (units, 1)) + rng.normal(0, 0.01, (units, items))
    m, lo, hi = crossed_bootstrap(table, boots=4000)
    assert m == pytest.approx(table.mean())
    expected_half = 1.96 * item.std(ddof=1) / math.sqrt(items)
    assert (hi - lo) / 2 == pytest.approx(expected_half, rel=0.12)
    per_seed = table.mean(1)
    assert np.ptp(per_seed) < 0.01 * expected_half  # what a seeds-only interval would see
    # one unit: only the items are resampled; nested draws items within each unit
    _, lo1, hi1 = crossed_bootstrap(table[:1], boots=4000)
    assert (hi1 - lo1) / 2 == pytest.approx(expected_half, rel=0.12)
    _, lo_n, hi_n = crossed_bootstrap(table, boots=2000, nested=True)  # nested: prompt noise averages over units
    assert hi_n - lo_n < 0.7 * (hi - lo)
    assert all(math.isnan(x) for x in crossed_bootstrap(np.full((2, 2), np.nan)))


def test_crossed_bootstrap_resamples_a_third_factor():
    """[seeds, recodings, prompts] with a recoding effect only: the interval of the mean must reach the closed form
    1.96 x sd(recoding effects) / sqrt(recodings), which a seeds x prompts bootstrap of the pooled values misses."""
    from analysis.stats import crossed_bootstrap

    rng = np.random.default_rng(3)
    rec = rng.normal(0, 1.0, 30)
    table = np.broadcast_to(rec[None, :, None], (4, 30, 20)) + rng.normal(0, 0.01, (4, 30, 20))
    _, lo, hi = crossed_bootstrap(table, boots=3000)
    assert (hi - lo) / 2 == pytest.approx(1.96 * rec.std(ddof=1) / math.sqrt(30), rel=0.15)
    _, lo2, hi2 = crossed_bootstrap(table.mean(1), boots=3000)
    assert hi2 - lo2 < 0.05 * (hi - lo)
    from analysis.errors import AnalysisError
    from analysis.stats import holm

    with pytest.raises(AnalysisError, match="2-D when nested"):
        crossed_bootstrap(table, nested=True)
    with pytest.raises(AnalysisError, match="1-D family"):
        holm(np.ones((2, 2)))


def _exact_seed_bootstrap(values, a, b, n_units):
    """The exact bootstrap distribution of the pair-weighted mean, by enumerating every multiset of seeds."""
    import itertools
    from math import factorial

    out = []
    for counts in itertools.product(range(n_units + 1), repeat=n_units):
        if sum(counts) != n_units:
            continue
        prob = factorial(n_units) / np.prod([factorial(c) for c in counts]) / n_units ** n_units
        w = np.array([counts[i] if i == j else counts[i] * counts[j] for i, j in zip(a, b)], float)
        if w.sum():
            out.append((float(w @ np.asarray(values) / w.sum()), prob))
    return out


def _quantile(dist, q):
    dist = sorted(dist)
    cum = np.cumsum([p for _, p in dist]) / sum(p for _, p in dist)
    return dist[int(np.searchsorted(cum, q))][0]


@pytest.mark.parametrize("pairs", ["same", "cross"])
def test_seed_bootstrap_matches_the_exact_distribution_over_seed_multisets(pairs):
    from analysis.stats import seed_bootstrap

    if pairs == "same":  # one value per seed: the ordinary bootstrap of seeds
        a = b = [0, 1, 2, 3]
        v = [0.2, 0.5, 0.55, 0.9]
    else:  # every pair of two seeds; a pair leaves with either of its seeds
        a, b = [0, 0, 0, 1, 1, 2], [1, 2, 3, 2, 3, 3]
        v = [0.1, 0.2, 0.9, 0.3, 0.8, 0.7]
    mean, lo, hi = seed_bootstrap(v, a, b, boots=40_000, seed=3)
    exact = _exact_seed_bootstrap(v, a, b, 4)
    assert mean == pytest.approx(np.mean(v))
    # percentile bounds of 40k draws against the exact distribution's 2.5% and 97.5% quantiles (a discrete
    # distribution: the sampled quantile lands on one of its atoms, at most one atom away)
    atoms = sorted({x for x, _ in exact})
    for got, q in ((lo, 0.025), (hi, 0.975)):
        want = _quantile(exact, q)
        i = atoms.index(want)
        assert atoms[max(i - 1, 0)] - 1e-9 <= got <= atoms[min(i + 1, len(atoms) - 1)] + 1e-9
    one = seed_bootstrap([0.4, 0.6], [5, 5], [5, 5])
    assert one[0] == pytest.approx(0.5) and np.isnan(one[1])  # one seed: no interval over seeds


def test_crossed_mean_covers_the_mean_over_seeds_and_recodings():
    """Simulated [seeds, recodings] tables with a seed effect, a recoding effect and noise, true mean 0: the interval
    covers 0 in at least ~95% of tables (Satterthwaite is slightly conservative), where a t interval over the seeds'
    means, which treats the recodings as fixed, covers it far less often when recodings vary."""
    from scipy import stats

    from analysis.stats import crossed_mean

    rng = np.random.default_rng(0)
    hit_random = hit_fixed = 0
    n = 1500
    for _ in range(n):
        t = rng.normal(0, 0.5, (5, 1)) + rng.normal(0, 1.0, (1, 3)) + rng.normal(0, 0.5, (5, 3))
        r = crossed_mean(t)
        hit_random += r["lo"] <= 0 <= r["hi"]
        _, lo, hi = t_interval(t.mean(1))
        hit_fixed += lo <= 0 <= hi
    assert 0.93 <= hit_random / n <= 0.995 and hit_fixed / n < 0.8
    r = crossed_mean(np.array([[1.0, 2.0], [np.nan, 5.0], [3.0, 4.0]]))
    assert r["n"] == 2 and r["mean"] == pytest.approx(2.5)  # the incomplete row dropped
    r = crossed_mean(np.array([[1.0, 2.0, np.nan], [2.0, 5.0, np.nan], [3.0, 4.0, np.nan]]))
    assert (r["n"], r["k"]) == (3, 2)  # a recoding measured on no seed is dropped, not every seed
    assert np.isnan(crossed_mean(np.ones((3, 1)))["lo"])  # one recoding: no interval for recodings in general
    # a table with both components positive: V = (MS_s + MS_r - MS_e) / (n k), Satterthwaite df, written out
    t = np.array([[0.0, 2.0, 1.0], [1.0, 3.5, 2.0], [3.0, 5.0, 3.5], [2.0, 4.0, 3.0]])
    rows, cols, m = t.mean(1), t.mean(0), t.mean()
    ms_s, ms_r = 3 * rows.var(ddof=1), 4 * cols.var(ddof=1)
    ms_e = ((t - rows[:, None] - cols + m) ** 2).sum() / 6
    assert ms_s > ms_e and ms_r > ms_e
    var = (ms_s + ms_r - ms_e) / 12
    df = (ms_s + ms_r - ms_e) ** 2 / (ms_s ** 2 / 3 + ms_r ** 2 / 2 + ms_e ** 2 / 6)
    r = crossed_mean(t)
    assert r["df"] == pytest.approx(df) and r["hi"] - r["mean"] == pytest.approx(stats.t.ppf(0.975, df) * var ** 0.5)
    same = crossed_mean(np.full((3, 2), 0.1))  # 0.1 is not exact in binary: no spread all the same
    assert same["lo"] == same["hi"] == same["mean"] and np.isnan(same["p"])  # no spread: the mean, no test
    flat = crossed_mean(np.array([[1.0, 2.0], [2.0, 1.0]]))  # equal row and column means: MS_e alone
    assert flat["hi"] - flat["mean"] == pytest.approx(12.706 * np.sqrt(1.0 / 4), rel=1e-3)  # t(0.975, 1 df)

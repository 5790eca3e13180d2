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

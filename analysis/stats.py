"""Every interval and test the analyses report, in one place.

- :func:`t_interval` / :func:`t_intervals`: the mean of the finite values and its Student-t interval (NaN bounds
  for fewer than two values);
- :func:`wilson`: the Wilson score interval of a proportion (scipy's ``binomtest``);
- :func:`paired_difference`: the mean of paired differences ``a - b`` (e.g. per seed) with its t interval, and
  whether that interval excludes zero.
"""

from __future__ import annotations

import numpy as np


def t_intervals(values, level: float = 0.95):
    """Row-wise mean and Student-t interval of the mean of the finite values of a ``[rows, items]`` array:
    ``(mean, low, high)``, each ``[rows]``; NaN bounds where a row has fewer than two finite values."""
    from scipy import stats

    v = np.asarray(values, dtype=float)
    ok = np.isfinite(v)
    n = ok.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, v, 0).sum(1) / n
        var = np.where(ok, (v - mean[:, None]) ** 2, 0).sum(1) / (n - 1)
        half = stats.t.ppf(0.5 + level / 2, np.maximum(n - 1, 1)) * np.sqrt(var / n)
    half = np.where(n >= 2, half, np.nan)
    return mean, mean - half, mean + half


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the finite ``values``: :func:`t_intervals` of one row."""
    m, lo, hi = t_intervals(np.asarray(values, dtype=float).reshape(1, -1), level)
    return float(m[0]), float(lo[0]), float(hi[0])


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of the proportion ``k / n`` (NaN for ``n == 0``)."""
    from scipy import stats

    if n == 0:
        return float("nan"), float("nan")
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def paired_difference(a, b, level: float = 0.95) -> dict:
    """Paired differences ``a - b`` (pairs with a NaN on either side dropped): ``n``, ``diff`` (their mean), ``lo``,
    ``hi`` (its t interval) and ``exceeds`` (two or more pairs and an interval that excludes zero)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    d = d[np.isfinite(d)]
    m, lo, hi = t_interval(d, level) if len(d) else (np.nan, np.nan, np.nan)
    return dict(n=len(d), diff=m, lo=lo, hi=hi, exceeds=bool(len(d) >= 2 and np.isfinite(lo) and (lo > 0 or hi < 0)))


__all__ = ["t_interval", "t_intervals", "wilson", "paired_difference"]

"""Every interval and test the analyses report, in one place."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from analysis.errors import AnalysisError

#: Up to this many pairs :func:`~analysis.stats.sign_flip_p` enumerates every sign vector; beyond, it draws ``draws`` of
#: them.
EXACT_SIGN_FLIPS = 16


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: int) -> float:
    """Student's t quantile ``q`` with ``df`` degrees of freedom (scipy's ``t.ppf``), remembered: a report asks for
    the same few thousands of times, and each scipy call costs more than the interval around it."""
    from scipy import stats

    return float(stats.t.ppf(q, df))


def t_intervals(values, level: float = 0.95):
    """Row-wise mean and Student-t interval of the mean of the finite values of a ``[rows, items]`` array:
    ``(mean, low, high)``, each ``[rows]``; NaN bounds where a row has fewer than two finite values."""
    v = np.asarray(values, dtype=float)
    ok = np.isfinite(v)
    if v.ndim == 2 and v.shape[1] >= 2 and ok.all():  # every row whole: one quantile, no masking (same arithmetic)
        v, k = np.ascontiguousarray(v), v.shape[1]
        mean = v.sum(1) / k
        half = t_quantile(0.5 + level / 2, k - 1) * np.sqrt(((v - mean[:, None]) ** 2).sum(1) / (k - 1) / k)
        return mean, mean - half, mean + half
    n = ok.sum(1)
    dfs, row_df = np.unique(np.maximum(n - 1, 1), return_inverse=True)
    q = np.array([t_quantile(0.5 + level / 2, int(k)) for k in dfs], dtype=float)[row_df]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, v, 0).sum(1) / n
        var = np.where(ok, (v - mean[:, None]) ** 2, 0).sum(1) / (n - 1)
        half = q * np.sqrt(var / n)
    half = np.where(n >= 2, half, np.nan)
    return mean, mean - half, mean + half


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the finite ``values``: :func:`~analysis.stats.t_intervals` of one row."""
    m, lo, hi = t_intervals(np.asarray(values, dtype=float).reshape(1, -1), level)
    return float(m[0]), float(lo[0]), float(hi[0])


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of the proportion ``k / n`` (NaN for ``n == 0``)."""
    from scipy import stats

    if n == 0:
        return float("nan"), float("nan")
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def _identical(d: np.ndarray) -> bool:
    """True when the values have no spread (every paired difference the same, to rounding)."""
    return len(d) >= 2 and float(np.ptp(d)) <= 1e-12 * max(1.0, float(np.abs(d).max()))


def sign_flip_p(d, *, draws: int = 20_000, seed: int = 0) -> float:
    """Exact two-sided sign-flip p-value of the mean of the finite paired differences ``d``: the share of the
    ``2**n`` sign vectors whose flipped mean is at least as far from 0 as the observed one (the observed signs
    included, so the smallest value is ``2 / 2**n``). Beyond :data:`~analysis.stats.EXACT_SIGN_FLIPS` pairs, ``draws``
    seeded random sign vectors plus the observed one. NaN with no pairs; 1 when every difference is 0."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    n = len(d)
    if n == 0:
        return float("nan")
    observed = abs(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if n <= EXACT_SIGN_FLIPS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        return float(np.mean(np.abs(signs @ d / n) >= observed - tol))
    signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(draws, n))
    return float((np.sum(np.abs(signs @ d / n) >= observed - tol) + 1) / (draws + 1))


def t_test_p(d: np.ndarray) -> float:
    """The two-sided p-value of the one-sample t test of mean 0 on the values ``d`` (two or more, not all equal):
    what scipy's ``ttest_1samp(d, 0).pvalue`` gives, from the t statistic and Student's t distribution directly
    (scipy's wrapper costs ~1 ms a call, and a study's report makes thousands)."""
    from scipy import special

    n = len(d)
    t = float(d.mean()) / math.sqrt(float(d.var(ddof=1)) / n)
    return float(2 * special.stdtr(n - 1, -abs(t)))


def paired_difference(a, b, level: float = 0.95) -> dict:
    """Paired differences ``a - b`` (pairs with a NaN on either side dropped): ``n``, ``diff`` (their mean), ``lo``,
    ``hi`` (its t interval: mean +- t x standard error), ``p`` (the paired t test's two-sided p-value), ``p_sign``
    (:func:`~analysis.stats.sign_flip_p`), ``identical`` (every difference the same: no spread, so no test) and
    ``exceeds`` (two or more pairs, not identical, and an interval that excludes zero)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    d = d[np.isfinite(d)]
    m, lo, hi = t_interval(d, level) if len(d) else (np.nan, np.nan, np.nan)
    same = _identical(d)
    p = t_test_p(d) if len(d) >= 2 and not same else float("nan")
    return dict(n=len(d), diff=m, lo=lo, hi=hi, p=p, p_sign=sign_flip_p(d), identical=same,
                exceeds=bool(len(d) >= 2 and not same and np.isfinite(lo) and (lo > 0 or hi < 0)))


def tost(d, margin: float, alpha: float = 0.05) -> dict:
    """Two one-sided t tests of ``-margin < mean(d) < margin`` on the finite paired differences ``d``: ``n``,
    ``diff`` (their mean), ``lo``, ``hi`` (the ``1 - 2 alpha`` t interval, 90% at ``alpha`` 0.05: equivalence at
    level ``alpha`` holds exactly when it lies inside +-margin), ``p`` (the larger of the two one-sided p-values; NaN
    with fewer than two pairs or no spread) and ``identical``."""
    from scipy import special

    if not margin > 0:
        raise AnalysisError(f"an equivalence margin must be positive, got {margin!r}")
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    n = len(d)
    m, lo, hi = t_interval(d, 1 - 2 * alpha) if n else (np.nan, np.nan, np.nan)
    same = _identical(d)
    p = float("nan")
    if n >= 2 and not same:
        se = math.sqrt(float(d.var(ddof=1)) / n)
        p_low = float(special.stdtr(n - 1, -(m + margin) / se))  # H0: mean <= -margin
        p_high = float(special.stdtr(n - 1, (m - margin) / se))  # H0: mean >= +margin
        p = max(p_low, p_high)
    return dict(n=n, diff=m, lo=lo, hi=hi, p=p, identical=same)


def _adjust(p, step) -> np.ndarray:
    """Adjusted p-values of the finite ``p`` in their order (NaN stays NaN): ``step(sorted finite p, m)`` gives the
    adjusted values in ascending order of p, capped at 1 here."""
    p = np.asarray(p, dtype=float)
    if p.ndim != 1:
        raise AnalysisError(f"adjust a 1-D family of p-values, got shape {p.shape}")
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if len(ok):
        order = ok[np.argsort(p[ok], kind="stable")]
        out[order] = np.minimum(step(p[order], len(ok)), 1.0)
    return out


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error) of the finite ``p``, in their order; NaN stays NaN.
    A comparison is significant at level ``alpha`` over the whole family when its adjusted p-value is <= alpha."""
    return _adjust(p, lambda ps, m: np.maximum.accumulate((m - np.arange(m)) * ps))


def bh(p) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (false discovery rate) of the finite ``p``, in their order; NaN stays
    NaN."""
    return _adjust(p, lambda ps, m: np.minimum.accumulate((m / np.arange(m, 0, -1) * ps[::-1]))[::-1])


def crossed_bootstrap(table, *, boots: int = 2000, level: float = 0.95, seed: int = 0,
                      nested: bool = False) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of the finite cells of a ``[units, items]`` table (or one with more crossed
    factors, ``[seeds, recodings, prompts]``) and a percentile interval from resampling every factor (axis) with
    replacement, independently - the same item draw for every unit when the items are shared between units
    (crossed, e.g. the same prompts for every seed; Owen's pigeonhole bootstrap) - or, for a 2-D table with
    ``nested=True``, a fresh item draw within each unit (items that differ by unit). A factor with one level is
    not resampled (it then contributes no variance: say so where it is reported). With few levels (2-5 seeds) a
    percentile bootstrap understates that factor's variance; report it beside the t interval, not instead of it.
    NaN bounds with fewer than two finite cells."""
    v = np.asarray(table, dtype=float)
    if v.ndim < 2 or (nested and v.ndim != 2):
        raise AnalysisError(f"crossed_bootstrap takes a [units, items, ...] table (2-D when nested), got shape "
                            f"{v.shape}")
    ok = np.isfinite(v)
    if ok.sum() == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(v[ok].mean())
    if ok.sum() < 2:
        return mean, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    filled, w = np.where(ok, v, 0.0), ok.astype(float)

    def draw(n, size):
        return rng.integers(0, n, (size, n)) if n > 1 else np.zeros((size, 1), int)

    stats_ = np.empty(boots)
    per = max(1, int(4e6 // v.size))  # resamples per vectorised chunk (memory ~ per x cells)
    for start in range(0, boots, per):
        b = min(per, boots - start)
        if nested:
            rows = draw(v.shape[0], b)  # [b, u]
            k = v.shape[1]
            cols = rng.integers(0, k, (b, rows.shape[1], k)) if k > 1 else np.zeros((b, rows.shape[1], 1), int)
            s_, c_ = filled[rows[:, :, None], cols], w[rows[:, :, None], cols]
        else:
            idx = [draw(n, b) for n in v.shape]  # one [b, n_axis] index per axis, broadcast against each other
            grid = tuple(ix.reshape((b,) + (1,) * a + (-1,) + (1,) * (v.ndim - a - 1)) for a, ix in enumerate(idx))
            s_, c_ = filled[grid], w[grid]
        tot, cnt = s_.reshape(b, -1).sum(1), c_.reshape(b, -1).sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats_[start:start + b] = np.where(cnt > 0, tot / np.where(cnt > 0, cnt, 1), np.nan)
    lo, hi = np.nanquantile(stats_, [(1 - level) / 2, (1 + level) / 2])
    return mean, float(lo), float(hi)


def crossed_mean(table, level: float = 0.95) -> dict:
    """The grand mean of a ``[seeds, recodings]`` table with both factors random (a two-way crossed random-effects
    model): the interval and test are for the population of seeds *and* recodings the table samples, not for these
    recodings. A recoding measured on no seed is dropped, then every seed missing any recoding. ``n`` (seeds kept),
    ``k`` (recodings kept), ``mean``, ``lo``, ``hi`` (mean +- t x sqrt(V)), ``df`` and ``p`` (two-sided, of mean 0).

    From the two-way ANOVA's mean squares (MS_seed, MS_recoding, MS_residual), each variance component estimated and
    set to 0 where negative: V = (max(MS_seed, MS_res) + max(MS_recoding, MS_res) - MS_res) / (n k), with
    Satterthwaite's degrees of freedom over the mean squares it keeps. NaN bounds with fewer than two seeds or
    recodings; ``lo = hi = mean`` and no ``p`` when every cell is the same. With 2 recodings the recoding term has one
    degree of freedom and the interval is wide: that is what two recodings can say about recodings in general."""
    from scipy import special, stats

    v = np.asarray(table, dtype=float)
    if v.ndim != 2:
        raise AnalysisError(f"crossed_mean takes a [seeds, recodings] table, got shape {v.shape}")
    v = v[:, np.isfinite(v).any(0)]
    v = v[np.isfinite(v).all(1)]
    n, k = v.shape
    mean = float(v.mean()) if v.size else float("nan")
    out = dict(n=n, k=k, mean=mean, lo=float("nan"), hi=float("nan"), df=float("nan"), p=float("nan"))
    if n < 2 or k < 2:
        return out
    if _identical(v.ravel()):  # every cell the same: no spread, no test
        return dict(out, lo=mean, hi=mean)
    rows, cols = v.mean(1), v.mean(0)
    ms_s = k * float(((rows - mean) ** 2).sum()) / (n - 1)
    ms_r = n * float(((cols - mean) ** 2).sum()) / (k - 1)
    ms_e = float(((v - rows[:, None] - cols[None, :] + mean) ** 2).sum()) / ((n - 1) * (k - 1))
    terms = [(1.0, ms_s, n - 1) if ms_s > ms_e else (1.0, ms_e, (n - 1) * (k - 1)),
             (1.0, ms_r, k - 1) if ms_r > ms_e else (1.0, ms_e, (n - 1) * (k - 1)),
             (-1.0, ms_e, (n - 1) * (k - 1))]
    terms = [t for t in terms if t[1] > 0]
    total = sum(c * m for c, m, _ in terms)
    if not total > 0:
        return dict(out, lo=mean, hi=mean)
    # the MS_res terms of a truncated component and the subtracted one are one mean square: merge them for the df
    merged = {}
    for c, m, d in terms:
        key = (m, d)
        merged[key] = merged.get(key, 0.0) + c
    df = total ** 2 / sum((c * m) ** 2 / d for (m, d), c in merged.items() if c)
    var = total / (n * k)
    half = float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(var)
    p = float(2 * special.stdtr(df, -abs(mean) / math.sqrt(var)))
    return dict(out, lo=mean - half, hi=mean + half, df=float(df), p=p)


def seed_bootstrap(values, seeds_a, seeds_b, *, boots: int = 2000, level: float = 0.95,
                   seed: int = 0) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of the finite ``values`` of pairs of models, the pair ``i`` between a model of
    seed ``seeds_a[i]`` and one of seed ``seeds_b[i]``, and a percentile interval from resampling the *seeds* with
    replacement (the vertex bootstrap of dyadic data): in a draw where seed ``s`` is drawn ``c_s`` times, a pair of
    two seeds weighs ``c_a c_b`` and a pair within one seed ``c_s``, so a seed's every pair leaves and returns with
    it. This is the interval over seeds that a mean over seed pairs needs (pairs sharing a seed are not independent);
    NaN bounds with fewer than two seeds. With few seeds (3-5) a percentile bootstrap is narrow: read it as a lower
    bound on the between-seed spread."""
    v = np.asarray(values, dtype=float)
    a, b = np.asarray(seeds_a), np.asarray(seeds_b)
    if not (v.shape == a.shape == b.shape) or v.ndim != 1:
        raise AnalysisError(f"seed_bootstrap takes one value and two seeds per pair, got shapes {v.shape}, {a.shape}, "
                            f"{b.shape}")
    ok = np.isfinite(v)
    v, a, b = v[ok], a[ok], b[ok]
    if not len(v):
        return float("nan"), float("nan"), float("nan")
    units = np.unique(np.concatenate([a, b]))
    mean = float(v.mean())
    if len(units) < 2:
        return mean, float("nan"), float("nan")
    ia, ib = np.searchsorted(units, a), np.searchsorted(units, b)
    counts = np.random.default_rng(seed).multinomial(len(units), np.full(len(units), 1 / len(units)), size=boots)
    w = np.where(ia == ib, counts[:, ia], counts[:, ia] * counts[:, ib]).astype(float)  # [boots, pairs]
    tot = w.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = np.where(tot > 0, (w @ v) / np.where(tot > 0, tot, 1), np.nan)
    lo, hi = np.nanquantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return mean, float(lo), float(hi)


__all__ = ["t_interval", "t_intervals", "wilson", "paired_difference", "sign_flip_p", "tost", "holm", "bh",
           "seed_bootstrap", "crossed_mean", "crossed_bootstrap", "EXACT_SIGN_FLIPS"]

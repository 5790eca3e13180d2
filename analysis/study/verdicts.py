"""The rules that turn a claim's numbers into its verdict: one place, so a claims table can be checked by recomputing
and a report's words about its rules (:func:`rules_text`) are written from the same numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.errors import AnalysisError
from analysis.stats import holm

#: The kinds of claim, what each tests.
KINDS = ("difference", "equivalence", "interaction", "descriptive")
#: The families, each Holm-adjusted on its own; exploratory rows are never findings.
FAMILIES = ("primary", "control", "exploratory")
#: The verdicts.
VERDICTS = ("supported", "not supported", "inconclusive")
#: The directions a difference or interaction claim can name.
DIRECTIONS = ("positive", "negative", "either")
#: The level of every test unless a claims file sets its own ``alpha``.
ALPHA = 0.05
#: The columns of every claims table, in order.
COLUMNS = ["id", "claim", "kind", "family", "measure", "contrast", "direction", "estimate", "ci_low", "ci_high",
           "ci_level", "margin", "threshold", "p", "p_adjusted", "n_seeds", "seeds", "unit", "verdict", "note"]


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float, np.floating, np.integer)) and math.isfinite(float(x))


def interval_level(kind: str, alpha: float | None = None) -> float:
    """The confidence level of a ``kind`` claim's interval at ``alpha`` (default :data:`ALPHA`): ``1 - alpha`` for a
    difference or interaction (the two-sided t interval), ``1 - 2 alpha`` for an equivalence (two one-sided t tests at
    ``alpha``: equivalence holds at that level exactly when this interval lies inside the margin); NaN for a
    descriptive claim, which has none."""
    alpha = ALPHA if alpha is None else alpha
    return {"difference": 1 - alpha, "interaction": 1 - alpha, "equivalence": 1 - 2 * alpha}.get(kind, math.nan)


def rules(alpha: float | None = None) -> dict[str, str]:
    """Per kind, when :func:`verdict` gives ``supported`` and ``not supported`` at ``alpha`` (default :data:`ALPHA`),
    in words written from the same numbers (``alpha`` and :func:`interval_level`)."""
    alpha = ALPHA if alpha is None else alpha
    p = f"its Holm-adjusted p is <= {alpha:g}"
    level = {k: f"{100 * interval_level(k, alpha):g}%" for k in ("difference", "equivalence")}
    return {"difference": f"{p} and its {level['difference']} interval excludes 0 on the side its sentence names "
                          "(not supported: on the other side)",
            "interaction": "as a difference",
            "equivalence": f"{p} and its {level['equivalence']} interval (two one-sided t tests) lies inside the "
                           "margin stated in advance (not supported: it lies wholly beyond the margin)",
            "descriptive": "every per-seed value meets its threshold (no test)"}


def rules_text(alpha: float | None = None) -> str:
    """The rules of :func:`verdict` at ``alpha`` as a report states them (:func:`rules`)."""
    r = rules(alpha)
    return ("Holm's adjustment runs within each family. A difference or interaction (a difference-in-differences) is "
            f"supported only when {r['difference']}; an equivalence only when {r['equivalence']}; a descriptive "
            f"claim when {r['descriptive']}. Anything else is inconclusive: a non-significant difference is never "
            "\"no difference\", and exploratory rows are never findings (their verdict is inconclusive whatever the "
            "numbers).")


def adjust(table: pd.DataFrame) -> pd.Series:
    """Holm-adjusted p-values of ``table.p`` within each ``family`` (NaN where ``p`` is NaN)."""
    out = pd.Series(np.nan, index=table.index, dtype=float)
    for _, g in table.groupby("family", sort=False):
        out[g.index] = holm(g.p.astype(float).to_numpy())
    return out


def _side(lo: float, hi: float) -> str | None:
    """Which side of 0 the interval lies on (``positive``/``negative``), or None when it holds 0."""
    if lo > 0:
        return "positive"
    if hi < 0:
        return "negative"
    return None


def verdict(row, alpha: float | None = None) -> str:
    """The verdict of one claims-table row (a mapping: a record of :func:`analysis.study.claims.claims_table`) at
    ``alpha`` (default :data:`ALPHA`) by the rules :func:`rules` states."""
    alpha = ALPHA if alpha is None else alpha
    get = row.get
    kind, family = get("kind"), get("family")
    if kind not in KINDS or family not in FAMILIES:
        raise AnalysisError(f"claim {get('id')!r}: kind {kind!r} / family {family!r} must be one of {KINDS} / "
                            f"{FAMILIES}")
    if family == "exploratory":
        return "inconclusive"
    est, lo, hi = get("estimate"), get("ci_low"), get("ci_high")
    if kind == "descriptive":
        if not (_finite(est) and _finite(get("threshold"))):
            return "inconclusive"
        return "supported" if est >= get("threshold") else "not supported"
    p = get("p_adjusted")
    if not (_finite(p) and _finite(lo) and _finite(hi)):
        return "inconclusive"
    if kind == "equivalence":
        margin = get("margin")
        if not _finite(margin) or margin <= 0:
            raise AnalysisError(f"claim {get('id')!r}: an equivalence claim needs a positive margin, got {margin!r}")
        if p <= alpha and -margin < lo and hi < margin:
            return "supported"
        if lo >= margin or hi <= -margin:
            return "not supported"
        return "inconclusive"
    side = _side(lo, hi)
    if p > alpha or side is None:
        return "inconclusive"
    return "supported" if get("direction") in (side, "either") else "not supported"


def apply(table: pd.DataFrame, alpha: float | None = None) -> pd.DataFrame:
    """``table`` with ``p_adjusted`` (Holm within each family) and ``verdict`` (:func:`verdict`) filled in."""
    out = table.copy()
    out["p_adjusted"] = adjust(out) if len(out) else []
    out["verdict"] = [verdict(r, alpha) for r in out.to_dict("records")]
    return out


def check(table: pd.DataFrame, alpha: float | None = None) -> list[str]:
    """What is wrong with a claims table as written (each problem a line; empty when it is right): missing columns,
    an equivalence row without a margin, a ``p_adjusted`` that is not Holm's within its family recomputed from ``p``,
    a verdict the rules do not give from the row's numbers."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        return [f"columns missing: {missing}"]
    problems = []
    for r in table.itertuples():
        if r.kind == "equivalence" and not (_finite(r.margin) and r.margin > 0):
            problems.append(f"{r.id}: an equivalence row without a positive margin")
    if problems:
        return problems
    again = apply(table, alpha)
    for r, p, v in zip(table.itertuples(), again.p_adjusted, again.verdict):
        if not (np.isclose(r.p_adjusted, p, rtol=1e-9, atol=1e-12) or (np.isnan(p) and np.isnan(r.p_adjusted))):
            problems.append(f"{r.id}: p_adjusted {r.p_adjusted} is not Holm's within {r.family!r} ({p})")
        if r.verdict != v:
            problems.append(f"{r.id}: verdict {r.verdict!r}, but its numbers give {v!r}")
    return problems


__all__ = ["KINDS", "FAMILIES", "VERDICTS", "DIRECTIONS", "ALPHA", "COLUMNS", "interval_level", "rules", "rules_text",
           "adjust", "verdict", "apply", "check"]

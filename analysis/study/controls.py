"""The study's controls: each difference measured again with a control in one side's place, and what a number of seeds
can show."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.stats import paired_difference


@dataclass(frozen=True)
class ControlCheck:
    """A base difference ``base[0] - base[1]`` measured again as ``swapped[0] - swapped[1]`` with ``control``."""
    control: str
    base: tuple[str, str]
    swapped: tuple[str, str]
    removes: str


#: The control checks: each control, the base difference it tests, the controlled one and what the control removes.
CHECKS = (
    ControlCheck("canonical-matched", ("learned", "canonical"), ("learned", "canonical-matched"),
                 "the parameter gap (the fixed variant's backbone gets the learned table's parameters)"),
    ControlCheck("permuted", ("learned", "canonical"), ("learned", "permuted"),
                 "frequency in the ids (a permuted id's code spells no frequency rank)"),
    ControlCheck("frozen_random", ("learned", "canonical"), ("learned", "frozen_random"),
                 "the binary code (a frozen Gaussian table instead)"),
    ControlCheck("learned-randomhead, canonical-randomhead", ("learned", "canonical"),
                 ("learned-randomhead", "canonical-randomhead"),
                 "a learned output head (both heads frozen random)"),
    ControlCheck("permuted", ("canonical", "gf2"), ("canonical", "permuted"),
                 "frequency in the ids (is another code as good when it spells no frequency?)"),
)
#: What the checks are measured on: the final step's validation loss and behaviour accuracies.
METRICS = (("loss", "val_loss"), ("behaviours", "accuracy"))


#: What one paired interval shows, as :func:`interval` writes it.
ABOVE, BELOW, INCLUDES, IDENTICAL, TOO_FEW = ("interval > 0", "interval < 0", "interval includes 0",
                                              "identical on every seed", "too few seeds")


def interval(d: dict) -> str:
    """Where a :func:`~analysis.stats.paired_difference` result's 95% interval lies: ``interval > 0``, ``interval < 0``,
    ``interval includes 0``, ``identical on every seed`` (no spread, so no interval) or ``too few seeds``."""
    if d["n"] < 2 or not np.isfinite(d["lo"]):
        return TOO_FEW
    if d.get("identical") or d["hi"] - d["lo"] <= 1e-12 * max(1.0, abs(d["diff"])):  # no variance to judge by
        return IDENTICAL
    if d["lo"] > 0:
        return ABOVE
    if d["hi"] < 0:
        return BELOW
    return INCLUDES


def _sign(side: str) -> str:
    return side.removeprefix("interval ")


def outcome(base: str, controlled: str) -> str:
    """How the two intervals of a control check lie, from their :func:`interval` strings, as a description (no
    verdict: whether a control changes a difference is an interaction claim): ``both intervals exclude 0 (< 0)``,
    ``both intervals exclude 0, base > 0 and controlled < 0``, ``only the base interval excludes 0 (> 0)``, ``only
    the controlled interval excludes 0 (< 0)``, ``neither interval excludes 0``, ``base identical on every seed;
    controlled interval includes 0`` (either side without spread), or ``too few seeds``."""
    if TOO_FEW in (base, controlled):
        return TOO_FEW
    if IDENTICAL in (base, controlled):
        return f"base {base}; controlled {controlled}"
    signed = [s in (ABOVE, BELOW) for s in (base, controlled)]
    if all(signed):
        return (f"both intervals exclude 0 ({_sign(base)})" if base == controlled else
                f"both intervals exclude 0, base {_sign(base)} and controlled {_sign(controlled)}")
    if signed[0]:
        return f"only the base interval excludes 0 ({_sign(base)})"
    if signed[1]:
        return f"only the controlled interval excludes 0 ({_sign(controlled)})"
    return "neither interval excludes 0"


def _paired(g: pd.DataFrame, a: str, b: str) -> dict | None:
    wide = g.pivot_table(index="seed", columns="variant", values="value")
    if a not in wide or b not in wide:
        return None
    return paired_difference(wide[a].to_numpy(float), wide[b].to_numpy(float))


def control_table(df: pd.DataFrame, step: int | None = None) -> pd.DataFrame:
    """One row per (metric, key, check) whose variants were all measured: the base and the controlled paired
    difference over seeds (``*_diff``, ``*_lo``, ``*_hi``, ``*_n``), where each interval lies (``base_interval``,
    ``control_interval``: :func:`interval`), ``both_exclude_0_same_sign`` and ``outcome`` (:func:`outcome`): a
    description of two unadjusted intervals side by side, not a test."""
    step = int(df.step.max()) if step is None else step
    rows = []
    for analysis, metric in METRICS:
        d = df[(df.analysis == analysis) & (df.metric == metric) & (df.step == step)]
        for key, g in d.groupby("key", sort=False):
            for c in CHECKS:
                base, ctrl = _paired(g, *c.base), _paired(g, *c.swapped)
                if base is None or ctrl is None:
                    continue
                bi, ci = interval(base), interval(ctrl)
                rows.append(dict(analysis=analysis, metric=metric, key=key, control=c.control,
                                 base=" - ".join(c.base), controlled=" - ".join(c.swapped),
                                 **{f"base_{k}": base[k] for k in ("n", "diff", "lo", "hi")},
                                 **{f"control_{k}": ctrl[k] for k in ("n", "diff", "lo", "hi")},
                                 base_interval=bi, control_interval=ci,
                                 both_exclude_0_same_sign=bi == ci and bi in (ABOVE, BELOW),
                                 outcome=outcome(bi, ci),
                                 removes=c.removes))
    return pd.DataFrame(rows)


def control_lines(table: pd.DataFrame) -> list[str]:
    """The report's section on the controls: per base difference, the difference measured again with each control in
    place of one side, as numbers only (whether a control changes a difference is an interaction claim, tested in
    the claims table, never read off two intervals)."""
    if table.empty:
        return []
    out = ["## The controls' differences", "",
           "Each control replaces one side of a difference with a variant that removes one explanation; the "
           "difference is measured again over the same seeds (paired mean [95% t interval], unadjusted). Two intervals "
           "side by side do not test whether a control changed a difference: that is the difference-in-differences of "
           "an interaction claim, in the claims above.", ""]
    for base, t in table.groupby("base", sort=False):
        out += [f"**{base}**", "", "| metric | base difference | control (what it removes) | controlled difference |",
                "|---|---|---|---|"]
        for r in t.itertuples():
            metric = f"{r.metric} ({r.key})" if r.key not in ("", "nan") else r.metric
            pct = r.metric == "accuracy"
            out.append(f"| {metric} | {_cell(r.base_diff, r.base_lo, r.base_hi, pct)} | {r.controlled}: {r.removes} | "
                       f"{_cell(r.control_diff, r.control_lo, r.control_hi, pct)} |")
        out.append("")
    return out


def _cell(m, lo, hi, pct) -> str:
    f = (lambda x: f"{100 * x:+.0f} pts") if pct else (lambda x: f"{x:+.3f}")
    return f"{f(m)} [{f(lo)}, {f(hi)}]" if np.isfinite(lo) else f"{f(m)}"


def seeds_statement(n: int) -> str:
    """What ``n`` seeds can and cannot show, with the numbers of the t distribution the report uses."""
    from scipy import stats

    if n < 2:
        return (f"With {n} seed there is no interval: every difference is an anecdote; train more seeds "
                "(--seeds 0-4).")
    t = float(stats.t.ppf(0.975, n - 1))
    t3 = float(stats.t.ppf(0.975, 2))
    than3 = f"; with 3 seeds it would be {t3 / np.sqrt(3):.2f} times" if n != 3 else ""
    return (f"With {n} seeds a paired difference's 95% interval (mean +- t x standard error) excludes 0 only when "
            f"its mean is larger than {t / np.sqrt(n):.2f} times the standard deviation of the per-seed differences "
            f"(t = {t:.2f} with {n - 1} degrees of freedom{than3}), "
            f"and the exact sign-flip test cannot give a p-value below {2 / 2 ** n:.3g} (2 / 2^{n}"
            + ("; 0.25 with 3 seeds" if n != 3 else "") + "): "
            "with fewer than 6 seeds no difference reaches p < 0.05 without assuming normal per-seed differences. "
            "What this cannot show: that two variants are the same (an interval that includes 0 may hold a "
            "difference these seeds cannot resolve); how the result varies with the recipe, the data or the scale "
            f"(every seed shares them); and, over the {len(CHECKS)} control checks and several metrics, about one "
            "unadjusted interval in twenty excludes 0 by chance.")


__all__ = ["CHECKS", "ControlCheck", "METRICS", "interval", "control_table", "outcome", "control_lines",
           "seeds_statement"]

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


def conclusion(d: dict, a: str, b: str) -> str:
    """``"a > b"``, ``"a < b"`` or ``"interval includes 0"`` from a :func:`~analysis.stats.paired_difference` result."""
    if d["n"] < 2 or not np.isfinite(d["lo"]):
        return "too few seeds"
    if d.get("identical") or d["hi"] - d["lo"] <= 1e-12 * max(1.0, abs(d["diff"])):  # no variance to judge by
        return "identical on every seed"
    if d["lo"] > 0:
        return f"{a} > {b}"
    if d["hi"] < 0:
        return f"{a} < {b}"
    return "interval includes 0"


def _signed(c: str) -> bool:
    """Whether a :func:`~analysis.study.controls.conclusion` names a direction (``a > b`` or ``a < b``)."""
    return " > " in c or " < " in c


def outcome(base: str, controlled: str) -> str:
    """What a control did to a difference, from the two :func:`~analysis.study.controls.conclusion` strings:
    ``survives`` (a difference whose interval excludes 0, and the same with the control), ``gone with the control``,
    ``reversed``, ``appears with the control`` (no difference before, one after), ``no difference either way``, or
    ``too few seeds``."""
    if "too few seeds" in (base, controlled):
        return "too few seeds"
    if _signed(base):
        if controlled == base:
            return "survives"
        return "reversed" if _signed(controlled) else "gone with the control"
    return "appears with the control" if _signed(controlled) else "no difference either way"


def _paired(g: pd.DataFrame, a: str, b: str) -> dict | None:
    wide = g.pivot_table(index="seed", columns="variant", values="value")
    if a not in wide or b not in wide:
        return None
    return paired_difference(wide[a].to_numpy(float), wide[b].to_numpy(float))


def control_table(df: pd.DataFrame, step: int | None = None) -> pd.DataFrame:
    """One row per (metric, key, check) whose variants were all measured: the base and the controlled paired
    difference over seeds (``*_diff``, ``*_lo``, ``*_hi``, ``*_n``), their conclusions and ``survives``."""
    step = int(df.step.max()) if step is None else step
    rows = []
    for analysis, metric in METRICS:
        d = df[(df.analysis == analysis) & (df.metric == metric) & (df.step == step)]
        for key, g in d.groupby("key", sort=False):
            for c in CHECKS:
                base, ctrl = _paired(g, *c.base), _paired(g, *c.swapped)
                if base is None or ctrl is None:
                    continue
                bc, cc = conclusion(base, *c.base), conclusion(ctrl, *c.base)
                what = outcome(bc, cc)
                rows.append(dict(analysis=analysis, metric=metric, key=key, control=c.control,
                                 base=" - ".join(c.base), controlled=" - ".join(c.swapped),
                                 **{f"base_{k}": base[k] for k in ("n", "diff", "lo", "hi")},
                                 **{f"control_{k}": ctrl[k] for k in ("n", "diff", "lo", "hi")},
                                 base_conclusion=bc, control_conclusion=cc,
                                 survives=what == "survives", outcome=what,
                                 removes=c.removes))
    return pd.DataFrame(rows)


def control_lines(table: pd.DataFrame) -> list[str]:
    """The report's section on the controls: per base difference, the difference measured again with each control in
    place of one side, as numbers only (whether a difference survives a control is an interaction claim, tested in
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


__all__ = ["CHECKS", "ControlCheck", "METRICS", "conclusion", "control_table", "outcome", "control_lines",
           "seeds_statement"]

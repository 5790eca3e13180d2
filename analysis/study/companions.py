"""Exploratory comparisons a report prints beside some claims: the numbers a reader needs to read a claim as it is
stated, and not as a broader one (described, never tested)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.stats import paired_difference, t_interval


@dataclass(frozen=True)
class Companion:
    """Beside a claim on ``claim_measure``: what that measure means (``means``, one plain sentence), and the same
    contrast on ``measure`` (``what`` says what it is, in a sentence; ``label`` names it in a few words), with each
    side's mean of ``share`` (a share, in %) where given."""
    claim_measure: str
    means: str
    measure: str
    label: str
    what: str
    share: str = ""


def _noise(level: int) -> Companion:
    return Companion(
        f"interventions/noise_delta_loss/decode {level}%",
        f"Matched decodability gives each model its own amount of noise: the amount at which {level}% of its noised "
        "input rows are still nearest to their own token's row, so the two sides of a claim are not given the same "
        "noise.",
        "interventions/noise_delta_loss/scale 0.5", "At equal noise scale",
        "Equal noise scale: Gaussian noise with a standard deviation of half the RMS of each model's own input "
        "table, added to each of that table's columns (the learned table's width, the code's bits).",
        "interventions/noise_decode_acc/scale 0.5")


#: The companions, by the measure of the claims they are printed beside.
COMPANIONS = {c.claim_measure: c for c in (_noise(90), _noise(50))}


def _values(df: pd.DataFrame, measure: str) -> pd.DataFrame:
    """``[seed, variant]`` values of ``measure`` (``analysis/metric/key``) at ``df``'s last step."""
    analysis, metric, key = measure.split("/", 2)
    g = df[(df.analysis == analysis) & (df.metric == metric) & (df.key.astype(str) == key)]
    g = g[g.step == g.step.max()]
    return g.pivot_table(index="seed", columns="variant", values="value", aggfunc="mean")


def _mean(x) -> str:
    m, lo, hi = t_interval(np.asarray(x, dtype=float))
    return f"{m:.3g} [{lo:.3g}, {hi:.3g}]" if np.isfinite(lo) else f"{m:.3g}"


def _beside(r, c: Companion, df: pd.DataFrame) -> str | None:
    """The bullet beside claim row ``r``: each side's mean on ``c.measure``, their paired difference and each side's
    ``c.share``; None when the measurements lack either side."""
    a, b = r.contrast.split(" - ")
    w = _values(df, c.measure)
    if a not in w or b not in w:
        return None
    pair = w[[a, b]].dropna()
    d = paired_difference(pair[a].to_numpy(float), pair[b].to_numpy(float))
    diff = (f"{d['diff']:+.3g} [{d['lo']:+.3g}, {d['hi']:+.3g}]" if np.isfinite(d["lo"]) else f"{d['diff']:+.3g}")
    share = _values(df, c.share) if c.share else pd.DataFrame()
    rows = "" if a not in share or b not in share else (
        f"; noised rows still nearest their own token's row: {a} {100 * share[a].mean():.0f}%, "
        f"{b} {100 * share[b].mean():.0f}%")
    return (f"- *{r.claim}* {c.label}, noise costs {a} {_mean(pair[a])} and {b} {_mean(pair[b])} {r.unit} "
            f"({a} - {b} {diff}, {d['n']} seeds){rows}.")


def companion_lines(table: pd.DataFrame, measurements: pd.DataFrame | None) -> list[str]:
    """Beside the tested claims of ``table`` (rows of :func:`analysis.study.claims.claims_table`) that have a
    companion (:data:`COMPANIONS`): what each claim's measure means, then per claim the same contrast on the
    companion's measure from the per-seed ``measurements`` (means and the paired difference with 95% t intervals over
    seeds, unadjusted), marked exploratory. Empty without measurements or such claims."""
    if measurements is None or table.empty:
        return []
    rows = [r for r in table.itertuples() if r.measure in COMPANIONS and r.n_seeds > 0 and " - " in r.contrast
            and not r.contrast.startswith("(")]
    bullets = [b for b in (_beside(r, COMPANIONS[r.measure], measurements) for r in rows) if b]
    if not bullets:
        return []
    said = list(dict.fromkeys(s for r in rows for s in (COMPANIONS[r.measure].means, COMPANIONS[r.measure].what)))
    return (["Beside these claims, exploratory (a description, not a finding; 95% t intervals over seeds, "
             "unadjusted). " + " ".join(said), ""] + bullets + [""])


__all__ = ["Companion", "COMPANIONS", "companion_lines"]

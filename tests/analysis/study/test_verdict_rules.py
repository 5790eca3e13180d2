"""The rules a report states are the rules that give its verdicts: the words are written from the same alpha and
interval levels (analysis.study.verdicts), so the thresholds read back out of the text are the ones verdict() applies
and the levels are the ones claims_table() computes."""

import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.study import verdicts
from analysis.study.claims import Claim, claim_lines, claims_table


def _stated(kind: str, alpha=None) -> tuple[float, float]:
    """The Holm-adjusted p bound and the interval level that ``rules`` states for ``kind``, read from its words."""
    text = verdicts.rules(alpha)[kind]
    return (float(re.search(r"Holm-adjusted p is <= ([0-9.]+)", text).group(1)),
            float(re.search(r"its ([0-9.]+)% interval", text).group(1)) / 100)


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1])
def test_the_stated_p_bounds_are_the_ones_verdict_applies(alpha):
    p, _ = _stated("difference", alpha)
    diff = dict(id="d", kind="difference", family="primary", direction="negative", estimate=-1.0, ci_low=-2.0,
                ci_high=-0.5)
    assert verdicts.verdict({**diff, "p_adjusted": p}, alpha) == "supported"
    assert verdicts.verdict({**diff, "p_adjusted": p * 1.01}, alpha) == "inconclusive"
    assert verdicts.verdict({**diff, "direction": "positive", "p_adjusted": p}, alpha) == "not supported"
    p, _ = _stated("equivalence", alpha)  # the bound the old text left out: inside the margin is not enough
    eq = dict(id="e", kind="equivalence", family="primary", margin=0.1, estimate=0.0, ci_low=-0.05, ci_high=0.05)
    assert verdicts.verdict({**eq, "p_adjusted": p}, alpha) == "supported"
    assert verdicts.verdict({**eq, "p_adjusted": p * 1.01}, alpha) == "inconclusive"
    assert verdicts.verdict({**eq, "ci_low": 0.11, "ci_high": 0.2, "p_adjusted": 0.9}, alpha) == "not supported"


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1])
def test_the_stated_levels_are_the_intervals_claims_table_computes(alpha):
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.0, 0.05, 6), rng.normal(0.1, 0.05, 6)
    df = pd.DataFrame([{"analysis": "loss", "metric": "val_loss", "key": "validation", "variant": v, "seed": s,
                        "step": 9, "value": x} for v, xs in (("a", a), ("b", b)) for s, x in enumerate(xs)])
    claims = [Claim("d", "a differs from b.", "primary", "difference", "nats", "loss/val_loss/validation", "a", "b"),
              Claim("e", "a is within 0.3 of b.", "primary", "equivalence", "nats", "loss/val_loss/validation", "a",
                    "b", margin=0.3)]
    t = claims_table(df, claims, alpha=alpha).set_index("id")
    d = a - b
    se = d.std(ddof=1) / np.sqrt(len(d))
    for kind, cid in (("difference", "d"), ("equivalence", "e")):
        _, level = _stated(kind, alpha)
        half = stats.t.ppf(1 - (1 - level) / 2, len(d) - 1) * se
        assert t.loc[cid, "ci_level"] == pytest.approx(level)
        assert t.loc[cid, "ci_low"] == pytest.approx(d.mean() - half)
        assert t.loc[cid, "ci_high"] == pytest.approx(d.mean() + half)


def test_the_report_states_the_rules_of_the_alpha_constant(monkeypatch):
    table = pd.DataFrame([dict(id="x", claim="a trails b.", kind="difference", family="primary", measure="m/m/m",
                               contrast="a - b", direction="negative", estimate=-1.0, ci_low=-2.0, ci_high=-0.5,
                               ci_level=0.95, margin=np.nan, threshold=np.nan, p=0.01, p_adjusted=0.01, n_seeds=5,
                               seeds="0,1,2,3,4", unit="nats", verdict="supported", note="")])
    text = claim_lines(table)[2]  # the paragraph under "## Claims" that states the rules
    assert text.startswith("This report's only conclusions")
    assert "p is <= 0.05 and its 95% interval excludes 0" in text
    assert "p is <= 0.05 and its 90% interval (two one-sided t tests) lies inside the margin" in text
    monkeypatch.setattr(verdicts, "ALPHA", 0.01)
    text = claim_lines(table)[2]
    assert "p is <= 0.01 and its 99% interval excludes 0" in text
    assert "p is <= 0.01 and its 98% interval (two one-sided t tests)" in text
    assert "0.05" not in text and "95%" not in text and "90%" not in text
    assert verdicts.interval_level("equivalence") == pytest.approx(0.98)

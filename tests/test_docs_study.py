"""What the study how-to (docs/howto/study.md) says about claims and controls is what the code does: its table of
verdict rules is the rules analysis.study.verdicts states (and applies), a claim the study cannot measure keeps its
row as the page says, and the controls' columns it names are the committed controls.csv's."""

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.outputs import read_csv
from analysis.study import verdicts
from analysis.study.claims import Claim, claims_table

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "howto" / "study.md").read_text()
RESULTS = ROOT / "experiments" / "benchmarks" / "results"


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_rules_table_is_the_rules_the_verdicts_apply():
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `(\w+)` \|[^|]*\| ([^|]+) \|$", PAGE, re.M)}
    assert rows == verdicts.rules()  # at the default alpha, which every committed claims file uses
    assert "p is <= 0.05 and its 90% interval" in rows["equivalence"]  # the p bound, not the interval alone


def test_a_claim_the_study_cannot_measure_is_kept_as_the_page_says():
    df = pd.DataFrame([{"analysis": "loss", "metric": "val_loss", "key": "validation", "variant": "learned",
                        "seed": s, "step": 9, "value": 1.0 + 0.01 * s} for s in range(3)])
    claim = Claim("x", "permuted trails learned.", "primary", "difference", "nats", "loss/val_loss/validation",
                  "permuted", "learned", direction="positive")
    row = claims_table(df, [claim]).iloc[0]
    assert row.note.startswith("not measured: ") and row.verdict == "inconclusive"
    assert row.n_seeds == 0 and np.isnan(row.estimate) and np.isnan(row.p)
    said = flat(PAGE)
    assert ("A claim whose variants or measure the study lacks stays in `claims.csv` with no numbers, its note "
            "`not measured: ...` and its verdict `inconclusive`.") in said
    assert "did not train is left out" not in said


def test_the_controls_columns_the_page_names_are_the_committed_ones():
    said = flat(PAGE)
    for study in ("study-tiny", "study-tiny-confirmatory"):
        t = read_csv(RESULTS / study / "controls.csv")
        assert {"base_interval", "control_interval", "outcome"} <= set(t.columns) and "survives" not in t.columns
        for value in set(t.base_interval) | set(t.control_interval):
            assert f"`{value}`" in said, f"{study}/controls.csv has {value!r}, which the page does not list"

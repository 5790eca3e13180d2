"""The claims table and the rules that give its verdicts: known-answer rows, numbers recomputed with scipy, bad claims
files, and every committed study directory's claims.csv checked against the rules."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis import AnalysisError
from analysis.outputs import read_csv, write_csv
from analysis.study import verdicts
from analysis.study.claims import Claim, claims_table, load_claims

RESULTS = Path(__file__).resolve().parents[3] / "experiments" / "benchmarks" / "results"


def _row(**kw):
    base = dict(id="x", kind="difference", family="primary", direction="negative", estimate=-1.0, ci_low=-2.0,
                ci_high=-0.5, margin=np.nan, threshold=np.nan, p_adjusted=0.01)
    return {**base, **kw}


@pytest.mark.parametrize("row, expected", [
    (_row(), "supported"),
    (_row(p_adjusted=0.06), "inconclusive"),  # interval excludes 0, but not after Holm
    (_row(ci_low=-2.0, ci_high=0.1, p_adjusted=0.01), "inconclusive"),  # the interval holds 0
    (_row(direction="positive"), "not supported"),  # significant, the other way
    (_row(direction="either", estimate=1.0, ci_low=0.5, ci_high=2.0), "supported"),
    (_row(kind="interaction", direction="positive", estimate=0.2, ci_low=0.05, ci_high=0.35), "supported"),
    (_row(kind="interaction", direction="positive", estimate=0.17, ci_low=-0.03, ci_high=0.37, p_adjusted=0.078),
     "inconclusive"),
    (_row(kind="equivalence", margin=0.1, estimate=0.01, ci_low=-0.05, ci_high=0.06, p_adjusted=0.02), "supported"),
    (_row(kind="equivalence", margin=0.1, estimate=0.01, ci_low=-0.05, ci_high=0.06, p_adjusted=0.07),
     "inconclusive"),  # inside the margin, but not after Holm
    (_row(kind="equivalence", margin=0.1, estimate=0.05, ci_low=-0.05, ci_high=0.15, p_adjusted=0.2),
     "inconclusive"),  # straddles the margin
    (_row(kind="equivalence", margin=0.1, estimate=0.3, ci_low=0.2, ci_high=0.4, p_adjusted=1.0), "not supported"),
    (_row(kind="descriptive", estimate=0.95, threshold=0.9, p_adjusted=np.nan), "supported"),
    (_row(kind="descriptive", estimate=0.89, threshold=0.9, p_adjusted=np.nan), "not supported"),
    (_row(family="exploratory"), "inconclusive"),  # never a finding, whatever the numbers
    (_row(p_adjusted=np.nan), "inconclusive"),  # no test (identical on every seed)
])
def test_verdict_rules(row, expected):
    assert verdicts.verdict(row) == expected


def test_equivalence_without_a_margin_is_refused():
    with pytest.raises(AnalysisError, match="margin"):
        verdicts.verdict(_row(kind="equivalence", margin=np.nan))


def _long(values: dict, analysis="behaviours", metric="accuracy", key="facts", step=16):
    return pd.DataFrame([{"analysis": analysis, "metric": metric, "key": key, "variant": v, "seed": s, "step": step,
                          "value": x} for v, xs in values.items() for s, x in enumerate(xs)])


def test_claims_table_numbers_agree_with_scipy_and_holm_by_hand():
    rng = np.random.default_rng(0)
    learned = rng.normal(0.9, 0.05, 5)
    vals = {"learned": learned, "canonical": learned - 0.25 + rng.normal(0, 0.05, 5),
            "gf2": learned - 0.24 + rng.normal(0, 0.05, 5), "lr": learned - 0.2 + rng.normal(0, 0.05, 5),
            "cr": learned - 0.3 + rng.normal(0, 0.05, 5)}
    df = pd.concat([_long(vals), _long({k: v + 1 for k, v in vals.items()}, step=8),  # an earlier step: ignored
                    _long({"learned": [1.0] * 5, "canonical": [0.95, 1, 1, 1, 0.85], "gf2": [1.0] * 5},
                          key="ioi")], ignore_index=True)
    claims = [Claim("d", "canonical trails", "primary", "difference", "acc", measure="behaviours/accuracy/facts",
                    a="canonical", b="learned", direction="negative"),
              Claim("e", "gf2 within 0.1 of canonical", "primary", "equivalence", "acc",
                    measure="behaviours/accuracy/facts", a="gf2", b="canonical", margin=0.1),
              Claim("i", "lead shrinks with random heads", "control", "interaction", "acc",
                    measure="behaviours/accuracy/facts", a="learned", b="canonical", c="lr", d="cr",
                    direction="positive"),
              Claim("c", "ioi at ceiling", "primary", "descriptive", "acc", measures=("behaviours/accuracy/ioi",),
                    variants=("learned", "canonical", "gf2"), threshold=0.9),
              Claim("m", "missing variant", "primary", "difference", "acc", measure="behaviours/accuracy/facts",
                    a="permuted", b="learned", direction="negative")]
    t = claims_table(df, claims).set_index("id")
    # a claim whose variant was not trained keeps its row, untested
    assert t.loc["m", "n_seeds"] == 0 and t.loc["m", "verdict"] == "inconclusive" and np.isnan(t.loc["m", "p"])
    assert t.loc["m", "note"] == "not measured: permuted not in this study"
    d = vals["canonical"] - vals["learned"]
    assert t.loc["d", "estimate"] == pytest.approx(d.mean())
    assert t.loc["d", "p"] == pytest.approx(stats.ttest_rel(vals["canonical"], vals["learned"]).pvalue)
    lo, hi = stats.t.interval(0.95, 4, loc=d.mean(), scale=stats.sem(d))
    assert (t.loc["d", "ci_low"], t.loc["d", "ci_high"]) == pytest.approx((lo, hi))
    e = vals["gf2"] - vals["canonical"]
    tost = max(stats.ttest_1samp(e, -0.1, alternative="greater").pvalue,
               stats.ttest_1samp(e, 0.1, alternative="less").pvalue)
    assert t.loc["e", "p"] == pytest.approx(tost) and t.loc["e", "ci_level"] == 0.9
    assert (t.loc["e", "ci_low"], t.loc["e", "ci_high"]) == pytest.approx(stats.t.interval(0.9, 4, e.mean(),
                                                                                         stats.sem(e)))
    did = (vals["learned"] - vals["canonical"]) - (vals["lr"] - vals["cr"])
    assert t.loc["i", "estimate"] == pytest.approx(did.mean())
    assert t.loc["i", "p"] == pytest.approx(stats.ttest_1samp(did, 0).pvalue)
    assert t.loc["c", "estimate"] == 0.85 and t.loc["c", "verdict"] == "not supported" and np.isnan(t.loc["c", "p"])
    # Holm by hand: the primary family has two tested rows (the descriptive one has no p), the control family one
    p = t.loc[["d", "e"], "p"].to_numpy()
    order = np.argsort(p)
    by_hand = np.empty(2)
    by_hand[order[0]] = min(1, 2 * p[order[0]])
    by_hand[order[1]] = min(1, max(by_hand[order[0]], p[order[1]]))
    assert t.loc[["d", "e"], "p_adjusted"].to_numpy() == pytest.approx(by_hand)
    assert t.loc["i", "p_adjusted"] == pytest.approx(t.loc["i", "p"])
    assert verdicts.check(t.reset_index()) == []


def test_check_finds_a_verdict_or_an_adjustment_the_rules_do_not_give(tmp_path):
    df = _long({"learned": [0.9, 0.92, 0.88, 0.91], "canonical": [0.6, 0.65, 0.62, 0.7]})
    claims = [Claim("d", "canonical trails", "primary", "difference", "acc", measure="behaviours/accuracy/facts",
                    a="canonical", b="learned", direction="negative"),
              Claim("e", "canonical within 0.05", "primary", "equivalence", "acc",
                    measure="behaviours/accuracy/facts", a="canonical", b="learned", margin=0.05)]
    t = claims_table(df, claims)
    assert list(t.verdict) == ["supported", "not supported"]
    write_csv(t, tmp_path / "claims.csv")
    back = read_csv(tmp_path / "claims.csv")
    assert verdicts.check(back) == []
    assert any("verdict" in x for x in verdicts.check(back.assign(verdict="supported")))
    assert any("Holm" in x for x in verdicts.check(back.assign(p_adjusted=back.p)))
    assert any("margin" in x for x in verdicts.check(back.assign(margin=np.nan)))


@pytest.mark.parametrize("text, match", [
    ("alpha = 0.05\n", "declares no"),
    ("[[claim]]\nid='a'\nclaim='x'\nfamily='primary'\nkind='guess'\nunit='u'\n", "kind 'guess'"),
    ("[[claim]]\nid='a'\nclaim='x'\nfamily='primary'\nkind='equivalence'\nunit='u'\nmeasure='a/b/c'\na='x'\nb='y'\n",
     r"needs \['margin'\]"),
    ("[[claim]]\nid='a'\nclaim='x'\nfamily='primary'\nkind='equivalence'\nunit='u'\nmeasure='a/b/c'\na='x'\nb='y'\n"
     "margin=-1\n", "positive margin"),
    ("[[claim]]\nid='a'\nclaim='x'\nfamily='main'\nkind='difference'\nunit='u'\n", "family 'main'"),
    ("[[claim]]\nid='a'\nclaim='x'\nfamily='primary'\nkind='difference'\nunit='u'\nmeasure='a/b'\na='x'\nb='y'\n"
     "direction='up'\n", "direction 'up'"),
    ("[[claim]]\nid='a'\nclaim='x'\nfamily='primary'\nkind='descriptive'\nunit='u'\nmeasures=['a/b/c']\n"
     "variants=['x']\nthreshold=0.9\n[[claim]]\nid='a'\nclaim='y'\nfamily='primary'\nkind='descriptive'\nunit='u'\n"
     "measures=['a/b/c']\nvariants=['x']\nthreshold=0.9\n", "repeat"),
    ("[[claim]\n", "not TOML"),
])
def test_bad_claims_files_are_refused_in_one_line(text, match, tmp_path):
    path = tmp_path / "claims.toml"
    path.write_text(text)
    with pytest.raises(AnalysisError, match=match):
        load_claims(path)


def test_the_shipped_claims_files_load():
    default, alpha = load_claims()
    frozen, _ = load_claims(RESULTS.parents[1] / "claims" / "confirmatory.toml")
    assert alpha == 0.05 and {c.family for c in default} == set(verdicts.FAMILIES)
    assert all(c.margin for c in frozen if c.kind == "equivalence")


def test_every_committed_study_has_claims_that_follow_the_rules():
    studies = sorted(p.parent for p in RESULTS.glob("study-*/measurements.csv"))
    assert len(studies) >= 1
    for study in studies:
        t = read_csv(study / "claims.csv")
        assert verdicts.check(t) == [], study.name
        assert t.margin[t.kind == "equivalence"].gt(0).all()


def test_the_report_command_rewrites_claims_and_refuses_bad_input(tmp_path, capsys):
    from analysis.cli.study import main

    study = tmp_path / "study"
    study.mkdir()
    df = pd.concat([_long({"learned": [0.9, 0.92, 0.88], "canonical": [0.6, 0.65, 0.62], "gf2": [0.61, 0.6, 0.7]}),
                    _long({"learned": [1.3, 1.31, 1.32], "canonical": [1.35, 1.33, 1.36], "gf2": [1.34, 1.36, 1.33]},
                          analysis="loss", metric="val_loss", key="validation")], ignore_index=True)
    write_csv(df, study / "measurements.csv")
    with pytest.raises(SystemExit) as e:
        main(["report", str(study)])
    assert e.value.code == 0
    t = read_csv(study / "claims.csv")
    tested = t[t.n_seeds > 0]
    assert {"facts-canonical", "facts-gf2", "loss-canonical-learned", "loss-gf2-canonical",
            "facts-gf2-canonical"} == set(tested.id) and verdicts.check(t) == []
    assert set(t.id) == {c.id for c in load_claims()[0]}  # every declared claim has its row
    text = (study / "report.md").read_text()
    assert "## Claims" in text and "The canonical code trails the learned table on the facts task." in text
    capsys.readouterr()
    bad = tmp_path / "bad.toml"
    bad.write_text("[[claim]]\nid='a'\n")
    for argv, match in ((["report", str(tmp_path / "nowhere")], "has no measurements.csv"),
                        (["report", str(study), "--claims", str(bad)], "needs a non-empty 'claim'"),
                        (["report", str(study), "--claims", str(tmp_path / "none.toml")], "cannot be read")):
        before = (study / "claims.csv").read_bytes()
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and match in err and len(err.splitlines()) == 1
        assert (study / "claims.csv").read_bytes() == before  # nothing half-written


def test_a_study_can_measure_only_the_analyses_its_claims_read(tmp_path, capsys):
    from analysis.cli.study import main
    from analysis.study.pipeline import check_analyses, measurement_tasks, study_tasks
    from fixedid.train.config import TrainConfig

    cfg = TrainConfig.load("tiny")
    ckpts = {(0, "learned"): tmp_path / "l", (0, "permuted"): tmp_path / "p", (1, "learned"): tmp_path / "l1"}
    every = measurement_tasks(cfg, tmp_path, ckpts)
    some = measurement_tasks(cfg, tmp_path, ckpts, check_analyses("behaviours,interventions"))
    assert {m.analysis for m in some} == {"behaviours", "interventions"}
    assert len(some) == sum(m.analysis in ("behaviours", "interventions") for m in every)
    names = [t.name for t in study_tasks(cfg, tmp_path, [0], [0], ("learned", "canonical"),
                                         analyses_only=["loss"])]
    assert not any(n.startswith("similarity") for n in names) and any(n.endswith(".loss") for n in names)
    assert any(t.name.startswith("similarity") for t in study_tasks(cfg, tmp_path, [0], [0], ("learned", "canonical"),
                                                                     analyses_only=["loss", "similarity"]))
    with pytest.raises(SystemExit) as e:
        main(["run", "tiny", "--out", str(tmp_path / "s"), "--analyses", "loss,probe"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "unknown probe" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "s").exists()  # refused before anything is written

"""The study pipeline: seeds, trained GF(2) recodings, every checkpoint measured, intervals over seeds, a report,
restartable without redoing work, figures redrawn from the CSVs alone."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis import AnalysisError
from analysis.outputs import read_csv
from analysis.study import analyses, pipeline
from analysis.study.pipeline import parse_seeds, run_study
from analysis.study.report import compare, summarise

from tests._fixtures import STUDY_CONFIG


def test_the_first_gf2_seed_is_the_gf2_variants_recoding_even_when_it_is_0():
    """A config whose gf2_seed is 3 with --gf2-seeds 0,3: the gf2 variant reads recoding 0 and gf2-r3 recoding 3
    (not the config's 3 twice, pooled as if they were two recodings)."""
    from analysis.study.pipeline import training_runs
    from fixedid.train.config import TrainConfig

    base = TrainConfig.load("tiny")
    cfg = TrainConfig(model={**base.model, "gf2_seed": 3}, data=base.data, train=base.train)
    runs = training_runs(cfg, [0], [0, 3])
    assert [(name, c.model["gf2_seed"]) for _, name, c, _, _ in runs] == [("seed0", 0), ("seed0-gf2r3", 3)]


def test_seed_0_recoding_0_is_the_demos_own_training():
    """The packaged tiny config at its own seed and default recoding: the study's run keeps the config's trained key,
    so the study, behaviours.py and the demo share one cache entry; a further recoding gets a key of its own."""
    from analysis.study.pipeline import training_runs
    from fixedid.train.config import TrainConfig

    base = TrainConfig.load("tiny")
    assert "gf2_seed" not in base.model and base.train.seed == 0
    keys = [c.trained_key() for _, _, c, _, _ in training_runs(base, [0], [0, 1])]
    assert keys[0] == base.trained_key()
    assert keys[1] != base.trained_key()


def test_seed_lists_parse_or_fail_clearly():
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds("0-2,5") == [0, 1, 2, 5] and parse_seeds(" 3 ") == [3]
    assert parse_seeds("3,0,3") == [3, 0]  # the order given: the first GF(2) seed is the gf2 variant's
    for bad in ("", "a,b", "1-", "3-1", "-1", "0,,1"):
        with pytest.raises(AnalysisError, match="does not parse"):
            parse_seeds(bad)


def test_intervals_and_paired_comparisons():
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(4):
        shift = rng.normal()
        rows += [{"analysis": "a", "metric": "m", "key": "k", "variant": "learned", "seed": seed, "step": 1,
                  "value": shift},
                 {"analysis": "a", "metric": "m", "key": "k", "variant": "canonical", "seed": seed, "step": 1,
                  "value": shift + 1.0 + 0.01 * seed}]
    df = pd.DataFrame(rows)
    s = summarise(df).set_index("variant")
    v = df[df.variant == "learned"].value.to_numpy()
    half = stats.t.ppf(0.975, 3) * v.std(ddof=1) / 2
    assert s.loc["learned", "n"] == 4 and np.isclose(s.loc["learned", "lo"], v.mean() - half)
    # the seed effect is shared, so the paired difference is tight and exceeds the spread; the unpaired intervals
    # of the two variants overlap
    c = compare(df).iloc[0]
    assert (c.a, c.b) == ("canonical", "learned") and c.exceeds and c.lo > 0.9
    assert s.loc["learned", "hi"] > s.loc["canonical", "lo"]
    one = compare(df[df.seed == 0]).iloc[0]
    assert one.n == 1 and not one.exceeds


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "study"
    cfg = out.parent / "study.toml"
    cfg.write_text(STUDY_CONFIG)
    with pytest.MonkeyPatch.context() as mp:  # the measurements' sample sizes, smaller: what is tested is the wiring
        for name, value in (("TOKENS", 1024), ("N_PAIRS", 16), ("EVAL_LIMIT", 10), ("BOOT", 100),
                            ("PROBE_C", 1.0)):
            mp.setattr(analyses, name, value)
        report = run_study(str(cfg), out, [0, 1], [0, 1], variants=("learned", "canonical", "gf2", "permuted"),
                           quiet=True)
    return out, report, str(cfg)


def test_study_trains_measures_and_reports_over_seeds(study):
    out, report, _ = study
    m = pd.read_csv(out / "measurements.csv", dtype={"key": str})
    assert set(m.variant) == {"learned", "canonical", "gf2", "permuted", "gf2-r1"}
    assert set(m.seed) == {0, 1} and set(m[m.analysis == "behaviours"].step) == {8, 16}  # kept snapshot and end
    assert set(m[m.analysis == "probes"].step) == {8, 16} and set(m[m.analysis == "eval"].step) == {16}
    assert "permuted" not in set(m[m.analysis == "eval"].variant)  # lm-eval runs on the study's own variants only
    assert "permuted" in set(m[m.analysis == "context"].variant)
    assert {"behaviours", "loss", "probes", "eval", "patching", "interventions", "recoding", "erasure",
            "lens", "head", "context", "circuits"} <= set(m.analysis)
    landing = m[m.metric.isin(["flip_at_landing", "delta_loss_at_landing"])]  # matched landing share, fixed codes
    assert set(landing.variant) == {"canonical", "gf2", "gf2-r1", "permuted"}
    assert set(landing[landing.metric == "flip_at_landing"].key) == {"landing 75%", "landing 90%"}
    # similarity with its references, once over every seed: the ceiling needs a variant at two seeds
    refs = pd.read_csv(out / "similarity" / "step16" / "references.csv")
    assert {"same_interface_cross_seed", "cross_interface_cross_seed", "cross_interface_same_seed",
            "own_initialisation", "permutation_null"} <= set(refs.reference)
    assert "permuted" not in set(refs.variant_a) | set(refs.variant_b)  # the study's own variants only
    # the IOI circuit of each study variant, and the overlap of the circuits across seeds and variants
    c = m[m.analysis == "circuits"]
    assert set(c.variant) == {"learned", "canonical", "gf2", "gf2-r1"} and set(c.step) == {16}
    every = c[(c.metric == "recovered") & c.key.str.startswith("top ")].groupby(["variant", "seed"]).value.last()
    assert np.allclose(every, 1, atol=1e-3)  # every edge kept: the clean run
    ov = pd.read_csv(out / "similarity" / "step16" / "circuits.csv")
    assert {"same_interface_cross_seed", "cross_interface_same_seed", "cross_interface_cross_seed"} <= set(ov.kind)
    assert ((ov.jaccard >= 0) & (ov.jaccard <= 1)).all() and ov.null.nunique() == 1
    assert "## Circuits across seeds and variants" in report.read_text()
    er = m[m.analysis == "erasure"]
    assert "learned" in set(er.variant) and {"minus_placebo", "edit_norm_leace", "edit_norm_placebo"} <= set(er.metric)
    assert "own_code_bit" in set(er[er.variant == "gf2"].key.str.split("@").str[0])
    assert "nn_overlap_excess" in set(m[(m.analysis == "head") & (m.variant == "learned")].metric)  # another seed's
    # the trained recodings differ: gf2 and gf2-r1 read different codes
    meta = [json.loads((out / "runs" / r / "gf2" / "config.json").read_text()) for r in ("seed0", "seed0-gf2r1")]
    assert meta[0]["gf2_seed"] != meta[1]["gf2_seed"]
    s = pd.read_csv(out / "summary.csv")
    base = s[s.variant.isin(["learned", "canonical", "gf2"]) & (s.analysis == "behaviours")]
    assert (base.n == 2).all() and (base.lo <= base["mean"]).all() and (base["mean"] <= base.hi).all()
    c = pd.read_csv(out / "comparisons.csv")
    assert {("canonical", "learned"), ("gf2", "learned"), ("gf2", "canonical"), ("gf2-r1", "gf2")} <= set(
        zip(c.a, c.b))
    text = report.read_text()
    assert "standard error" in text and "seed spread" not in text and "## Behaviours on the built-in tasks" in text
    # the claims (the default claims whose variants were trained, each verdict by the rules), the pooled
    # recodings, and the prompts' bootstrap from the per-item files
    from analysis.study import verdicts

    claims = read_csv(out / "claims.csv")
    assert set(claims[claims.n_seeds > 0].id) == {
        "facts-canonical", "facts-gf2", "facts-gf2-r1", "loss-canonical-learned", "loss-gf2-canonical",
        "loss-gf2-r1-canonical", "facts-gf2-canonical", "facts-gf2-r1-canonical", "noise-canonical", "noise-gf2",
        "ceiling", "facts-not-frequency", "eval-facts-canonical", "noise50-canonical"}
    assert verdicts.check(claims) == [] and set(claims.n_seeds) == {0, 2}
    assert (claims[claims.n_seeds == 0].verdict == "inconclusive").all()  # the controls not trained: untested
    assert "## Claims" in text and "gf2 (pooled) - canonical" in text and "Declared before looking" not in text
    pooled = c[c.a == "gf2 (pooled)"]
    assert pooled.boot.dropna().str.startswith("seeds x recodings").all()
    assert (pooled[pooled.analysis == "behaviours"].boot == "seeds x recodings x prompts").all()
    beh = c[(c.analysis == "behaviours") & (c.a == "canonical") & (c.b == "learned") & (c.step == 16)]
    assert (beh.boot == "seeds x prompts").all() and len(list((out / "items").rglob("behaviours.csv"))) >= 10
    assert "## Across training" in text
    # the permuted control re-measures learned - canonical and canonical - gf2 (as canonical - permuted)
    ctrl = pd.read_csv(out / "controls.csv", dtype={"key": str})
    assert set(ctrl.control) == {"permuted"} and set(ctrl.base) == {"learned - canonical", "canonical - gf2"}
    assert not ctrl.outcome.str.contains("|".join(VERDICT_WORDS)).any()  # descriptions of two intervals, no verdicts
    assert "## Similarity with its references" in text and "canonical vs gf2 @" in text
    assert "## The controls' differences" in text and "With 2 seeds a paired difference" in text
    assert "survives" not in text.split("## Claims")[1].split("## Figures")[0]  # no conclusion beside the claims
    for stem in ("behaviours_eval", "interventions", "probes", "similarity", "training", "comparisons"):
        assert (out / "figures" / f"{stem}.png").exists() and (out / "figures" / f"{stem}.pdf").exists()


def test_study_restarts_without_redoing_work(study):
    out, _, cfg = study
    ckpt = out / "runs" / "seed1" / "canonical" / "model.safetensors"
    kept = sorted((out / "measurements").rglob("*.csv"))
    stamps = {p: p.stat().st_mtime_ns for p in [ckpt, *kept]}
    victim = out / "measurements" / "seed1" / "gf2" / "step16" / "recoding.csv"
    victim.unlink()  # as if interrupted before this measurement
    with pytest.MonkeyPatch.context() as mp:  # the report is redrawn (tested above); what is tested here is the rest
        mp.setattr(pipeline, "write_report", lambda cfg, out, seeds, gf2_seeds, claims=None: out / "report.md")
        run_study(cfg, out, [0, 1], [0, 1], variants=("learned", "canonical", "gf2", "permuted"), quiet=True)
    assert victim.exists()
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items() if p != victim)
    with pytest.raises(AnalysisError, match="another config"):
        run_study("tiny", out, [0], [0], quiet=True)


def test_figures_redrawn_from_csvs_and_bad_input(study, tmp_path, capsys):
    from analysis.cli.main import main
    from analysis.cli.study import main as study_main

    out, _, _ = study
    for f in (out / "figures").glob("*.png"):
        f.unlink()
    with pytest.raises(SystemExit) as e:
        main(["figures", "--results", str(out)])
    assert e.value.code == 0 and (out / "figures" / "comparisons.png").exists()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["figures", "--results", str(tmp_path)])
    assert e.value.code == 2 and "no measurements.csv" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        study_main(["run", "tiny", "--seeds", "zero", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "does not parse" in err and "\n" not in err and not (tmp_path / "s").exists()


def test_control_table_describes_where_each_interval_lies():
    """Synthetic seeds with known effects: learned beats canonical by 0.2 nats, as it does canonical-matched
    (learned - canonical-matched = -0.2), but not with both heads frozen (both 1.0: no gap); the paired intervals are
    recomputed here from the t quantile, and the table describes them without a verdict."""
    from analysis.study.controls import control_table, seeds_statement

    rng = np.random.default_rng(1)
    rows = []
    for seed in range(5):
        shift = rng.normal(0, 0.3)  # shared by every variant of a seed: pairing removes it
        noise = rng.normal(0, 0.01, size=5)
        loss = {"learned": 1.0, "canonical": 1.2, "canonical-matched": 1.2, "learned-randomhead": 1.0,
                "canonical-randomhead": 1.0}
        for (v, value), e in zip(loss.items(), noise):
            rows.append({"analysis": "loss", "metric": "val_loss", "key": "", "variant": v, "seed": seed, "step": 9,
                         "value": value + shift + e})
    df = pd.DataFrame(rows)
    t = control_table(df).set_index("control")
    assert set(t.index) == {"canonical-matched", "learned-randomhead, canonical-randomhead"}  # the others untrained
    w = df.pivot_table(index="seed", columns="variant", values="value")
    d = (w["learned"] - w["canonical"]).to_numpy()
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / np.sqrt(5)
    r = t.loc["canonical-matched"]
    assert np.isclose(r.base_diff, d.mean()) and np.isclose(r.base_hi - r.base_diff, half)
    assert r.base_interval == "interval < 0" and r.control_interval == "interval < 0"
    assert r.both_exclude_0_same_sign and r.base_n == r.control_n == 5
    h = t.loc["learned-randomhead, canonical-randomhead"]
    assert h.control_interval == "interval includes 0" and not h.both_exclude_0_same_sign
    assert r.outcome == "both intervals exclude 0 (< 0)" and h.outcome == "only the base interval excludes 0 (< 0)"
    assert {"survives", "base_conclusion", "control_conclusion"}.isdisjoint(t.columns)
    assert "1.24 times" in seeds_statement(5) and "2.48 times" in seeds_statement(5)  # t(4)/sqrt5, t(2)/sqrt3


#: Words that read a verdict off two intervals side by side; a control check's description uses none of them.
VERDICT_WORDS = ("survive", "gone", "reversed", "appears", "no difference", "same", "differ", "changed", "removes")


def test_control_outcome_describes_the_two_intervals():
    """Every case of (base interval, controlled interval), written out by hand, and no verdict word in any."""
    from analysis.study.controls import interval, outcome

    cases = {("interval < 0", "interval < 0"): "both intervals exclude 0 (< 0)",
             ("interval > 0", "interval < 0"): "both intervals exclude 0, base > 0 and controlled < 0",
             ("interval < 0", "interval includes 0"): "only the base interval excludes 0 (< 0)",
             ("interval includes 0", "interval > 0"): "only the controlled interval excludes 0 (> 0)",
             ("interval includes 0", "interval includes 0"): "neither interval excludes 0",
             ("interval > 0", "identical on every seed"): "base interval > 0; controlled identical on every seed",
             ("identical on every seed", "interval includes 0"):
                 "base identical on every seed; controlled interval includes 0",
             ("too few seeds", "interval < 0"): "too few seeds"}
    assert {k: outcome(*k) for k in cases} == cases
    assert not [w for text in cases.values() for w in VERDICT_WORDS if w in text]
    one = dict(n=5, diff=0.1, lo=0.05, hi=0.15, identical=False)
    assert interval(one) == "interval > 0" and interval({**one, "lo": -0.2, "hi": -0.1}) == "interval < 0"
    assert interval({**one, "lo": -0.05}) == "interval includes 0" and interval({**one, "n": 1}) == "too few seeds"
    assert interval({**one, "identical": True}) == "identical on every seed"


def _long(values: dict, analysis="loss", metric="val_loss", key="", step=9):
    return pd.DataFrame([{"analysis": analysis, "metric": metric, "key": key, "variant": v, "seed": s, "step": step,
                          "value": x} for v, xs in values.items() for s, x in enumerate(xs)])


def test_comparisons_pool_recodings_and_never_flag_identical_differences():
    """Known-answer tables: the pooled gf2 is the per-seed mean over recodings; identical differences are not
    flagged; no comparison carries a family or an adjusted p (the claims do: tests/analysis/study/test_claims.py)."""
    from analysis.study.comparisons import compare

    df = _long({"learned": [1.0, 1.1, 0.9], "canonical": [1.2, 1.3, 1.1],  # canonical - learned = +0.2 every seed
                "gf2": [1.5, 1.2, 1.4], "gf2-r1": [1.3, 1.6, 1.2]})
    c = compare(df).set_index(["a", "b"])
    ident = c.loc[("canonical", "learned")]
    assert ident.identical and not ident.excludes_zero and not ident.exceeds and np.isnan(ident.p)
    pooled = c.loc[("gf2 (pooled)", "canonical")]
    d = (np.array([1.4, 1.4, 1.3]) - np.array([1.2, 1.3, 1.1]))
    assert np.isclose(pooled["diff"], d.mean())
    # the recodings are a random effect: the two-way ANOVA of the [seeds, recodings] differences, written out here
    t = np.array([[1.5, 1.3], [1.2, 1.6], [1.4, 1.2]]) - np.array([1.2, 1.3, 1.1])[:, None]
    rows, cols, m = t.mean(1), t.mean(0), t.mean()
    ms_s, ms_r = 2 * rows.var(ddof=1), 3 * cols.var(ddof=1)  # 3 seeds x 2 recodings
    ms_e = ((t - rows[:, None] - cols + m) ** 2).sum() / 2
    # variance components, each set to 0 where its estimate is negative
    s_seed, s_rec = max(0.0, (ms_s - ms_e) / 2), max(0.0, (ms_r - ms_e) / 3)
    v = s_seed / 3 + s_rec / 2 + ms_e / 6
    assert s_seed == 0 and s_rec == 0  # this table: V is the residual mean square's alone, on its 2 df
    assert np.isclose(pooled.p, 2 * stats.t.sf(abs(m) / np.sqrt(v), 2))
    assert np.isclose(pooled.hi - pooled["diff"], stats.t.ppf(0.975, 2) * np.sqrt(v))
    assert np.isnan(pooled.p_sign) and pooled.boot == "seeds x recodings"
    assert pooled.boot_lo <= pooled["diff"] <= pooled.boot_hi
    assert ("gf2 (pooled)", "gf2") not in c.index and ("gf2-r1", "gf2") in c.index  # never against its own pool
    assert not {"family", "family_size", "p_holm"} & set(c.columns)
    # a variant measured as NaN on every seed (a measure that does not apply to it) is left out, not an error
    nan = _long({"learned": [np.nan] * 3, "canonical": [1.0, 2.0, 3.0], "gf2": [1.5, 2.1, 3.3]})
    assert set(zip(compare(nan).a, compare(nan).b)) == {("gf2", "canonical")}
    # ... and a key NaN for every variant is no comparison (a standardisation with no rate for it), not an error
    allnan = pd.concat([df, _long({v: [np.nan] * 3 for v in ("learned", "canonical")}).assign(key="none")])
    assert set(compare(allnan).key) == set(df.key)


def test_item_bootstrap_widens_an_interval_that_seeds_alone_make_narrow():
    """Per-prompt values: the same 40 prompts for every seed, a large prompt-to-prompt spread in the difference and
    almost none between seeds. The t interval over seeds is then far narrower than the crossed bootstrap, which
    must be close to the closed form 1.96 x sd(prompt differences) / sqrt(40)."""
    from analysis.study.comparisons import compare

    rng = np.random.default_rng(0)
    effect = rng.normal(0.1, 1.0, 40)  # per-prompt canonical - learned
    rows, items = [], []
    for seed in range(3):
        for v, add in (("learned", 0.0), ("canonical", 1.0)):
            vals = 2.0 + add * effect + rng.normal(0, 0.001, 40)
            items += [{"analysis": "behaviours", "metric": "logit_diff", "key": "ioi", "variant": v, "seed": seed,
                       "step": 5, "item": i, "value": x} for i, x in enumerate(vals)]
            rows.append({"analysis": "behaviours", "metric": "logit_diff", "key": "ioi", "variant": v, "seed": seed,
                         "step": 5, "value": vals.mean()})
    c = compare(pd.DataFrame(rows), pd.DataFrame(items)).iloc[0]
    assert c.boot == "seeds x prompts"
    half = 1.96 * effect.std(ddof=1) / np.sqrt(40)
    assert (c.boot_hi - c.boot_lo) / 2 == pytest.approx(half, rel=0.2) and (c.hi - c.lo) < 0.1 * (c.boot_hi - c.boot_lo)


def test_the_report_says_what_the_matched_comparisons_changed():
    """Known answer: at 4 transvections gf2 loses clearly more than canonical (+1.0 on every seed, with noise), at
    1 bit moved the difference is noise around 0 - the conclusion changes; the noise estimand keeps its sign."""
    from analysis.study.comparisons import compare
    from analysis.study.sections import matched_lines

    rng = np.random.default_rng(0)
    rows = []
    for seed in range(4):
        for v, shift in (("learned", 0.0), ("canonical", 0.0), ("gf2", 1.0)):
            vals = {("recoding", "delta_loss", "transvection k=4"): 2.0 + shift + rng.normal(0, 0.05),
                    ("recoding", "delta_loss_at_hamming", "transvection 1 bits"): 1.0 + rng.normal(0, 0.3),
                    ("interventions", "noise_delta_loss", "scale 0.5"): 0.5 + shift + rng.normal(0, 0.05),
                    ("interventions", "noise_delta_loss", "decode 50%"): 0.8 + shift + rng.normal(0, 0.05)}
            rows += [{"analysis": a, "metric": m, "key": k, "variant": v, "seed": seed, "step": 7, "value": x}
                     for (a, m, k), x in vals.items()]
    lines = matched_lines(compare(pd.DataFrame(rows)), 7)
    table = {(ln.split(" | ")[0][2:], ln.split(" | ")[1]): ln for ln in lines if ln.startswith("| ") and " - " in ln}
    rec = table[("recoding: 4 transvections -> at 1 bit moved", "gf2 - canonical")]
    assert "> 0" in rec.split(" | ")[2] and "interval includes 0" in rec.split(" | ")[3] and rec.endswith("| yes |")
    noise = table[("input noise: half the rows' RMS -> where 50% of rows still decode", "gf2 - canonical")]
    assert noise.endswith("| no |")
    assert not any("erasure" in k[0] for k in table)  # not measured on either side: no row


def test_depth_figure_draws_only_the_groups_that_have_the_metric():
    """A metric that only some groups have (the held-out-types probes exist for the bits, not for the labels): one
    panel per group that has it, and none at all when no group has it."""
    from analysis.study.report import depth_figure

    rows = [{"analysis": "probes", "metric": m, "key": f"{g}@{h}", "variant": v, "seed": s, "step": 5, "value": 0.7}
            for g, ms in (("canonical_bit", ("score", "score_types")), ("number", ("score", "lexical")))
            for m in ms for h in ("hook_embed", "blocks.0.hook_resid_pre") for v in ("learned", "gf2")
            for s in (0, 1)]
    fig = depth_figure(pd.DataFrame(rows), "probes", "score_types", ylabel="y", title="t")
    assert len([ax for ax in fig.axes if ax.get_title()]) == 1
    assert depth_figure(pd.DataFrame(rows), "probes", "nothing", ylabel="y", title="t") is None


def test_forest_legend_names_every_variant_of_every_panel():
    """The bit-flip panel has no learned variant; the legend below the panels still names learned (drawn in a later
    panel) and lists the variants in the study's order."""
    from analysis.study.report import forest

    rows = [{"analysis": a, "metric": m, "key": "k", "variant": v, "seed": s, "step": 5, "value": 0.5 + 0.1 * s}
            for a, m, vs in (("interventions", "bitflip", ("canonical", "gf2")),
                             ("interventions", "noise", ("learned", "canonical", "gf2")))
            for v in vs for s in (0, 1)]
    fig = forest(pd.DataFrame(rows), [("interventions", "bitflip", "x"), ("interventions", "noise", "y")], title="t")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["learned", "canonical", "gf2"]


def test_the_null_rows_of_the_similarity_reading_reach_the_report(study):
    """reading.csv keys its permutation-null rows ``null``, which pandas' default parser reads as missing: they must
    survive loading, and the report must name the null it reads the similarity against."""
    from analysis.study.report import load_similarity

    out, report, _ = study
    path = next((out / "similarity").glob("step*/reading.csv"))
    written = sum(line.split(",").count("null") for line in path.read_text().splitlines()[1:])
    assert written > 0  # the study wrote null rows
    _, reading = load_similarity(out)
    assert (reading.quantity == "null").sum() == written and reading.quantity.notna().all()
    assert "null [" in report.read_text()


def test_a_table_keeps_keys_that_pandas_would_read_as_missing(tmp_path):
    from analysis.outputs import read_csv, write_csv

    df = pd.DataFrame({"key": ["null", "NA", "None", "nan", "x"], "value": [1.0, np.nan, 3.0, 4.0, 5.0]})
    write_csv(df, tmp_path / "t.csv")
    back = read_csv(tmp_path / "t.csv")
    assert list(back.key) == ["null", "NA", "None", "nan", "x"]
    assert np.isnan(back.value[1]) and back.value.dtype == np.float64


def test_crosscoders_are_made_only_when_named_and_become_measurements(study, tmp_path):
    """``--analyses crosscoders``: every pair of variants per seed and each variant against the next seed, at every
    depth of the stream, as measurements a claim can name (labels ``<a>+<b>``, ``<v>+<v>``)."""
    import shutil

    from analysis.study.analyses import check_analyses
    from analysis.study.crosscoders import crosscoders_done, measure_crosscoders
    from analysis.study.pipeline import collect_measurements

    out, _, _ = study
    assert check_analyses(None) is None and check_analyses("crosscoders") == ["crosscoders"]
    assert not (out / "crosscoders").exists()  # a study makes none unless they are named
    copy = tmp_path / "study"
    models = {(s, v): out / "runs" / f"seed{s}" / v for s in (0, 1) for v in ("learned", "canonical")}
    where = measure_crosscoders(copy, 16, models, tokens=256)
    pairs = pd.read_csv(where / "pairs.csv")
    assert set(pairs.label) == {"learned+canonical", "learned+learned", "canonical+canonical"}
    assert set(pairs.hook) == {"blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"}
    assert len(pairs) == 3 * (2 + 2 * 2)  # per depth: a pair per seed, a reference per variant and seed
    assert pairs[["shared", "exclusive_a", "exclusive_b"]].sum(1).le(1 + 1e-9).all()
    assert crosscoders_done(copy, 16, models) and measure_crosscoders(copy, 16, models, tokens=256) == where
    m = collect_measurements(copy)
    assert set(m.analysis) == {"crosscoders"} and set(m.seed) == {0, 1}
    assert {"shared", "lopsided", "exclusive_learned", "exclusive_canonical"} <= set(
        m[m.variant == "learned+canonical"].metric)
    assert set(m[m.variant == "canonical+canonical"].metric) == {"shared", "lopsided", "exclusive_canonical"}
    shutil.rmtree(copy)

"""Circuits from edge scores: the ablated run's ends (every edge kept: the clean run; none kept, corrupted
replacements: the corrupted run), equality with TransformerLens 4.3's ``faithfulness`` on the split-qkv bridge, the
curve, the minimality and complement checks, and bad input."""

import numpy as np
import pytest
from transformer_lens.tools.analysis.attribution_patching import (EdgeAttributionConfig, attribution_patch,
                                                                   faithfulness)

from analysis import AnalysisError, make_pairs
from analysis.causal.circuits import circuit_checks, default_ks, faithfulness_curve
from analysis.causal.edges import edge_attribution, exact_edge_effects
from analysis.interop.split_bridge import to_split_qkv_bridge

from tests._fixtures import tl_label
from tests.analysis.causal._circuits import PAIRS, circuit_model


@pytest.fixture(scope="module", params=["ln_bias", "gqa"])
def model(request, tmp_path_factory):
    return circuit_model(tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def batch(model):
    return make_pairs(model, PAIRS)


@pytest.fixture(scope="module")
def scores(model, batch):
    return edge_attribution(model, batch, metric="logit_diff")


def top(scores, k):
    return scores.loc[scores.score.abs().sort_values(ascending=False, kind="stable").index[:k]]


def test_the_curve_runs_from_the_corrupted_to_the_clean_run(model, batch, scores):
    curve = faithfulness_curve(model, batch, scores, metric="logit_diff")
    assert list(curve.k) == default_ks(len(scores)) and curve.k.iloc[-1] == len(scores)
    assert abs(curve.recovered.iloc[0]) < 1e-4 and abs(curve.recovered.iloc[-1] - 1) < 1e-4
    assert 0 < curve.attrs["area"] < 1.5 and curve.n_edges.is_monotonic_increasing
    assert curve.recovered.iloc[1:-1].std() > 1e-3  # the middle of the curve is measured, not interpolated
    nodes = faithfulness_curve(model, batch, scores, unit="nodes", metric="logit_diff")
    assert abs(nodes.recovered.iloc[0]) < 1e-4 and abs(nodes.recovered.iloc[-1] - 1) < 1e-4
    zero = faithfulness_curve(model, batch, scores, ks=[0, len(scores)], ablation="zero", metric="logit_diff")
    assert abs(zero.recovered.iloc[-1] - 1) < 1e-4 and abs(zero.recovered.iloc[0]) > 1e-3  # zero is not corrupt
    for ablation in ("mean", "resample"):
        got = faithfulness_curve(model, batch, scores, ks=[len(scores)], ablation=ablation, metric="logit_diff")
        assert abs(got.recovered.iloc[0] - 1) < 1e-4


def test_one_edge_kept_alone_is_exact_edge_patching_of_its_complement(model, batch, scores):
    """Keeping every edge but one, with corrupted replacements, is the clean run with that edge's sender patched
    from the corrupted run into that receiver only: noise-mode path patching of the edge."""
    exact = exact_edge_effects(model, batch, mode="noise", receivers="logits", metric="logit_diff")
    sender = exact.loc[exact.effect.abs().idxmax(), "sender"]
    checks = circuit_checks(model, batch, list(zip(scores.sender, scores.receiver)), metric="logit_diff")
    row = checks[(checks.sender == sender) & (checks.receiver == "logits")].iloc[0]
    gap = checks.attrs  # recovered of the full circuit is 1; the drop is the edge's noising effect over the gap
    clean = faithfulness_curve(model, batch, scores, ks=[0], metric="logit_diff").attrs
    effect = float(exact.set_index("sender").effect[sender])
    assert abs(gap["recovered"] - 1) < 1e-4 and abs(gap["complement"]) < 1e-4
    assert np.isclose(row.drop_in_recovered, -effect / (clean["clean"] - clean["corrupt"]), atol=1e-4)


def test_equals_transformer_lens_faithfulness(model, batch, scores):
    if model.cfg.kv_heads != model.cfg.n_heads:
        pytest.skip("TransformerLens's faithfulness refuses grouped keys and values")
    bridge = to_split_qkv_bridge(model).eval()
    code = getattr(model.embed, "code", None)
    if code is not None:
        code.requires_grad_(True)
    try:
        for i in (0,):  # one pair: TL measures a pair at a time, and each of its calls walks every hook point
            a, w = int(batch.answer[i]), int(batch.wrong[i])
            fn = lambda lg, a=a, w=w: lg[0, -1, a] - lg[0, -1, w]  # noqa: E731
            graph = attribution_patch(bridge, batch.clean[i:i + 1], batch.corrupt[i:i + 1], fn,
                                      EdgeAttributionConfig(granularity="edge")).edge_scores
            for k in (64, 128):
                keep = set(zip(*top(scores, k)[["sender", "receiver"]].T.values))
                circuit = [(u, v) for (u, v) in graph if (tl_label(u), tl_label(v)) in keep]  # every position
                theirs = faithfulness(bridge, batch.clean[i:i + 1], batch.corrupt[i:i + 1], fn, circuit).recovered
                ours = circuit_checks(model, make_pairs(model, PAIRS[i]), top(scores, k), metric="logit_diff").attrs["recovered"]
                assert abs(ours - theirs) < 1e-4, (i, k, ours, theirs)
    finally:
        if code is not None:
            code.requires_grad_(False)


def test_bad_input(model, batch, scores):
    with pytest.raises(AnalysisError, match="unknown ablation"):
        faithfulness_curve(model, batch, scores, ablation="noise", metric="logit_diff")
    with pytest.raises(AnalysisError, match="unknown unit"):
        faithfulness_curve(model, batch, scores, unit="heads", metric="logit_diff")
    with pytest.raises(AnalysisError, match="every k"):
        faithfulness_curve(model, batch, scores, ks=[len(scores) + 1], metric="logit_diff")
    with pytest.raises(AnalysisError, match="not an edge"):
        circuit_checks(model, batch, [("L2H0", "L0H0.q")], metric="logit_diff")
    with pytest.raises(AnalysisError, match="holds no edge"):
        circuit_checks(model, batch, [], metric="logit_diff")
    with pytest.raises(AnalysisError, match="at least 2 pairs"):
        faithfulness_curve(model, make_pairs(model, PAIRS[0]), scores, ablation="resample", metric="logit_diff")
    with pytest.raises(AnalysisError, match="summed over positions"):
        faithfulness_curve(model, batch, edge_attribution(model, batch, per_position=True, metric="logit_diff"), metric="logit_diff")


def test_command_line(tmp_path, capsys):
    import json

    import pandas as pd

    from analysis.cli.main import main
    from fixedid import FixedIdLM, ModelConfig, save_checkpoint

    from tests._fixtures import word_tokenizer

    ckpts = []
    for interface in ("canonical", "gf2"):
        cfg = ModelConfig.preset("toy", vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=64, context=32,
                                 interface=interface, init_std=0.3, seed=3)
        ckpts += ["--ckpt", str(save_checkpoint(FixedIdLM(cfg), tmp_path / interface, tokenizer=word_tokenizer()))]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["circuit", *ckpts, "--pairs", str(pairs), "--k", "6", "--metric", "logit_diff", "--out", str(out)])
    assert e.value.code == 0
    circuit = pd.read_csv(out / "circuit.csv")
    assert sorted(circuit.variant.unique()) == ["canonical", "gf2"] and (circuit.groupby("variant").size() == 6).all()
    assert {"score", "drop_in_recovered"} <= set(circuit.columns)
    curve = pd.read_csv(out / "faithfulness.csv")
    summary = json.loads((out / "circuit.json").read_text())
    for v in ("canonical", "gf2"):
        c = curve[curve.variant == v]
        assert abs(c.recovered.iloc[-1] - 1) < 1e-3 and summary[v]["k"] == 6
    for name in ("faithfulness", "circuit_canonical", "circuit_gf2"):
        assert (out / f"{name}.png").exists() and (out / f"{name}.pdf").exists()
    assert "recover" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["circuit", *ckpts, "--pairs", str(pairs), "--k", "100000", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2 and not (tmp_path / "bad").exists()
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_without_minimality_the_circuit_and_its_complement_are_the_same(model, batch, scores):
    kept = top(scores, 40)
    full, quick = circuit_checks(model, batch, kept, metric="logit_diff"), circuit_checks(model, batch, kept, minimality=False, metric="logit_diff")
    assert quick.drop_in_recovered.isna().all() and full.drop_in_recovered.notna().all()
    assert np.isclose(full.attrs["recovered"], quick.attrs["recovered"], atol=1e-6)
    assert np.isclose(full.attrs["complement"], quick.attrs["complement"], atol=1e-6)

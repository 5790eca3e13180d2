"""Edge attribution: equal to TransformerLens 4.3's ``attribution_patch`` at edge granularity on the split-qkv bridge
(summed per position, the same denoising convention), integrated gradients' completeness for EAP-IG over the inputs,
agreement with exact edge patching, and the command line."""

import json

import numpy as np
import pandas as pd
import pytest
from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

from analysis import AnalysisError, make_pairs
from analysis.causal.edges import edge_attribution, exact_agreement, exact_edge_effects, graph, node_scores
from analysis.interop.split_bridge import to_split_qkv_bridge

from tests._fixtures import tl_label
from tests.analysis.causal._circuits import PAIRS, circuit_model


@pytest.fixture(scope="module", params=["rms", "ln_bias", "gqa"])
def model(request, tmp_path_factory):
    return circuit_model(tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def batch(model):
    return make_pairs(model, PAIRS)


def test_equals_transformer_lens_attribution_patch_per_position(model, batch):
    if model.cfg.kv_heads != model.cfg.n_heads:
        pytest.skip("TransformerLens's edge attribution refuses grouped keys and values")
    ours = edge_attribution(model, batch, per_position=True, metric="logit_diff")
    bridge = to_split_qkv_bridge(model).eval()
    code = getattr(model.embed, "code", None)
    if code is not None:  # TL takes a gradient at hook_embed, which a fixed code does not carry
        code.requires_grad_(True)
    try:
        total = {}
        for i in range(len(batch)):
            a, w = int(batch.answer[i]), int(batch.wrong[i])
            r = attribution_patch(bridge, batch.clean[i:i + 1], batch.corrupt[i:i + 1],
                                  lambda logits, a=a, w=w: logits[0, -1, a] - logits[0, -1, w],
                                  EdgeAttributionConfig(granularity="edge"))
            for (u, v), s in r.edge_scores.items():
                key = (tl_label(u), tl_label(v), u.position)
                total[key] = total.get(key, 0.0) + s / len(batch)
    finally:
        if code is not None:
            code.requires_grad_(False)
    mine = {(r.sender, r.receiver, r.position): r.score for r in ours.itertuples()}
    assert set(mine) == set(total) and len(mine) == ours.attrs["n_edges"] * batch.n_pos
    scale = max(abs(v) for v in total.values())
    assert scale > 1e-3 and max(abs(mine[k] - total[k]) for k in total) <= 1e-5 * max(1.0, scale)
    summed = edge_attribution(model, batch, metric="logit_diff")  # per_position=False: the same scores summed over positions
    per = ours.groupby(["sender", "receiver"], sort=False).score.sum()
    # float32 contractions: the sum over positions inside one product rounds apart from the per-position sums
    assert np.allclose(summed.set_index(["sender", "receiver"]).score.loc[per.index], per, atol=1e-6, rtol=0)


def test_a_callable_metric_gets_every_position_and_the_same_scores(model, batch):
    # the built-in metrics read the final position, so their runs unembed only it; a callable may read any position,
    # so its runs unembed all of them. The same metric as a callable: the same scores, and the clean-corrupt gap
    def same_as_logit_diff(logits, answer, wrong):
        last = logits[:, -1]
        return last.gather(1, answer[:, None])[:, 0] - last.gather(1, wrong[:, None])[:, 0]

    for method in ("eap", "eap-ig"):
        named = edge_attribution(model, batch, metric="logit_diff", method=method, steps=2)
        own = edge_attribution(model, batch, metric=same_as_logit_diff, method=method, steps=2)
        assert np.allclose(own.score, named.score, atol=1e-7, rtol=1e-5)
        assert own.attrs["raw_clean"] == pytest.approx(named.attrs["raw_clean"], abs=1e-5)
    # one that reads the position before the last is scored from it: edges into the logits' reader move
    def one_before(logits, answer, wrong):
        return same_as_logit_diff(logits[:, :-1], answer, wrong)

    early = edge_attribution(model, batch, metric=one_before).set_index(["sender", "receiver"]).score
    final = edge_attribution(model, batch, metric="logit_diff").set_index(["sender", "receiver"]).score
    assert not np.allclose(early.xs("logits", level="receiver"), final.xs("logits", level="receiver"), atol=1e-4)


def test_a_memory_budget_below_one_chunk_splits_it_into_single_pairs(model, batch, monkeypatch):
    import analysis.causal.edges as edges

    whole = edge_attribution(model, batch, metric="logit_diff")
    one = edges.pair_bytes(model, batch.n_pos)
    assert one > 0 and edges.pair_bytes(model, 2 * batch.n_pos) == 2 * one
    monkeypatch.setattr(edges, "EDGE_BUDGET", one)  # room for one pair per chunk
    split = edge_attribution(model, batch, metric="logit_diff")
    # the same scores to float32 rounding: with more than one thread, products over a chunk of one pair and of all
    # pairs add in different orders (a wrong split moves scores by orders of magnitude more)
    assert np.allclose(split.score, whole.score, atol=1e-7, rtol=1e-5) and (split.n == whole.n).all()


def test_eap_ig_over_the_inputs_is_complete_and_noise_mode_mirrors(model, batch):
    ig = edge_attribution(model, batch, method="eap-ig", steps=48, metric="logit_diff")
    embed = node_scores(ig).set_index("sender").score["embed"]  # every reader downstream of the input
    gap = ig.attrs["raw_clean"] - ig.attrs["raw_corrupt"]  # m(source) - m(base) in denoise mode
    assert abs(gap) > 1e-2 and abs(embed - gap) <= 2e-3 * abs(gap) + 1e-5
    noise = edge_attribution(model, batch, mode="noise", method="eap-ig", steps=48, metric="logit_diff")
    assert abs(node_scores(noise).set_index("sender").score["embed"] + gap) <= 2e-3 * abs(gap) + 1e-5
    act = edge_attribution(model, batch, method="eap-ig", steps=4, interpolate="activations", metric="logit_diff")
    assert act.attrs["interpolate"] == "activations" and np.isfinite(act.score).all()
    assert not np.allclose(act.score, edge_attribution(model, batch, method="eap-ig", steps=4, metric="logit_diff").score)


def test_scores_rank_edges_as_exact_patching_does(model, batch):
    eap = edge_attribution(model, batch, metric="logit_diff")
    writers, readers = graph(model)
    assert len(eap) == eap.attrs["n_edges"] == sum(w.time < r.time for w in writers for r in readers)
    exact = exact_edge_effects(model, batch, metric="logit_diff")
    agree = exact_agreement(eap, exact)
    grouped = model.cfg.kv_heads != model.cfg.n_heads
    assert agree["n_edges"] == len(exact) < len(eap) if grouped else agree["n_edges"] == len(eap)
    assert agree["spearman_abs"] > 0.7 and agree["spearman"] > 0.5  # measured 0.94-0.96 and 0.84-0.92
    # an edge into the logits is linear up to the final norm: its score and its exact effect share their sign
    into_logits = eap[eap.receiver == "logits"].merge(exact, on=["sender", "receiver"])
    big = into_logits[into_logits.effect.abs() > 0.2 * into_logits.effect.abs().max()]
    assert len(big) and (np.sign(big.score) == np.sign(big.effect)).all()


def test_bad_input_is_refused(model, batch):
    for kw, match in ((dict(method="exact"), "unknown method"), (dict(mode="both"), "unknown mode"),
                      (dict(method="eap-ig", steps=0), "steps"), (dict(interpolate="tokens"), "interpolation"),
                      (dict(max_batch=0), "max_batch")):
        with pytest.raises(AnalysisError, match=match):
            edge_attribution(model, batch, **kw)
    with pytest.raises(AnalysisError, match="unknown receiver"):
        exact_edge_effects(model, batch, receivers="L9H0.q", metric="logit_diff")
    model.train()
    try:
        with pytest.raises(AnalysisError, match="train mode"):
            edge_attribution(model, batch, metric="logit_diff")
    finally:
        model.eval()


def test_command_line(tmp_path, capsys):
    from analysis.cli.main import main
    from fixedid import FixedIdLM, ModelConfig, save_checkpoint

    from tests._fixtures import word_tokenizer

    cfg = ModelConfig.preset("toy", vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=64, context=32,
                             interface="canonical", init_std=0.2, seed=3)
    ckpt = tmp_path / "canonical"
    save_checkpoint(FixedIdLM(cfg), ckpt, tokenizer=word_tokenizer())
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["edges", "--ckpt", str(ckpt), "--pairs", str(pairs), "--method", "eap-ig", "--steps", "2", "--exact",
              "--metric", "logit_diff", "--out", str(out)])  # untrained: a gap too small for the normalised default
    assert e.value.code == 0
    edges = pd.read_csv(out / "edges.csv")
    assert {"sender", "receiver", "score", "score_lo", "score_hi"} <= set(edges.columns)
    assert len(pd.read_csv(out / "nodes.csv")) == edges.sender.nunique()
    agree = json.loads((out / "agreement.json").read_text())
    assert agree["method"] == "eap-ig" and agree["n_edges"] == len(pd.read_csv(out / "exact.csv"))
    assert (out / "edges.png").exists() and (out / "edges.pdf").exists()
    assert "Against exact patching" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["edges", "--ckpt", str(ckpt), "--pairs", str(pairs), "--steps", "0", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2 and not (tmp_path / "bad").exists()
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_table_edited_by_its_reader_leaves_the_next_one_as_computed(model, batch):
    """The label columns are made once per graph and shared between tables: editing one table (labels and scores)
    must not reach the cache or another table."""
    first = edge_attribution(model, batch, metric="logit_diff")
    want = first.copy(deep=True)
    first.loc[0, "sender"] = "edited"
    first["receiver"] = "edited"
    first["score"] *= 2
    again = edge_attribution(model, batch, metric="logit_diff")
    pd.testing.assert_frame_equal(again, want)
    assert (first.receiver == "edited").all() and first.loc[0, "sender"] == "edited"

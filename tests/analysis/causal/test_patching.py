"""Activation and attribution patching: parity with TransformerLens's own functions on the bridge, and semantics."""

from functools import partial

import pandas as pd
import pytest
import torch
import transformer_lens.patching as tlp

from analysis import AnalysisError, activation_patching, attribution_patching, load, make_pairs, to_tensor
from analysis.engine.metrics import logit_diff
from fixedid import FixedIdLM, ModelConfig, save_checkpoint

from tests._fixtures import word_tokenizer



@pytest.fixture(autouse=True)
def quiet_transformer_lens(monkeypatch):
    monkeypatch.setattr(tlp, "tqdm", lambda it, **kw: it)  # TL's sweeps print a bar per call otherwise

PAIRS = [
    dict(clean="When Mary and John went to the park , John gave a ball to",
         corrupt="When Mary and John went to the park , Mary gave a ball to", answer="Mary", wrong="John"),
    dict(clean="When John and Mary went to the park , Mary gave a ball to",
         corrupt="When John and Mary went to the park , Anna gave a ball to", answer="John", wrong="Mary"),
    dict(clean="When Anna and John went to the park , John gave a ball to",
         corrupt="When Anna and John went to the park , Anna gave a ball to", answer="Anna", wrong="John"),
]


@pytest.fixture(scope="module", params=["canonical", "learned"])
def model(request, tmp_path_factory):
    cfg = ModelConfig.preset("toy", vocab_size=64, d_model=64, n_layers=3, n_heads=4, d_ff=128, context=32,
                             interface=request.param, init_std=0.2, seed=1)
    path = tmp_path_factory.mktemp("ck") / request.param
    save_checkpoint(FixedIdLM(cfg), path, tokenizer=word_tokenizer())
    return load(path)


@pytest.fixture(scope="module")
def bridge(model):
    return model.to_transformer_lens().eval()


TL = {"resid_pre": tlp.get_act_patch_resid_pre, "resid_mid": tlp.get_act_patch_resid_mid,
      # TransformerLens ships no resid_post sweep; its generic patcher with the resid_pre setter is one
      "resid_post": partial(tlp.generic_activation_patch, patch_setter=tlp.layer_pos_patch_setter,
                            activation_name="resid_post", index_axis_names=("layer", "pos")),
      "attn_out": tlp.get_act_patch_attn_out,
      "mlp_out": tlp.get_act_patch_mlp_out, "z": tlp.get_act_patch_attn_head_out_by_pos,
      "z_all_pos": tlp.get_act_patch_attn_head_out_all_pos}


@pytest.mark.parametrize("site", list(TL))
def test_parity_with_transformer_lens_on_the_bridge(model, bridge, site):
    batch = make_pairs(model, PAIRS)

    def metric(logits):
        return logit_diff(logits, batch.answer, batch.wrong).mean()

    with torch.no_grad():
        _, clean_cache = bridge.run_with_cache(batch.clean)
        ref = TL[site](bridge, batch.corrupt, clean_cache, metric)
    df = activation_patching(model, PAIRS, site=site, metric="logit_diff")
    ours = to_tensor(df)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max() < 1e-4
    assert ours.abs().max() > 1e-3  # not trivially zero


def test_frame_layout_and_attrs(model):
    df = activation_patching(model, PAIRS, site="z", metric="logit_diff")
    assert list(df.columns) == ["site", "layer", "pos", "head", "value"]
    assert len(df) == 3 * 14 * 4 and set(df.site) == {"z"}
    assert str(df["head"].dtype) == "Int64"
    assert df.attrs["str_tokens"][:2] == ["When", "Mary"] and df.attrs["n_pairs"] == 3
    per = activation_patching(model, PAIRS, site="resid_pre", per_pair=True, metric="logit_diff")
    assert list(per.columns) == ["site", "layer", "pos", "head", "pair", "value"] and per["head"].isna().all()
    agg = per.groupby(["layer", "pos"])["value"].mean().to_numpy()
    assert torch.allclose(torch.tensor(agg, dtype=torch.float32), to_tensor(activation_patching(
        model, PAIRS, site="resid_pre", metric="logit_diff")).flatten(), atol=1e-5)
    assert to_tensor(per).shape == (3, 3, 14)


def test_positions_before_the_first_difference_are_exact_no_ops(model):
    df = activation_patching(model, PAIRS, site="resid_pre", metric="logit_diff")
    early = df[df.pos < 9]  # clean and corrupt agree up to token 9 (the second subject)
    assert (early.value == df.attrs["corrupt"]).all()
    last_layer0 = df[(df.layer == 0) & (df.pos == 9)].value.item()
    assert last_layer0 == pytest.approx(df.attrs["clean"], abs=1e-4)  # patching the only differing token restores


def test_normalized_metric_and_noise_mode(model):
    d = activation_patching(model, PAIRS, site="resid_pre", metric="normalized_logit_diff")
    assert d.attrs["clean"] == 1.0 and d.attrs["corrupt"] == 0.0
    assert d[(d.layer == 0) & (d.pos == 9)].value.item() == pytest.approx(1.0, abs=1e-4)
    n = activation_patching(model, PAIRS, site="resid_pre", mode="noise", metric="normalized_logit_diff")
    assert n[(n.layer == 0) & (n.pos == 9)].value.item() == pytest.approx(0.0, abs=1e-4)
    assert (n[n.pos < 9].value == 1.0).all()
    e = activation_patching(model, PAIRS, site="embed", metric="logit_diff")
    torch.testing.assert_close(to_tensor(e)[0], to_tensor(activation_patching(model, PAIRS, metric="logit_diff"))[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("metric", ["answer_prob", "answer_loss", lambda lg, a, w: lg[:, -1, 3]])
def test_other_metrics(model, metric):
    df = activation_patching(model, PAIRS, site="mlp_out", metric=metric)
    assert df.value.notna().all() and len(df) == 3 * 14


def test_attribution_is_the_first_order_estimate(model):
    batch = make_pairs(model, PAIRS)
    df = attribution_patching(model, PAIRS, site="resid_pre", metric="logit_diff")
    est = to_tensor(df)
    # independent check of one entry: (clean - corrupt) . grad of the summed metric at the corrupted run
    _, clean_cache = model.run_with_cache(batch.clean, names_filter="blocks.1.hook_resid_pre")
    store = {}

    def keep(act, hook):
        act.retain_grad()
        store["a"] = act
        return act

    def leaf(act, hook):
        return act.detach().requires_grad_(True)

    logits = model.run_with_hooks(batch.corrupt, fwd_hooks=[("hook_embed", leaf), ("blocks.1.hook_resid_pre", keep)])
    m = logit_diff(logits, batch.answer, batch.wrong)
    m.sum().backward()
    delta = ((clean_cache["blocks.1.hook_resid_pre"] - store["a"].detach()) * store["a"].grad)[:, 11].sum(-1)
    expected = (m.detach() + delta).mean()
    assert est[1, 11] == pytest.approx(expected.item(), abs=1e-4)
    assert (est[:, :9] == df.attrs["corrupt"]).all()  # no difference, no estimated change
    for site in ("embed", "z", "z_all_pos", "attn_out"):
        assert attribution_patching(model, PAIRS, site=site, metric="logit_diff").value.notna().all()
    # near-linear sites agree with activation patching in sign where effects are large
    act = to_tensor(activation_patching(model, PAIRS, site="attn_out", metric="logit_diff"))
    att = to_tensor(attribution_patching(model, PAIRS, site="attn_out", metric="logit_diff"))
    big = (act - df.attrs["corrupt"]).abs() > 0.05
    assert ((act - df.attrs["corrupt"]).sign()[big] == (att - df.attrs["corrupt"]).sign()[big]).float().mean() > 0.7


def test_bad_input(model):
    bad_len = dict(PAIRS[0], corrupt="When Mary and John went to the park , Mary gave a ball")
    with pytest.raises(AnalysisError, match="pair 1 .*clean has 14 tokens but corrupt has 13"):
        activation_patching(model, [PAIRS[0], bad_len], metric="logit_diff")
    with pytest.raises(AnalysisError, match="pair 0: .*not one"):
        activation_patching(model, [dict(PAIRS[0], answer="Mary John")], metric="logit_diff")
    with pytest.raises(AnalysisError, match="unknown site"):
        activation_patching(model, PAIRS, site="resid", metric="logit_diff")
    with pytest.raises(AnalysisError, match="unknown mode"):
        activation_patching(model, PAIRS, mode="restore", metric="logit_diff")
    with pytest.raises(AnalysisError, match="unknown metric"):
        activation_patching(model, PAIRS, metric="kl")
    with pytest.raises(AnalysisError, match="same token length"):
        activation_patching(model, [PAIRS[0], dict(clean="When Mary went to", corrupt="When John went to",
                                                   answer="the", wrong="a")], metric="logit_diff")
    model.train()
    try:
        with pytest.raises(AnalysisError, match="train mode"):
            activation_patching(model, PAIRS, metric="logit_diff")
    finally:
        model.eval()
    assert isinstance(activation_patching(model, PAIRS[0], metric="logit_diff"), pd.DataFrame)  # one pair on its own is fine


def test_attribution_leaves_no_parameter_gradients_and_honours_max_batch(model):
    model.zero_grad(set_to_none=True)
    whole = attribution_patching(model, PAIRS, site="resid_pre", metric="logit_diff")
    assert all(p.grad is None for p in model.parameters())
    for site in ("embed", "z", "mlp_out"):
        full = attribution_patching(model, PAIRS, site=site, per_pair=True, metric="logit_diff")
        chunked = attribution_patching(model, PAIRS, site=site, per_pair=True, max_batch=1, progress=True, metric="logit_diff")
        assert (full.value - chunked.value).abs().max() < 1e-5
    assert all(p.grad is None for p in model.parameters())
    assert whole.attrs["baseline"] == whole.attrs["corrupt"]


def test_baselines_in_attrs_and_summary_ranks_from_the_patched_run(model):
    from analysis.specs.patching import summarize

    noise = activation_patching(model, PAIRS, site="resid_pre", mode="noise", metric="logit_diff")
    a = noise.attrs
    assert a["baseline"] == a["clean"] and a["raw_clean"] == a["clean"] and a["raw_corrupt"] == a["corrupt"]
    text = summarize(noise, k=3)
    listed = text.splitlines()[-3:]
    # the cells that change the clean run most come first; the untouched positions (value == clean) never do
    expected = noise.loc[(noise.value - a["clean"]).abs().sort_values(ascending=False).index[:3]]
    for line, (_, r) in zip(listed, expected.iterrows()):
        assert line.strip().startswith(f"layer {r.layer}, pos {r.pos}")
    assert "from the clean run's own value" in text
    norm = activation_patching(model, PAIRS, site="resid_pre", metric="normalized_logit_diff")
    assert norm.attrs["baseline"] == 0.0 and "raw logit differences" in summarize(norm)


def test_tiny_gaps_give_nan_and_a_warning(model):
    from analysis import AnalysisWarning

    same = [dict(p, corrupt=p["clean"]) for p in PAIRS]  # no gap at all: every pair's normalisation is undefined
    with pytest.warns(AnalysisWarning, match="gap"):
        per = activation_patching(model, same, site="resid_pre", metric="normalized_logit_diff", per_pair=True)
    assert per.value.isna().all()
    mixed = [PAIRS[0], same[1]]
    with pytest.warns(AnalysisWarning, match="1 of 2 pairs"):
        per = activation_patching(model, mixed, site="resid_pre", metric="normalized_logit_diff", per_pair=True)
    assert per[per.pair == 1].value.isna().all() and per[per.pair == 0].value.notna().all()

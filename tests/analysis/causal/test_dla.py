"""Direct logit attribution: components sum to the model's own logit difference, and equal TransformerLens 4.3's
``direct_logit_attribution`` on the bridge (of a twin whose final-norm weight is folded into the unembedding)."""

import numpy as np
import pytest
import torch
from transformer_lens.tools.analysis import direct_logit_attribution as tl_dla

from analysis import AnalysisError, make_pairs
from analysis.causal import dla
from analysis.causal.dla import PARTITIONS, direct_logit_attribution, partition

from tests.analysis.causal._circuits import PAIRS, circuit_model, folded_twin


@pytest.fixture(scope="module", params=["rms", "ln_bias", "gqa"])
def model(request, tmp_path_factory):
    return circuit_model(tmp_path_factory, request.param)


def own_logit_diff(model, tokens, answer, wrong):
    with torch.no_grad():
        last = model(tokens)[:, -1].double()
    ar = torch.arange(len(tokens))
    return (last[ar, answer] - last[ar, wrong]).numpy()


def test_partitions_sum_to_the_models_logit_difference(model):
    batch = make_pairs(model, PAIRS)
    df = direct_logit_attribution(model, batch, per_pair=True, by_position=True)
    ld = own_logit_diff(model, batch.clean, batch.answer, batch.wrong)
    for unit in PARTITIONS:
        total = partition(df, unit).groupby("pair").value.sum().to_numpy()
        assert np.abs(total - ld).max() < 1e-4, unit
    assert df.attrs["max_sum_error"] < 1e-4
    heads = df[df.component == "head"]
    whole = heads[heads["pos"].isna()].set_index(["label", "pair"]).value
    split = heads[heads["pos"].notna()].groupby(["label", "pair"]).value.sum()
    assert np.abs(split - whole.loc[split.index]).max() < 1e-6  # source positions add up to the head (fp32 z)
    assert len(heads[heads["pos"].notna()]) == len(whole) * batch.n_pos
    for layer in range(model.cfg.n_layers):  # an attention layer is its heads plus its bias
        at = df[df.layer == layer]
        attn = at[at.component == "attn"].set_index("pair").value
        parts = at[(at.component.isin(["head", "attn_bias"])) & at["pos"].isna()].groupby("pair").value.sum()
        assert np.abs(attn - parts).max() < 1e-9
    biased = model.cfg.bias
    assert (df.component == "attn_bias").any() == biased and (df.component == "ln_final_bias").any() == biased


def test_equals_transformer_lens_dla_on_the_bridge(model):
    batch = make_pairs(model, PAIRS)
    ours = direct_logit_attribution(model, batch, per_pair=True)
    assert not torch.allclose(model.ln_final.w, torch.ones_like(model.ln_final.w))  # the fold is not a no-op
    bridge = folded_twin(model).to_transformer_lens().eval()
    with pytest.raises(ValueError, match="compatibility mode"):  # TL's gate: it cannot see that w is folded
        tl_dla(bridge, batch.clean, batch.answer, batch.wrong)
    with torch.no_grad():
        _, cache = bridge.run_with_cache(batch.clean)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    # TL's computation on the bridge's cache (the gate passed by handing it the cache, not the bridge)
    comp = tl_dla(None, answer_tokens=batch.answer, incorrect_tokens=batch.wrong, unit="component", cache=cache)
    head = tl_dla(None, answer_tokens=batch.answer, incorrect_tokens=batch.wrong, unit="head", cache=cache)
    names = {"embed": "embed", **{f"{i}_attn_out": f"L{i}.attn" for i in range(L)},
             **{f"{i}_mlp_out": f"L{i}.mlp" for i in range(L)}, **{f"L{i}H{h}": f"L{i}H{h}" for i in range(L)
                                                                    for h in range(H)}}
    table = ours[ours["pos"].isna()].set_index(["label", "pair"]).value
    worst = 0.0
    for res in (comp, head):
        for label, row in zip(res.labels, res.attribution.detach().double()):
            if label == "remainder":  # everything but the heads in the residual stream: input, MLPs, b_O
                rest = ["embed"] + [f"L{i}.mlp" for i in range(L)] + [f"L{i}.attn_b" for i in range(L) if
                                                                         model.cfg.bias]
                mine = sum(table.loc[lbl].to_numpy() for lbl in rest)
            else:
                mine = table.loc[names[label]].to_numpy()
            worst = max(worst, float(np.abs(mine - row.numpy()).max()))
    assert len(head.labels) == L * H + 1 and worst < 1e-4, worst
    print(f"max |ours - TL direct_logit_attribution| = {worst:.2e}")
    # TL leaves the final LayerNorm's bias out (it is a per-token constant, b_U after folding); we report it
    if model.cfg.bias:
        assert table.loc["ln_final"].abs().max() > 1e-3
    # without the fold TL reads W_U alone and misses the final norm's weight: a different, wrong number
    raw = model.to_transformer_lens().eval()
    with torch.no_grad():
        _, raw_cache = raw.run_with_cache(batch.clean)
    wrong = tl_dla(None, answer_tokens=batch.answer, incorrect_tokens=batch.wrong, unit="component", cache=raw_cache)
    assert float((wrong.attribution - comp.attribution).detach().abs().max()) > 1e-2


def test_prompts_corrupt_prompts_and_chunks(model, monkeypatch):
    one = direct_logit_attribution(model, [dict(prompt=p["clean"], answer=p["answer"], wrong=p["wrong"])
                                          for p in PAIRS])
    assert np.allclose(one.value, direct_logit_attribution(model, PAIRS).value, atol=1e-9)
    corrupt = direct_logit_attribution(model, PAIRS, prompt="corrupt", max_batch=2)  # two chunks
    swapped = direct_logit_attribution(model, [dict(p, clean=p["corrupt"]) for p in PAIRS])
    assert np.allclose(corrupt.value, swapped.value, atol=1e-6)
    assert corrupt.attrs["prompt"] == "corrupt" and list(one.columns) == [
        "component", "label", "layer", "head", "pos", "value", "value_lo", "value_hi", "n"]
    assert (one.value_lo <= one.value).all() and (one.value <= one.value_hi).all()
    whole = direct_logit_attribution(model, PAIRS, by_position=True)
    monkeypatch.setattr(dla, "PATTERN_BUDGET", 1)  # one prompt per forward
    assert np.allclose(direct_logit_attribution(model, PAIRS, by_position=True).value, whole.value, atol=1e-9)


def test_bad_input(model):
    with pytest.raises(AnalysisError, match="prompt must be 'clean' or 'corrupt'"):
        direct_logit_attribution(model, PAIRS, prompt="both")
    with pytest.raises(AnalysisError, match="unit must be one of"):
        partition(direct_logit_attribution(model, PAIRS), "neuron")
    with pytest.raises(AnalysisError, match="no usable 'answer'"):
        direct_logit_attribution(model, [dict(prompt="When Mary and John went", wrong="John")])

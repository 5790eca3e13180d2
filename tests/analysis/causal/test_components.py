"""Attention / MLP effects with the reference taken from other windows: resample and per-position mean ablations
against hand-written TransformerLens hooks, their intervals against scipy, the interaction terms and shares, a
known-answer construction where every effect is zero, and bad input."""

import numpy as np
import pytest
import torch
from scipy import stats

from analysis import AnalysisError
from analysis.causal.components import component_effects, component_shares


def _x(model, n, T, seed):
    return torch.randint(0, model.cfg.vocab_size, (n, T), generator=torch.Generator().manual_seed(seed))


def _window_loss(logits, x):
    lp = torch.log_softmax(logits[:, :-1].double(), -1)
    return (-lp.gather(-1, x[:, 1:, None])[..., 0]).mean(1).numpy()


def _hand(model, x, hooks_values):
    """Per-window loss with each named hook point's output replaced by the given tensor (run_with_hooks)."""
    def put(value):
        return lambda act, hook: value.to(act.dtype).expand_as(act).clone()

    with torch.no_grad():
        return _window_loss(model.run_with_hooks(x, fwd_hooks=[(n, put(v)) for n, v in hooks_values.items()]), x)


def _t(values):
    v = np.asarray(values, float)
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return v.mean(), v.mean() - half, v.mean() + half


def test_resample_ablation_against_hand_written_hooks(model):
    x = _x(model, 6, 20, 0)
    df = component_effects(model, x, seed=3)
    pairing = np.array(df.attrs["pairing"][0])
    assert sorted(pairing) == list(range(6)) and (pairing != np.arange(6)).all()  # another window, each used once
    with torch.no_grad():
        clean = _window_loss(model(x), x)
        _, cache = model.run_with_cache(x[torch.as_tensor(pairing)])
    L = model.cfg.n_layers
    attn = {f"blocks.{i}.hook_attn_out": cache[f"blocks.{i}.hook_attn_out"] for i in range(L)}
    mlp = {f"blocks.{i}.hook_mlp_out": cache[f"blocks.{i}.hook_mlp_out"] for i in range(L)}
    want = {f"attn L{i}": _hand(model, x, {f"blocks.{i}.hook_attn_out": attn[f"blocks.{i}.hook_attn_out"]}) - clean
            for i in range(L)}
    want |= {f"mlp L{i}": _hand(model, x, {f"blocks.{i}.hook_mlp_out": mlp[f"blocks.{i}.hook_mlp_out"]}) - clean
             for i in range(L)}
    want["all attn"] = _hand(model, x, attn) - clean
    want["all mlp"] = _hand(model, x, mlp) - clean
    want["all attn + all mlp"] = _hand(model, x, attn | mlp) - clean
    want["attn x mlp"] = want["all attn + all mlp"] - want["all attn"] - want["all mlp"]
    want["mlp across layers"] = want["all mlp"] - sum(want[f"mlp L{i}"] for i in range(L))
    got = df.set_index("effect")
    for effect, d in want.items():
        m, lo, hi = _t(d)
        assert np.allclose(got.loc[effect, ["delta_loss", "delta_loss_lo", "delta_loss_hi"]].to_numpy(float),
                           [m, lo, hi], atol=2e-5), effect
    assert abs(df.attrs["base_loss"] - clean.mean()) < 1e-5 and (df.n == 6).all()
    assert abs(got.loc["all mlp", "loss"] - (clean + want["all mlp"]).mean()) < 1e-5
    assert np.isnan(got.loc["attn x mlp", "loss"]) and got.loc["attn L1", "layer"] == 1


def test_mean_ablation_over_a_disjoint_reference_at_each_position(model):
    x, ref = _x(model, 5, 16, 1), _x(model, 7, 16, 2)
    df = component_effects(model, x, how="mean", reference=ref).set_index("effect")
    with torch.no_grad():
        clean = _window_loss(model(x), x)
        _, cache = model.run_with_cache(ref)
    name = "blocks.0.hook_mlp_out"
    per_position = cache[name].double().mean(0)  # [T, d]: a mean over the reference windows, position by position
    assert per_position.shape == (16, model.cfg.d_model)
    d = _hand(model, x, {name: per_position}) - clean
    assert np.allclose(df.loc["mlp L0", ["delta_loss", "delta_loss_lo", "delta_loss_hi"]].to_numpy(float), _t(d),
                       atol=2e-5)
    assert df.attrs["n_reference"] == 7 and df.attrs["n_windows"] == 5 and (df.ablation == "mean").all()


def test_mean_split_is_disjoint_and_measured_on_the_other_half(model):
    x = _x(model, 9, 12, 3)
    df = component_effects(model, x, how="mean", seed=1)
    meas, ref = df.attrs["measured"], df.attrs["reference"]
    assert not set(meas) & set(ref) and sorted(meas + ref) == list(range(9)) and len(ref) == 4
    direct = component_effects(model, x[meas], how="mean", reference=x[ref])
    assert np.allclose(df.delta_loss, direct.delta_loss, atol=1e-9)


def test_every_effect_is_zero_when_every_window_is_the_same(model):
    """Known answer: the measured windows and the reference are copies of one window, so any replacement writes
    exactly what was there."""
    w = _x(model, 1, 14, 4)
    for how in ("resample", "mean"):
        df = component_effects(model, w.repeat(4, 1), how=how, reference=w.repeat(3, 1))
        assert np.allclose(df.delta_loss, 0, atol=1e-5) and df.share.isna().all(), how


def test_shares_are_of_the_joint_effects_and_add_to_one(model):
    x = _x(model, 24, 16, 5)
    df = component_effects(model, x, draws=2)
    assert len(df.attrs["pairing"]) == 2 and df.attrs["pairing"][0] != df.attrs["pairing"][1]
    d = df.set_index("effect")
    for comp in ("attn", "mlp"):
        parts = [f"{comp} L{i}" for i in range(model.cfg.n_layers)] + [f"{comp} across layers"]
        assert abs(d.loc[parts, "delta_loss"].sum() - d.loc[f"all {comp}", "delta_loss"]) < 1e-9
        assert (d.loc[parts, "share_of"] == f"all {comp}").all()
        denominator = d.loc[f"all {comp}"]
        if denominator.delta_loss_lo > 0 or denominator.delta_loss_hi < 0:
            assert abs(d.loc[parts, "share"].sum() - 1) < 1e-9
            assert np.allclose(d.loc[parts, "share"], d.loc[parts, "delta_loss"] / denominator.delta_loss)
        else:
            assert d.loc[parts, "share"].isna().all()
    top = ["all attn", "all mlp", "attn x mlp"]
    assert abs(d.loc[top, "delta_loss"].sum() - d.loc["all attn + all mlp", "delta_loss"]) < 1e-9
    shares = component_shares(model, x)
    assert list(shares[["component", "layer"]].itertuples(index=False, name=None)) == [
        (c, i) for c in ("attn", "mlp") for i in range(model.cfg.n_layers)]
    assert shares.layer.dtype.kind == "i" and {"delta_loss", "delta_loss_lo", "delta_loss_hi", "share"} <= set(shares)


def test_bad_input(model):
    x = _x(model, 4, 12, 6)
    with pytest.raises(AnalysisError, match="unknown ablation"):
        component_effects(model, x, how="zero")
    with pytest.raises(AnalysisError, match="draws apply to resample"):
        component_effects(model, x, how="mean", draws=2)
    with pytest.raises(AnalysisError, match="at least two windows"):
        component_effects(model, x[:1])
    with pytest.raises(AnalysisError, match="too few"):
        component_effects(model, x[:3], how="mean")
    with pytest.raises(AnalysisError, match="the data's length"):
        component_effects(model, x, reference=_x(model, 4, 10, 7))

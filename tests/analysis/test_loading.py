"""analysis.load and its views: native hooks, the TransformerLens bridge and nnsight agree on the same weights."""

import pytest
import torch

from analysis import AnalysisError, load
from fixedid import FixedIdLM, ModelConfig, save_checkpoint

from tests._fixtures import word_tokenizer


@pytest.fixture(scope="module", params=["learned", "canonical", "gf2", "canonical-mixed-rope"])
def model(request, tmp_path_factory):
    interface, _, rope = request.param.partition("-")
    cfg = ModelConfig.preset("toy", vocab_size=64, d_model=64, n_layers=2, n_heads=4, d_ff=128, context=32,
                             interface=interface, init_std=0.1, n_kv_heads=2 if interface == "gf2" else None,
                             rope_head_thetas=[30.0, 30.0, 10000.0, 10000.0] if rope else None)
    path = tmp_path_factory.mktemp("ck") / request.param
    save_checkpoint(FixedIdLM(cfg), path, tokenizer=word_tokenizer())
    return load(path)


def tokens(seed=0, batch=3, pos=12):
    return torch.randint(0, 64, (batch, pos), generator=torch.Generator().manual_seed(seed))


def test_load_gives_an_eval_model_with_notebook_methods(model):
    assert not model.training and isinstance(model, FixedIdLM)
    t = model.to_tokens("When Mary and John went to the park")
    assert t.shape == (1, 8) and t.dtype == torch.long
    assert model.to_str_tokens(t) == ["When", "Mary", "and", "John", "went", "to", "the", "park"]
    assert model.to_single_token("Mary") == 2
    with pytest.raises(AnalysisError, match="not one"):
        model.to_single_token("Mary John")
    with pytest.raises(AnalysisError, match="different lengths"):
        model.to_tokens(["When Mary", "When Mary and"])
    out = model.generate(t, max_new_tokens=3, stop_at_eot=False)
    assert out.shape == (1, 11) and torch.equal(out[:, :8], t)
    assert out[0, 8] == model(t)[0, -1].argmax()


def test_bridge_logits_and_cache_equal_native(model):
    bridge = model.to_transformer_lens().eval()
    t = tokens()
    with torch.no_grad():
        native, ncache = model.run_with_cache(t)
        bl, bcache = bridge.run_with_cache(t)
    assert (bl - native).abs().max() < 1e-5
    for name in ("hook_embed", "blocks.1.hook_resid_pre", "blocks.0.hook_attn_out", "blocks.1.hook_mlp_out",
                 "blocks.0.attn.hook_z", "blocks.1.attn.hook_pattern"):
        assert (bcache[name] - ncache[name]).abs().max() < 1e-5, name
    # a view, not a copy: an in-place edit of the model shows through the bridge
    with torch.no_grad():
        model.unembed.weight[0] += 1.0
        assert (bridge(t) - model(t)).abs().max() < 1e-5
        model.unembed.weight[0] -= 1.0
    with pytest.raises(RuntimeError, match="never folds"):
        bridge.process_weights()


def test_nnsight_two_invokes_one_trace(model):
    nn = model.to_nnsight()
    a, b = tokens(1, batch=2), tokens(2, batch=3)
    with torch.no_grad():
        with nn.trace() as tracer:
            with tracer.invoke(a):
                out_a = nn.output.save()
            with tracer.invoke(b):
                out_b = nn.output.save()
        assert (out_a - model(a)).abs().max() < 1e-5 and (out_b - model(b)).abs().max() < 1e-5
        # an activation patch across invokes equals the native run_with_hooks patch
        clean, corrupt = tokens(3, batch=1), tokens(4, batch=1)
        _, cache = model.run_with_cache(clean, names_filter="blocks.1.hook_resid_pre")

        def patch(act, hook):
            act = act.clone()
            act[:, 5] = cache["blocks.1.hook_resid_pre"][:, 5]
            return act

        ref = model.run_with_hooks(corrupt, fwd_hooks=[("blocks.1.hook_resid_pre", patch)])
        with nn.trace() as tracer:
            barrier = tracer.barrier(2)
            with tracer.invoke(clean):
                src = nn.blocks[1].hook_resid_pre.output.clone().save()
                barrier()
            with tracer.invoke(corrupt):
                barrier()
                nn.blocks[1].hook_resid_pre.output[:, 5] = src[:, 5]
                patched = nn.output.save()
        assert (patched - ref).abs().max() < 1e-5
        assert (patched - model(corrupt)).abs().max() > 1e-4  # the patch did something
        with nn.trace(tokens(5, batch=1)):
            pattern = nn.blocks[0].attn.hook_pattern.output.save()
        _, c = model.run_with_cache(tokens(5, batch=1), names_filter="blocks.0.attn.hook_pattern")
        assert (pattern - c["blocks.0.attn.hook_pattern"]).abs().max() < 1e-6
    assert not model.blocks[0].attn.wants_pattern()  # the model itself is untouched by nnsight


def test_unsupported_nnsight_version_is_refused_clearly(model, monkeypatch):
    from analysis.model import check_nnsight_version

    check_nnsight_version("0.8.1")  # the tested release passes
    for bad in ("0.7.3", "0.9.0", "1.0"):
        with pytest.raises(AnalysisError, match=f"nnsight {bad} is not supported.*0.8"):
            check_nnsight_version(bad)
    from importlib import metadata
    monkeypatch.setattr(metadata, "version", lambda name: "0.9.2")
    with pytest.raises(AnalysisError, match="0.9.2 is not supported"):
        model.to_nnsight()

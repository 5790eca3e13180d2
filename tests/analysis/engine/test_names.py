"""The model's names in one place: every name the module builds is a hook point or submodule of a test-sized model,
the names read the activations their docstrings describe, and ``layer_of`` inverts ``block``."""

import pytest
import torch
from transformer_lens.hook_points import HookPoint

from analysis.engine import names

ATTN_HOOKS = ("q", "k", "v", "z", "pattern", "attn_scores", "rot_q", "rot_k")


@pytest.fixture(scope="module")
def cache(model):
    x = torch.randint(0, model.cfg.vocab_size, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, cache = model.run_with_cache(x)
    return cache


def hook_names(n_layers):
    out = [names.EMBED, names.FINAL_NORMALIZED]
    for i in range(n_layers):
        out += [names.resid_pre(i), names.resid_mid(i), names.resid_post(i), names.attn_out(i), names.mlp_out(i),
                names.mlp_in(i)]
        out += [names.resid(i, w) for w in ("pre", "mid", "post")]
        out += [names.attn(i, h) for h in ATTN_HOOKS]
        out += [names.norm_hook(i, w, n) for w in ("ln1", "ln2") for n in ("normalized", "scale")]
    return out + names.stream(n_layers) + names.depth_stream(n_layers)


def test_every_hook_name_is_a_hook_point_of_the_model(model):
    for name in hook_names(model.cfg.n_layers):
        assert name in model.hook_dict, name
        assert isinstance(model.get_submodule(name), HookPoint), name


def test_block_and_norm_name_the_blocks_and_their_norm_modules(model):
    for i in range(model.cfg.n_layers):
        assert model.get_submodule(names.block(i)) is model.blocks[i]
        assert model.get_submodule(names.block(i, "attn")) is model.blocks[i].attn
        assert model.get_submodule(names.norm(i, "ln1")) is model.blocks[i].ln1
        assert model.get_submodule(names.norm(i, "ln2")) is model.blocks[i].ln2


def test_the_names_are_spelled_as_the_model_spells_them():
    assert names.block(3) == "blocks.3" and names.block(3, "ln2") == "blocks.3.ln2"
    assert names.resid_pre(0) == "blocks.0.hook_resid_pre" and names.resid_post(5) == "blocks.5.hook_resid_post"
    assert [names.resid(2, w) for w in ("pre", "mid", "post")] == [names.resid_pre(2), names.resid_mid(2),
                                                                    names.resid_post(2)]
    assert names.attn(1, "rot_k") == "blocks.1.attn.hook_rot_k"
    assert names.norm_hook(1, "ln1", "scale") == "blocks.1.ln1.hook_scale"
    assert names.mlp_in(4) == "blocks.4.ln2.hook_normalized"


def test_stream_and_depth_stream_list_the_residual_stream_input_to_output():
    assert names.stream(3) == ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre", "blocks.2.hook_resid_pre",
                               "blocks.2.hook_resid_post"]
    assert names.depth_stream(3) == ["hook_embed", "blocks.1.hook_resid_pre", "blocks.2.hook_resid_pre",
                                     "blocks.2.hook_resid_post"]
    assert names.stream(1) == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post"]
    assert names.depth_stream(1) == ["hook_embed", "blocks.0.hook_resid_post"]


def test_the_names_read_the_activations_they_describe(model, cache):
    n = model.cfg.n_layers
    # the input enters block 0 unchanged; each block's output is the next one's input
    assert torch.equal(cache[names.EMBED], cache[names.resid_pre(0)])
    for i in range(n - 1):
        assert torch.equal(cache[names.resid_post(i)], cache[names.resid_pre(i + 1)])
    for i in range(n):
        pre, mid, post = (cache[names.resid(i, w)] for w in ("pre", "mid", "post"))
        torch.testing.assert_close(mid, pre + cache[names.attn_out(i)])
        torch.testing.assert_close(post, mid + cache[names.mlp_out(i)])
        with torch.no_grad():
            torch.testing.assert_close(cache[names.mlp_in(i)], model.blocks[i].ln2(mid))
    with torch.no_grad():
        torch.testing.assert_close(cache[names.FINAL_NORMALIZED], model.ln_final(cache[names.resid_post(n - 1)]))
    # the two streams differ only in their first entry, and both end at the last block's output
    assert names.stream(n)[1:] == names.depth_stream(n)[1:]


@pytest.mark.parametrize("layer", [0, 1, 7, 12, 123])
def test_layer_of_inverts_block(layer):
    assert names.layer_of(names.block(layer)) == layer
    for name in (names.resid_pre(layer), names.attn(layer, "z"), names.mlp_in(layer), names.norm(layer, "ln1")):
        assert names.layer_of(name) == layer


@pytest.mark.parametrize("name", ["hook_embed", "ln_final.hook_normalized", "blocks", "blocks.x.hook_resid_pre",
                                  "unembed", "embed.blocks.1"])
def test_layer_of_is_none_outside_the_blocks(name):
    assert names.layer_of(name) is None

"""Forward hooks for the length of a block: ``submodule`` finds hook points and modules by name (one clear error
otherwise), and ``module_hooks`` registers hooks in order, lets them replace an output, and removes every one of them on
exit, when the block raises and when a later name is unknown."""

import pytest
import torch

from analysis import AnalysisError
from analysis.engine.hooks import module_hooks, submodule


@pytest.fixture(scope="module")
def x(learned):
    return torch.randint(0, learned.cfg.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))


def no_hooks_left(model):
    return all(not m._forward_hooks for m in model.modules())


def test_submodule_finds_hook_points_and_modules(learned):
    assert submodule(learned, "blocks.1.attn.hook_q") is learned.blocks[1].attn.hook_q
    assert submodule(learned, "blocks.1.ln2") is learned.blocks[1].ln2
    assert submodule(learned, "hook_embed") is learned.hook_embed


@pytest.mark.parametrize("name", ["blocks.9.hook_resid_pre", "blocks.0.attn.hook_nothing", "nothing"])
def test_submodule_refuses_an_unknown_name(learned, name):
    with pytest.raises(AnalysisError, match=f"no submodule '{name}'"):
        submodule(learned, name)


def test_hooks_fire_in_order_and_an_output_returned_replaces_the_activation(learned, x):
    calls = []
    last = f"blocks.{learned.cfg.n_layers - 1}.hook_resid_post"
    hooks = [("blocks.0.hook_resid_pre", lambda m, i, o: calls.append("pre0")),
             (last, lambda m, i, o: calls.append("first")),
             (last, lambda m, i, o: torch.zeros_like(o)),
             (last, lambda m, i, o: calls.append(float(o.abs().max())))]
    with torch.no_grad(), module_hooks(learned, hooks):
        logits = learned(x)
    # hooks on one module run in the order given, each seeing the output the one before returned
    assert calls == ["pre0", "first", 0.0]
    with torch.no_grad():
        expected = learned.unembed(learned.ln_final(torch.zeros(*x.shape, learned.cfg.d_model)))
    torch.testing.assert_close(logits, expected)
    assert no_hooks_left(learned)


def test_hooks_are_removed_on_exit(learned, x):
    with torch.no_grad():
        clean = learned(x)
        with module_hooks(learned, [("blocks.0.hook_mlp_out", lambda m, i, o: o + 1.0)]):
            assert len(learned.blocks[0].hook_mlp_out._forward_hooks) == 1
            hooked = learned(x)
        after = learned(x)
    assert not torch.allclose(hooked, clean)
    assert torch.equal(after, clean) and no_hooks_left(learned)


def test_hooks_are_removed_when_the_block_raises(learned, x):
    seen = []
    with pytest.raises(RuntimeError, match="inside"):
        with module_hooks(learned, [("blocks.0.ln2", lambda m, i, o: seen.append(o.shape)),
                                  ("blocks.1.attn.hook_z", lambda m, i, o: None)]):
            with torch.no_grad():
                learned(x)
            raise RuntimeError("inside")
    assert len(seen) == 1 and no_hooks_left(learned)


def test_hooks_registered_before_an_unknown_name_are_removed(learned):
    with pytest.raises(AnalysisError, match="blocks.0.nothing"):
        with module_hooks(learned, [("blocks.0.hook_resid_pre", lambda m, i, o: None),
                                  ("blocks.1.hook_resid_pre", lambda m, i, o: None),
                                  ("blocks.0.nothing", lambda m, i, o: None)]):
            pytest.fail("the block ran although a name is unknown")
    assert no_hooks_left(learned)

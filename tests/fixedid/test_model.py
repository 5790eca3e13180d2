import numpy as np
import pytest
import torch

from fixedid import FixedIdLM, ModelConfig
from fixedid.codes import code_table

TINY = dict(vocab_size=512, d_model=64, n_layers=2, n_heads=4, d_ff=128, context=32)


def model(**kw):
    return FixedIdLM(ModelConfig.preset("toy", **{**TINY, **kw})).eval()


def tokens(batch=2, pos=12, vocab=512, seed=0):
    return torch.randint(0, vocab, (batch, pos), generator=torch.Generator().manual_seed(seed))


def test_run_with_cache_has_the_legacy_hook_names():
    m = model()
    _, cache = m.run_with_cache(tokens())
    names = set(cache.keys())
    for i in range(2):
        for hook in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
                     "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.hook_pattern"):
            assert f"blocks.{i}.{hook}" in names
    assert {"hook_embed", "ln_final.hook_normalized"} <= names
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 4, 12, 12)
    assert cache["blocks.1.attn.hook_z"].shape == (2, 12, 4, 16)
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"].sum(-1), torch.ones(2, 4, 12))


@pytest.mark.parametrize("interface", ["canonical", "gf2"])
@pytest.mark.parametrize("repeat", ["tile", "interleave"])
def test_hook_embed_is_exactly_the_code(interface, repeat):
    m = model(interface=interface, repeat=repeat, gf2_seed=5)
    t = tokens()
    _, cache = m.run_with_cache(t, names_filter="hook_embed")
    table = torch.from_numpy(code_table(512, 16, recoding=m.cfg.recoding()))
    rows = table[t]  # [batch, pos, 16]
    if repeat == "tile":
        expected = rows.repeat(1, 1, 4)
        assert torch.equal(cache["hook_embed"][..., 16:32], rows)
    else:
        expected = rows.repeat_interleave(4, dim=-1)
        assert torch.equal(cache["hook_embed"][..., 0:4], rows[..., :1].expand(-1, -1, 4))
    assert torch.equal(cache["hook_embed"], expected)
    assert not any(p is m.embed.code for p in m.parameters())
    assert m.param_counts()["input_interface"] == 0


def test_value_map_and_scale_reach_the_residual_stream():
    m = model(value_map="01", code_scale=3.0)
    _, cache = m.run_with_cache(tokens(), names_filter="hook_embed")
    assert set(cache["hook_embed"].unique().tolist()) <= {0.0, 3.0}


def test_run_with_hooks_overwrites_resid_pre_and_changes_logits():
    m, t = model(), tokens()
    clean = m(t)
    seen = {}

    def zero(x, hook):
        seen[hook.name] = x.shape
        return torch.zeros_like(x)

    patched = m.run_with_hooks(t, fwd_hooks=[("blocks.0.hook_resid_pre", zero)])
    assert seen == {"blocks.0.hook_resid_pre": (2, 12, 64)}
    assert not torch.allclose(clean, patched)
    torch.testing.assert_close(m(t), clean)  # hooks were removed


MIXED_ROPE = dict(rope_head_thetas=[30.0, 10000.0, 30.0, 500.0])


@pytest.mark.parametrize("kw", [{}, dict(n_kv_heads=2), dict(norm="ln", mlp="gelu", bias=True), MIXED_ROPE])
def test_explicit_attention_matches_sdpa(kw):
    m, t = model(**kw), tokens(pos=20)
    fast = m(t)
    assert not m.blocks[0].attn.wants_pattern()
    m.force_explicit_attention = True
    slow = m(t)
    m.force_explicit_attention = False
    assert (fast - slow).abs().max() < 1e-5
    _, cache = m.run_with_cache(t, names_filter=lambda n: n.endswith("hook_pattern"))  # hooks trigger it too
    assert cache["blocks.1.attn.hook_pattern"].shape == (2, 4, 20, 20)


def test_backbone_matched_init():
    states = {i: FixedIdLM(ModelConfig.preset("toy", **TINY, interface=i, seed=3)).state_dict()
              for i in ("learned", "canonical", "gf2")}
    keys = set(states["canonical"])
    assert keys == set(states["gf2"]) == set(states["learned"]) - {"embed.W_E"}
    for k in keys:
        assert torch.equal(states["canonical"][k], states["learned"][k]), k
        assert torch.equal(states["canonical"][k], states["gf2"][k]), k
    other = FixedIdLM(ModelConfig.preset("toy", **TINY, seed=4)).state_dict()
    assert not torch.equal(other["blocks.0.attn.q_proj.weight"], states["canonical"]["blocks.0.attn.q_proj.weight"])
    # the learned table's own init scale changes that table only
    wide = FixedIdLM(ModelConfig.preset("toy", **TINY, interface="learned", seed=3, embed_init_std=0.3)).state_dict()
    assert all(torch.equal(wide[k], states["learned"][k]) for k in keys)
    assert torch.allclose(wide["embed.W_E"], states["learned"]["embed.W_E"] * 0.3 / 0.02, atol=1e-6)
    assert abs(wide["embed.W_E"].std().item() - 0.3) < 0.02


def test_loss_targets_and_layer_slicing():
    m, t = model(), tokens()
    logits, loss = m(t, return_type="both")
    ref = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 512), t[:, 1:].reshape(-1))
    torch.testing.assert_close(loss, ref)
    resid = m(t, stop_at_layer=1)
    _, cache = m.run_with_cache(t, names_filter="blocks.1.hook_resid_pre")
    torch.testing.assert_close(resid, cache["blocks.1.hook_resid_pre"])
    torch.testing.assert_close(m(resid, start_at_layer=1), logits)


def test_learned_gradients_flow_and_fixed_code_is_frozen():
    for interface in ("learned", "canonical"):
        m = model(interface=interface).train()
        m(tokens(), return_type="loss").backward()
        grads = {n: p.grad is not None for n, p in m.named_parameters()}
        assert all(grads.values())
        assert ("embed.W_E" in grads) == (interface == "learned")


def test_bad_inputs():
    m = model()
    with pytest.raises(ValueError, match="integer tensor"):
        m(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="context"):
        m(tokens(pos=40))


def test_code_rows_distinct_for_every_token():
    m = model(interface="gf2")
    assert len(np.unique(m.embed.code.numpy(), axis=0)) == 512


@pytest.mark.parametrize("kw", [{}, dict(n_kv_heads=2), MIXED_ROPE])
def test_past_kv_continues_a_prefix_exactly(kw):
    m, t = model(**kw), tokens(pos=20)
    full = m(t)
    names = [f"blocks.{i}.attn.hook_{h}" for i in range(2) for h in ("rot_k", "v")]
    _, cache = m.run_with_cache(t[:, :8], names_filter=lambda n: n in names)
    past = [(cache[f"blocks.{i}.attn.hook_rot_k"].transpose(1, 2), cache[f"blocks.{i}.attn.hook_v"].transpose(1, 2))
            for i in range(2)]
    suffix = m(t[:, 8:], past_kv=past)
    assert (suffix - full[:, 8:]).abs().max() < 1e-5
    m.force_explicit_attention = True
    assert (m(t[:, 8:], past_kv=past) - full[:, 8:]).abs().max() < 1e-5
    m.force_explicit_attention = False
    # from the middle of the network: the residual stream entering block 1, with block 1's prefix keys and values
    _, c = m.run_with_cache(t, names_filter="blocks.1.hook_resid_pre")
    mid = m(c["blocks.1.hook_resid_pre"][:, 8:], start_at_layer=1, past_kv=past[1:])
    assert (mid - full[:, 8:]).abs().max() < 1e-5


@pytest.mark.parametrize("changes", [dict(interface="frozen_random"), dict(interface="gf2", output="code"),
                                     dict(interface="learned", output="random")])
def test_fixed_tables_on_meta_have_their_shape_and_on_cpu_their_values(changes):
    from fixedid.codes import code_features, frozen_random_table, random_head

    cfg = ModelConfig.preset("toy", **changes)
    with torch.device("meta"):
        ghost = FixedIdLM(cfg, init=False)
    real = FixedIdLM(cfg, init=False)
    fixed = {n: b for n, b in real.named_buffers() if not n.startswith("rope")}
    assert fixed and {n: (b.shape, b.dtype) for n, b in ghost.named_buffers() if n in fixed} == \
        {n: (b.shape, b.dtype) for n, b in fixed.items()}
    assert all(b.is_meta for b in ghost.buffers())
    v, d, seed = cfg.vocab_size, cfg.d_model, cfg.table_seed
    if cfg.interface == "frozen_random":
        rows = real.embed.code.numpy()  # every row scaled to the same norm: read it back
        norm = float(np.linalg.norm(rows.astype(np.float64), axis=1).mean())
        assert np.allclose(rows, frozen_random_table(v, d, seed, norm), rtol=1e-6, atol=0)
    elif cfg.output == "random":
        assert np.array_equal(real.unembed.weight.numpy(), random_head(v, d, seed))
    else:
        code = real.embed.code.numpy()  # the gf2 code the input reads, {-1, +1} in its default value map here
        expect = code_features(np.where(code > 0, 1.0, -1.0), d, seed)
        assert np.array_equal(real.unembed.weight.numpy(), expect)


def _rotated(x: np.ndarray, base: float) -> np.ndarray:
    """RoPE by hand, in float64: ``x`` is ``[pos, d]``; the pair (i, i + d/2) turns by ``pos * base**(-2i/d)``."""
    pos, d = x.shape
    angle = np.arange(pos)[:, None] * base ** (-np.arange(0, d, 2) / d)[None, :]
    a, b = x[:, :d // 2], x[:, d // 2:]
    return np.concatenate([a * np.cos(angle) - b * np.sin(angle), b * np.cos(angle) + a * np.sin(angle)], axis=1)


@pytest.mark.parametrize("kw, bases", [({}, [10000.0] * 4), (dict(rope_theta=500.0), [500.0] * 4),
                                       (MIXED_ROPE, MIXED_ROPE["rope_head_thetas"])])
def test_each_head_turns_its_queries_and_keys_by_its_own_base(kw, bases):
    m, t = model(**kw), tokens(pos=20)
    _, cache = m.run_with_cache(t, names_filter=lambda n: n.startswith("blocks.1.attn.hook_"))
    for name in ("q", "k"):
        raw = cache[f"blocks.1.attn.hook_{name}"].double().numpy()  # [batch, pos, heads, d_head]
        rot = cache[f"blocks.1.attn.hook_rot_{name}"].double().numpy()
        for h, base in enumerate(bases):
            np.testing.assert_allclose(rot[1, :, h], _rotated(raw[1, :, h], base), atol=1e-5)
    assert m.rope_cos.shape == ((32, 1, 16) if "rope_head_thetas" not in kw else (32, 4, 16))

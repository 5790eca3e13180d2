"""The staged forwards against plain ones: ``cache_run`` keeps what ``run_with_cache`` keeps, ``run_from`` and
``past_kv`` continue a forward from a layer or a position to the full forward's logits, and ``run_stages`` equals a
hooked forward that writes the same unit; plus the sites' names, units and indices, the sweep plan of ``groups``,
``stop_layer``, ``first_difference`` and ``unit_start`` on cases worked out by hand."""

import random

import pytest
import torch

from analysis import AnalysisError
from analysis.engine import (MERGE_POSITIONS, SITES, Site, Stage, cache_run, first_difference, groups, kv_names,
                             past_kv, run_from, run_stages, site, stop_layer, unit_start)

T = 8  # positions of the test sequences
TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def x(model):
    return torch.randint(0, model.cfg.vocab_size, (3, T), generator=torch.Generator().manual_seed(2))


@pytest.fixture(scope="module")
def full(model, x):
    """The plain forward's logits and its TransformerLens cache of every hook point."""
    with torch.no_grad():
        logits, cache = model.run_with_cache(x)
    return logits, cache


def no_hooks_left(model):
    return all(not m._forward_hooks for m in model.modules())


def hooked(model, x, name, fn):
    """Logits of a plain forward whose hook point ``name`` is rewritten by ``fn(act) -> act``."""
    with torch.no_grad():
        return model.run_with_hooks(x, fwd_hooks=[(name, lambda act, hook: fn(act.clone()))])


# ------------------------------------------------------------------------------------------------------- sites
def test_sites_are_named_by_their_keys_and_site_refuses_an_unknown_name():
    assert all(s.name == k for k, s in SITES.items())
    assert site("z") is SITES["z"] and site("block") is SITES["block"]
    with pytest.raises(AnalysisError, match="unknown site 'resid'.*'resid_pre'"):
        site("resid")


def test_every_sites_hook_is_a_hook_point_at_each_of_its_layers(model):
    n = model.cfg.n_layers
    for s in SITES.values():
        assert s.layers(model.cfg) == ([0] if s.name == "embed" else list(range(n)))
        for layer in s.layers(model.cfg):
            assert s.hook_name(layer) in model.hook_dict, (s.name, layer)
            assert all(name in model.hook_dict for name in s.cache_names([layer]))
    assert SITES["resid_post"].hook_name(3) == "blocks.3.hook_resid_post"
    assert SITES["z_all_pos"].hook_name(1) == "blocks.1.attn.hook_z" and SITES["embed"].hook_name(5) == "hook_embed"


def test_units_enumerate_positions_then_heads(model):
    H = model.cfg.n_heads
    assert SITES["resid_pre"].units(model.cfg, 3) == [(0, None), (1, None), (2, None)]
    assert SITES["block"].units(model.cfg, 2) == [(0, None), (1, None)]
    assert SITES["z"].units(model.cfg, 2) == [(p, h) for p in range(2) for h in range(H)]
    assert SITES["z_all_pos"].units(model.cfg, 5) == [(None, h) for h in range(H)]
    assert SITES["attn_out"].units(model.cfg, 0) == []


def test_index_selects_the_unit_in_an_activation_without_its_batch_axis():
    act = torch.arange(2 * 6 * 4 * 3).reshape(2, 6, 4, 3)  # [batch, pos, head, d_head]
    z = SITES["z"]
    assert z.index((2, 1)) == (2, 1) and z.index((2, 1), offset=2) == (0, 1)
    assert torch.equal(act[(slice(None), *z.index((4, 3), offset=1))], act[:, 4 - 1, 3])
    assert torch.equal(act[(slice(None), *z.index((None, 2)))], act[:, :, 2])
    assert SITES["resid_post"].index((3, None)) == (3,) and SITES["resid_post"].index((None, None)) == (slice(None),)
    with pytest.raises(ValueError, match="before the run's first position 3"):
        z.index((2, 0), offset=3)


def test_read_takes_the_sites_activation_and_a_blocks_whole_write(model, full):
    _, cache = full
    for layer in range(model.cfg.n_layers):
        assert torch.equal(SITES["z"].read(cache, layer), cache[f"blocks.{layer}.attn.hook_z"])
        assert torch.equal(SITES["resid_mid"].read(cache, layer), cache[f"blocks.{layer}.hook_resid_mid"])
        # a block writes its attention and MLP outputs to the residual stream
        torch.testing.assert_close(SITES["block"].read(cache, layer),
                                   cache[f"blocks.{layer}.hook_attn_out"] + cache[f"blocks.{layer}.hook_mlp_out"])
    assert torch.equal(SITES["embed"].read(cache, 0), cache["hook_embed"])


def test_cache_names_are_what_read_needs(model, full):
    assert SITES["block"].cache_names([0, 2]) == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post",
                                                  "blocks.2.hook_resid_pre", "blocks.2.hook_resid_post"]
    assert SITES["z"].cache_names([1, 0]) == ["blocks.1.attn.hook_z", "blocks.0.attn.hook_z"]
    assert SITES["embed"].cache_names([0]) == ["hook_embed"]
    _, cache = full
    for s in SITES.values():
        layers = s.layers(model.cfg)
        small = {name: cache[name] for name in s.cache_names(layers)}
        for layer in layers:
            assert torch.equal(s.read(small, layer), s.read(cache, layer)), s.name


def test_live_finds_the_units_whose_activations_differ():
    base = torch.zeros(2, 4, 3, 5)  # [batch, pos, head, d_head]
    src = base.clone()
    src[1, 2, 1, 4] = 1.0  # one row, one position, one head
    cfg = type("Cfg", (), {"n_heads": 3, "n_layers": 1})()
    z_units = SITES["z"].units(cfg, 4)
    assert SITES["z"].live(src, base, z_units) == [z_units.index((2, 1))]
    all_pos = SITES["z_all_pos"].units(cfg, 4)
    assert SITES["z_all_pos"].live(src, base, all_pos) == [1]
    flat, flat_src = base.flatten(2), src.flatten(2)  # [batch, pos, d_model]
    resid_units = SITES["resid_post"].units(cfg, 4)
    assert SITES["resid_post"].live(flat_src, flat, resid_units) == [2]
    assert SITES["resid_post"].live(flat, flat, resid_units) == []


# ------------------------------------------------------------------------------------------------ stop_layer
@pytest.mark.parametrize("hooks, expected", [
    ([], 0),
    (["hook_embed"], 0),
    (["blocks.0.hook_resid_pre"], 1),
    (["blocks.0.attn.hook_z", "hook_embed"], 1),
    (["blocks.1.ln2.hook_normalized", "blocks.0.hook_mlp_out"], 2),
    (["blocks.11.hook_resid_post", "blocks.3.attn.hook_v"], 12),
    (["ln_final.hook_normalized"], None),
    (["blocks.0.hook_resid_pre", "ln_final.hook_scale"], None),
])
def test_stop_layer(hooks, expected):
    assert stop_layer(hooks) == expected


@pytest.mark.parametrize("names", [["hook_embed"], ["hook_embed", "blocks.0.attn.hook_rot_k"],
                                   ["blocks.0.hook_resid_post", "blocks.1.hook_resid_mid"]])
def test_a_forward_stopped_at_stop_layer_still_fires_every_hook(model, x, names):
    with torch.no_grad():
        _, kept = cache_run(model, x, names, stop_at_layer=stop_layer(names))
        _, whole = cache_run(model, x, names)
    assert set(kept) == set(names)
    for name in names:
        assert torch.equal(kept[name], whole[name])


# ------------------------------------------------------------------------------------------------- cache_run
NAMES = ["hook_embed", "blocks.0.attn.hook_z", "blocks.0.attn.hook_pattern", "blocks.1.ln2.hook_normalized",
         "blocks.1.hook_resid_post", "ln_final.hook_normalized"]


def test_cache_run_keeps_what_run_with_cache_keeps(model, x):
    with torch.no_grad():
        logits, ours = cache_run(model, x, NAMES + NAMES[:2])  # a name given twice is kept once
        ref_logits, ref = model.run_with_cache(x, names_filter=NAMES)
    assert torch.allclose(logits, ref_logits) and set(ours) == set(NAMES)
    for name in NAMES:
        assert ours[name].shape == ref[name].shape and torch.allclose(ours[name], ref[name]), name
    assert no_hooks_left(model)


def test_cache_run_keeps_detached_activations_and_passes_forward_arguments(model, x):
    out, kept = cache_run(model, x, ["blocks.0.hook_resid_post"], return_type="loss")
    assert out.dim() == 0 and out.requires_grad and not kept["blocks.0.hook_resid_post"].requires_grad


def test_cache_run_refuses_an_unknown_hook_point_and_leaves_no_hook(model, x):
    with pytest.raises(AnalysisError, match="no hook point 'blocks.0.hook_nothing'"):
        cache_run(model, x, ["hook_embed", "blocks.0.hook_resid_pre", "blocks.0.hook_nothing", "blocks.1.attn.hook_z"])
    assert no_hooks_left(model)


# ------------------------------------------------------------------------------------- run_from and past_kv
def test_run_from_a_layer_reproduces_the_full_forwards_logits(model, full):
    logits, cache = full
    n = model.cfg.n_layers
    with torch.no_grad():
        for layer in range(n):
            torch.testing.assert_close(run_from(model, cache[f"blocks.{layer}.hook_resid_pre"], layer), logits, **TOL)
            last = run_from(model, cache[f"blocks.{layer}.hook_resid_pre"], layer, last_only=True)
            assert last.shape == (logits.shape[0], 1, logits.shape[2])
            torch.testing.assert_close(last, logits[:, -1:], **TOL)
        # past the last block only the final norm and the unembedding remain
        torch.testing.assert_close(run_from(model, cache[f"blocks.{n - 1}.hook_resid_post"], n), logits, **TOL)


def test_kv_names_are_each_blocks_rotated_keys_and_values():
    assert kv_names(2) == ["blocks.0.attn.hook_rot_k", "blocks.0.attn.hook_v", "blocks.1.attn.hook_rot_k",
                           "blocks.1.attn.hook_v"]


def test_past_kv_holds_the_earlier_positions_keys_and_values_repeated_unit_major(model, x, full):
    _, cache = full
    n = model.cfg.n_layers
    assert past_kv(cache, 0, n, 0) is None
    past = past_kv(cache, 1, n, 3, repeat=2)
    assert len(past) == n - 1
    k, v = past[0]
    assert k.shape == v.shape == (2 * len(x), model.cfg.kv_heads, 3, model.cfg.d_head)
    for r in range(2):  # rows r * n_seq .. : a copy of every sequence
        rows = slice(r * len(x), (r + 1) * len(x))
        assert torch.equal(k[rows], cache["blocks.1.attn.hook_rot_k"][:, :3].transpose(1, 2))
        assert torch.equal(v[rows], cache["blocks.1.attn.hook_v"][:, :3].transpose(1, 2))


@pytest.mark.parametrize("layer, start", [(0, 3), (1, 5), (0, T - 1)])
def test_run_from_a_later_position_with_past_kv_reproduces_the_full_forward(model, full, layer, start):
    logits, cache = full
    n = model.cfg.n_layers
    x_in = cache[f"blocks.{layer}.hook_resid_pre"][:, start:].repeat(2, 1, 1)
    with torch.no_grad():
        out = run_from(model, x_in, layer, past=past_kv(cache, layer, n, start, repeat=2))
    torch.testing.assert_close(out, logits[:, start:].repeat(2, 1, 1), **TOL)


# --------------------------------------------------------------------------------------------------- groups
def test_groups_merge_units_while_the_recomputed_positions_fit():
    # 2 rows per unit: starting unit 1 at position 0 recomputes 2 * 1 positions, unit 2 a further 2 * 3 (8 > 6)
    assert list(groups([0, 1, 3, 10], 2, 100, merge=6)) == [(0, [0, 1]), (3, [2]), (10, [3])]
    assert list(groups([0, 1, 3, 10], 2, 100, merge=8)) == [(0, [0, 1, 2]), (10, [3])]


def test_groups_take_units_in_order_of_their_start():
    assert list(groups([2, 0, 2, 1], 3, 100, merge=0)) == [(0, [1]), (1, [3]), (2, [0, 2])]
    assert list(groups([5, 1, 3], 1, 100, merge=100)) == [(1, [1, 2, 0])]


def test_groups_hold_at_most_max_batch_rows_and_at_least_one_unit():
    assert list(groups([0] * 5, 2, 5)) == [(0, [0, 1]), (0, [2, 3]), (0, [4])]
    assert list(groups([0, 0, 0], 4, 3)) == [(0, [0]), (0, [1]), (0, [2])]  # one unit is already past max_batch
    assert list(groups([], 2, 8)) == []


def test_groups_merge_up_to_merge_positions_by_default():
    assert list(groups([0, MERGE_POSITIONS], 1, 10 ** 6)) == [(0, [0, 1])]
    assert list(groups([0, MERGE_POSITIONS + 1], 1, 10 ** 6)) == [(0, [0]), (MERGE_POSITIONS + 1, [1])]


def test_groups_plan_every_unit_once_within_the_limits():
    rng = random.Random(0)
    for _ in range(200):
        starts = [rng.randrange(12) for _ in range(rng.randrange(1, 15))]
        rows, max_batch, merge = rng.randrange(1, 5), rng.randrange(1, 20), rng.randrange(0, 30)
        plan = list(groups(starts, rows, max_batch, merge))
        assert sorted(i for _, g in plan for i in g) == list(range(len(starts)))
        for begin, g in plan:
            assert g and begin == min(starts[i] for i in g) == starts[g[0]]
            assert len(g) == 1 or len(g) * rows <= max_batch
            assert sum(rows * (starts[i] - begin) for i in g) <= merge
        firsts = [begin for begin, _ in plan]
        assert firsts == sorted(firsts)


# ----------------------------------------------------------------------------------------------- run_stages
def test_one_stage_equals_a_hooked_forward_writing_the_unit(model, x, full):
    logits, cache = full
    g = torch.Generator().manual_seed(5)
    for name, layer, unit in [("resid_post", 0, (2, None)), ("z", 1, (4, 2)), ("z_all_pos", 0, (None, 1)),
                              ("mlp_out", 1, (T - 1, None)), ("resid_pre", 1, (3, None))]:
        s = SITES[name]
        shape = cache[s.hook_name(layer)][(slice(None), *s.index(unit))].shape
        value = torch.randn(shape, generator=g)

        def write(act, idx=(slice(None), *s.index(unit)), value=value):
            act[idx] = value
            return act

        expected = hooked(model, x, s.hook_name(layer), write)
        stage = Stage(layer, cache[f"blocks.{layer}.hook_resid_pre"], [(slice(None), unit, value)])
        with torch.no_grad():
            out = run_stages(model, s, [stage])
        torch.testing.assert_close(out, expected, **TOL)
        assert not torch.allclose(out, logits)
    assert no_hooks_left(model)


def test_a_block_site_write_sets_resid_post_to_resid_pre_plus_the_value(model, x, full):
    _, cache = full
    value = torch.randn(len(x), model.cfg.d_model, generator=torch.Generator().manual_seed(6))
    pre = cache["blocks.1.hook_resid_pre"]

    def write(act):
        act[:, 5] = pre[:, 5] + value
        return act

    expected = hooked(model, x, "blocks.1.hook_resid_post", write)
    with torch.no_grad():
        out = run_stages(model, SITES["block"], [Stage(1, pre, [(slice(None), (5, None), value)])])
    torch.testing.assert_close(out, expected, **TOL)


def test_stages_of_several_layers_share_one_forward_and_edit_only_their_own_rows(model, x, full):
    logits, cache = full
    s, n = SITES["resid_mid"], len(x)
    v0, v1 = torch.randn(2, model.cfg.d_model, generator=torch.Generator().manual_seed(7))

    def at(pos, value):
        def write(act):
            act[1:, pos] = value  # rows 1.. of the stage only
            return act
        return write

    stages = [Stage(0, cache["blocks.0.hook_resid_pre"], [(slice(1, None), (1, None), v0)]),
              Stage(1, cache["blocks.1.hook_resid_pre"], [(slice(1, None), (6, None), v1)])]
    with torch.no_grad():
        out = run_stages(model, s, stages)
    assert out.shape == (2 * n, T, model.cfg.vocab_size)
    torch.testing.assert_close(out[:n], hooked(model, x, s.hook_name(0), at(1, v0)), **TOL)
    torch.testing.assert_close(out[n:], hooked(model, x, s.hook_name(1), at(6, v1)), **TOL)
    torch.testing.assert_close(out[[0, n]], logits[[0, 0]], **TOL)  # each stage's row 0 is unedited


def test_a_staged_run_from_a_later_position_reads_the_earlier_keys_and_values(model, x, full):
    _, cache = full
    s, start = SITES["attn_out"], 3
    value = torch.randn(len(x), model.cfg.d_model, generator=torch.Generator().manual_seed(8))

    def write(act):
        act[:, 5] = value
        return act

    expected = hooked(model, x, s.hook_name(0), write)
    stage = Stage(0, cache["blocks.0.hook_resid_pre"][:, start:], [(slice(None), (5, None), value)],
                  past_rows=torch.arange(len(x)))
    with torch.no_grad():
        out = run_stages(model, s, [stage], kv_cache=cache, offset=start)
        last = run_stages(model, s, [stage], kv_cache=cache, offset=start, last_only=True)
    torch.testing.assert_close(out, expected[:, start:], **TOL)
    torch.testing.assert_close(last, expected[:, -1:], **TOL)


def test_run_stages_refuses_unsorted_stages_and_a_later_start_without_past_rows(model, full):
    _, cache = full
    a = Stage(1, cache["blocks.1.hook_resid_pre"], [])
    b = Stage(0, cache["blocks.0.hook_resid_pre"], [])
    with pytest.raises(ValueError, match="sorted by layer"):
        run_stages(model, SITES["resid_post"], [a, b])
    with pytest.raises(ValueError, match="past_rows"):
        run_stages(model, SITES["resid_post"], [b], kv_cache=cache, offset=2)


# ------------------------------------------------------------------------------------ positions of units
def test_first_difference_is_the_first_position_where_any_row_differs():
    base = torch.zeros(3, 6, 2, 4)
    assert first_difference(base, base.clone()) == 6
    src = base.clone()
    src[2, 4, 1, 0] = 1.0
    assert first_difference(src, base) == 4
    src[0, 1, 0, 3] = -1.0
    assert first_difference(src, base) == 1
    assert first_difference(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 4]])) == 2


def test_unit_start_is_the_units_position_or_the_default():
    assert unit_start((None, 2), 3) == 3
    assert unit_start((5, None), 3) == 5
    assert unit_start((1, 0), 3) == 3  # never before the default
    assert unit_start((0, None), 0) == 0


def test_a_site_is_frozen():
    with pytest.raises(AttributeError):
        SITES["z"].per_head = False
    assert Site("x", "blocks.{}.hook_x") == Site("x", "blocks.{}.hook_x")

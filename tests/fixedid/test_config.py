import json

import numpy as np
import pytest
import torch

from fixedid import ConfigError, FixedIdLM, ModelConfig
from fixedid.codes import GF2Code


@pytest.mark.parametrize("name", ["toy", "small", "gpt2-small", "paper-1.7b", "prior-1024"])
def test_presets_round_trip_through_json(name):
    cfg = ModelConfig.preset(name, interface="gf2")
    again = ModelConfig.from_json(cfg.to_json())
    assert again == cfg and again.name == name
    resolved = cfg.resolved()
    assert resolved.gf2_matrix is not None and np.array_equal(resolved.recoding().matrix, cfg.recoding().matrix)
    assert ModelConfig.from_json(resolved.to_json()).recoding() == cfg.recoding()


def test_paper_parameter_counts_on_meta_device():
    counts = {}
    for interface in ("learned", "canonical", "gf2"):
        with torch.device("meta"):
            counts[interface] = FixedIdLM(ModelConfig.preset("paper-1.7b", interface=interface)).param_counts()
    assert counts["canonical"]["trainable"] == 1_711_376_384
    assert counts["gf2"]["trainable"] == 1_711_376_384
    assert counts["learned"]["trainable"] == 1_812_039_680
    assert counts["learned"]["input_interface"] == 100_663_296
    assert counts["canonical"]["input_interface"] == 0
    assert counts["canonical"]["backbone"] == 1_610_713_088
    assert counts["canonical"]["output_head"] == 100_663_296
    with torch.device("meta"):
        prior = FixedIdLM(ModelConfig.preset("prior-1024", interface="learned")).param_counts()
    assert prior["input_interface"] == 67_108_864


def test_small_preset_size():
    with torch.device("meta"):
        n = FixedIdLM(ModelConfig.preset("small")).param_counts()["total"]
    assert 10e6 <= n <= 30e6


@pytest.mark.parametrize("kwargs, match", [
    (dict(vocab_size=70000), "2\\*\\*n_bits"),
    (dict(d_model=120, n_heads=4), "not divisible by n_bits"),
    (dict(n_heads=3), "does not divide d_model"),
    (dict(n_kv_heads=3), "must divide n_heads"),
    (dict(interface="onehot"), "unknown interface"),
    (dict(norm="batch"), "unknown norm"),
    (dict(gf2_matrix=np.zeros((16, 16), int).tolist(), gf2_offset=[0] * 16, interface="gf2"), "singular"),
    (dict(gf2_matrix=np.eye(16, dtype=int).tolist()), "go together"),
    (dict(colour="red"), "unknown ModelConfig field"),
    (dict(embed_init_std=0.0), "embed_init_std must be a positive number"),
    (dict(rope_head_thetas=[30.0, 10000.0]), "one positive RoPE base per head \\(4\\)"),
    (dict(rope_head_thetas=[30.0, 0.0, 1e4, 1e4]), "one positive RoPE base per head"),
    (dict(rope_head_thetas=[30.0, 30.0, 1e4, "1e4"]), "one positive RoPE base per head"),
    (dict(rope_head_thetas=[30.0, 30.0, 1e4, 1e4], n_kv_heads=2), "a key/value head per query head"),
])
def test_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ModelConfig.preset("toy", **kwargs)


def test_learned_interface_allows_any_width_and_vocab():
    cfg = ModelConfig.preset("toy", interface="learned", d_model=120, n_heads=4, vocab_size=70000)
    assert cfg.d_model == 120


def test_unknown_preset_and_fields_from_json():
    with pytest.raises(ConfigError, match="unknown preset"):
        ModelConfig.preset("huge")
    d = ModelConfig.preset("toy").to_dict()
    d["dropout"] = 0.1
    with pytest.raises(ConfigError, match="dropout"):
        ModelConfig.from_dict(d)
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelConfig.from_json("{")
    assert json.loads(ModelConfig.preset("toy").to_json())["interface"] == "canonical"


def test_explicit_matrix_is_used():
    code = GF2Code.random(16, 99, affine=True)
    j = code.to_json()
    cfg = ModelConfig.preset("toy", interface="gf2", gf2_matrix=j["matrix"], gf2_offset=j["offset"])
    assert cfg.recoding() == code
    assert ModelConfig.preset("toy", interface="gf2", gf2_seed=99, gf2_affine=True).recoding() == code


@pytest.mark.parametrize("name", ["toy", "small", "gpt2-small", "paper-1.7b", "prior-1024"])
def test_width_matching_lands_within_half_a_percent_of_the_learned_count(name):
    from fixedid.config import MATCH_TOLERANCE, trainable_params

    learned = trainable_params(ModelConfig.preset(name, interface="learned"))
    for interface in ("canonical", "gf2"):
        cfg = ModelConfig.preset(name, interface=interface, match_params="width")
        base = ModelConfig.preset(name, interface=interface)
        got = trainable_params(cfg)
        assert abs(got - learned) <= MATCH_TOLERANCE * learned and cfg.d_ff > base.d_ff
        assert cfg.matched_from == {"d_ff": base.d_ff, "n_layers": base.n_layers} and cfg.n_layers == base.n_layers
        again = ModelConfig.from_json(cfg.to_json())  # a checkpoint's config is not matched a second time
        assert again == cfg and again.d_ff == cfg.d_ff
    assert ModelConfig.preset(name, interface="learned", match_params="width").d_ff == base.d_ff  # the budget
    with torch.device("meta"):
        counts = FixedIdLM(ModelConfig.preset(name, interface="canonical", match_params="width")).param_counts()
    assert counts["input_interface"] == 0 and counts["trainable"] == got


@pytest.mark.parametrize("name", ["toy", "small", "paper-1.7b"])
def test_depth_matching_is_refused_where_no_whole_layer_count_fits(name):
    from fixedid.config import PRESETS

    # by hand: a SwiGLU/RMSNorm layer holds 4d^2 + 3 d d_ff + 2d; the learned model adds a V x d table to the fixed
    # one; the nearest whole layer counts on either side miss the learned count by these fractions
    p = PRESETS[name]
    d, ff, V, L = p["d_model"], p["d_ff"], p["vocab_size"], p["n_layers"]
    layer, table = 4 * d * d + 3 * d * ff + 2 * d, V * d
    learned = table + L * layer + d + V * d
    below = table // layer
    low, high = ((k * layer - table) / learned for k in (below, below + 1))
    with pytest.raises(ConfigError, match="cannot land within 0.5%") as e:
        ModelConfig.preset(name, interface="canonical", match_params="depth")
    assert f"{low:+.2%}" in str(e.value) and f"{high:+.2%}" in str(e.value), str(e.value)
    assert "match_params='width'" in str(e.value)


def test_depth_matching_adds_whole_layers_where_they_fit():
    from fixedid.config import trainable_params

    # one tiny layer (d 128, d_ff 384) holds 213,248 parameters: a 1,666-token table (213,248) is one layer
    cfg = ModelConfig.preset("toy", vocab_size=1666, interface="gf2", match_params="depth")
    learned = trainable_params(ModelConfig.preset("toy", vocab_size=1666, interface="learned"))
    assert cfg.n_layers == 5 and cfg.d_ff == 384 and abs(trainable_params(cfg) - learned) <= 0.005 * learned
    with pytest.raises(ConfigError, match="unknown match_params"):
        ModelConfig.preset("toy", match_params="height")
    with pytest.raises(ConfigError, match="do not set it by hand"):
        ModelConfig.preset("toy", matched_from={"d_ff": 1})


@pytest.mark.parametrize("preset", ["toy", "small", "gpt2-small", "paper-1.7b", "prior-1024"])
@pytest.mark.parametrize("changes", [dict(interface="learned"), dict(interface="canonical"),
                                     dict(interface="gf2", output="code"), dict(interface="frozen_random"),
                                     dict(interface="learned", output="random"),
                                     dict(interface="learned", n_kv_heads=2, bias=True)])
def test_trainable_params_from_the_shape_equal_the_models_own_count(preset, changes):
    import torch

    from fixedid.config import trainable_params

    cfg = ModelConfig.preset(preset, **changes)
    with torch.device("meta"):
        counted = FixedIdLM(cfg, init=False).param_counts()["trainable"]
    assert trainable_params(cfg) == counted


def test_one_rope_base_is_the_base_all_heads_share():
    assert ModelConfig.preset("toy").one_rope_base == 10000.0
    assert ModelConfig.preset("toy", rope_theta=500.0).one_rope_base == 500.0
    assert ModelConfig.preset("toy", rope_head_thetas=[30, 30, 30, 30]).one_rope_base == 30.0
    assert ModelConfig.preset("toy", rope_head_thetas=[30.0, 10000.0, 30.0, 30.0]).one_rope_base is None


def test_tiny_names_the_recipe_not_a_preset():
    """``tiny`` is the training recipe (72 wide, 9 bits); the 128-wide shape it builds on is the ``toy`` preset, and a
    recorded run that still says ``preset = "tiny"`` reads as ``toy`` with its trained key unchanged."""
    from fixedid.train import TrainConfig

    with pytest.raises(ConfigError, match="not a model preset: it names the training recipe.*'toy'"):
        ModelConfig.preset("tiny")
    recipe = TrainConfig.load("tiny")
    assert recipe.model["preset"] == "toy" and ModelConfig.preset("toy").d_model == 128
    assert recipe.model_config("canonical", 371).d_model == 72
    old = TrainConfig.from_dict({**recipe.to_dict(), "model": {**recipe.model, "preset": "tiny"}})
    assert old.trained_key() == recipe.trained_key() and old.fingerprint() == recipe.fingerprint()
    assert old.model_config("gf2", 371) == recipe.model_config("gf2", 371)
    # the key spells the preset by its first name, so caches keyed before the rename stay valid: this is the demo
    # cache's directory as the code before the rename named it
    assert recipe._keyed()["model"]["preset"] == "tiny" and recipe.trained_key()[:12] == "436df3230d5a"

import json

import numpy as np
import pytest
import torch

from fixedid import ConfigError, FixedIdLM, ModelConfig
from fixedid.codes import GF2Code


@pytest.mark.parametrize("name", ["tiny", "small", "gpt2-small", "paper-1.7b", "prior-1024"])
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
])
def test_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ModelConfig.preset("tiny", **kwargs)


def test_learned_interface_allows_any_width_and_vocab():
    cfg = ModelConfig.preset("tiny", interface="learned", d_model=120, n_heads=4, vocab_size=70000)
    assert cfg.d_model == 120


def test_unknown_preset_and_fields_from_json():
    with pytest.raises(ConfigError, match="unknown preset"):
        ModelConfig.preset("huge")
    d = ModelConfig.preset("tiny").to_dict()
    d["dropout"] = 0.1
    with pytest.raises(ConfigError, match="dropout"):
        ModelConfig.from_dict(d)
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelConfig.from_json("{")
    assert json.loads(ModelConfig.preset("tiny").to_json())["interface"] == "canonical"


def test_explicit_matrix_is_used():
    code = GF2Code.random(16, 99, affine=True)
    j = code.to_json()
    cfg = ModelConfig.preset("tiny", interface="gf2", gf2_matrix=j["matrix"], gf2_offset=j["offset"])
    assert cfg.recoding() == code
    assert ModelConfig.preset("tiny", interface="gf2", gf2_seed=99, gf2_affine=True).recoding() == code

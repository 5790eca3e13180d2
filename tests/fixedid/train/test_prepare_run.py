"""A run prepared without training (for workers that train its variants one by one), and a run's run.json as a
training config."""

import json

import pytest

from fixedid.errors import ConfigError
from fixedid.train.config import TrainConfig
from fixedid.train.loop import prepare_run

from tests._fixtures import TRAIN_CONFIG


def test_a_prepared_run_holds_its_data_and_record_and_no_variant(tmp_path):
    cfg = TrainConfig._parse(TRAIN_CONFIG, "test config")
    out = tmp_path / "run"
    prepare_run(cfg, out, ["learned", "canonical"], quiet=True)
    assert (out / "data" / "data.json").exists() and not (out / "learned").exists()
    record = json.loads((out / "run.json").read_text())
    assert record["variants"] == ["learned", "canonical"] and record["config"] == cfg.to_dict()
    prepare_run(cfg, out, ["gf2", "learned"], quiet=True)  # again, with more: kept, and the new one added
    assert json.loads((out / "run.json").read_text())["variants"] == ["learned", "canonical", "gf2"]
    # the record is a config: the same run, by its fingerprint
    assert TrainConfig.load(out / "run.json").fingerprint() == cfg.fingerprint()
    with pytest.raises(ConfigError, match="different run"):
        prepare_run(cfg.replace_train(lr=0.5), out, ["learned"])
    with pytest.raises(ConfigError, match="distinct names"):
        prepare_run(cfg, tmp_path / "other", ["learned", "learned"])
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        TrainConfig.load(tmp_path / "bad.json")

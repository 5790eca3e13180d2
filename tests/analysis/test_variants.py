"""study_variants: the demo's cached variants or those FIXEDID_CHECKPOINTS names, and never a training unless asked
(a notebook's first cell must not train)."""

import json

import pytest

from analysis import variants
from analysis.errors import AnalysisError
from fixedid.train.config import TrainConfig


@pytest.fixture
def no_training(monkeypatch):
    """Any training fails the test (and records which run directory it was asked for)."""
    asked = []

    def fake_train(cfg, run_dir, *a, **k):
        asked.append(run_dir)
        raise KeyboardInterrupt  # stop before any training

    monkeypatch.setattr(variants.train, "train", fake_train)
    monkeypatch.delenv(variants.ENV, raising=False)
    return asked


def test_missing_demo_variants_are_refused_with_what_to_run(tmp_path, no_training, monkeypatch):
    with pytest.raises(AnalysisError) as e:
        variants.study_variants(cache=str(tmp_path))
    msg = str(e.value)
    assert f"run `fixedid-analyze demo --cache {tmp_path}` first" in msg and variants.ENV in msg
    monkeypatch.setenv("FIXEDID_CACHE", str(tmp_path))  # the demo's own default cache: no --cache to name
    with pytest.raises(AnalysisError, match=r"run `fixedid-analyze demo` first \(it trains and caches them"):
        variants.load_variants()
    assert not no_training and not any(tmp_path.iterdir())  # nothing trained, nothing written


def test_train_true_trains_into_the_cache(tmp_path, no_training):
    with pytest.raises(KeyboardInterrupt):
        variants.study_variants(cache=str(tmp_path), train=True)
    key = TrainConfig.load("tiny").trained_key()[:12]
    assert [p.name for p in no_training] == [f"demo-{key}"]


def test_cached_demo_variants_are_found_without_training(tmp_path, no_training, monkeypatch, capsys):
    cfg = TrainConfig.load("tiny")
    run = tmp_path / f"demo-{cfg.trained_key()[:12]}"
    monkeypatch.setattr(variants.train, "run_complete",
                        lambda run_dir, c, vs: run_dir == run and c.trained_key() == cfg.trained_key()
                        and tuple(vs) == variants.VARIANTS)
    assert variants.study_variants(cache=str(tmp_path)) == {v: run / v for v in variants.VARIANTS}
    assert "using the cached variants" in capsys.readouterr().out and not no_training


def test_fixedid_checkpoints_names_the_variants(tmp_path, no_training, monkeypatch):
    for name in ("gf2", "learned", "mine"):
        (tmp_path / "run" / name).mkdir(parents=True)
        (tmp_path / "run" / name / "meta.json").write_text(json.dumps({}))
    monkeypatch.setenv(variants.ENV, str(tmp_path / "run"))  # a fixedid-train --out directory: its variants, in order
    assert list(variants.study_variants()) == ["learned", "gf2", "mine"]
    monkeypatch.setenv(variants.ENV, f"a={tmp_path / 'run' / 'gf2'}, b={tmp_path / 'run' / 'mine'}")
    assert variants.study_variants(cache=str(tmp_path / "empty")) == {"a": tmp_path / "run" / "gf2",
                                                                      "b": tmp_path / "run" / "mine"}
    monkeypatch.setenv(variants.ENV, f"a={tmp_path}")
    with pytest.raises(AnalysisError, match="no meta.json"):
        variants.study_variants()
    assert not no_training

"""What the README states that the code can check: the notebooks it lists, a config's parameter count, where
snapshots go, and the behaviours table, which must be the one experiments/benchmarks/behaviours.py rendered from its
committed results."""

import importlib.util
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
WORDS = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def test_the_notebooks_it_lists_are_the_notebooks_there():
    shipped = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    count = re.search(r"`notebooks/` holds (\w+) notebooks", README).group(1)
    assert WORDS[count] == len(shipped)
    assert all(f"`{name}`" in README for name in shipped)


def test_the_small_configs_parameter_counts():
    from fixedid.config import trainable_params
    from fixedid.train import TrainConfig

    cfg = TrainConfig.load("small")
    vocab = cfg.data.vocab_size  # the tokenizer it trains has this many ids
    learned, fixed = (round(trainable_params(cfg.model_config(v, vocab)) / 1e6) for v in ("learned", "canonical"))
    claim = re.search(r"`small` \(~(\d+)M trainable parameters as the learned variant, ~(\d+)M fixed-code\)", README)
    assert (int(claim.group(1)), int(claim.group(2))) == (learned, fixed)


def test_the_snapshot_directory_it_names():
    from fixedid.train import kept_dir

    from fixedid.train import TrainConfig

    t = TrainConfig.load("tiny").train
    assert f"`steps/{kept_dir(Path('v'), t.kept_steps[0]).name}/` for tiny's {t.steps:,} steps" in README


@pytest.mark.parametrize("config", ["tiny", "tiny-bpe"])
def test_the_behaviours_table_is_the_benchmarks_output(config):
    spec = importlib.util.spec_from_file_location("behaviours", ROOT / "experiments/benchmarks/behaviours.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results, begin, end = bench.places(config)
    block = README[README.index(begin):README.index(end) + len(end)]
    assert block == bench.readme_block(pd.read_csv(results), config)


def test_the_demos_training_budget():
    from fixedid.train import TrainConfig

    cfg = TrainConfig.load("tiny")
    per_variant = cfg.train.steps * cfg.train.batch_size * cfg.model_config("canonical", 2).context
    assert f"training 3 x {per_variant:,} tokens: about {3 * per_variant / 1e6:.1f}M" in README

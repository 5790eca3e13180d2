"""The model the benchmark scripts time: an untrained model of the demo's tiny recipe (the speed of a sweep does not
depend on the weights), with the word-level tokenizer of the built-in language and a checkpoint record that names it,
so that corpus-level analyses find its validation data."""

from __future__ import annotations

import tempfile
from pathlib import Path

from analysis import load
from fixedid import FixedIdLM, save_checkpoint
from fixedid.data import SyntheticLanguage
from fixedid.data.tokenizer import train_words
from fixedid.train.config import TrainConfig


def untrained_tiny(interface: str, recipe: str = "tiny"):
    """An untrained model of ``recipe``'s shape (``tiny``, the demo's; ``small``...) reading the built-in language's
    word tokens."""
    tok = train_words(SyntheticLanguage(0).documents(2000), 4096)
    # one RoPE base for every head: TL's split-qkv attention, which edges.py and paths.py check against, has one
    # table (the recipe's per-head bases change no timing: the same operations on a table as wide as the heads)
    cfg = TrainConfig.load(recipe).model_config(interface, tok.get_vocab_size(with_added_tokens=True))
    cfg = cfg.replace(rope_head_thetas=None)
    with tempfile.TemporaryDirectory() as d:
        path = save_checkpoint(FixedIdLM(cfg), Path(d) / interface, tokenizer=tok,
                               train_config={"data": {"source": "synthetic", "val_split": "validation"}})
        return load(path)

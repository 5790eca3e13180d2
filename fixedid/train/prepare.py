"""Prepare a run's data once: tokenizer, pretokenised train/validation shards and a unigram baseline."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ..atomic import fsync_dir, temp_name, write_text_atomic
from ..data import TokenShards, build_shards, check_vocab_fits, iter_texts, load_tokenizer, train_bpe, train_words
from ..errors import DataError
from .config import DataConfig, data_table


#: Tokenizers trained from the run's own text, by ``[data] tokenizer`` name.
TRAINED = {"bpe": train_bpe, "words": train_words}


@dataclass
class PreparedData:
    """What training reads (:func:`fixedid.train.prepare.prepare_data`): the ``tokenizer``, the ``train`` and
    ``val`` token streams (:class:`~fixedid.data.shards.TokenShards`, memory-mapped) and ``unigram_loss``, the
    validation cross-entropy in nats per token of the training tokens' add-one unigram model (the loss a model that
    ignores context would reach)."""

    tokenizer: Tokenizer
    train: TokenShards
    val: TokenShards
    unigram_loss: float  # cross-entropy (nats/token) of the validation tokens under the train unigram distribution


def _take_bytes(texts, n_bytes: int):
    total = 0
    for t in texts:
        yield t
        total += len(t.encode())
        if total >= n_bytes:
            return


def unigram_loss(train: TokenShards, val: TokenShards, vocab_size: int) -> float:
    """Validation cross-entropy of the add-one smoothed unigram model of the training tokens."""
    counts = np.bincount(train.slice(0, len(train)), minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[val.slice(0, len(val))].mean())


def _build(d: DataConfig, target: Path, n_bits: int, progress: bool) -> None:
    tmp = temp_name(target)
    tmp.mkdir(parents=True)
    try:
        tok = make_tokenizer(d)
        check_vocab_fits(tok, n_bits)
        train_texts = iter_texts(d.source, text_field=d.text_field, split=d.split, synthetic_mix=d.synthetic_mix)
        if d.val_split:
            val_texts = iter_texts(d.source, text_field=d.text_field, split=d.val_split,
                                   synthetic_mix=d.synthetic_mix)
        else:  # hold out the head of the training stream, then continue it for training
            val_texts = train_texts
        build_shards(val_texts, tok, tmp, source=d.source, split="validation", max_tokens=d.val_tokens,
                     progress=progress)
        manifest = build_shards(train_texts, tok, tmp, source=d.source, split="train", max_tokens=d.train_tokens,
                                progress=progress, split_word_rate=d.split_word_rate,
                                split_word_scope=d.split_word_scope)
        if manifest.split("train").n_tokens < d.train_tokens // 10:
            raise DataError(f"source {d.source!r} gave only {manifest.split('train').n_tokens} training tokens "
                            f"of the {d.train_tokens} asked for; use more data or lower train_tokens")
        write_text_atomic(tmp / "tokenizer.json", tok.to_str())
        vocab = tok.get_vocab_size(with_added_tokens=True)
        base = unigram_loss(TokenShards(tmp, "train"), TokenShards(tmp, "validation"), vocab)
        info = {"data": data_table(d), "vocab_size": vocab, "unigram_loss": base}
        write_text_atomic(tmp / "data.json", json.dumps(info, indent=1, sort_keys=True))
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
        fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def make_tokenizer(d: DataConfig):
    """The tokenizer of ``[data]``: trained (``bpe``, ``words``) on the first ``tokenizer_train_bytes`` of the
    training text, or loaded."""
    if d.tokenizer in TRAINED:
        texts = iter_texts(d.source, text_field=d.text_field, split=d.split, synthetic_mix=d.synthetic_mix)
        return TRAINED[d.tokenizer](_take_bytes(texts, d.tokenizer_train_bytes), d.vocab_size)
    return load_tokenizer(d.tokenizer)


def load_prepared(path: Path, d: DataConfig | None = None) -> PreparedData:
    """Open a prepared data directory; with ``d``, refuse one built from a different ``[data]`` table."""
    try:
        info = json.loads((path / "data.json").read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{path} is not a prepared data directory ({e}); delete it to rebuild") from None
    if d is not None and info.get("data") != data_table(d):
        raise DataError(f"{path} was prepared from a different [data] table; use another --out or delete it")
    try:
        tok = Tokenizer.from_str((path / "tokenizer.json").read_text())
    except Exception as e:  # tokenizers raises a bare Exception
        raise DataError(f"{path}/tokenizer.json cannot be loaded ({e}); delete {path} to rebuild") from None
    return PreparedData(tok, TokenShards(path, "train"), TokenShards(path, "validation"), info["unigram_loss"])


def prepare_data(d: DataConfig, out: Path, *, n_bits: int, build: bool = True, progress: bool = False) -> PreparedData:
    """Return the prepared data for ``d``, building ``out`` first when it does not exist and ``build`` is set.

    With ``d.shards`` set, that directory (a ``manifest.json`` with ``train`` and ``validation`` splits beside a
    ``tokenizer.json``) is used as is and ``out`` is ignored.
    """
    if d.shards:
        shards = Path(d.shards)
        if not (shards / "tokenizer.json").exists():
            raise DataError(f"shard directory {shards} has no tokenizer.json beside its manifest")
        tok = load_tokenizer(str(shards / "tokenizer.json"))
        check_vocab_fits(tok, n_bits)
        train, val = TokenShards(shards, "train"), TokenShards(shards, "validation")
        vocab = tok.get_vocab_size(with_added_tokens=True)
        return PreparedData(tok, train, val, unigram_loss(train, val, vocab))
    if not (out / "data.json").exists():
        if not build:
            raise DataError(f"prepared data is missing at {out}")
        _build(d, out, n_bits, progress)
    return load_prepared(out, d)


def vocab_size_of(d: DataConfig) -> int:
    """The vocabulary size a run will have, without preparing its shards (for ``--dry-run``): a word-level
    tokenizer is trained to count its words (about a second on the built-in language)."""
    if d.shards:
        return load_tokenizer(str(Path(d.shards) / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    if d.tokenizer == "bpe":
        return d.vocab_size
    return make_tokenizer(d).get_vocab_size(with_added_tokens=True)


__all__ = ["PreparedData", "prepare_data", "load_prepared", "unigram_loss", "vocab_size_of"]

"""Tokenizers: train a byte-level BPE, load one, and the checks a fixed-width token code needs."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ..errors import DataError

__all__ = ["train_bpe", "train_words", "load_tokenizer", "check_vocab_fits", "tokenizer_hash", "eot_id", "EOT_TOKENS"]

#: End-of-text token names looked up by :func:`~fixedid.data.tokenizer.eot_id`, in order of preference.
EOT_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")


def train_bpe(texts: Iterable[str], vocab_size: int, *,
              special_tokens: Sequence[str] = ("<|endoftext|>",)) -> Tokenizer:
    """Train a byte-level BPE tokenizer with ``vocab_size`` tokens in all (special tokens and the 256 bytes included).

    GPT-2 style: the ByteLevel pre-tokenizer (GPT-2 split regex, ``add_prefix_space=False``) and the ByteLevel
    decoder, so ``decode(encode(s).ids) == s`` for every string ``s``. The special tokens take ids
    ``0..len(special_tokens)-1`` in the order given (``<|endoftext|>`` is id 0 by default); the 256 byte tokens
    come next, then the merges. The trainer is deterministic: the same texts and arguments give the same
    tokenizer (same :func:`~fixedid.data.tokenizer.tokenizer_hash`). Fewer tokens than ``vocab_size`` result if the
    texts have too few distinct pairs to merge.
    """
    special_tokens = list(special_tokens)
    if len(set(special_tokens)) != len(special_tokens):
        raise DataError(f"special_tokens has duplicates: {special_tokens}")
    floor = 256 + len(special_tokens)
    if not isinstance(vocab_size, int) or vocab_size < floor:
        raise DataError(f"vocab_size={vocab_size!r} is too small: a byte-level BPE needs at least {floor} tokens "
                        f"(256 bytes + {len(special_tokens)} special); ask for a larger vocabulary")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(iter(texts), trainer=trainer)
    return tok


def train_words(texts: Iterable[str], vocab_size: int, *,
                special_tokens: Sequence[str] = ("<|endoftext|>", "<|unk|>")) -> Tokenizer:
    """Train a word-level tokenizer: one token per piece of GPT-2's pre-tokenization (a word with its leading
    space, or a punctuation mark), the ``vocab_size`` most frequent pieces of ``texts`` at most.

    The pieces are exactly those a byte-level BPE of the same text ends with when every word is one token, but the
    vocabulary holds only the pieces seen (no byte alphabet, no intermediate merges): for the built-in language
    ~380 tokens instead of ~1,080, so the output head and softmax of a tiny model cost ~3x less (a whole training
    step of the d_model-64 ``tiny`` recipe ~1.5x less). The special tokens take ids ``0..`` in the order given;
    the last one stands for any piece not seen in training (so ``decode(encode(s)) == s`` holds for text made of
    seen pieces, e.g. the built-in language). Deterministic.
    """
    special_tokens = list(special_tokens)
    if len(special_tokens) < 2 or len(set(special_tokens)) != len(special_tokens):
        raise DataError(f"special_tokens needs distinct end-of-text and unknown tokens, got {special_tokens}")
    if not isinstance(vocab_size, int) or vocab_size <= len(special_tokens):
        raise DataError(f"vocab_size={vocab_size!r} is too small for a word-level tokenizer; ask for more than "
                        f"{len(special_tokens)}")
    tok = Tokenizer(models.WordLevel(unk_token=special_tokens[-1]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=special_tokens,
                                        show_progress=False)
    tok.train_from_iterator(iter(texts), trainer=trainer)
    return tok


def load_tokenizer(spec: str) -> Tokenizer:
    """Load a tokenizer from a ``tokenizer.json`` file, a directory holding one, or a Hugging Face hub name.

    A hub name (e.g. ``"gpt2"``) is fetched with ``huggingface_hub.hf_hub_download(name, "tokenizer.json")``,
    which honours ``HF_HUB_OFFLINE`` and the local cache; without network or cache the result is a
    :class:`~fixedid.errors.DataError`, never a hang.
    """
    if not isinstance(spec, str) or not spec:
        raise DataError(f"tokenizer spec must be a non-empty string, got {spec!r}")
    path = Path(spec).expanduser()
    if path.is_dir():
        file = path / "tokenizer.json"
        if not file.is_file():
            raise DataError(f"directory {spec!r} holds no tokenizer.json; point at a tokenizer.json file or a "
                            "directory that has one")
        return _from_file(file)
    if path.is_file():
        return _from_file(path)
    if spec.startswith(("/", "./", "../", "~")) or spec.endswith(".json") or spec.count("/") > 1:
        raise DataError(f"tokenizer {spec!r} not found: no such file or directory; pass a path to a "
                        "tokenizer.json, a directory holding one, or a Hugging Face tokenizer name")
    return _from_hub(spec)


def _from_file(file: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(file))
    except Exception as e:  # tokenizers raises a bare Exception on a bad file
        raise DataError(f"{str(file)!r} is not a valid tokenizer.json ({e}); re-save it with "
                        "tokenizers.Tokenizer.save") from None


def _from_hub(name: str) -> Tokenizer:
    hint = "pass a path to a local tokenizer.json (or its directory), or train one with train_bpe"
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:  # pragma: no cover - huggingface_hub comes with tokenizers/datasets
        hf_hub_download = None
    try:
        if hf_hub_download is None:  # pragma: no cover
            return Tokenizer.from_pretrained(name)
        return _from_file(Path(hf_hub_download(name, "tokenizer.json")))
    except DataError:
        raise
    except Exception as e:  # offline, not found, gated, no tokenizer.json...
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(f"tokenizer {name!r} could not be loaded from the Hugging Face hub: "
                        f"{type(e).__name__}: {reason}; {hint}") from None


def check_vocab_fits(tokenizer: Tokenizer, n_bits: int) -> None:
    """Raise :class:`~fixedid.errors.DataError` unless every token id of ``tokenizer`` has an ``n_bits``-bit code."""
    v = tokenizer.get_vocab_size(with_added_tokens=True)
    if v > 2 ** n_bits:
        raise DataError(f"tokenizer has {v} tokens but a {n_bits}-bit code can name only {2 ** n_bits}; "
                        "use a smaller vocabulary or more bits")


def tokenizer_hash(tokenizer: Tokenizer) -> str:
    """The sha256 (hex) of the tokenizer's serialised JSON, ``tokenizer.to_str()``: equal hash, same tokenizer."""
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


def eot_id(tokenizer: Tokenizer) -> int:
    """The id of the end-of-text token: the first of :data:`~fixedid.data.tokenizer.EOT_TOKENS` that the tokenizer
    knows."""
    for name in EOT_TOKENS:
        i = tokenizer.token_to_id(name)
        if i is not None:
            return i
    raise DataError(f"tokenizer has no end-of-text token (looked for {list(EOT_TOKENS)}); train it with "
                    "special_tokens=('<|endoftext|>',) or add one with tokenizer.add_special_tokens")

"""Words written in more than one way: a seeded split of some words into two pieces before a tokenizer encodes them.

A tokenizer segments a word the same way every time; real text does not stay that regular (a word at the start of a
line, a typo, a rare inflection), and the study's explanation of the fixed-code gap is exactly that a frozen table
cannot smooth over how text is split. :func:`resegmenting_encoder` wraps a tokenizer's batch encoder so that each
word (a piece of the tokenizer's own pre-tokenization: a word with its leading space, a run of punctuation) is, with
probability ``rate``, cut at a uniformly drawn inner position and the two halves encoded apart: ``" teachers"`` may
come out as ``" teach" + "ers"`` instead of ``" teacher" + "s"``. The ids still decode to the same text. Unlike the
tokenizers library's BPE dropout (whose random draws are not seeded), the cuts come from a numpy generator, so the
same text, rate and seed give the same ids on every machine.
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError


def split_words(text: str, tokenizer, rate: float, rng: np.random.Generator) -> list[str]:
    """``text`` as the tokenizer's pre-tokenized pieces (raw substrings, in order), each piece of two or more
    characters cut in two with probability ``rate``."""
    pre = tokenizer.pre_tokenizer
    if pre is None:
        raise DataError("splitting words needs a tokenizer with a pre-tokenizer (a byte-level BPE has one)")
    spans = [text[s:e] for _, (s, e) in pre.pre_tokenize_str(text)]
    cut = rng.random(len(spans)) < rate
    where = rng.random(len(spans))
    out = []
    for piece, c, w in zip(spans, cut, where):
        if c and len(piece) >= 2:
            k = 1 + int(w * (len(piece) - 1))  # 1 .. len - 1
            out += [piece[:k], piece[k:]]
        else:
            out.append(piece)
    return out


def resegmenting_encoder(tokenizer, rate: float, seed: int = 0):
    """A drop-in for ``tokenizer.encode_batch(texts, add_special_tokens=False)`` that splits words first (see the
    module docstring); the draws continue from one generator across calls, so a stream of batches is reproducible."""
    if not 0 < rate <= 1:
        raise DataError(f"split_word_rate must be in (0, 1], got {rate!r}")
    rng = np.random.default_rng([int(seed), 29])
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    def encode_split(texts, add_special_tokens=False):
        words = [split_words(t, tokenizer, rate, rng) for t in texts]
        return encode(words, is_pretokenized=True, add_special_tokens=add_special_tokens)

    return encode_split


__all__ = ["split_words", "resegmenting_encoder"]

"""Words written in more than one way: a seeded split of some words into two pieces before a tokenizer encodes them."""

from __future__ import annotations

import numpy as np

from ..errors import DataError


#: The scopes of a draw (``split_word_scope``): each occurrence of a word on its own, or one draw per word and
#: document (see the module docstring).
SCOPES = ("occurrence", "document")


def split_words(text: str, tokenizer, rate: float, rng: np.random.Generator,
                scope: str = "occurrence") -> list[str]:
    """``text`` as the tokenizer's pre-tokenized pieces (raw substrings, in order), each piece of two or more
    characters cut in two with probability ``rate``: each occurrence on its own (``scope="occurrence"``), or one
    draw per distinct piece of ``text``, shared by all its occurrences (``scope="document"``)."""
    pre = tokenizer.pre_tokenizer
    if pre is None:
        raise DataError("splitting words needs a tokenizer with a pre-tokenizer (a byte-level BPE has one)")
    _check_scope(scope)
    spans = [text[s:e] for _, (s, e) in pre.pre_tokenize_str(text)]
    if scope == "document":
        kinds: dict[str, int] = {}
        which = np.array([kinds.setdefault(p, len(kinds)) for p in spans], dtype=np.int64)
        cut = (rng.random(len(kinds)) < rate)[which]
        where = rng.random(len(kinds))[which]
    else:
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


def _check_scope(scope) -> None:
    if scope not in SCOPES:
        raise DataError(f"split_word_scope must be one of {', '.join(map(repr, SCOPES))}, got {scope!r}")


def resegmenting_encoder(tokenizer, rate: float, seed: int = 0, scope: str = "occurrence"):
    """A drop-in for ``tokenizer.encode_batch(texts, add_special_tokens=False)`` that splits words first (see the
    module docstring; each text is one document for ``scope="document"``); the draws continue from one generator
    across calls, so a stream of batches is reproducible."""
    if not 0 < rate <= 1:
        raise DataError(f"split_word_rate must be in (0, 1], got {rate!r}")
    _check_scope(scope)
    rng = np.random.default_rng([int(seed), 29])
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    def encode_split(texts, add_special_tokens=False):
        words = [split_words(t, tokenizer, rate, rng, scope) for t in texts]
        return encode(words, is_pretokenized=True, add_special_tokens=add_special_tokens)

    return encode_split


__all__ = ["SCOPES", "split_words", "resegmenting_encoder"]

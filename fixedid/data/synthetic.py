"""A seeded, deterministic toy English with known latent structure."""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Iterator

from ..errors import DataError
from .render import render
from .task_pairs import PromptPair, TaskPairs
from .lexicon import (ADJS, ANIMATE, ANIM_ADJS, ATTR_PREPS, CODAS, FEMALE, FIXED_WORDS, FOODS, GIVE, JOBS, LOC_PREPS,
                      MALE, MOTION, NOUNS, N_CITIES, N_ENTITIES, OBJECTS, ONSETS, OPENERS, PLACES, PLURAL_FOODS,
                      POOL_TOKS, TRANSITIVE, VERB_PAIRS, VOWELS)

#: The part-of-speech tags of :class:`~fixedid.data.synthetic.WordLabel` ``pos`` (the analysis adds ``"EOT"`` for the
#: end-of-text token).
POS_TAGS = ("NAME", "ENTITY", "CITY", "DET", "NOUN", "VERB", "ADJ", "PREP", "CONJ", "PRON", "REL", "PUNCT")
NUMBERS = ("sg", "pl", "none")
RELATIONS = ("lives_in", "likes", "works_as")
PUNCTUATION = (",", ".")

_PERIOD = (".", "PUNCT", "none", -1, 0)
_COMMA = (",", "PUNCT", "none", -1, 0)
_THE0 = ("The", "DET", "none", -1, 0)
_FLIP = {"sg": "pl", "pl": "sg"}
# Sentence kinds of the document mixture and their default probabilities.
_KINDS = ("ioi", "agreement", "fact", "nested", "list", "repeat", "filler")
_WEIGHTS = (0.45, 0.12, 0.12, 0.04, 0.20, 0.0, 0.07)
#: Sentences per document before any retelling (inclusive range), and the default retelling probability.
SENTENCES_PER_DOC = (3, 6)
RETELL = 0.85
#: The default document mixture, sentence kind -> probability (``SyntheticLanguage(mix=...)`` overrides some).
DEFAULT_MIX = dict(zip(_KINDS, _WEIGHTS))


@dataclass(frozen=True)
class WordLabel:
    """One word (or punctuation mark) of a sentence with its latent labels; see the module docstring."""
    word: str
    pos: str
    number: str
    entity: int
    depth: int
    role: str = "none"  # in an IOI sentence: "io" / "s1" (first mentions), "s2" (the subject again), "io2" (the answer)


def _check_int(value, what: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(f"{what} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise DataError(f"{what} must be >= {minimum}, got {value}")
    return value


class SyntheticLanguage(TaskPairs):
    """The toy language of one world seed. Building it is cheap (microseconds to milliseconds)."""

    def __init__(self, seed: int = 0, mix: dict[str, float] | None = None, retell: float = RETELL):
        """``mix`` overrides the probabilities of some sentence kinds of :data:`~fixedid.data.synthetic.DEFAULT_MIX`
        (they are then renormalised); ``retell`` is the probability that a document is told twice. Both change the
        documents, never the world or the task pairs."""
        self.seed = _check_int(seed, "seed")
        if isinstance(retell, bool) or not isinstance(retell, (int, float)) or not 0 <= retell <= 1:
            raise DataError(f"retell must be a probability in [0, 1], got {retell!r}")
        self.retell = float(retell)
        weights = dict(DEFAULT_MIX)
        for kind, w in (mix or {}).items():
            if kind not in weights:
                raise DataError(f"unknown sentence kind {kind!r} in the synthetic mix; use some of {list(_KINDS)}")
            if not isinstance(w, (int, float)) or isinstance(w, bool) or w < 0:
                raise DataError(f"synthetic mix weight of {kind!r} must be a non-negative number, got {w!r}")
            weights[kind] = float(w)
        if sum(weights.values()) <= 0:
            raise DataError("the synthetic mix gives every sentence kind probability 0")
        self.mix = {k: w / sum(weights.values()) for k, w in weights.items()}
        rng = random.Random(f"fixedid.synthetic.world:{seed}")
        self._names = tuple(FEMALE + MALE)
        taken = {w.lower() for w in self._fixed_vocabulary()}
        self._entities = tuple(self._made_up(rng, N_ENTITIES, taken))
        self._cities = tuple(self._made_up(rng, N_CITIES, taken))
        self._attr_words = (self._cities, FOODS, JOBS)  # the value words of each relation in RELATIONS
        self._attr = attr = [[rng.randrange(len(words)) for _ in range(N_ENTITIES)] for words in self._attr_words]
        for values, words in zip(attr, self._attr_words):
            if len(set(values)) < 2:  # every relation needs two distinct values for the facts task
                values[0] = (values[1] + 1) % len(words)
        self._facts = {(self._entities[e], rel): self._attr_words[r][attr[r][e]]
                       for e in range(N_ENTITIES) for r, rel in enumerate(RELATIONS)}
        self._vocab = sorted(set(self._fixed_vocabulary()) | set(self._entities) | set(self._cities))
        self._cumulative = list(itertools.accumulate(self.mix[k] for k in _KINDS))
        self._simple = {"ioi": self._ioi, "agreement": self._agreement, "fact": self._fact, "nested": self._nested}

    # ----------------------------------------------------------------------------------------- world
    def _fixed_vocabulary(self) -> list[str]:
        words = list(self._names) + list(FIXED_WORDS) + list(OPENERS) + list(MOTION) + list(GIVE)
        words += PLACES + OBJECTS + ATTR_PREPS + LOC_PREPS + ADJS + ANIM_ADJS + TRANSITIVE
        words += FOODS + JOBS + [w for pair in NOUNS + ANIMATE + list(VERB_PAIRS) for w in pair]
        return words

    @staticmethod
    def _made_up(rng: random.Random, count: int, taken: set[str]) -> list[str]:
        """``count`` new capitalised pseudo-words of 2-3 syllables, none in (and all added to) ``taken``."""
        out = []
        while len(out) < count:
            n = 2 if rng.random() < 0.7 else 3
            word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(n)) + rng.choice(CODAS)
            if 4 <= len(word) <= 9 and word not in taken:
                taken.add(word)
                out.append(word.capitalize())
        return out

    @property
    def facts(self) -> dict[tuple[str, str], str]:
        """The fact base: ``(entity, relation) -> attribute`` for every entity and relation in RELATIONS."""
        return dict(self._facts)

    @property
    def vocabulary(self) -> list[str]:
        """Every word the language can emit (sorted, unique; punctuation excluded, see PUNCTUATION)."""
        return list(self._vocab)

    @property
    def names(self) -> tuple[str, ...]:
        """Person names; the first half are female (pronoun "she"), the second half male ("he")."""
        return self._names

    @property
    def entities(self) -> tuple[str, ...]:
        """Made-up fact-base entity names (subjects of FACT sentences)."""
        return self._entities

    @property
    def cities(self) -> tuple[str, ...]:
        """Made-up city names (values of the lives_in relation)."""
        return self._cities

    # ------------------------------------------------------------------------- sentence generators
    # Each returns a list of (word, pos, number, entity, depth) tuples, the field order of WordLabel.
    def _name(self, i: int, depth: int = 0) -> tuple:
        return (self._names[i], "NAME", "sg", i, depth)

    def _ioi(self, rng: random.Random) -> list[tuple]:
        n = len(self._names)
        s = rng.randrange(n)
        io = rng.randrange(n - 1)
        io += io >= s
        a, b = (s, io) if rng.random() < 0.5 else (io, s)
        first = {s: "s1", io: "io"}  # the role label is appended; it draws nothing from rng
        return [(rng.choice(OPENERS), "CONJ", "none", -1, 1), self._name(a, 1) + (first[a],),
                ("and", "CONJ", "none", -1, 1), self._name(b, 1) + (first[b],),
                (rng.choice(MOTION), "VERB", "none", -1, 1), ("to", "PREP", "none", -1, 1),
                ("the", "DET", "none", -1, 1), (rng.choice(PLACES), "NOUN", "sg", -1, 1), _COMMA,
                self._name(s) + ("s2",), (rng.choice(GIVE), "VERB", "none", -1, 0), ("a", "DET", "none", -1, 0),
                (rng.choice(OBJECTS), "NOUN", "sg", -1, 0), ("to", "PREP", "none", -1, 0), self._name(io) + ("io2",),
                _PERIOD]

    def _agreement(self, rng: random.Random, opposite: bool | None = None) -> list[tuple]:
        i = rng.randrange(len(NOUNS))
        j = rng.randrange(len(NOUNS) - 1)
        j += j >= i
        num = "pl" if rng.random() < 0.5 else "sg"
        if opposite is None:
            opposite = rng.random() < 0.5
        anum = _FLIP[num] if opposite else num
        pair = rng.choice(VERB_PAIRS)
        toks = [_THE0, (NOUNS[i][num == "pl"], "NOUN", num, -1, 0), (rng.choice(ATTR_PREPS), "PREP", "none", -1, 0),
                ("the", "DET", "none", -1, 0), (NOUNS[j][anum == "pl"], "NOUN", anum, -1, 0),
                (pair[num == "pl"], "VERB", num, -1, 0)]
        if pair[0] in ("is", "was") and rng.random() < 0.5:
            knum = "pl" if rng.random() < 0.5 else "sg"
            toks += [(rng.choice(LOC_PREPS), "PREP", "none", -1, 0), ("the", "DET", "none", -1, 0),
                     (rng.choice(NOUNS)[knum == "pl"], "NOUN", knum, -1, 0)]
        else:
            toks.append((rng.choice(ADJS), "ADJ", "none", -1, 0))
        toks.append(_PERIOD)
        return toks

    def _fact(self, rng: random.Random, e: int | None = None, rel: int | None = None) -> list[tuple]:
        if e is None:
            e = rng.randrange(N_ENTITIES)
        if rel is None:
            rel = rng.randrange(len(RELATIONS))
        head, v = (self._entities[e], "ENTITY", "sg", e, 0), self._attr[rel][e]
        if rel == 0:
            return [head, ("lives", "VERB", "sg", -1, 0), ("in", "PREP", "none", -1, 0),
                    (self._cities[v], "CITY", "sg", v, 0), _PERIOD]
        if rel == 1:
            food = FOODS[v]
            return [head, ("likes", "VERB", "sg", -1, 0),
                    (food, "NOUN", "pl" if food in PLURAL_FOODS else "sg", -1, 0), _PERIOD]
        return [head, ("works", "VERB", "sg", -1, 0), ("as", "PREP", "none", -1, 0), ("a", "DET", "none", -1, 0),
                (JOBS[v], "NOUN", "sg", -1, 0), _PERIOD]

    def _nested(self, rng: random.Random, depth: int | None = None) -> list[tuple]:
        d = rng.randrange(4) if depth is None else depth
        heads = rng.sample(range(len(ANIMATE)), d + 1)
        nums = ["pl" if rng.random() < 0.5 else "sg" for _ in heads]
        toks = [_THE0, (ANIMATE[heads[0]][nums[0] == "pl"], "NOUN", nums[0], -1, 0)]
        for k in range(1, d + 1):
            toks.append(("that", "REL", "none", -1, k))
            if k == d and rng.random() < 0.5:
                toks.append(self._name(rng.randrange(len(self._names)), k))
            else:
                toks += [("the", "DET", "none", -1, k), (ANIMATE[heads[k]][nums[k] == "pl"], "NOUN", nums[k], -1, k)]
        verbs = rng.sample(TRANSITIVE, d)  # distinct, so "saw saw" never occurs
        toks += [(verbs[k - 1], "VERB", "none", -1, k) for k in range(d, 0, -1)]
        pair = VERB_PAIRS[rng.randrange(2)]
        toks += [(pair[nums[0] == "pl"], "VERB", nums[0], -1, 0), (rng.choice(ANIM_ADJS), "ADJ", "none", -1, 0),
                 _PERIOD]
        return toks

    def _word_list(self, rng: random.Random, indices: list[int] | None = None, words=POOL_TOKS) -> list[tuple]:
        if indices is None:
            indices = rng.sample(range(len(words)), rng.randint(5, 10))
        return ([_THE0, ("words", "NOUN", "pl", -1, 0), ("are", "VERB", "pl", -1, 0)]
                + [words[i] for i in indices] + [_PERIOD])

    def _filler(self, rng: random.Random) -> list[tuple]:
        kind = rng.randrange(4)
        if kind == 0:
            return [self._name(rng.randrange(len(self._names))), ("walked", "VERB", "none", -1, 0),
                    ("to", "PREP", "none", -1, 0), ("the", "DET", "none", -1, 0),
                    (rng.choice(PLACES), "NOUN", "sg", -1, 0), _PERIOD]
        if kind == 1:
            return [self._name(rng.randrange(len(self._names))), ("saw", "VERB", "none", -1, 0),
                    ("a", "DET", "none", -1, 0), (rng.choice(ANIMATE)[0], "NOUN", "sg", -1, 0), _PERIOD]
        if kind == 2:
            num = "pl" if rng.random() < 0.5 else "sg"
            return [_THE0, (rng.choice(NOUNS)[num == "pl"], "NOUN", num, -1, 0),
                    ("are" if num == "pl" else "is", "VERB", num, -1, 0), (rng.choice(ADJS), "ADJ", "none", -1, 0),
                    _PERIOD]
        i = rng.randrange(len(self._names))
        pron = "she" if i < len(FEMALE) else "he"
        return [self._name(i), ("went", "VERB", "none", -1, 0), ("to", "PREP", "none", -1, 0),
                ("the", "DET", "none", -1, 0), (rng.choice(PLACES), "NOUN", "sg", -1, 0),
                ("because", "CONJ", "none", -1, 1), (pron, "PRON", "sg", i, 1), ("was", "VERB", "sg", -1, 1),
                (rng.choice(ANIM_ADJS), "ADJ", "none", -1, 1), _PERIOD]

    def _doc_sentences(self, rng: random.Random, lo: int, hi: int) -> list[list[tuple]]:
        """One document as a list of sentences: ``lo..hi`` drawn sentences (a LIST adds its 1-2 later copies),
        then, with probability ``retell``, the same sentences again."""
        n = rng.randint(lo, hi)
        out: list[list[tuple]] = []
        pending: list[tuple[int, list[tuple]]] = []  # (index due, sentence) of list copies still to come
        cumulative, simple, last = self._cumulative, self._simple, len(self._cumulative) - 1
        while len(out) < n or pending:
            i = len(out)
            if pending and (i >= pending[0][0] or i >= n):
                out.append(pending.pop(0)[1])
                continue
            r = rng.random() * cumulative[-1]
            k = 0
            while k < last and r >= cumulative[k]:
                k += 1
            kind = _KINDS[k]
            if kind in simple:
                out.append(simple[kind](rng))
            elif kind == "list" and not pending:
                words = self._word_list(rng)
                out.append(words)
                due = i + 1 + rng.randrange(2)
                pending.append((due, words))
                if rng.random() < 0.5:
                    pending.append((due + 1 + rng.randrange(2), words))
            elif kind == "repeat" and i > 0:
                out.append(out[rng.randrange(i)])
            else:
                out.append(self._filler(rng))
        if rng.random() < self.retell:
            out = out + out
        return out

    def _stream(self, seed: int, lo: int, hi: int) -> Iterator[list[list[tuple]]]:
        rng = random.Random(f"fixedid.synthetic.docs:{self.seed}:{seed}")
        while True:
            yield self._doc_sentences(rng, lo, hi)

    # ---------------------------------------------------------------------------------- public text
    @staticmethod
    def _check_spd(sentences_per_doc) -> tuple[int, int]:
        try:
            lo, hi = sentences_per_doc
        except (TypeError, ValueError):
            raise DataError(f"sentences_per_doc must be a pair (min, max), got {sentences_per_doc!r}") from None
        _check_int(lo, "sentences_per_doc[0]", 1)
        _check_int(hi, "sentences_per_doc[1]", 1)
        if hi < lo:
            raise DataError(f"sentences_per_doc must have min <= max, got {sentences_per_doc!r}")
        return lo, hi

    def documents(self, n: int | None = None, *, seed: int = 0,
                  sentences_per_doc: tuple[int, int] = SENTENCES_PER_DOC) -> Iterator[str]:
        """Yield ``n`` documents (forever if ``n`` is None), deterministic in (world seed, ``seed``).

        A document holds ``sentences_per_doc`` sentences (inclusive range) joined by single spaces.
        """
        if n is not None:
            _check_int(n, "n", 0)
        _check_int(seed, "seed")
        lo, hi = self._check_spd(sentences_per_doc)
        return self._documents(n, seed, lo, hi)

    def _documents(self, n: int | None, seed: int, lo: int, hi: int) -> Iterator[str]:
        for count, doc in enumerate(self._stream(seed, lo, hi)):
            if n is not None and count >= n:
                return
            # no sentence starts with punctuation, so this is the rendered sentences joined by one space
            yield render([t[0] for sentence in doc for t in sentence])

    def text(self, n_bytes: int, *, seed: int = 0) -> str:
        """Documents of ``documents(seed=seed)`` joined by "\\n", stopping once at least ``n_bytes`` long.

        The text is ASCII (one byte per character) and overshoots ``n_bytes`` by less than one document.
        """
        _check_int(n_bytes, "n_bytes", 1)
        parts, total = [], -1
        for doc in self.documents(seed=seed):
            parts.append(doc)
            total += len(doc) + 1
            if total >= n_bytes:
                break
        return "\n".join(parts)

    def labelled_sentences(self, n: int, *, seed: int = 0) -> Iterator[list[WordLabel]]:
        """Yield the first ``n`` sentences of ``documents(seed=seed)`` (default sentences_per_doc), labelled.

        ``sentence_text`` of the k-th yielded list is exactly the k-th sentence of that document stream.
        """
        _check_int(n, "n", 0)
        _check_int(seed, "seed")
        return self._labelled(n, seed)

    def _labelled(self, n: int, seed: int) -> Iterator[list[WordLabel]]:
        count = 0
        for doc in self._stream(seed, *SENTENCES_PER_DOC):
            for sentence in doc:
                if count >= n:
                    return
                yield [WordLabel(*t) for t in sentence]
                count += 1

    def sentence_text(self, words: list[WordLabel]) -> str:
        """Render a labelled sentence exactly as :meth:`~fixedid.data.synthetic.SyntheticLanguage.documents` does (with
        :func:`~fixedid.data.render.render`)."""
        if not words:
            raise DataError("sentence_text needs a non-empty list of WordLabel")
        for w in words:
            if not isinstance(w, WordLabel):
                raise DataError(f"sentence_text expects WordLabel items, got {type(w).__name__}")
        return render([w.word for w in words])

    # ------------------------------------------------------------------------------------- tasks
    def task_pairs(self, task: str, n: int, *, seed: int = 0) -> list[PromptPair]:
        """``n`` clean/corrupt prompt pairs for ``task`` (one of TASKS, or of the held-out CONTROLS; see
        :mod:`fixedid.data.task_pairs`), deterministic in (world seed, seed).

        Clean and corrupt have the same number of words and differ only in the patched word: the second
        subject mention (ioi), the subject noun's number (agreement), the entity (facts), or the word at the
        answer's position in the first copy of the list (induction, where the corrupt prompt puts the wrong
        answer there). The wrong answer is always a plausible continuation that a model without context cannot
        tell from the answer: the other name of the sentence (ioi), the other form of the verb, with an attractor
        noun of the subject's number in half of the pairs and of the opposite number in the other half
        (agreement), another entity's attribute of the same relation (facts), another word of the same list
        (induction).
        """
        if task not in self.TASKS + self.CONTROLS:
            raise DataError(f"unknown task {task!r}; valid tasks are: {', '.join(self.TASKS)} (and the controls "
                            f"{', '.join(self.CONTROLS)})")
        _check_int(n, "n", 1)
        _check_int(seed, "seed")
        rng = random.Random(f"fixedid.synthetic.task:{self.seed}:{task}:{seed}")
        make = self._pair_writer(task)
        return [make(rng) for _ in range(n)]

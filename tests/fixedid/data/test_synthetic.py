"""Tests of the synthetic toy language (fixedid.data.synthetic)."""
import itertools
import re

import pytest
from hypothesis import given, settings, strategies as st

from fixedid.data.lexicon import POOL
from fixedid.data.synthetic import (NUMBERS, POS_TAGS, RELATIONS, PromptPair, SyntheticLanguage, WordLabel)
from fixedid.errors import DataError

WORD = re.compile(r"[A-Za-z]+")
FACT_RE = {
    "lives_in": re.compile(r"\b([A-Z][a-z]+) lives in ([A-Z][a-z]+)\."),
    "likes": re.compile(r"\b([A-Z][a-z]+) likes ([a-z]+)\."),
    "works_as": re.compile(r"\b([A-Z][a-z]+) works as a ([a-z]+)\."),
}
NOMINALS = ("NOUN", "NAME", "ENTITY", "PRON")


@pytest.fixture(scope="module")
def lang():
    return SyntheticLanguage(0)


@pytest.fixture(scope="module")
def docs(lang):
    return list(lang.documents(200, seed=1))


def sentences_of(doc):
    return re.findall(r"[^.]*\.", doc)


# ------------------------------------------------------------------------------------ determinism
def test_world_is_deterministic_in_seed():
    a, b, c = SyntheticLanguage(0), SyntheticLanguage(0), SyntheticLanguage(1)
    assert a.facts == b.facts and a.vocabulary == b.vocabulary and a.entities == b.entities
    assert a.facts != c.facts and a.entities != c.entities


def test_documents_are_deterministic(lang):
    assert list(lang.documents(30, seed=5)) == list(lang.documents(30, seed=5))
    assert list(lang.documents(30, seed=5)) != list(lang.documents(30, seed=6))
    assert list(lang.documents(30, seed=5)) != list(SyntheticLanguage(1).documents(30, seed=5))
    assert lang.text(5000, seed=2) == SyntheticLanguage(0).text(5000, seed=2)


def test_documents_stream_and_format(lang, docs):
    assert len(list(itertools.islice(lang.documents(), 500))) == 500
    assert len(docs) == 200 and not list(lang.documents(0))
    for doc in docs:
        assert doc.isascii() and "\n" not in doc and "  " not in doc and doc.endswith(".")
        assert doc == doc.strip()
        sents = sentences_of(doc)
        assert "".join(sents) == doc
        assert all(s.startswith(" ") for s in sents[1:]) and len(sents) >= 3
        assert all(s.strip()[0].isupper() for s in sents)
    once = SyntheticLanguage(0, retell=0.0)
    for doc in once.documents(200, sentences_per_doc=(2, 3)):
        sents = [s.strip() for s in sentences_of(doc)]
        drawn = [s for i, s in enumerate(sents) if s not in sents[:i]]  # list copies are not drawn sentences
        assert len(sents) >= 2 and len(drawn) <= 3
        for s in drawn:
            if s.startswith("The words are"):
                assert sents.count(s) in (2, 3)  # a list comes back once or twice
    halves = []
    for doc in lang.documents(400, sentences_per_doc=(2, 3)):
        sents = sentences_of(doc)
        half = len(sents) // 2
        halves.append(len(sents) % 2 == 0 and [x.strip() for x in sents[:half]] == [x.strip() for x in sents[half:]])
    assert 0.78 < sum(halves) / len(halves) < 0.92  # documents are told twice with probability RETELL = 0.85
    with pytest.raises(DataError, match="retell"):
        SyntheticLanguage(0, retell=1.5)


def test_text_size(lang):
    small = lang.text(100)
    assert len(small) >= 100 and small.isascii()
    big = lang.text(1_000_000, seed=3)  # generous volume check; the speed is measured by hand, not asserted
    assert 1_000_000 <= len(big.encode()) < 1_010_000
    assert big.count("\n") > 500 and "\n\n" not in big
    assert big.split("\n")[:10] == list(lang.documents(10, seed=3))


# --------------------------------------------------------------------------------------- content
def test_facts_are_consistent_across_documents(lang, docs):
    facts = lang.facts
    assert len(facts) == len(lang.entities) * len(RELATIONS)
    seen = dict.fromkeys(RELATIONS, 0)
    for doc in docs:
        for rel, pattern in FACT_RE.items():
            for entity, value in pattern.findall(doc):
                assert facts[(entity, rel)] == value
                seen[rel] += 1
    assert all(count > 20 for count in seen.values())


def test_all_phenomena_appear(lang, docs):
    joined = " ".join(docs)
    assert re.search(r"(When|After) (\w+) and (\w+) \w+ to the \w+, (\2|\3) \w+ a \w+ to (\2|\3)\.", joined)
    assert re.search(r"The \w+ \w+ the \w+ (is|are|was|were) ", joined)
    assert re.search(r"The \w+ that the \w+ that \w+ \w+ \w+ (is|are|was|were) \w+\.", joined)
    assert re.search(r"because (he|she) was", joined)
    lists = 0
    for doc in docs:
        sents = [s.strip() for s in sentences_of(doc)]
        for s in sents:
            if s.startswith("The words are"):
                lists += 1
                assert sents.count(s) >= 2  # every random word list is repeated verbatim
    assert lists > 20


def test_vocabulary_covers_documents(lang, docs):
    vocab = lang.vocabulary
    assert vocab == sorted(set(vocab)) and 150 <= len(vocab) <= 600
    words = set(WORD.findall(" ".join(docs)))
    assert words <= set(vocab)
    assert set(lang.names) | set(lang.entities) | set(lang.cities) <= set(vocab)
    assert 40 <= len(lang.names) <= 80 and len(set(lang.names)) == len(lang.names)
    assert all(re.fullmatch(r"[a-z]+|[A-Z][a-z]+", w) for w in vocab)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=-10**6, max_value=10**6))
def test_any_world_is_well_formed(seed):
    lang = SyntheticLanguage(seed)
    proper = set(lang.names) | set(lang.entities) | set(lang.cities)
    assert len(proper) == len(lang.names) + len(lang.entities) + len(lang.cities)
    lowered = {w.lower() for w in lang.vocabulary if w[0].islower()}
    assert not {w.lower() for w in set(lang.entities) | set(lang.cities)} & lowered
    for rel in RELATIONS:
        assert len({lang.facts[(e, rel)] for e in lang.entities}) >= 2


# ---------------------------------------------------------------------------------------- labels
def test_labelled_sentences_render_like_documents(lang):
    labelled = list(lang.labelled_sentences(300, seed=4))
    assert len(labelled) == 300
    rendered = " ".join(lang.sentence_text(s) for s in labelled)
    stream = " ".join(lang.documents(100, seed=4))
    assert stream.startswith(rendered)
    assert list(lang.labelled_sentences(50, seed=4)) == labelled[:50]


def test_labels_are_valid(lang):
    depths = set()
    for sentence in lang.labelled_sentences(2000, seed=2):
        assert sentence[-1] == WordLabel(".", "PUNCT", "none", -1, 0)
        for w in sentence:
            assert isinstance(w, WordLabel)
            assert w.pos in POS_TAGS and w.number in NUMBERS and 0 <= w.depth <= 3
            depths.add(w.depth)
            if w.pos == "PUNCT":
                assert w.word in (",", ".")
            else:
                assert WORD.fullmatch(w.word)
            if w.pos == "NAME":
                assert lang.names[w.entity] == w.word
            elif w.pos == "ENTITY":
                assert lang.entities[w.entity] == w.word
            elif w.pos == "CITY":
                assert lang.cities[w.entity] == w.word
            elif w.pos == "PRON":
                female = w.entity < len(lang.names) // 2
                assert w.word == ("she" if female else "he")
            else:
                assert w.entity == -1
            if w.pos == "REL":
                assert w.word == "that" and w.depth >= 1
    assert depths == {0, 1, 2, 3}


def test_verbs_agree_with_their_subjects(lang):
    checked = 0
    for sentence in lang.labelled_sentences(4000, seed=7):
        for verb in sentence:
            if verb.pos != "VERB" or verb.number == "none":
                continue
            subject = next(w for w in sentence if w.depth == verb.depth and w.pos in NOMINALS)
            assert verb.number == subject.number, lang.sentence_text(sentence)
            checked += 1
        # agreement across an attractor: the subject and the verb are separated by a noun
        nouns = [w for w in sentence if w.depth == 0 and w.pos == "NOUN"]
        if sentence[0].word == "The" and len(nouns) >= 2 and sentence[5].pos == "VERB":
            assert sentence[5].number == nouns[0].number
    assert checked > 1500


def test_sentence_text_attaches_punctuation(lang):
    words = [WordLabel("When", "CONJ", "none", -1, 1), WordLabel("Mary", "NAME", "sg", 0, 1),
             WordLabel(",", "PUNCT", "none", -1, 0), WordLabel("John", "NAME", "sg", 32, 0),
             WordLabel(".", "PUNCT", "none", -1, 0)]
    assert lang.sentence_text(words) == "When Mary, John."


def test_render_spans_locate_every_word(lang):
    from fixedid.data.render import render, render_spans

    assert render(["When", "Mary", ",", "John", "."]) == "When Mary, John."
    labelled = list(lang.labelled_sentences(300, seed=4))
    words = [w.word for s in labelled for w in s]
    text, spans = render_spans(words)
    assert text == " ".join(lang.sentence_text(s) for s in labelled)
    assert " ".join(lang.documents(100, seed=4)).startswith(text)
    assert len(spans) == len(words) and [text[a:b] for a, b in spans] == words
    assert all(a < b <= c for (a, b), (c, _) in zip(spans, spans[1:]))


# ----------------------------------------------------------------------------------------- tasks
def diff_positions(a, b):
    wa, wb = a.split(), b.split()
    assert len(wa) == len(wb)
    return [i for i, (x, y) in enumerate(zip(wa, wb)) if x != y]


@pytest.mark.parametrize("task", SyntheticLanguage.TASKS)
def test_task_pairs_common(lang, task):
    pairs = lang.task_pairs(task, 60, seed=1)
    assert len(pairs) == 60 and pairs == lang.task_pairs(task, 60, seed=1)
    assert pairs != lang.task_pairs(task, 60, seed=2)
    vocab = set(lang.vocabulary)
    for p in pairs:
        assert isinstance(p, PromptPair) and p.task == task
        assert p.answer != p.wrong and p.answer in vocab and p.wrong in vocab
        assert p.clean == p.clean.strip() and p.corrupt == p.corrupt.strip()
        assert len(diff_positions(p.clean, p.corrupt)) == 1


def test_ioi_pairs(lang):
    for p in lang.task_pairs("ioi", 100):
        clean, corrupt = p.clean.split(), p.corrupt.split()
        names = [w.strip(",") for w in clean if w.strip(",") in lang.names]
        assert names.count(p.answer) == 1 and names.count(p.wrong) == 2 and len(names) == 3
        assert diff_positions(p.clean, p.corrupt) == [8]  # "park, John": the comma is attached
        assert clean[8] == p.wrong and corrupt[8] == p.answer and clean[-1] == "to"
        corrupt_names = [w.strip(",") for w in corrupt if w.strip(",") in lang.names]
        assert corrupt_names.count(p.wrong) == 1  # for corrupt the once-mentioned name flips to `wrong`


def test_agreement_pairs(lang):
    verbs = {"is": "are", "was": "were", "looks": "look", "seems": "seem"}
    verbs.update({v: k for k, v in verbs.items()})
    for p in lang.task_pairs("agreement", 100):
        clean, corrupt = p.clean.split(), p.corrupt.split()
        assert len(clean) == 5 and clean[0] == "The" and diff_positions(p.clean, p.corrupt) == [1]
        assert verbs[p.answer] == p.wrong
        assert clean[1] != corrupt[1] and clean[2:] == corrupt[2:]


def test_agreement_pairs_match_labels(lang):
    # the noun forms used in the task carry the number labels seen in the corpus
    number = {}
    for sentence in lang.labelled_sentences(2000):
        for w in sentence:
            if w.pos == "NOUN":
                number[w.word] = w.number
    opposite = 0
    for p in lang.task_pairs("agreement", 200, seed=3):
        clean = p.clean.split()
        subject_pl = number[clean[1]] == "pl"
        assert (p.answer in ("are", "were", "look", "seem")) == subject_pl
        opposite += number[clean[4]] != number[clean[1]]
    assert 70 <= opposite <= 130  # the attractor has the opposite number in about half of the pairs


def test_facts_pairs(lang):
    facts, prefixes = lang.facts, {"lives in": "lives_in", "likes": "likes", "works as a": "works_as"}
    for p in lang.task_pairs("facts", 100):
        entity, rest = p.clean.split(" ", 1)
        other, rest2 = p.corrupt.split(" ", 1)
        assert rest == rest2 and entity != other and diff_positions(p.clean, p.corrupt) == [0]
        rel = prefixes[rest]
        assert facts[(entity, rel)] == p.answer and facts[(other, rel)] == p.wrong


@pytest.mark.parametrize("task", ["induction", "induction_unlisted"])
def test_induction_pairs(lang, task):
    pool = {w for w, _, _ in POOL}
    used = set()
    for p in lang.task_pairs(task, 100):
        assert p.task == task
        clean = p.clean.split()
        assert clean[:3] == ["The", "words", "are"] and clean.count("The") == 2
        second = clean.index("The", 1)
        span = [w.rstrip(".") for w in clean[3:second]]
        repeat = clean[second + 3:]
        k = len(repeat)
        assert 2 <= k < len(span) and span[:k] == repeat
        words, corrupt_words = WORD.findall(p.clean), WORD.findall(p.corrupt)
        # the wrong answer is another word of the same list: a model that copies any list word is at chance
        assert span[k] == p.answer and words.count(p.answer) == 1 and p.wrong in span and p.wrong != p.answer
        assert diff_positions(p.clean, p.corrupt) == [3 + k]
        assert corrupt_words[3 + k] == p.wrong and p.answer not in corrupt_words
        assert len(set(span)) == len(span)
        used |= set(span)
    if task == "induction":  # the training lists' words
        assert used <= pool
    else:  # words no training list uses: lowercase words of the language outside the pool and the list's frame
        assert not used & pool and used <= set(lang.vocabulary) and not used & {"words", "are"}
        assert all(w.islower() for w in used) and len(used) > len(pool)


def test_induction_pairs_are_the_ones_studies_recorded(lang):
    # the first pairs as the language wrote them before the induction_unlisted control shared their code
    first = lang.task_pairs("induction", 3)
    assert first[0] == PromptPair("induction", "The words are garden door gift old table school. The words are garden "
                                  "door gift old table", "The words are garden door gift old table door. The words "
                                  "are garden door gift old table", "school", "door")
    assert (first[2].clean, first[2].answer, first[2].wrong) == (
        "The words are basket broken kite market dirty. The words are basket broken", "kite", "basket")


# ----------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("task", ["", "IOI", "fact", None])
def test_unknown_task(lang, task):
    with pytest.raises(DataError) as info:
        lang.task_pairs(task, 3)
    for name in SyntheticLanguage.TASKS + SyntheticLanguage.CONTROLS:
        assert name in str(info.value)


@pytest.mark.parametrize("call", [
    lambda L: L.task_pairs("ioi", 0),
    lambda L: L.task_pairs("ioi", -2),
    lambda L: L.task_pairs("ioi", 2.0),
    lambda L: L.task_pairs("ioi", True),
    lambda L: L.documents(-1),
    lambda L: L.documents(3, seed="a"),
    lambda L: L.documents(3, sentences_per_doc=(0, 3)),
    lambda L: L.documents(3, sentences_per_doc=(5, 2)),
    lambda L: L.documents(3, sentences_per_doc=4),
    lambda L: L.text(0),
    lambda L: L.labelled_sentences(-1),
    lambda L: L.sentence_text([]),
    lambda L: L.sentence_text(["word"]),
    lambda L: SyntheticLanguage("0"),
])
def test_bad_input_raises_data_error(lang, call):
    with pytest.raises(DataError):
        call(lang)


def test_mix_reweights_sentence_kinds_but_not_the_world():
    from fixedid.data.synthetic import DEFAULT_MIX
    base, ioi_heavy = SyntheticLanguage(0), SyntheticLanguage(0, mix={"ioi": 1.0, "fact": 0.0, "list": 0.0})
    assert base.mix == pytest.approx(DEFAULT_MIX) and sum(ioi_heavy.mix.values()) == pytest.approx(1.0)
    assert ioi_heavy.facts == base.facts and ioi_heavy.task_pairs("ioi", 5) == base.task_pairs("ioi", 5)

    def count(lang, needle):
        return sum(doc.count(needle) for doc in lang.documents(200, seed=3))

    assert count(ioi_heavy, " gave a ") + count(ioi_heavy, " handed a ") > 1.5 * (count(base, " gave a ")
                                                                                 + count(base, " handed a "))
    assert count(ioi_heavy, " lives in ") == 0
    for bad in ({"poetry": 1.0}, {"ioi": -1}, {k: 0 for k in DEFAULT_MIX}):
        with pytest.raises(DataError):
            SyntheticLanguage(0, mix=bad)

"""The built-in language's held-out task prompts: clean/corrupt :class:`~fixedid.data.task_pairs.PromptPair` s for
patching and behaviour checks (ioi, agreement, facts, induction) and the held-out control ``induction_unlisted``."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .lexicon import N_ENTITIES, NOUNS, POOL, POOL_TOKS, VERB_PAIRS
from .render import render_tokens


@dataclass(frozen=True)
class PromptPair:
    """A clean/corrupt prompt pair for patching; the answer continues ``clean`` as ``" " + answer``."""
    task: str
    clean: str
    corrupt: str
    answer: str
    wrong: str


class TaskPairs:
    """The task-pair writers of :class:`fixedid.data.synthetic.SyntheticLanguage` (a mixin: it reads that class's
    sentences and world)."""

    TASKS = ("ioi", "agreement", "facts", "induction")
    #: Held-out controls of a task, never trained on as such and not among
    #: :attr:`~fixedid.data.task_pairs.TaskPairs.TASKS`: ``induction_unlisted`` is the induction task with its lists
    #: drawn from the words that no training list uses (the lowercase words outside the list pool), so a model that
    #: copies any word scores as on ``induction`` and one that copies only the pool's words scores at chance.
    CONTROLS = ("induction_unlisted",)

    def unlisted_words(self) -> list[str]:
        """The words of ``induction_unlisted``'s lists: the lowercase words of the vocabulary that no list uses
        (outside the list pool and the list's own ``words are``), in sorted order."""
        pool = {w for w, _, _ in POOL} | {"words", "are"}
        return [w for w in self._vocab if w.isalpha() and w.islower() and w not in pool]

    def _pair_writer(self, task: str):
        """The function ``rng -> PromptPair`` that writes one pair of ``task`` (a name of TASKS or CONTROLS)."""
        if task == "induction_unlisted":
            words = [(w,) for w in self.unlisted_words()]
            return lambda rng: self._induction_pair(rng, words, task)
        return {"ioi": self._ioi_pair, "agreement": self._agreement_pair, "facts": self._facts_pair,
                "induction": self._induction_pair}[task]

    def _ioi_pair(self, rng: random.Random) -> PromptPair:
        toks = self._ioi(rng)  # S2 is word 9, IO is word 14
        clean = toks[:14]
        corrupt = list(clean)
        corrupt[9] = toks[14]
        return PromptPair("ioi", render_tokens(clean), render_tokens(corrupt), toks[14][0], toks[9][0])

    def _agreement_pair(self, rng: random.Random) -> PromptPair:
        # the attractor has the subject's number in half of the pairs and the opposite number in the other half,
        # so "the verb agrees (or disagrees) with the nearest noun" scores at chance: only the subject decides
        toks = self._agreement(rng, opposite=rng.random() < 0.5)  # subject is word 1, verb word 5
        subject, verb = toks[1], toks[5]
        pair = next(p for p in VERB_PAIRS if verb[0] in p)
        noun = next(p for p in NOUNS if subject[0] in p)
        corrupt = list(toks[:5])
        corrupt[1] = (noun[subject[2] == "sg"],) + subject[1:]
        return PromptPair("agreement", render_tokens(toks[:5]), render_tokens(corrupt), verb[0],
                          pair[verb[2] == "sg"])

    def _facts_pair(self, rng: random.Random) -> PromptPair:
        rel = rng.randrange(len(self._attr_words))
        e = rng.randrange(N_ENTITIES)
        values = self._attr[rel]
        other = rng.choice([j for j in range(N_ENTITIES) if values[j] != values[e]])
        clean, corrupt = self._fact(rng, e, rel)[:-2], self._fact(rng, other, rel)[:-2]
        words = self._attr_words[rel]
        return PromptPair("facts", render_tokens(clean), render_tokens(corrupt), words[values[e]],
                          words[values[other]])

    def _induction_pair(self, rng: random.Random, words=POOL_TOKS, task: str = "induction") -> PromptPair:
        length = rng.randint(5, 8)
        indices = rng.sample(range(len(words)), length)
        k = rng.randint(2, length - 1)  # the repeat shows the first k list words; the answer is word k
        # the wrong answer: another word of the same list, never the word just before (a word never follows
        # itself in a list, so a bigram model would rule that one out without reading the context)
        j = rng.choice([i for i in range(length) if i not in (k - 1, k)])
        first = self._word_list(rng, indices, words)
        repeat = self._word_list(rng, indices[:k], words)[:-1]
        bad = list(indices)
        bad[k] = indices[j]  # the corrupted first copy continues the repeated prefix with the wrong word instead
        corrupt = self._word_list(rng, bad, words)
        return PromptPair(task, render_tokens(first + repeat), render_tokens(corrupt + repeat),
                          words[indices[k]][0], words[indices[j]][0])

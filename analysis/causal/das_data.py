"""The causal variables distributed alignment search aligns (:mod:`analysis.causal.das`), as interchange examples."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from analysis.engine.staged import cache_run
from analysis.errors import AnalysisError
from analysis.pairs import PairBatch
from analysis.tasks import task_pairs

#: The causal variables :func:`~analysis.causal.das_data.das_data` builds examples for (see the module docstring);
#: ``bit`` needs the code bit.
VARIABLES = ("ioi", "agreement", "bit")
#: The target of an example: the high-level model's value (``variable``), or the class the model itself predicts on the
#: source prompt (``source_output``).
TARGETS = ("variable", "source_output")


def twin_token(model, bit: int) -> np.ndarray:
    """``[vocab]`` the token whose input code differs from each token's in column ``bit`` only (-1 where no token has
    that code); for a variant without a code (learned), column ``bit`` of the canonical code of the id, in the
    config's bit order, so that bit ``k`` names the same id bit as for the canonical variant."""
    from analysis.causal.support import CodeSupport, code_keys

    n_bits = int(model.cfg.n_bits)
    if isinstance(bit, bool) or not isinstance(bit, (int, np.integer)) or not 0 <= bit < n_bits:
        raise AnalysisError(f"bit {bit!r} is out of range for a {n_bits}-bit code (0..{n_bits - 1})")
    support = CodeSupport.of(model)
    if support is None:
        from fixedid.codes import code_table

        keys = code_keys(code_table(model.cfg.vocab_size, n_bits, bit_order=model.cfg.bit_order) > 0)
        owner = {int(k): t for t, k in enumerate(keys)}
        return np.array([owner.get(int(k) ^ (1 << int(bit)), -1) for k in keys])
    return support.landing(support.keys ^ (1 << int(bit)))


def list_words(model) -> set[int]:
    """The tokens of the words the built-in language's induction lists draw from (each a single token here)."""
    from fixedid.data.lexicon import POOL

    if getattr(model, "tokenizer", None) is None:
        raise AnalysisError("the bit variable needs the model's tokenizer (to find the list words)")
    ids = [model.tokenizer.encode(" " + w[0], add_special_tokens=False).ids for w in POOL]
    return {i[0] for i in ids if len(i) == 1}


def _allowed(model, twins: str) -> set[int]:
    if twins not in ("list", "any"):
        raise AnalysisError(f"twins must be 'list' or 'any', got {twins!r}")
    allowed = list_words(model) if twins == "list" else set(range(model.cfg.vocab_size))
    tok = getattr(model, "tokenizer", None)
    if tok is not None:  # special tokens never stand in a list
        allowed -= {i for t, i in tok.get_vocab(with_added_tokens=True).items() if t.startswith("<") and t.endswith(">")}
    return allowed


def bits_with_twins(model, twins: str = "list", share: float = 0.5) -> list[int]:
    """The code bits for which at least ``share`` of the list words have a twin (see
    :func:`~analysis.causal.das_data.bit_pairs`)."""
    words = sorted(list_words(model))
    allowed = _allowed(model, twins)
    out = []
    for b in range(int(model.cfg.n_bits)):
        twin = twin_token(model, b)
        if np.mean([int(twin[w]) in allowed for w in words]) >= share:
            out.append(b)
    return out


def bit_pairs(model, bit: int, n: int = 64, *, seed: int = 0, twins: str = "list") -> PairBatch:
    """``n`` induction pairs whose prompts differ in code bit ``bit`` of the answer's first occurrence only (see the
    module docstring): clean continues with the token, corrupted with its bit-``bit`` twin. ``twins="list"`` keeps
    twins that are list words themselves, so that both prompts are lists of the language and neither candidate is
    favoured by what lists usually hold; ``"any"`` takes any token of the vocabulary."""
    twin = twin_token(model, bit)
    allowed = _allowed(model, twins)
    for factor in (4, 16):  # most answers of some bits have no twin: draw more prompts (of one length) if short
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fewer prompts of one length than asked: the count is checked below
            batch = task_pairs(model, "induction", factor * n, seed=seed)
        clean, corrupt, answer, wrong = [], [], [], []
        for prompt, a in zip(batch.clean, batch.answer.tolist()):
            t = int(twin[a])
            where = (prompt == a).nonzero()
            if t not in allowed or t == a or (prompt == t).any() or not len(where):
                continue
            other = prompt.clone()
            other[int(where[0, 0])] = t
            clean.append(prompt), corrupt.append(other), answer.append(a), wrong.append(t)
            if len(clean) == n:
                break
        if len(clean) == n:
            break
    if len(clean) < 2:
        where = "a list word" if twins == "list" else "a token of this vocabulary"
        raise AnalysisError(f"only {len(clean)} induction prompt(s) have an answer whose bit-{bit} twin is {where}; "
                            f"choose one of the bits {bits_with_twins(model, twins)}"
                            + (" or twins='any' (--any-twin)" if twins == "list" else ""))
    return PairBatch(torch.stack(clean), torch.stack(corrupt), torch.tensor(answer), torch.tensor(wrong))


def variable_pairs(model, variable: str, n: int = 64, *, bit: int | None = None, seed: int = 0,
                   twins: str = "list") -> PairBatch:
    """The prompt pairs that carry ``variable`` (one of :data:`~analysis.causal.das_data.VARIABLES`; ``bit`` needs
    ``bit=k``)."""
    if variable not in VARIABLES:
        raise AnalysisError(f"unknown DAS variable {variable!r}; use one of {list(VARIABLES)}")
    if (variable == "bit") != (bit is not None):
        raise AnalysisError("the bit variable needs the code bit to align (bit=K, --bit K)" if variable == "bit"
                            else f"a bit (bit=K, --bit K) applies to the bit variable only, not to {variable!r}")
    if n < 4:
        raise AnalysisError(f"DAS needs at least 4 pairs (2 to fit, 2 to test), got {n}")
    return bit_pairs(model, bit, n, seed=seed, twins=twins) if variable == "bit" else task_pairs(model, variable, n, seed=seed)


@dataclass
class DasData:
    """Interchange examples of one variable. ``prompts`` ``[2n, pos]`` are the pairs' clean prompts then their
    corrupted ones; example ``e`` runs prompt ``base[e]`` with the variable taken from prompt ``source[e]`` at
    position ``diff[e]`` (where the pair's prompts differ) or the final position. ``candidates`` ``[m, 2]`` are the
    tokens of the two values (answer, wrong); ``target`` the value the high-level model predicts (the source's);
    ``pair`` the pair each example comes from; ``train``/``test`` example indices (whole pairs per split);
    ``target_rule`` and ``solved_only`` how they were chosen (see :func:`~analysis.causal.das_data.das_data`)."""

    variable: str
    bit: int | None
    prompts: torch.Tensor
    base: torch.Tensor
    source: torch.Tensor
    diff: torch.Tensor
    candidates: torch.Tensor
    target: torch.Tensor
    pair: torch.Tensor
    train: torch.Tensor
    test: torch.Tensor
    n_drawn: int
    n_solved: int
    target_rule: str = "variable"
    solved_only: bool = True

    def __len__(self) -> int:
        return len(self.base)

    def positions(self, position: str) -> torch.Tensor:
        """The intervened position per example: ``"diff"`` (where base and source differ) or ``"last"``."""
        if position == "diff":
            return self.diff
        if position == "last":
            return torch.full_like(self.diff, self.prompts.shape[1] - 1)
        raise AnalysisError(f"unknown DAS position {position!r}; use 'diff' (where the prompts differ) or 'last'")


@torch.no_grad()
def prompt_logits(model, prompts: torch.Tensor, candidates: torch.Tensor, max_batch: int = 64) -> torch.Tensor:
    """``[n, 2]`` float32 logits of each prompt's two candidates at its final position."""
    out = []
    for i in range(0, len(prompts), max_batch):
        logits, _ = cache_run(model, prompts[i:i + max_batch].to(model.device), [])
        out.append(logits[:, -1].gather(1, candidates[i:i + max_batch].to(logits.device)).float().cpu())
    return torch.cat(out)


def das_data(model, variable: str, n_pairs: int = 64, *, bit: int | None = None, seed: int = 0,
             solved_only: bool = True, target: str = "variable", test_fraction: float = 0.5,
             twins: str = "list", pairs: PairBatch | None = None) -> DasData:
    """The interchange examples of ``variable`` for ``model`` (see the module docstring); ``pairs`` replaces the
    built-in prompts. ``target="source_output"`` takes the class the model itself predicts on each source prompt
    (its counterfactual output) instead of the high-level model's value; with ``solved_only`` the two agree."""
    if target not in TARGETS:
        raise AnalysisError(f"unknown DAS target {target!r}; use one of {list(TARGETS)}")
    if not 0 < test_fraction < 1:
        raise AnalysisError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}")
    batch = pairs if pairs is not None else variable_pairs(model, variable, n_pairs, bit=bit, seed=seed, twins=twins)
    n_drawn = len(batch)
    cands = torch.stack([batch.answer, batch.wrong], 1).cpu()
    clean = prompt_logits(model, batch.clean, cands)
    corrupt = prompt_logits(model, batch.corrupt, cands)
    solved = (clean[:, 0] > clean[:, 1]) & (corrupt[:, 1] > corrupt[:, 0])
    keep = solved.nonzero().flatten() if solved_only else torch.arange(n_drawn)
    if len(keep) < 4:
        raise AnalysisError(f"the model solves only {int(solved.sum())} of {n_drawn} {variable} pairs (both prompts "
                            "right); DAS needs 4 - draw more pairs, or pass solved_only=False (--all-pairs)")
    n = len(keep)
    prompts = torch.cat([batch.clean[keep], batch.corrupt[keep]]).cpu()
    diff_rows = (batch.clean[keep] != batch.corrupt[keep]).cpu()
    if not diff_rows.any(1).all():
        raise AnalysisError("a pair's clean and corrupted prompts are identical: DAS needs prompts that differ")
    diff = diff_rows.int().argmax(1)
    idx = torch.arange(n)
    base, source = torch.cat([idx + n, idx]), torch.cat([idx, idx + n])
    value = torch.cat([torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.long)])
    if target == "source_output":
        own = torch.cat([clean[keep], corrupt[keep]]).argmax(1)
        value = own[source]
    order = torch.as_tensor(np.random.default_rng(seed).permutation(n))
    n_test = min(n - 2, max(2, round(test_fraction * n)))
    test_pairs = set(order[:n_test].tolist())
    pair = torch.cat([idx, idx])
    in_test = torch.tensor([int(p) in test_pairs for p in pair])
    return DasData(variable, bit, prompts, base, source, torch.cat([diff, diff]), cands[keep].repeat(2, 1), value,
                   pair, (~in_test).nonzero().flatten(), in_test.nonzero().flatten(), n_drawn, int(solved.sum()),
                   target, solved_only)

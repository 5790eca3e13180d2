"""Behaviour checks on the built-in language's tasks: does a model have the behaviour a study is about?"""

from __future__ import annotations

import json
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fixedid.data import SyntheticLanguage

from analysis.errors import AnalysisError, AnalysisWarning
from analysis.stats import t_interval, wilson
from analysis.tasks import check_task, language_seed

#: The built-in language's tasks a behaviour table reports (``SyntheticLanguage.TASKS``).
TASKS = SyntheticLanguage.TASKS
#: Control tasks beside them (``SyntheticLanguage.CONTROLS``: ``induction_unlisted``, see the module docstring).
CONTROLS = SyntheticLanguage.CONTROLS


def fitting_pairs(model, task: str, n: int, *, seed: int = 0) -> list:
    """The first ``n`` pairs of ``task`` (``seed``) whose answer and wrong word are single tokens of the model's
    tokenizer, as :class:`fixedid.data.task_pairs.PromptPair` objects."""
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise AnalysisError("the model has no tokenizer; behaviours are measured on text prompts")
    lang = SyntheticLanguage(language_seed(model))
    check_task(lang, task)
    if n < 1:
        raise AnalysisError(f"the number of pairs must be positive, got {n}")
    out = []
    for p in lang.task_pairs(task, 4 * n, seed=seed):
        if all(len(tok.encode(" " + w, add_special_tokens=False).ids) == 1 for w in (p.answer, p.wrong)):
            out.append(p)
            if len(out) == n:
                return out
    if not out:
        raise AnalysisError(f"no {task} pair fits this model's tokenizer (answers must be single tokens)")
    return out


@dataclass(frozen=True)
class PairGroup:
    """Pairs of one task and one token length, tokenised once: ``tokens`` ``[n, length]`` (clean prompts),
    ``answer`` and ``wrong`` token ids ``[n]``, and each pair's index in its task (``pair``)."""
    task: str
    pair: tuple[int, ...]
    tokens: torch.Tensor
    answer: torch.Tensor
    wrong: torch.Tensor


def prepare_pairs(model, tasks=TASKS, n: int = 64, *, seed: int = 0, max_batch: int = 256) -> list[PairGroup]:
    """Tokenise the clean prompts of ``tasks`` once, grouped by token length in batches of at most ``max_batch``
    (what :func:`~analysis.evaluation.behaviours.score_pairs` runs; a sweep that scores many edits of one model prepares
    them once)."""
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    tok = model.tokenizer if getattr(model, "tokenizer", None) is not None else None
    groups = []
    for task in tasks:
        try:
            pairs = fitting_pairs(model, task, n, seed=seed)
        except AnalysisError as e:  # of several tasks, one whose answers this tokenizer splits is left out
            if len(tasks) == 1 or tok is None or "fits this model's tokenizer" not in str(e):
                raise
            warnings.warn(f"{task} is left out: {e}", AnalysisWarning, stacklevel=2)
            continue
        by_len: dict[int, list[tuple[int, list[int], int, int]]] = defaultdict(list)
        for i, p in enumerate(pairs):
            ids = tok.encode(p.clean, add_special_tokens=False).ids
            if len(ids) > _context(model):
                raise AnalysisError(f"{task} pair {i} has {len(ids)} tokens, more than the model's context")
            a, w = (tok.encode(" " + x, add_special_tokens=False).ids[0] for x in (p.answer, p.wrong))
            by_len[len(ids)].append((i, ids, a, w))
        for length, group in sorted(by_len.items()):
            for c in range(0, len(group), max_batch):
                part = group[c:c + max_batch]
                groups.append(PairGroup(task, tuple(g[0] for g in part), torch.tensor([g[1] for g in part]),
                                        torch.tensor([g[2] for g in part]), torch.tensor([g[3] for g in part])))
    if not groups:
        raise AnalysisError(f"no pair of the tasks {tasks} fits this model's tokenizer (answers must be single "
                            "tokens)")
    return groups


@torch.no_grad()
def score_pairs(model, groups: list[PairGroup]) -> pd.DataFrame:
    """One row per pair (``task, pair, n_tokens, logit_diff, correct``) of prepared pair groups."""
    rows = []
    device = _device(model)
    for g in groups:
        last = model(g.tokens.to(device))[:, -1].float()
        ans, wrong = g.answer.to(last.device), g.wrong.to(last.device)
        diff = (last.gather(1, ans[:, None]) - last.gather(1, wrong[:, None]))[:, 0].cpu()
        rows += [(g.task, i, g.tokens.shape[1], float(d)) for i, d in zip(g.pair, diff)]
    df = pd.DataFrame(rows, columns=["task", "pair", "n_tokens", "logit_diff"])
    df["correct"] = df.logit_diff > 0
    return df.sort_values(["task", "pair"], kind="stable", ignore_index=True)


def pair_scores(model, tasks=TASKS, n: int = 64, *, seed: int = 0, max_batch: int = 256) -> pd.DataFrame:
    """One row per pair: ``task, pair, n_tokens, logit_diff, correct`` on the clean prompts of ``tasks``."""
    return score_pairs(model, prepare_pairs(model, tasks, n, seed=seed, max_batch=max_batch))


def behaviour_table(model, tasks=TASKS, n: int = 64, *, seed: int = 0) -> pd.DataFrame:
    """Per task: ``task, n_pairs, accuracy, accuracy_low, accuracy_high, logit_diff, logit_diff_low,
    logit_diff_high`` (95% intervals), from :func:`~analysis.evaluation.behaviours.pair_scores`."""
    return summarize(pair_scores(model, tasks, n, seed=seed))


def summarize(scores: pd.DataFrame) -> pd.DataFrame:
    """Aggregate per-pair rows (of :func:`~analysis.evaluation.behaviours.pair_scores`, possibly with more grouping
    columns such as ``variant`` or ``seed``) per group and task, with 95% intervals."""
    keys = [c for c in scores.columns if c not in ("task", "pair", "n_tokens", "logit_diff", "correct")] + ["task"]
    rows = []
    for key, g in scores.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        k, m = int(g.correct.sum()), len(g)
        lo, hi = wilson(k, m)
        rows.append((*key, m, k / m, lo, hi, *t_interval(g.logit_diff.to_numpy())))
    return pd.DataFrame(rows, columns=keys + ["n_pairs", "accuracy", "accuracy_low", "accuracy_high", "logit_diff",
                                              "logit_diff_low", "logit_diff_high"])


def _context(model) -> int:
    cfg = getattr(model, "cfg", None)
    return cfg.context if cfg is not None else 1 << 30


def _device(model):
    w = getattr(getattr(model, "unembed", None), "weight", None)
    return w.device if w is not None else torch.device("cpu")


class NGramLM:
    """A context-free control: the add-``alpha`` smoothed unigram (``order=1``) or bigram (``order=2``) model of
    a token stream, called like a model (``tokens [batch, pos] -> log-probabilities [batch, pos, vocab]`` of the
    next token). It sees at most the current token, so on a task that needs context it scores at chance."""

    def __init__(self, tokens: np.ndarray, vocab_size: int, *, order: int = 2, alpha: float = 1.0, tokenizer=None,
                 meta: dict | None = None):
        if order not in (1, 2):
            raise AnalysisError(f"order must be 1 (unigram) or 2 (bigram), got {order}")
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size < 2 or tokens.min() < 0 or tokens.max() >= vocab_size:
            raise AnalysisError(f"an n-gram model needs at least 2 token ids in [0, {vocab_size})")
        self.order, self.tokenizer, self.meta = order, tokenizer, dict(meta or {})
        uni = np.bincount(tokens, minlength=vocab_size).astype(np.float64) + alpha
        self._uni = torch.from_numpy(np.log(uni / uni.sum())).float()
        if order == 2:
            pairs = np.bincount(tokens[:-1] * vocab_size + tokens[1:], minlength=vocab_size * vocab_size)
            big = pairs.reshape(vocab_size, vocab_size).astype(np.float64) + alpha
            self._big = torch.from_numpy(np.log(big / big.sum(1, keepdims=True))).float()

    @classmethod
    def from_run(cls, run_dir, *, order: int = 2, alpha: float = 1.0) -> "NGramLM":
        """The n-gram model of a trainer run's training tokens (``<run_dir>/data``), with its tokenizer and the
        run's training config (so the built-in language's world seed is known)."""
        from fixedid.train.prepare import load_prepared

        run_dir = Path(run_dir)
        data = load_prepared(run_dir / "data")
        try:
            meta = {"train_config": json.loads((run_dir / "run.json").read_text())["config"]}
        except (OSError, ValueError, KeyError) as e:
            raise AnalysisError(f"{run_dir} is not a trainer run ({e}); pass the --out directory of fixedid-train") \
                from None
        vocab = data.tokenizer.get_vocab_size(with_added_tokens=True)
        return cls(data.train.slice(0, len(data.train)), vocab, order=order, alpha=alpha, tokenizer=data.tokenizer,
                   meta=meta)

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = torch.as_tensor(tokens)
        if self.order == 1:
            return self._uni.expand(*tokens.shape, -1)
        return self._big[tokens]


__all__ = ["TASKS", "CONTROLS", "fitting_pairs", "PairGroup", "prepare_pairs", "score_pairs", "pair_scores",
           "behaviour_table", "summarize", "NGramLM"]

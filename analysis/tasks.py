"""Patching pairs from the built-in synthetic language, fitted to a model's tokenizer."""

from __future__ import annotations

import warnings
from collections import defaultdict

from fixedid.data import SyntheticLanguage, synthetic_seed
from fixedid.errors import DataError

from analysis.errors import AnalysisError
from analysis.pairs import PairBatch, make_pairs


def language_seed(model) -> int:
    """The world seed of the synthetic language a checkpoint was trained on (0 when it is not recorded)."""
    source = (getattr(model, "meta", None) or {}).get("train_config", {}).get("data", {}).get("source", "synthetic")
    try:
        seed = synthetic_seed(source)
    except DataError as e:  # analysis reports its own error type (a ValueError, as this raised before)
        raise AnalysisError(str(e)) from None
    return 0 if seed is None else seed


def check_task(lang: SyntheticLanguage, task: str) -> None:
    """Refuse, with one :class:`~analysis.errors.AnalysisError` naming the choices, a task ``lang`` does not write (its
    ``TASKS`` and the held-out ``CONTROLS``)."""
    if task not in lang.TASKS + lang.CONTROLS:
        raise AnalysisError(f"unknown task {task!r}; use one of {list(lang.TASKS)} or a control "
                            f"{list(lang.CONTROLS)}")


def task_pairs(model, task: str, n: int = 16, *, seed: int = 0) -> PairBatch:
    """``n`` pairs of a built-in task (``ioi``, ``agreement``, ``facts``, ``induction``, or the control
    ``induction_unlisted``) as a :class:`~analysis.pairs.PairBatch`.

    The pairs of one batch share a token length, so candidates are drawn (4, then 16, then 64 times ``n``) until one
    length has ``n``; where none does, the largest group is returned with a warning that names how many."""
    lang = SyntheticLanguage(language_seed(model))
    check_task(lang, task)
    if n < 1:
        raise AnalysisError(f"the number of pairs must be positive, got {n}")
    for factor in (4, 16, 64):
        by_len: dict[int, list] = defaultdict(list)
        for p in lang.task_pairs(task, factor * n, seed=seed):
            try:
                one = make_pairs(model, p)
            except AnalysisError:
                continue
            by_len[one.n_pos].append(p)
        if by_len and max(map(len, by_len.values())) >= n:
            break
    if not by_len:
        raise AnalysisError(f"no {task} pair fits this model's tokenizer (answers must be single tokens)")
    best = max(by_len.values(), key=len)
    if len(best) < n:
        warnings.warn(f"{task}: only {len(best)} pairs of one token length fit this tokenizer, fewer than the {n} "
                      "asked for", stacklevel=2)
    return make_pairs(model, best[:n])

"""The built-in language's lm-eval tasks: their documents (deterministic in the world seed) and the include path
lm-eval reads them from (:data:`~analysis.evaluation.lmeval_tasks.TASKS_DIR`: the tasks' YAML, their loader and the
JSONL of the world of seed 0, written by :func:`~analysis.evaluation.lmeval_tasks.write_task_data`).
:mod:`analysis.evaluation.lmeval` runs them."""

from __future__ import annotations

import json
import random
from pathlib import Path

from analysis.errors import AnalysisError

#: The directory of the built-in tasks' YAML, loader and data (lm-eval's ``include_path``), inside the package.
TASKS_DIR = Path(__file__).parent / "lm_eval_tasks"
#: The built-in tasks shipped as lm-eval tasks.
BUILTIN_TASKS = ("fixedid_ioi", "fixedid_agreement", "fixedid_facts", "fixedid_lastword")
#: Documents per built-in task (the last-word task may find fewer).
N_TASK_DOCS = 200


def _lastword_docs(world_seed: int, n: int) -> list[dict]:
    """Documents of the world's default mixture (a stream of its own), cut before their last word, kept when that
    word already occurred in the document (so the context decides it, as in LAMBADA) and the document is at most
    60 words long (so it fits the tiny context)."""
    from fixedid.data.corpus import iter_texts

    out = []
    for doc in iter_texts(f"synthetic:{world_seed}" if world_seed else "synthetic", split="lm_eval_lastword"):
        words = doc.rstrip(".").split(" ")
        if len(words) <= 60 and words[-1].isalpha() and words[-1] in words[:-1]:
            out.append({"text": " ".join(words)})
            if len(out) == n:
                return out
    return out


def task_docs(task: str, world_seed: int = 0, n: int = N_TASK_DOCS) -> list[dict]:
    """The documents of a built-in lm-eval task (deterministic in the world seed): multiple-choice tasks
    ``{"context", "choices", "label"}`` (the answer's place drawn per document), the last-word task ``{"text"}``."""
    from fixedid.data import SyntheticLanguage

    if task not in BUILTIN_TASKS:
        raise AnalysisError(f"unknown built-in task {task!r}; use one of {list(BUILTIN_TASKS)}")
    if task == "fixedid_lastword":
        return _lastword_docs(world_seed, n)
    name = task.removeprefix("fixedid_")
    rng = random.Random(f"fixedid.lm_eval:{world_seed}:{name}")
    docs = []
    for p in SyntheticLanguage(world_seed).task_pairs(name, n, seed=1000):  # seed 1000: not the analyses' pairs
        label = rng.randrange(2)
        choices = [p.answer, p.wrong] if label == 0 else [p.wrong, p.answer]
        docs.append({"context": p.clean, "choices": choices, "label": label})
    return docs


def write_task_data(directory, world_seed: int = 0, n: int = N_TASK_DOCS) -> Path:
    """Write the built-in tasks' YAML and JSONL for ``world_seed`` into ``directory`` (an lm-eval include path)."""
    import shutil

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if directory.resolve() != TASKS_DIR.resolve():
        for f in TASKS_DIR.iterdir():
            if f.suffix in (".yaml", ".py"):
                shutil.copy(f, directory / f.name)
    for task in BUILTIN_TASKS:
        tmp = directory / f".{task}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(d) + "\n" for d in task_docs(task, world_seed, n)))
        tmp.replace(directory / f"{task}.jsonl")
    return directory


__all__ = ["TASKS_DIR", "BUILTIN_TASKS", "N_TASK_DOCS", "task_docs", "write_task_data"]

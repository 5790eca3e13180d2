"""lm-eval 0.4 on fixedid checkpoints: the model class ``fixedid`` and the built-in language's tasks."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
from pathlib import Path

import torch

from analysis.errors import AnalysisError
from analysis.evaluation.lmeval_model import FixedIdEvalLM
from analysis.evaluation.lmeval_tasks import BUILTIN_TASKS, TASKS_DIR, task_docs, write_task_data

#: The study's benchmarks (0-shot) and its canonical variant's figures (docs/paper.md), for side-by-side reports.
STUDY_FIGURES = {"hellaswag": ("acc_norm", 52.40), "piqa": ("acc", 70.51), "lambada_openai": ("acc", 42.75)}


def register() -> None:
    """Register the model ``fixedid`` with lm-eval (lazily: the class is imported when first asked for); idempotent.
    Runs when the adapter is first used (:func:`~analysis.evaluation.lmeval.task_manager`,
    :func:`~analysis.evaluation.lmeval.evaluate_table`), never on import. lm-eval's own models are registered first,
    since its registry imports them only while it is empty."""
    importlib.import_module("lm_eval.models")
    from lm_eval.api.registry import model_registry

    if "fixedid" not in model_registry:
        model_registry.register("fixedid", target="analysis.evaluation.lmeval_model:FixedIdEvalLM")


def task_manager(include_path=None, *, defaults: bool = True):
    """An lm-eval ``TaskManager`` that also finds the built-in tasks (and ``include_path``, a directory or list);
    ``defaults=False`` leaves lm-eval's own tasks out of its index (which reads every one of their ~14,000 YAML
    files: seconds). Managers are kept per process, keyed by the paths and the files under them, so a task file
    added or edited in an include path is seen by the next call."""
    register()
    extra = [] if include_path is None else ([include_path] if isinstance(include_path, (str, Path)) else
                                             list(include_path))
    paths = (str(TASKS_DIR), *map(str, extra))
    return _manager(paths, tuple(_files_signature(p) for p in paths), defaults)


def _files_signature(path: str) -> tuple:
    """What an index of ``path`` depends on: each file's relative path, size and modification time."""
    root = Path(path)
    return tuple(sorted((str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns)
                        for f in root.rglob("*") if f.is_file()))


@functools.lru_cache(maxsize=8)
def _manager(paths: tuple, signature: tuple, defaults: bool):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(paths), include_defaults=defaults)


@contextlib.contextmanager
def _quiet_loggers(*names):
    """Only errors from the loggers ``names`` inside the block; their levels restored on exit."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@contextlib.contextmanager
def _without_env_report():
    """lm-eval's ``simple_evaluate`` ends by collecting an environment report (torch's ``collect_env``: pip, conda,
    lscpu and GPU-tool subprocesses, ~1.5 s per call, whatever the model) into its results;
    :func:`~analysis.evaluation.lmeval.evaluate_table` keeps none of it, so inside this block the report is not
    collected. lm-eval's own function is restored on exit; where a later lm-eval moves it, nothing is changed."""
    import lm_eval.evaluator as evaluator

    original = getattr(evaluator, "add_env_info", None)
    if original is None:
        yield
        return
    evaluator.add_env_info = lambda storage: None
    try:
        yield
    finally:
        evaluator.add_env_info = original


@contextlib.contextmanager
def _bootstrap_in_process():
    """lm-eval estimates the standard error of some metrics (perplexity among them) by a bootstrap that it runs in a
    ``multiprocessing.Pool`` of forked processes unless ``DISABLE_MULTIPROC`` is set. A process forked from one that
    runs other threads (torch's, a study worker's heartbeat) can inherit a lock held by one of them and never exit:
    one of a 5-seed study's 25 evaluations hung for half an hour in the pool's shutdown. Inside this block the
    bootstrap runs in this process instead (the same draws: every chunk of 1,000 is seeded by its index either way);
    the variable is restored on exit."""
    import os

    old = os.environ.get("DISABLE_MULTIPROC")
    os.environ["DISABLE_MULTIPROC"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DISABLE_MULTIPROC", None)
        else:
            os.environ["DISABLE_MULTIPROC"] = old


# ------------------------------------------------------------------------------------------------- tables
def tidy_results(results: dict, n_samples: dict | None = None):
    """lm-eval's ``results`` dict as one row per task x metric: ``task, metric, filter, value, stderr, n`` and, for
    the study's benchmarks, the study's canonical figure ``study_canonical`` (a fraction, like ``value``)."""
    import math

    import pandas as pd

    rows = []
    for task, metrics in results.items():
        for key, value in metrics.items():
            if "," not in key or key.split(",")[0].endswith("_stderr") or not isinstance(value, (int, float)):
                continue
            metric, filt = key.split(",", 1)
            stderr = metrics.get(f"{metric}_stderr,{filt}")
            study = STUDY_FIGURES.get(task)
            rows.append({"task": task, "metric": metric, "filter": filt, "value": float(value),
                         "stderr": float(stderr) if isinstance(stderr, (int, float)) else math.nan,
                         "n": (n_samples or {}).get(task, {}).get("effective", math.nan),
                         "study_canonical": study[1] / 100 if study and study[0] == metric else math.nan})
    return pd.DataFrame(rows, columns=["task", "metric", "filter", "value", "stderr", "n", "study_canonical"])


def _manager_with(tasks: list, paths: list, *, kept: bool):
    """A task manager that finds every one of ``tasks``: the built-in tasks and ``paths`` alone first, lm-eval's own
    ~14,000 tasks indexed only when a task is not among those; :class:`AnalysisError` naming the unknown ones.
    ``kept``: from :func:`~analysis.evaluation.lmeval.task_manager`'s per-process cache (not for a temporary
    directory, which is not worth keeping)."""
    def manager_for(defaults: bool):
        if kept:
            return task_manager(paths, defaults=defaults)
        from lm_eval.tasks import TaskManager

        return TaskManager(include_path=list(map(str, paths)), include_defaults=defaults)

    manager = manager_for(False)
    if any(t not in manager.all_tasks for t in tasks):
        manager = manager_for(True)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise AnalysisError(f"unknown lm-eval task(s) {unknown}; the built-in ones are {', '.join(BUILTIN_TASKS)} "
                            "(others: lm-eval ls tasks)")
    return manager


def evaluate_table(model, tasks=BUILTIN_TASKS, *, limit: int | None = None, num_fewshot: int = 0,
                   batch_size: int = 32, include_path=None, device: str | None = None, progress: bool = False,
                   bootstrap_iters: int = 100_000):
    """Run lm-eval ``tasks`` on one checkpoint (a directory or a loaded model) and return
    :func:`~analysis.evaluation.lmeval.tidy_results`, with lm-eval's raw ``results``, ``n-samples`` and task ``configs``
    in ``attrs["lm_eval"]``. The built-in tasks are found without an include path; for a checkpoint of another world of
    the built-in language (``synthetic:N``) they are regenerated for that world in a temporary directory. lm-eval's own
    notices and bars are silenced; ``progress`` shows the adapter's bar over the requests. ``bootstrap_iters`` is
    lm-eval's: the draws of the bootstrap it estimates some metrics' standard errors with (perplexity among them; about
    a second in this process at the default); 0 skips every standard error (``stderr`` missing on every row, the
    values unchanged)."""
    import contextlib
    import io
    import sys
    import tempfile

    from lm_eval import simple_evaluate

    from analysis.loading import load
    from analysis.tasks import language_seed

    register()
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    if not tasks:
        raise AnalysisError("no lm-eval tasks given")
    if limit is not None and limit < 1 or batch_size < 1 or num_fewshot < 0 or bootstrap_iters < 0:
        raise AnalysisError("limit and batch_size must be positive and num_fewshot and bootstrap_iters >= 0")
    path = None
    if not isinstance(model, torch.nn.Module):
        path, model = str(model), load(model, device=device)
    extra = [] if include_path is None else ([include_path] if isinstance(include_path, (str, Path)) else
                                             list(include_path))
    for p in extra:
        if not Path(p).is_dir():
            raise AnalysisError(f"include path {p} is not a directory")
    with tempfile.TemporaryDirectory() as tmp, _quiet_loggers("lm-eval", "lm_eval"):
        world = language_seed(model)
        paths = extra if world == 0 else [write_task_data(Path(tmp) / f"world{world}", world), *extra]
        manager = _manager_with(tasks, paths, kept=world == 0)
        lm = FixedIdEvalLM(model=model, batch_size=batch_size, pretrained=path)
        lm.bar_file = sys.stderr if progress else io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                _without_env_report(), _bootstrap_in_process():
            out = simple_evaluate(model=lm, tasks=tasks, num_fewshot=num_fewshot, limit=limit, task_manager=manager,
                                  log_samples=False, verbosity="ERROR", bootstrap_iters=bootstrap_iters)
    df = tidy_results(out["results"], out.get("n-samples", {}))
    df.attrs["lm_eval"] = {"results": out["results"], "n_samples": out.get("n-samples", {}),
                           "configs": out.get("configs", {})}
    return df


__all__ = ["FixedIdEvalLM", "register", "task_manager", "evaluate_table", "tidy_results", "task_docs",
           "write_task_data", "TASKS_DIR",
           "BUILTIN_TASKS", "STUDY_FIGURES"]

"""A task graph run on Dask distributed: the study's trainings, measurements, similarity and report as futures."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fixedid.atomic import write_text_atomic
from fixedid.clitools import one_line_warnings

from analysis.errors import AnalysisError

#: How often a task may lose its worker before Dask gives up on it (the clusters of :mod:`analysis.study.clusters`).
ALLOWED_FAILURES = 3
#: How a worker writes the package's warnings: one line, as the ``fixedid-study`` command line does.
_WARNING_FORMAT = one_line_warnings("fixedid-study")


@dataclass
class Task:
    """One task: ``run()`` does it, ``done()`` reads whether its output is there, ``needs``: the names of the tasks
    that must be done first; ``order``: lower first among ready tasks (the study: trainings before measurements);
    ``device``: it runs a model (asks for a ``GPU`` where the workers have them). ``name``: letters, digits, ``_.-``."""
    name: str
    needs: tuple[str, ...]
    done: Callable[[], bool]
    run: Callable[[], None]
    order: int = 0
    device: bool = False


class TasksFailed(AnalysisError):
    """Some tasks of a graph raised (or lost their worker too often); ``failed``: ``{task: traceback text}``,
    ``blocked``: the tasks not run because something they need failed."""

    def __init__(self, message: str, failed: dict[str, str], blocked: list[str]):
        super().__init__(message)
        self.failed, self.blocked = failed, blocked


def check_tasks(tasks: list[Task]) -> dict[str, Task]:
    """``{name: task}``; refuses duplicate or non-file-name names and needs that are not tasks."""
    by_name = {}
    for t in tasks:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", t.name):
            raise AnalysisError(f"task name {t.name!r} is not a file name: use letters, digits and _.- (no leading . "
                                "or -)")
        if t.name in by_name:
            raise AnalysisError(f"two tasks are named {t.name!r}; every task needs its own name")
        by_name[t.name] = t
    for t in tasks:
        unknown = [n for n in t.needs if n not in by_name]
        if unknown:
            raise AnalysisError(f"task {t.name!r} needs {unknown}, which are not tasks of the graph")
    return by_name


def _in_order(by_name: dict[str, Task]) -> list[Task]:
    """The tasks with every task after what it needs (a cycle is refused)."""
    seen, out = {}, []

    def visit(name):
        if seen.get(name) == "done":
            return
        if seen.get(name) == "open":
            raise AnalysisError(f"the tasks' needs form a cycle through {name!r}")
        seen[name] = "open"
        for n in by_name[name].needs:
            visit(n)
        seen[name] = "done"
        out.append(by_name[name])

    for name in by_name:
        visit(name)
    return out


def _log_event(log: str | None, task: str, event: str, **info) -> None:
    if log is None:
        return
    try:
        from distributed import get_worker

        worker = get_worker().address
    except (ImportError, ValueError):
        worker = None
    line = json.dumps({"task": task, "event": event, "worker": worker, "host": socket.gethostname(),
                       "pid": os.getpid(), "time": time.time(), **info})
    with open(log, "a") as f:  # one short line per write, appended: whole lines from concurrent workers
        f.write(line + "\n")


def execute(name: str, run: Callable[[], None], done: Callable[[], bool], log: str | None, *needed) -> str:
    """Run one task on a worker (``needed``: the results of the tasks it needs, which Dask has waited for), unless
    its output is already there: Dask recomputes a finished task whose result was held by a worker that died, and
    that must not write its output again. Returns its name."""
    if done():
        _log_event(log, name, "skipped")
        return name
    warnings.formatwarning = _WARNING_FORMAT
    _log_event(log, name, "start")
    start = time.perf_counter()
    try:
        run()
    except BaseException as e:
        _log_event(log, name, "failed", error=f"{type(e).__name__}: {e}", seconds=time.perf_counter() - start)
        raise
    _log_event(log, name, "done", seconds=time.perf_counter() - start)
    return name


def task_key(name: str, run_id: str) -> str:
    """A task's Dask key: ``<kind>-<name>-<run id>``, the kind (``train``, ``measure``...: the name up to its first
    dot) first, so that Dask's key prefix - what it learns task durations by - is shared by every task of a kind.
    With a prefix of its own per task, Dask never learns that a training takes minutes, estimates each at half a
    second, and does not move queued trainings from a busy worker to an idle one (measured: one of two workers idle
    for a whole training while the other had trainings queued)."""
    return f"{name.split('.', 1)[0]}-{name}-{run_id}"


def run_graph(tasks: list[Task], client, *, log=None, gpu: bool = False, retries: int = 0,
              quiet: bool = False, desc: str = "study") -> list[str]:
    """Run every task of ``tasks`` that is not done on ``client``'s cluster, each after what it needs; returns the
    names of the tasks it ran. ``log``: the JSON-lines event log (and ``failed_tasks.txt`` beside it), or None;
    ``gpu``: ``device`` tasks ask for one ``GPU`` resource; ``retries``: how often a task that raises is tried again
    (a task whose worker died is rerun anyway, see the module docstring). Raises
    :class:`~analysis.study.graph.TasksFailed` after every task that could run has run, when some failed."""
    from distributed import as_completed
    from tqdm.auto import tqdm

    by_name = check_tasks(tasks)
    ordered = _in_order(by_name)
    done = {t.name for t in ordered if t.done()}
    log = None if log is None else Path(log)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    futures = {}
    for t in ordered:
        if t.name in done:
            continue
        needed = [futures[n] for n in t.needs if n in futures]
        futures[t.name] = client.submit(execute, t.name, t.run, t.done, None if log is None else str(log), *needed,
                                        key=task_key(t.name, run_id), pure=False, priority=-t.order, retries=retries,
                                        resources={"GPU": 1} if gpu and t.device else None)
    bar = tqdm(total=len(tasks), initial=len(done), desc=desc, unit="task", disable=quiet, dynamic_ncols=True)
    try:
        for future in as_completed(list(futures.values())):
            bar.update(1)
            bar.set_postfix_str(future.key.split("-", 1)[1].rsplit("-", 1)[0], refresh=False)
    finally:
        bar.close()
    errors = {name: f for name, f in futures.items() if f.status == "error"}
    ran = [name for name in futures if name not in errors]
    if errors:
        _raise_failures(by_name, errors, log)
    elif log is not None and (log.parent / "failed_tasks.txt").exists():
        (log.parent / "failed_tasks.txt").unlink()
    return ran


def _raise_failures(by_name: dict[str, Task], errors: dict, log: Path | None) -> None:
    """Name the tasks that failed (with their tracebacks) apart from those that did not run because a task they need
    failed (Dask hands them its error)."""
    import traceback

    failed, blocked = {}, []
    for name, future in errors.items():
        if any(n in errors for n in by_name[name].needs):
            blocked.append(name)
            continue
        exc, tb = future.exception(), future.traceback()
        failed[name] = "".join(traceback.format_exception(type(exc), exc, tb))
    where = ""
    if log is not None:
        text = "\n".join(f"== {name}\n{tb}" for name, tb in failed.items())
        if blocked:
            text += f"\nnot run, because a task they need failed: {', '.join(blocked)}\n"
        path = write_text_atomic(log.parent / "failed_tasks.txt", text)
        where = f" (tracebacks in {path})"
    first = next(iter(failed.values())).strip().splitlines()[-1]
    raise TasksFailed(f"{len(failed)} task(s) failed: {', '.join(failed)}{where}; {len(blocked)} not run because of "
                      f"them; the last line of the first: {first}. Finished work is kept: run the same command again "
                      "to continue", failed, blocked)


__all__ = ["task_key", "Task", "TasksFailed", "run_graph", "check_tasks", "execute", "ALLOWED_FAILURES"]

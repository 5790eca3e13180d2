"""Work shared among worker processes - the GPUs of a node, or Slurm array tasks on a shared file system - as a
list of tasks that each worker claims one at a time.

    fixedid-study --config small --seeds 0-4 --out study/ --workers 4   # 4 local workers, 1 GPU each
    fixedid-study --config small --seeds 0-4 --out /shared/study --worker   # in each of N jobs
    sbatch --array=0-7 --gres=gpu:1 --wrap "fixedid-study --config small --seeds 0-4 \
        --out /shared/study --worker"

Every worker runs the same command (the same arguments; ``--out`` on a file system they all see) and so builds the
same list of :class:`~analysis.study.workers.Task` (the study's: :func:`analysis.study.pipeline.study_tasks`), each with
the tasks it needs and a test of whether it is done that reads only its output. A worker
(:func:`~analysis.study.workers.run_worker`) repeatedly takes the first task that is not done, whose needs are done and
that no live worker holds - in ``order``, and among equals one of the ``group`` it has loaded - claims it
(:mod:`analysis.study.claims`: atomic, with a heartbeat; a killed worker's claim is taken over, by a worker on the same
host at once, from another host after ``--stale-after`` seconds) and runs it; it waits while the remaining tasks are
held by others, and exits when all are done. So no task runs twice, N workers finish about N times faster while there
are at least N tasks ready at once (a last task such as the study's report runs alone), and the work is restartable at
any point: what is done is never redone. ``OUT/tasks/`` holds the claims (one directory per claim, kept as the record of
who ran what and when; ``T.dead-<token>``: a claim taken over or given back) and ``OUT/tasks/log/<worker>.jsonl`` each
worker's events (``claimed``, ``done`` with its seconds, ``released`` with why).
:func:`~analysis.study.workers.launch_workers` starts N workers on this machine (``--workers N``).

Each training can itself be a distributed job: ``--train-cmd`` is the command a worker runs for a training task
instead of training in its own process, with ``{python}``, ``{config}`` (the run's ``run.json``), ``{out}`` (the run
directory) and ``{variant}`` filled in, for example
``--train-cmd "torchrun --standalone --nproc_per_node=8 -m fixedid.train --config {config} --out {out}
--variants {variant} --resume --quiet"`` (one worker per node then; the worker measures in its own process). The
command ends with its worker (:func:`~analysis.study.workers.run_tied`): a worker that is killed takes its training with
it, so the worker that takes the task over is the only one training it.

What this does not give: a task's own parallelism (a measurement runs in one process), balance when there are
fewer ready tasks than workers (a worker waits), or exclusion against a worker whose heartbeat is late by more
than ``--stale-after`` while it still runs (see :mod:`analysis.study.claims`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import string
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from analysis.errors import AnalysisError
from analysis.study.claims import STALE_AFTER, Claim, Claims

#: The placeholders of ``--train-cmd``.
TRAIN_CMD_FIELDS = ("python", "config", "out", "variant")
#: ``--train-cmd`` doing what a worker does by default, but in a process of its own.
PLAIN_TRAIN_CMD = "{python} -m fixedid.train --config {config} --out {out} --variants {variant} --resume --quiet"


@dataclass
class Task:
    """One task: ``run()`` does it, ``done()`` reads whether its output is there (never a claim), ``needs``: the
    names of the tasks that must be done first; ``order``: lower first among ready tasks (the study: trainings
    before measurements); ``group``: what it loads (the study: a checkpoint), preferred by a worker that has it
    loaded. ``name``: letters, digits, ``_.-`` (it names the task's claim)."""
    name: str
    needs: tuple[str, ...]
    done: Callable[[], bool]
    run: Callable[[], None]
    order: int
    group: object = None


def check_train_cmd(template: str) -> str:
    """Refuse a ``--train-cmd`` with an unknown placeholder or without ``{config}``, ``{out}`` and ``{variant}``."""
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        raise AnalysisError(f"--train-cmd {template!r} does not parse ({e}); write placeholders as {{out}}") from None
    unknown, missing = used - set(TRAIN_CMD_FIELDS), {"config", "out", "variant"} - used
    if unknown or missing:
        raise AnalysisError(f"--train-cmd {template!r}: " + (f"unknown placeholder(s) {sorted(unknown)}" if unknown
                            else f"needs {sorted('{' + m + '}' for m in missing)}") +
                            f"; use {', '.join('{' + f + '}' for f in TRAIN_CMD_FIELDS)}")
    return template


def train_command(template: str, run_dir: Path, variant: str) -> list[str]:
    """The argument list of ``--train-cmd`` for one variant of one run."""
    values = {"python": sys.executable, "config": run_dir / "run.json", "out": run_dir, "variant": variant}
    return shlex.split(check_train_cmd(template).format(**{k: shlex.quote(str(v)) for k, v in values.items()}))


#: A program that runs ``argv[2:]`` in its own place after asking Linux to send it SIGTERM when its parent (the
#: worker, pid ``argv[1]``) dies - by SIGKILL too - so that no training outlives its worker's claim (torchrun passes
#: the SIGTERM on to its ranks). Where that cannot be asked (not Linux) it only runs the command.
TIED = ("import ctypes, os, signal, sys\n"
        "try:\n"
        "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
        "except (OSError, AttributeError):\n"
        "    pass\n"
        "if os.getppid() != int(sys.argv[1]):\n"
        "    sys.exit(70)  # the worker is already gone\n"
        "os.execvp(sys.argv[2], sys.argv[2:])\n")


def run_tied(cmd: list[str]) -> int:
    """Run ``cmd`` as a child that ends with this process (:data:`~analysis.study.workers.TIED`); if this process is
    interrupted (SIGTERM, Ctrl-C) the child is sent SIGTERM and, a minute later, SIGKILL. Returns its exit status."""
    proc = subprocess.Popen([sys.executable, "-c", TIED, str(os.getpid()), *cmd])
    try:
        return proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def train_outside(template: str, cfg, run_dir: Path, variant: str) -> None:
    """Train ``variant`` of the run in ``run_dir`` (prepared, config ``cfg``) with the command ``template``
    (``--train-cmd``); refuse a command that fails or does not train it to the last step."""
    from fixedid.train.loop import run_complete

    cmd = train_command(template, run_dir, variant)
    rc = run_tied(cmd)
    if rc != 0:
        raise AnalysisError(f"training {variant} of {run_dir}: {shlex.join(cmd)} exited with status {rc}")
    if not run_complete(run_dir, cfg, [variant]):
        raise AnalysisError(f"training {variant} of {run_dir}: {shlex.join(cmd)} exited without training it to step "
                            f"{cfg.train.steps}; check the --train-cmd")


def worker_name(name: str | None = None) -> str:
    """A worker's name for its claims and log: ``name`` or ``<host>-<pid>``, in file-name-safe characters."""
    name = name or f"{socket.gethostname()}-{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class _Log:
    def __init__(self, path: Path, worker: str):
        self.path, self.worker = path, worker
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: str, task: str, **info) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"time": time.time(), "worker": self.worker, "event": event, "task": task,
                                **info}) + "\n")


def _stop_on_lost(claim: Claim) -> None:
    """A claim taken over while its owner ran: stop at once, before this process writes anything more."""
    sys.stderr.write(f"worker {claim.owner['worker']}: another worker took over {claim.task} (this worker's "
                     "heartbeat was late by more than --stale-after); stopping\n")
    sys.stderr.flush()
    os._exit(75)


def run_worker(tasks: list[Task], root, *, worker: str | None = None, stale_after: float = STALE_AFTER,
               poll: float = 2.0, quiet: bool = False, held: Callable[[], object] | None = None,
               on_lost: Callable[[Claim], None] | None = None) -> None:
    """Work on ``tasks`` beside any other workers that share ``root`` (their claims and logs; see the module
    docstring) until all are done. ``worker``: this worker's name (default ``<host>-<pid>``); ``stale_after``:
    seconds without a heartbeat after which another host's claim is taken over; ``poll``: the longest wait between
    looks while every remaining task is held by others; ``held``: the group (checkpoint) this worker has loaded,
    preferred among ready tasks of one order; ``on_lost``: called when a claim was taken over while it ran
    (default: stop the process at once)."""
    from tqdm.auto import tqdm

    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise AnalysisError("two tasks share a name; every task needs its own")
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", n)]
    if bad:
        raise AnalysisError(f"task name {bad[0]!r} is not a file name: use letters, digits and _.- (no leading .)")
    worker = worker_name(worker)
    claims = Claims(root, worker, stale_after=stale_after, on_lost=on_lost or _stop_on_lost)
    log = _Log(Path(root) / "log" / f"{worker}.jsonl", worker)
    bar = tqdm(total=len(tasks), desc=f"worker {worker}", unit="task", disable=quiet, dynamic_ncols=True)
    restore = _term_as_exit()
    wait = 0.0
    try:
        while True:
            done = {t.name for t in tasks if t.done()}
            bar.n = len(done)
            bar.refresh()
            if len(done) == len(tasks):
                break
            ready = [t for t in tasks if t.name not in done and all(n in done for n in t.needs)]
            group = held() if held is not None else None
            ready.sort(key=lambda t: (t.order, t.group is None or t.group != group))
            if any(_run_one(t, claims, log, bar) for t in ready):
                wait = 0.0
            else:  # everything left is held by others or waits for them: look again soon, then less often
                wait = min(poll, max(0.1, 2 * wait))
                time.sleep(wait)
    finally:
        restore()
        bar.close()


def _run_one(task: Task, claims: Claims, log: _Log, bar) -> bool:
    """Claim and run ``task``; False when another worker holds it (or just finished it)."""
    claim = claims.claim(task.name, is_done=task.done)
    if claim is None:
        return False
    if task.done():  # finished by its last owner between our look and our claim
        claim.done(skipped=True)
        return True
    log.write("claimed", task.name, took_over=claim.owner.get("took_over"))
    bar.set_postfix_str(task.name)
    start = time.perf_counter()
    try:
        task.run()
    except BaseException as e:
        why = f"{type(e).__name__}: {e}"
        claim.release(why)
        log.write("released", task.name, why=why)
        raise
    seconds = time.perf_counter() - start
    claim.done(seconds=seconds)
    log.write("done", task.name, seconds=seconds)
    return True


def _term_as_exit() -> Callable[[], None]:
    """SIGTERM (Slurm's notice before a time limit) as SystemExit, so the running task is given back at once;
    returns the function that restores the previous handler."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, old)


# ------------------------------------------------------------------------------------------------ local launcher
#: The ``python`` arguments that run the study's command line (:mod:`analysis.cli.study`) in each worker process
#: :func:`~analysis.study.workers.launch_workers` starts (its ``program`` replaces them).
WORKER_PROGRAM = ("-c", "import sys; from analysis.cli.study import main; main(sys.argv[1:])")


def launch_workers(n: int, args: list[str], *, out, tasks: list[Task] | None = None, quiet: bool = False,
                   program=None) -> Path:
    """Start ``n`` worker processes on this machine, each ``program`` (default: the study's command line) with
    ``args --worker --worker-id <host>-<pid>-w<i> --quiet``, and wait for them; returns ``out/report.md``. Where GPUs
    are visible, worker ``i`` sees only GPU ``i mod count`` (``CUDA_VISIBLE_DEVICES``); on CPUs each gets an equal
    share of the cores (``OMP_NUM_THREADS``, unless it is set). ``tasks``: the work's, for one progress bar over
    all workers. SIGTERM or Ctrl-C here stops the workers, which give their tasks back."""
    from tqdm.auto import tqdm

    if n < 1:
        raise AnalysisError(f"--workers {n} must be at least 1")
    gpus = _visible_gpus()
    host = worker_name(f"{socket.gethostname()}-{os.getpid()}")
    procs = []
    for i in range(n):
        env = dict(os.environ)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
        elif "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // n))
        cmd = [sys.executable, *(program or WORKER_PROGRAM), *args, "--worker", "--worker-id", f"{host}-w{i}",
               "--quiet"]
        procs.append(subprocess.Popen(cmd, env=env))
    bar = tqdm(total=len(tasks or ()), desc=f"study, {n} workers", unit="task", disable=quiet or not tasks,
               dynamic_ncols=True)
    restore = _term_as_exit()
    try:
        last = 0.0
        while any(p.poll() is None for p in procs):
            if tasks and time.monotonic() - last > 1.0:
                bar.n, last = sum(t.done() for t in tasks), time.monotonic()
                bar.refresh()
            time.sleep(0.1)
    except BaseException:
        for p in procs:
            p.terminate()  # SIGTERM: each gives its task back
        for p in procs:
            p.wait()
        raise
    finally:
        restore()
        bar.close()
    failed = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if failed:
        raise AnalysisError(f"{len(failed)} of {n} study workers failed (worker, exit status: {failed}; their errors "
                            "are above); finished work is kept: run the same command again to continue")
    return Path(out) / "report.md"


def _visible_gpus() -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


__all__ = ["Task", "run_worker", "launch_workers", "worker_name", "check_train_cmd", "train_command", "train_outside",
           "run_tied", "PLAIN_TRAIN_CMD", "TRAIN_CMD_FIELDS", "TIED"]

"""Training a run's variants side by side on the CPU: one process per variant, the cores shared among them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm.auto import tqdm

from .config import TrainConfig


def default_jobs(n_variants: int, device: str = "auto") -> int:
    """``--jobs auto``: all ``n_variants`` at once on a CPU with at least two cores (no GPU in use, not under
    torchrun), else one."""
    import torch

    cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    if not cpu or (os.cpu_count() or 1) < 2 or "LOCAL_RANK" in os.environ:
        return 1
    return max(1, n_variants)


#: A worker process: :func:`fixedid.train.loop.side_by_side_worker` (the loop imports this module, not the reverse).
CHILD = "import sys; from fixedid.train.loop import side_by_side_worker; side_by_side_worker(sys.argv[1:])"


def _last_record(stdout: str, key: str) -> dict | None:
    """The last JSON object on a worker's stdout that has ``key``."""
    for line in reversed(stdout.splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and key in rec:
            return rec
    return None


def _reraise(variant: str, code: int, stdout: str, stderr: str):
    """The exception of a worker that failed: the package's own type and message where it raised one."""
    from .. import errors

    rec = _last_record(stdout, "error")
    cls = getattr(errors, str(rec["error"]), None) if rec else None
    if isinstance(cls, type) and issubclass(cls, errors.FixedIdError):
        raise cls(rec.get("message", ""))
    tail = "\n".join(stderr.strip().splitlines()[-15:])
    raise RuntimeError(f"training {variant} in a worker process failed (exit status {code}):\n{tail}")


def _steps_done(path: Path) -> int:
    """The last logged step of a variant's ``metrics.jsonl`` (0 when there is none yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            start = max(0, f.tell() - 4096)
            f.seek(start)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines[1:] if start else lines):  # after a seek the first line may be cut
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def _read(f) -> str:
    f.seek(0)
    return f.read()


def _wait(procs: dict, logs: dict, metrics: list[Path], bar) -> None:
    """Half a second of waiting: the bar brought up to date, and a failed worker's error raised."""
    time.sleep(0.5)
    for v, p in procs.items():
        if p.poll() not in (None, 0):
            _reraise(v, p.returncode, _read(logs[v][0]), _read(logs[v][1]))
    bar.n = sum(_steps_done(m) for m in metrics)
    bar.refresh()


def _summary_of(variant: str, stdout) -> dict:
    rec = _last_record(_read(stdout), "variant")
    if rec and rec["variant"] == variant:
        return rec
    raise RuntimeError(f"the worker that trained {variant} printed no summary")


def train_side_by_side(cfg: TrainConfig, out: Path, variants: list[str], *, jobs: int, quiet: bool,
                       device: str = "cpu") -> list[dict]:
    """Train ``variants`` of the prepared run ``out`` (:func:`~fixedid.train.loop.prepare_run` done) in ``jobs``
    processes at once (``jobs >= 1``, checked by the caller), each with an equal share of this process's threads
    (at least one); one progress bar over all of them. Returns the summaries in the order of ``variants``. A
    worker's error is re-raised here (the package's own exception types pass through as themselves), and the other
    workers are stopped."""
    import torch

    threads = max(1, torch.get_num_threads() // min(jobs, len(variants)))
    total = cfg.train.steps * len(variants)
    metrics = [out / v / "metrics.jsonl" for v in variants]
    bar = tqdm(total=total, desc=f"{len(variants)} variants side by side", unit="step", disable=quiet,
               dynamic_ncols=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    procs, logs = {}, {}
    try:
        for v in variants:  # all at once when jobs covers them, else the next one as a worker ends
            while len(procs) - sum(p.poll() is not None for p in procs.values()) >= jobs:
                _wait(procs, logs, metrics, bar)
            logs[v] = (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+"))
            procs[v] = subprocess.Popen([sys.executable, "-c", CHILD, str(out / "run.json"), str(out), v,
                                         str(threads), device], env=env, stdout=logs[v][0], stderr=logs[v][1])
        while any(p.poll() is None for p in procs.values()):
            _wait(procs, logs, metrics, bar)
        _wait(procs, logs, metrics, bar)
        summaries = [_summary_of(v, logs[v][0]) for v in variants]
        bar.n = total
        bar.refresh()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            p.wait()
        for f in (f for pair in logs.values() for f in pair):
            f.close()
        bar.close()
    return summaries


__all__ = ["default_jobs", "train_side_by_side"]

"""Each training of the study as a command of its own (``--train-cmd``): a ``torchrun`` job over the GPUs of a node or
of a Slurm allocation, or a plain process, instead of a training in the study worker's own process."""

from __future__ import annotations

import os
import shlex
import string
import subprocess
import sys
from pathlib import Path

from analysis.errors import AnalysisError

#: The placeholders of ``--train-cmd``.
TRAIN_CMD_FIELDS = ("python", "config", "out", "variant")
#: ``--train-cmd`` doing what a worker does by default, but in a process of its own.
PLAIN_TRAIN_CMD = "{python} -m fixedid.train --config {config} --out {out} --variants {variant} --resume --quiet"


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
    """Run ``cmd`` as a child that ends with this process (:data:`~analysis.study.train_cmd.TIED`); if this process is
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


__all__ = ["check_train_cmd", "train_command", "train_outside", "run_tied", "PLAIN_TRAIN_CMD", "TRAIN_CMD_FIELDS", "TIED"]

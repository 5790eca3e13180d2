"""The test suite's time against its budget and its bound, in one run.

Runs the README's test command (``python -m pytest -q``, every core through pytest-xdist) in a child process with
the test environment (offline, Agg, a fresh ``HF_HOME``; the suite makes its own caches) and prints:

- the wall time against the budget (issue 49: 6 minutes of tests on a 2-core machine);
- the bound: the CPU seconds the suite spent (pytest, its workers and every process they started, from
  ``getrusage(RUSAGE_CHILDREN)``) over the cores - the wall time of perfectly packed work - and how close the run came
  to it (bound / wall; near 1, the suite is CPU-bound and only less work makes it faster);
- the heaviest test files (their tests' setup + call + teardown seconds, summed inside the workers, so they add up
  to more than the wall time).

A run is one sample: on the 2-core development machine the same tree measured 350-423 s over four runs in one
afternoon, so compare trees in alternation, not across days.

Usage: python experiments/benchmarks/suite.py [--budget 360] [--top 12] [-- extra pytest arguments]
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from fixedid.clitools import ArgumentParser

ROOT = Path(__file__).resolve().parents[2]


def file_seconds(text: str) -> dict[str, float]:
    """Seconds per test file from pytest's ``--durations=0`` lines (``1.23s call tests/x.py::test``)."""
    out: dict[str, float] = defaultdict(float)
    for sec, node in re.findall(r"^([0-9.]+)s (?:setup|call|teardown)\s+(\S+)", text, re.M):
        out[node.split("::")[0]] += float(sec)
    return dict(out)


def main(argv=None) -> int:
    ap = ArgumentParser(prog="suite.py", description=__doc__.split("\n\n")[0])  # bad input: one line, exit 2
    ap.add_argument("--budget", type=float, default=360.0, help="seconds of tests allowed (default 360)")
    ap.add_argument("--top", type=int, default=12, help="heaviest test files to list")
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = ap.parse_args(argv)
    if args.budget <= 0 or args.top < 0:
        ap.error("--budget must be positive and --top at least 0")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", MPLBACKEND="Agg",
               HF_HOME=tempfile.mkdtemp(prefix="suite-hf-"))
    cmd = [sys.executable, "-m", "pytest", "-q", "--durations=0", "-p", "no:cacheprovider", *args.pytest_args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    summary = [ln for ln in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    print(f"pytest: {summary[-1].strip('= ') if summary else 'no summary line'} (exit {proc.returncode})")
    print(f"wall {wall:.0f} s against a budget of {args.budget:.0f} s: {wall / args.budget:.2f}x the budget")
    bound = cpu / cores
    print(f"CPU {cpu:.0f} s on {cores} cores: bound {bound:.0f} s (perfect packing); the run reached "
          f"{bound / wall:.2f} of it")
    files = sorted(file_seconds(proc.stdout).items(), key=lambda kv: -kv[1])
    if files and args.top:
        print(f"heaviest test files (seconds inside the workers; {sum(s for _, s in files):.0f} s in all):")
        for name, sec in files[:args.top]:
            print(f"  {sec:7.1f}  {name}")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

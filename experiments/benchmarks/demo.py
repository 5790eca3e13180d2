"""The cold demo's time against its target and its bound, with the behaviours it must keep, in one run.

Runs ``fixedid-analyze demo`` as a newcomer's first run does (an empty cache: data, three trainings, the analyses,
the report) into temporary directories and prints:

- the machine's speed (a bare training loop of the tiny recipe, tokens/s), then the wall time against the target
  (6 minutes on a 2-core machine);
- the training's share of it: the recipe's tokens (3 variants x steps x batch x context) over the tokens/s the
  trainer logged (``timing.jsonl``, the median interval of each variant), and what is left (data, analyses, report);
- the bound at this machine's training speed: the steps per variant that would fit the target once the rest is
  paid, against the recipe's;
- the behaviours the demo reports (held-out accuracy of each variant on IOI, agreement and induction; target >= 90%).

One run is one seed on one machine: the recipe's behaviours over seeds and recodings are ``behaviours.py``'s.

Usage: python experiments/benchmarks/demo.py [--config tiny] [--target 360] [--keep DIR]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from fixedid.clitools import ArgumentParser

TASKS = ("ioi", "agreement", "induction")


def main(argv=None) -> int:
    ap = ArgumentParser(prog="demo.py", description=__doc__.split("\n\n")[0])  # bad input: one line, exit 2
    ap.add_argument("--config", default="tiny", help="the recipe the demo trains (default tiny)")
    ap.add_argument("--target", type=float, default=360.0, help="seconds the cold demo may take (default 360)")
    ap.add_argument("--keep", help="run in this (new) directory and keep the cache and the report")
    args = ap.parse_args(argv)
    if args.target <= 0:
        ap.error("--target must be positive")
    if args.keep and Path(args.keep).exists():
        ap.error(f"--keep {args.keep} exists; give a new directory")
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="demo-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    from fixedid.train.config import TrainConfig

    sys.path.insert(0, str(Path(__file__).parent))
    from _timing import machine_line

    print(machine_line(), flush=True)  # how fast this machine is, before the run
    cfg = TrainConfig.load(args.config)
    cmd = [sys.executable, "-m", "analysis", "demo", "--config", args.config, "--cache", str(root / "cache"),
           "--out", str(root / "demo")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    runs = [d for d in (root / "cache").iterdir() if d.is_dir()]
    per_variant = cfg.train.steps * cfg.train.batch_size * cfg.model["context"]
    rates = {}
    for timing in sorted(runs[0].glob("*/timing.jsonl")):
        rows = [json.loads(line) for line in timing.read_text().splitlines() if line.strip()]
        rates[timing.parent.name] = statistics.median(r["tok_per_s"] for r in rows)
    train_s = sum(per_variant / r for r in rates.values())
    rest = wall - train_s
    print(f"cold demo ({args.config}): {wall:.0f} s against a target of {args.target:.0f} s "
          f"({wall / args.target:.2f}x the target)")
    print(f"training: {len(rates)} x {per_variant:,} tokens at "
          + ", ".join(f"{v} {r / 1e3:.1f}k" for v, r in rates.items())
          + f" tokens/s = {train_s:.0f} s ({train_s / wall:.0%} of the run); the rest (data, analyses, report) "
            f"{rest:.0f} s")
    mean_rate = statistics.mean(rates.values())
    fit = (args.target - rest) * mean_rate / (len(rates) * cfg.train.batch_size * cfg.model["context"])
    print(f"bound at this machine's training speed: {max(fit, 0):.0f} steps per variant fit the target, against the "
          f"recipe's {cfg.train.steps:,} ({max(fit, 0) / cfg.train.steps:.2f}x)")
    beh = pd.read_csv(root / "demo" / "behaviours.csv")
    beh = beh[beh.task.isin(TASKS)].pivot_table(index="variant", columns="task", values="accuracy")
    print("held-out accuracy (target >= 90% for every variant and task):")
    print(beh.reindex(columns=list(TASKS)).map(lambda a: f"{a:.0%}").to_string())
    print("behaviours " + ("hold" if (beh >= 0.9).all().all() else "MISS the target"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

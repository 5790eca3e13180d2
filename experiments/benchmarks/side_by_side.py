"""Training a run's variants side by side (``--jobs``) against one after another, measured in one run.

Trains the learned, canonical and gf2 variants of a config (default: the demo's ``tiny``) for ``--steps`` steps,
on one prepared dataset, three ways, in interleaved rounds:
  sequential     ``train(..., jobs=1)``: one variant after another, each with all of this process's threads (the
                 way the trainer ran before ``--jobs``; the honest anchor);
  side by side   ``train(..., jobs=3)``: the three at once, each in a process of its own with an equal share of
                 the threads (at least one);
  one thread     one variant alone at one thread, for the bound: the cores used perfectly at one thread's speed
                 would train the three in 3 x that / cores.
Prints the time of each (medians over rounds; start-up of the worker processes included, data preparation not),
the speed-up of side by side over sequential, the bound's, and whether the weights are bit for bit the same.

Usage: python experiments/benchmarks/side_by_side.py [--config tiny] [--steps 300] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from fixedid.train.config import TrainConfig
from fixedid.train.loop import prepare_run, train

sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine_line  # noqa: E402

VARIANTS = ["learned", "canonical", "gf2"]


def timed_run(cfg: TrainConfig, data_from: Path, out: Path, variants, jobs: int) -> float:
    """Seconds to train ``variants`` into ``out`` (its data copied from ``data_from``, so not prepared again)."""
    out.mkdir(parents=True)
    (out / "data").symlink_to(data_from / "data", target_is_directory=True)
    shutil.copy(data_from / "run.json", out / "run.json")  # the prepared run this one shares its data with
    t0 = time.perf_counter()
    train(cfg, out, variants, resume=True, quiet=True, jobs=jobs)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="tiny")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    n = args.steps
    cfg = TrainConfig.load(args.config).replace_train(steps=n, keep=[], save_every=n, eval_every=n)
    threads, cores = torch.get_num_threads(), os.cpu_count() or 1
    print(f"torch {torch.__version__}, {threads} threads, {cores} cores, {args.config}: {n} steps x "
          f"{cfg.train.batch_size} sequences per variant, {args.rounds} interleaved rounds", file=sys.stderr)
    times = {"sequential": [], "side by side": [], "one thread": []}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        prepare_run(cfg, work / "prepared", VARIANTS, quiet=True)
        for r in range(args.rounds):
            times["sequential"].append(timed_run(cfg, work / "prepared", work / f"seq{r}", VARIANTS, 1))
            times["side by side"].append(timed_run(cfg, work / "prepared", work / f"side{r}", VARIANTS, 3))
            torch.set_num_threads(1)
            try:
                times["one thread"].append(timed_run(cfg, work / "prepared", work / f"one{r}", ["gf2"], 1))
            finally:
                torch.set_num_threads(threads)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), file=sys.stderr)
        same = all((work / "seq0" / v / "model.safetensors").read_bytes() ==
                   (work / "side0" / v / "model.safetensors").read_bytes() for v in VARIANTS)
    med = {k: statistics.median(v) for k, v in times.items()}
    bound = 3 * med["one thread"] / cores
    print(f"three variants, {n} steps each: sequential {med['sequential']:.1f} s, side by side "
          f"{med['side by side']:.1f} s, bound (3 x one thread / {cores} cores) {bound:.1f} s")
    print(f"side by side / sequential speed-up: {med['sequential'] / med['side by side']:.2f}x "
          f"(the bound's: {med['sequential'] / bound:.2f}x)")
    print(f"weights bit for bit the same: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()

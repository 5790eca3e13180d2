"""Do the three variants of the demo's recipe have the behaviours a study needs, for every seed, with margin?

Trains the learned, canonical and gf2 variants of a config (default: the packaged ``tiny``, the demo's) for each
seed (initialisation and data order), or reuses them from the demo's cache ($FIXEDID_CACHE or ~/.cache/fixedid;
seed 0 is the demo's own run), and scores held-out pairs of every task of the built-in language, at the final
step and at the snapshot the config keeps at 75% of training. Prints a table variant x seed x task (accuracy,
mean logit difference answer - wrong) per checkpoint, the training time per seed, and whether the targets hold:
every variant and seed at >= 90% on ioi, agreement and induction, at 75% of training and at the end.

Usage: python experiments/benchmarks/behaviours.py [--config tiny] [--seeds 0,1,2] [--n 64] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from analysis import load
from analysis.evaluation.behaviours import pair_scores, summarize
from analysis.variants import VARIANTS, cache_root, ensure_variants
from fixedid.train import kept_dir
from fixedid.train.config import TrainConfig

TARGET_TASKS = ("ioi", "agreement", "induction")
TARGET = 0.9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="tiny", help="TOML file or packaged config name (default: tiny)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--n", type=int, default=64, help="held-out pairs per task")
    p.add_argument("--cache", help="where the runs are cached (default: the demo's cache)")
    p.add_argument("--csv", help="also write the per-pair scores here")
    args = p.parse_args()
    base = TrainConfig.load(args.config)
    margin = base.train.snapshot_steps
    steps = sorted(set(margin[-1:] + [base.train.steps]))
    frames, timing = [], {}
    for seed in (int(s) for s in args.seeds.split(",")):
        cfg = base.replace_train(seed=seed)
        t0 = time.perf_counter()
        run = ensure_variants(cfg, cache_root(args.cache))
        timing[seed] = time.perf_counter() - t0
        for v in VARIANTS:
            for step in steps:
                path = run / v if step == base.train.steps else kept_dir(run / v, step)
                scores = pair_scores(load(path), n=args.n)
                frames.append(scores.assign(variant=v, seed=seed, step=step))
    scores = pd.concat(frames, ignore_index=True)
    if args.csv:
        scores.to_csv(args.csv, index=False)
    table = summarize(scores[["variant", "seed", "step", "task", "pair", "n_tokens", "logit_diff", "correct"]])
    pd.set_option("display.width", 200)
    for step in steps:
        t = table[table.step == step]
        cell = t.assign(cell=[f"{100 * a:3.0f}% {d:+5.1f}" for a, d in zip(t.accuracy, t.logit_diff)])
        grid = cell.pivot_table(index=["variant", "seed"], columns="task", values="cell", aggfunc="first")
        grid = grid.reindex(index=pd.MultiIndex.from_product([VARIANTS, sorted(timing)]))
        print(f"\nstep {step} of {base.train.steps} ({100 * step / base.train.steps:.0f}% of training): "
              "held-out accuracy and mean logit difference")
        print(grid.to_string())
    for seed, s in timing.items():
        print(f"seed {seed}: the three variants ready in {s:.0f} s (training, or loading from the cache)")
    hit = table[table.task.isin(TARGET_TASKS)]
    low = hit[hit.accuracy < TARGET]
    verdict = "hold" if low.empty else "MISS"
    print(f"\ntargets (>= {100 * TARGET:.0f}% on {', '.join(TARGET_TASKS)} for every variant and seed at steps "
          f"{steps}): {verdict}")
    for _, r in low.iterrows():
        print(f"  {r.variant} seed {r.seed} step {r.step} {r.task}: {100 * r.accuracy:.0f}%")


if __name__ == "__main__":
    main()

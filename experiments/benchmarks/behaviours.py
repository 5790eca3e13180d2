"""Do the three variants of the demo's recipe have the behaviours a study needs, for every seed, with margin?

Trains the learned, canonical and gf2 variants of a config (default: the packaged ``tiny``, the demo's) for each
seed (initialisation and data order), or reuses them from the demo's cache ($FIXEDID_CACHE or ~/.cache/fixedid;
seed 0 is the demo's own run), and scores held-out pairs of every task of the built-in language, at the final
step and at the snapshot the config keeps at 75% of training. Prints a table variant x seed x task (accuracy,
mean logit difference answer - wrong) per checkpoint, the training time per seed, and whether the targets hold:
every variant and seed at >= 90% on ioi, agreement and induction, at 75% of training and at the end.

With the defaults it also writes the summary table (variant, seed, step, task, accuracy, logit difference) to
``experiments/benchmarks/results/behaviours.csv`` and renders it into README.md between the ``behaviours``
markers, so the README's numbers are this script's (``tests/test_readme.py`` checks the two agree).

Usage: python experiments/benchmarks/behaviours.py [--config tiny] [--seeds 0,1,2] [--n 64] [--csv out.csv]
       [--no-readme]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from analysis import load
from analysis.evaluation.behaviours import pair_scores, summarize
from analysis.variants import VARIANTS, cache_root, ensure_variants
from fixedid.train import kept_dir
from fixedid.train.config import TrainConfig

TARGET_TASKS = ("ioi", "agreement", "induction")
TARGET = 0.9
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "benchmarks" / "results" / "behaviours.csv"
BEGIN, END = "<!-- behaviours: begin -->", "<!-- behaviours: end -->"


def readme_block(table: pd.DataFrame) -> str:
    """The README's table of held-out accuracy: per variant and task, the range over seeds at each step."""
    steps = sorted(table.step.unique())
    final = max(steps)
    seeds = ", ".join(str(s) for s in sorted(table.seed.unique()))
    at = " / ".join(f"step {s:,}" + (" (the end)" if s == final else "") for s in steps)
    lines = [BEGIN, f"<!-- written by experiments/benchmarks/behaviours.py from {RESULTS.relative_to(ROOT)}; do "
             "not edit by hand -->", "",
             f"Held-out accuracy, lowest-highest over seeds {seeds} ({int(table.n_pairs.iloc[0])} pairs per task), "
             f"at {at}:",
             "", "| variant | " + " | ".join(sorted(table.task.unique(), key=_task_order)) + " |",
             "|---|" + "---|" * table.task.nunique()]
    for v in VARIANTS:
        cells = []
        for task in sorted(table.task.unique(), key=_task_order):
            t = table[(table.variant == v) & (table.task == task)]
            parts = []
            for s in steps:
                a = 100 * t[t.step == s].accuracy
                parts.append(f"{a.min():.0f}%" if round(a.min()) == round(a.max()) else f"{a.min():.0f}-{a.max():.0f}%")
            cells.append(" / ".join(parts))
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", END])


def _task_order(task: str):
    return (("ioi", "agreement", "induction", "facts") + (task,)).index(task)


def write_results(table: pd.DataFrame) -> None:
    from fixedid.atomic import atomic_path, write_text_atomic

    cols = ["variant", "seed", "step", "task", "n_pairs", "accuracy", "logit_diff"]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(RESULTS) as tmp:
        table[cols].to_csv(tmp, index=False, float_format="%.6g")
    readme = (ROOT / "README.md").read_text()
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    write_text_atomic(ROOT / "README.md", head + readme_block(pd.read_csv(RESULTS)) + tail)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="tiny", help="TOML file or packaged config name (default: tiny)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--n", type=int, default=64, help="held-out pairs per task")
    p.add_argument("--cache", help="where the runs are cached (default: the demo's cache)")
    p.add_argument("--csv", help="also write the per-pair scores here")
    p.add_argument("--no-readme", action="store_true", help="do not write results/behaviours.csv and README.md")
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
    if not args.no_readme:
        write_results(table)
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

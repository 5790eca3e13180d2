"""Do the variants of the demo's recipe have the behaviours a study needs, for every seed and recoding, with margin?

Trains the learned, canonical and gf2 variants of a config (default: the packaged ``tiny``, the demo's) for each
seed (initialisation and data order), and the gf2 variant again for each further GF(2) recoding of ``--gf2-seeds``
(``[model] gf2_seed``; "not tied to one binary assignment" is a claim about recodings in general), or reuses them
from the demo's cache ($FIXEDID_CACHE or ~/.cache/fixedid; seed 0, recoding 0 is the demo's own run). It scores
held-out pairs of every task of the built-in language at the final step and at the snapshot the config keeps at 75%
of training, and prints a table variant x recoding x seed x task (accuracy, mean logit difference answer - wrong)
per checkpoint, the training time per seed, and whether the targets hold: every variant, recoding and seed at
>= 90% on ioi, agreement and induction, at 75% of training and at the end. The held-out controls
(``induction_unlisted``: the induction prompts with list words no training list uses, chance 50%) are scored and
tabled beside the tasks, not as targets: a model that copies only the words its training lists use is at chance
there.

Unless ``--no-docs``, it also writes the summary table (variant, recoding, seed, step, task, accuracy, logit
difference) to ``experiments/benchmarks/results/behaviours.csv`` (``behaviours-<config>.csv`` for another packaged
config, e.g. ``tiny-bpe``) and renders it into docs/recipes.md between that config's ``behaviours`` markers, so the
page's numbers are this script's (``tests/test_docs_claims.py`` checks the two agree). ``--study DIR`` reads (and
trains where missing) the runs of a study directory instead of the demo's cache, so one training serves both.

Usage: python experiments/benchmarks/behaviours.py [--config tiny] [--seeds 0,1,2] [--gf2-seeds 0,1,2] [--n 64]
       [--csv out.csv] [--study DIR] [--no-docs]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from analysis import load
from analysis.evaluation.behaviours import CONTROLS, TASKS, pair_scores, summarize
from analysis.variants import VARIANTS, cache_root, ensure_variants
from fixedid.train import kept_dir
from fixedid.train.config import TrainConfig

TARGET_TASKS = ("ioi", "agreement", "induction")
TARGET = 0.9
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "benchmarks" / "results" / "behaviours.csv"
#: The page the tables are written into, between each config's markers.
PAGE = ROOT / "docs" / "recipes.md"
BEGIN, END = "<!-- behaviours: begin -->", "<!-- behaviours: end -->"


def places(config: str) -> tuple[Path, str, str]:
    """Where a config's table goes: (results CSV, begin marker, end marker in :data:`PAGE`); the default config's are
    :data:`RESULTS`, :data:`BEGIN` and :data:`END`, another packaged config's carry its name."""
    name = Path(config).name.removesuffix(".toml")
    if name == "tiny":
        return RESULTS, BEGIN, END
    return (RESULTS.with_name(f"behaviours-{name}.csv"), f"<!-- behaviours {name}: begin -->",
            f"<!-- behaviours {name}: end -->")


def _rows(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(table row label, its rows): the variants in order, gf2 once per recoding."""
    out = []
    for v in VARIANTS:
        t = table[table.variant == v]
        recodings = sorted(pd.to_numeric(t.recoding, errors="coerce").dropna().unique()) if v == "gf2" else []
        if len(recodings) > 1:
            out += [(f"{v}, recoding {int(r)}", t[pd.to_numeric(t.recoding, errors="coerce") == r]) for r in recodings]
        else:
            out.append((v, t))
    return out


def table_block(table: pd.DataFrame, config: str = "tiny") -> str:
    """The page's table of held-out accuracy, markers included: per variant (gf2: per recoding) and task, the range
    over seeds at each step."""
    steps = sorted(table.step.unique())
    final = max(steps)
    seeds = ", ".join(str(s) for s in sorted(table.seed.unique()))
    at = " / ".join(f"step {s:,}" + (" (the end)" if s == final else "") for s in steps)
    tasks = sorted(table.task.unique(), key=_task_order)
    results, begin, end = places(config)
    lines = [begin, f"<!-- written by experiments/benchmarks/behaviours.py from {results.relative_to(ROOT)}; do "
             "not edit by hand -->", "",
             f"Held-out accuracy, lowest-highest over seeds {seeds} ({int(table.n_pairs.iloc[0])} pairs per task), "
             f"at {at}:",
             "", "| variant | " + " | ".join(f"{t} (control)" if t in CONTROLS else t for t in tasks) + " |",
             "|---|" + "---|" * len(tasks)]
    for label, t in _rows(table):
        cells = []
        for task in tasks:
            parts = []
            for s in steps:
                a = 100 * t[(t.task == task) & (t.step == s)].accuracy
                parts.append(f"{a.min():.0f}%" if round(a.min()) == round(a.max()) else f"{a.min():.0f}-{a.max():.0f}%")
            cells.append(" / ".join(parts))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", end])


def _task_order(task: str):
    order = ("ioi", "agreement", "induction", "facts") + tuple(CONTROLS)
    return order.index(task) if task in order else len(order)


def write_results(table: pd.DataFrame, config: str = "tiny") -> None:
    """The summary CSV, and its table in :data:`PAGE` between the config's markers (:func:`places`)."""
    from fixedid.atomic import atomic_path, write_text_atomic

    results, begin, end = places(config)
    cols = ["variant", "recoding", "seed", "step", "task", "n_pairs", "accuracy", "logit_diff"]
    results.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(results) as tmp:
        table[cols].to_csv(tmp, index=False, float_format="%.6g")
    page = PAGE.read_text()
    if begin not in page:
        raise SystemExit(f"{PAGE.relative_to(ROOT)} has no {begin} ... {end} block for this config; add the two "
                         "markers where its table belongs, or pass --no-docs")
    head, _, rest = page.partition(begin)
    _, _, tail = rest.partition(end)
    write_text_atomic(PAGE, head + table_block(pd.read_csv(results), config) + tail)


def _variant_dirs(base: TrainConfig, seed: int, recodings: list[int], args):
    """``(recoding, variant, directory)`` of every trained variant of one seed, trained first where missing: in the
    demo's cache (``demo-<key>`` per recoding), or in a study directory's ``runs/`` (``--study``)."""
    if args.study:
        from analysis.study.pipeline import BASE_VARIANTS, train_all

        ckpts = train_all(base, Path(args.study), [seed], recodings, variants=BASE_VARIANTS)
        out = [(recodings[0] if v == "gf2" else None, v, d) for (_, v), d in ckpts.items() if not v.startswith("gf2-r")]
        return out + [(int(v.split("gf2-r")[1]), "gf2", d) for (_, v), d in ckpts.items() if v.startswith("gf2-r")]
    from analysis.study.pipeline import training_runs

    out = []
    # the study's configs for each recoding (the same cache key for the same training)
    for r, (_, _, cfg, _, variants) in zip(recodings, training_runs(base, [seed], recodings, VARIANTS)):
        run = ensure_variants(cfg, cache_root(args.cache), variants=variants)
        out += [(r if v == "gf2" else None, v, run / v) for v in variants]
    return out


def main() -> None:
    from analysis.study.pipeline import parse_seeds

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="tiny", help="TOML file or packaged config name (default: tiny)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--gf2-seeds", default="0,1,2", help="GF(2) recodings to train the gf2 variant with (default "
                   "0,1,2; the first is the demo's)")
    p.add_argument("--n", type=int, default=64, help="held-out pairs per task")
    p.add_argument("--cache", help="where the runs are cached (default: the demo's cache)")
    p.add_argument("--study", help="use (and train where missing) the runs of this study directory instead "
                   "(fixedid-study run CONFIG --out DIR: the same seeds and recodings, no second training)")
    p.add_argument("--csv", help="also write the per-pair scores here")
    p.add_argument("--no-docs", action="store_true", help="do not write results/behaviours.csv and docs/recipes.md")
    args = p.parse_args()
    base = TrainConfig.load(args.config)
    recodings = parse_seeds(args.gf2_seeds, "--gf2-seeds")
    margin = base.train.snapshot_steps
    steps = sorted(set(margin[-1:] + [base.train.steps]))
    frames, timing = [], {}
    for seed in parse_seeds(args.seeds):
        t0 = time.perf_counter()
        for r, v, vdir in _variant_dirs(base, seed, recodings, args):
            for step in steps:
                path = vdir if step == base.train.steps else kept_dir(vdir, step)
                scores = pair_scores(load(path), TASKS + CONTROLS, n=args.n)
                # the recoding of a gf2 row ("" for the others, so that grouping keeps them)
                frames.append(scores.assign(variant=v, recoding=str(r) if v == "gf2" else "", seed=seed, step=step))
        timing[seed] = time.perf_counter() - t0
    scores = pd.concat(frames, ignore_index=True)
    if args.csv:
        scores.to_csv(args.csv, index=False)
    keys = ["variant", "recoding", "seed", "step", "task"]
    table = summarize(scores[keys + ["pair", "n_tokens", "logit_diff", "correct"]])
    if not args.no_docs:
        write_results(table, args.config)
    print_report(table, steps, base.train.steps, recodings, timing)


def print_report(table: pd.DataFrame, steps: list[int], last: int, recodings: list[int], timing: dict) -> None:
    """The grid of accuracy and logit difference per step (variant and recoding x seed by task), the time per seed,
    whether the targets hold (and where not), and each control's range per variant."""
    pd.set_option("display.width", 200)
    table = table.assign(row=[v if v != "gf2" else f"gf2 r{r}" for v, r in zip(table.variant, table.recoding)])
    rows = [label for label in dict.fromkeys(
        [v for v in VARIANTS if v != "gf2"] + [f"gf2 r{r}" for r in recodings])]
    for step in steps:
        t = table[table.step == step]
        cell = t.assign(cell=[f"{100 * a:3.0f}% {d:+5.1f}" for a, d in zip(t.accuracy, t.logit_diff)])
        grid = cell.pivot_table(index=["row", "seed"], columns="task", values="cell", aggfunc="first")
        grid = grid.reindex(index=pd.MultiIndex.from_product([rows, sorted(timing)], names=["variant", "seed"]))
        print(f"\nstep {step} of {last} ({100 * step / last:.0f}% of training): "
              "held-out accuracy and mean logit difference")
        print(grid.to_string())
    for seed, s in timing.items():
        print(f"seed {seed}: the variants and recodings ready in {s:.0f} s (training, or loading from the cache)")
    hit = table[table.task.isin(TARGET_TASKS)]
    low = hit[hit.accuracy < TARGET]
    verdict = "hold" if low.empty else "MISS"
    print(f"\ntargets (>= {100 * TARGET:.0f}% on {', '.join(TARGET_TASKS)} for every variant, recoding and seed at "
          f"steps {steps}): {verdict}")
    for _, r in low.iterrows():
        print(f"  {r.row} seed {r.seed} step {r.step} {r.task}: {100 * r.accuracy:.0f}%")
    for control in CONTROLS:
        c = table[table.task == control]
        if len(c):
            print(f"control {control} (not a target; chance 50%): "
                  + ", ".join(f"{row} {100 * g.accuracy.min():.0f}-{100 * g.accuracy.max():.0f}%"
                              for row, g in c.groupby("row", sort=False)))


if __name__ == "__main__":
    main()

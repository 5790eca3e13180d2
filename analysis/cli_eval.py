"""``fixedid-analyze eval``: lm-eval tasks on one or several checkpoints, through the ``fixedid`` model.

    fixedid-analyze eval --ckpt runs/tiny/canonical --tasks fixedid_ioi,fixedid_agreement,fixedid_lastword

Writes ``eval.json`` (lm-eval's results and configs per checkpoint) and ``eval.csv`` (one row per checkpoint x task
x metric: ``variant, task, metric, value, stderr, n``, and for the study's benchmarks the canonical variant's figure
``study_canonical`` from the paper). The built-in language's tasks are found without ``--include-path``; a
checkpoint of another world (``synthetic:N``) gets that world's task data, written to a temporary directory. The
study's benchmarks (``hellaswag``, ``piqa``, ``lambada_openai``, 0-shot) run the same way where their datasets can be
loaded (they need the Hugging Face hub or its cache).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

from .cli_interventions import checkpoint_dirs
from .errors import AnalysisError


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat for several")
    p.add_argument("--tasks", default="fixedid_ioi,fixedid_agreement,fixedid_facts,fixedid_lastword",
                   help="comma-separated lm-eval task names (default: the built-in language's four)")
    p.add_argument("--limit", type=int, help="at most this many documents per task")
    p.add_argument("--num-fewshot", type=int, default=0, help="few-shot examples (default 0, as the study)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--include-path", help="a directory of further lm-eval task YAMLs")
    p.add_argument("--out", help="output directory (default: analysis-out/eval)")


def _tidy(variant: str, results: dict, samples: dict) -> list[dict]:
    from .evaluate import STUDY_FIGURES

    rows = []
    for task, metrics in results.items():
        for key, value in metrics.items():
            if "," not in key or key.split(",")[0].endswith("_stderr") or not isinstance(value, (int, float)):
                continue
            metric, filt = key.split(",", 1)
            stderr = metrics.get(f"{metric}_stderr,{filt}")
            study = STUDY_FIGURES.get(task)
            rows.append({"variant": variant, "task": task, "metric": metric, "filter": filt, "value": float(value),
                         "stderr": float(stderr) if isinstance(stderr, (int, float)) else math.nan,
                         "n": samples.get(task, {}).get("effective", math.nan),
                         "study_canonical": study[1] / 100 if study and study[0] == metric else math.nan})
    return rows


def run(args) -> int:
    import logging

    import pandas as pd
    from lm_eval import simple_evaluate

    from fixedid.atomic import write_text_atomic

    from .evaluate import BUILTIN_TASKS, FixedIdEvalLM, task_manager, write_task_data
    from .figures import write_csv
    from .model import load
    from .tasks import language_seed

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise AnalysisError("--tasks is empty; name lm-eval tasks, e.g. fixedid_ioi,fixedid_lastword")
    if args.limit is not None and args.limit < 1 or args.batch_size < 1 or args.num_fewshot < 0:
        raise AnalysisError("--limit and --batch-size must be positive and --num-fewshot >= 0")
    if args.include_path and not Path(args.include_path).is_dir():
        raise AnalysisError(f"--include-path {args.include_path} is not a directory")
    paths = checkpoint_dirs(args.ckpt)
    for name in ("lm-eval", "lm_eval"):
        logging.getLogger(name).setLevel(logging.ERROR)  # its per-task notices; our summary says what ran
    names = [p.name if len({q.name for q in paths}) == len(paths) else str(p) for p in paths]
    rows, raw = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant, path in zip(names, paths):
            model = load(path, device=args.device)
            world = language_seed(model)
            builtin = None if world == 0 else write_task_data(Path(tmp) / f"world{world}", world)
            extra = [args.include_path] if args.include_path else []
            manager = task_manager(extra) if builtin is None else _manager_without_shipped([builtin, *extra])
            unknown = [t for t in tasks if t not in manager.all_tasks]
            if unknown:
                raise AnalysisError(f"unknown lm-eval task(s) {unknown}; the built-in ones are "
                                    f"{', '.join(BUILTIN_TASKS)} (others: lm-eval --tasks list)")
            if model.tokenizer is None:
                raise AnalysisError(f"checkpoint {variant} has no tokenizer: lm-eval evaluates text")
            lm = FixedIdEvalLM(model=model, batch_size=args.batch_size, pretrained=str(path))
            out = simple_evaluate(model=lm, tasks=tasks, num_fewshot=args.num_fewshot, limit=args.limit,
                                  task_manager=manager, log_samples=False, verbosity="ERROR")
            raw[variant] = {"results": out["results"], "n_samples": out.get("n-samples", {}),
                            "configs": out.get("configs", {})}
            rows += _tidy(variant, out["results"], out.get("n-samples", {}))
    df = pd.DataFrame(rows)
    out_dir = Path(args.out) if args.out else Path("analysis-out") / "eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "eval.json", json.dumps(raw, indent=1, default=str))
    write_csv(df, out_dir / "eval.csv")
    print(f"lm-eval, {args.num_fewshot}-shot" + (f", at most {args.limit} documents per task" if args.limit else "")
          + ":")
    for (variant, task), g in df.groupby(["variant", "task"], sort=False):
        cells = ", ".join(f"{r.metric} {r.value:.3f}" + (f" +- {1.96 * r.stderr:.3f}" if r.stderr == r.stderr else "")
                          + (f" (study, canonical: {r.study_canonical:.4f})" if r.study_canonical == r.study_canonical
                             else "") for r in g.itertuples())
        print(f"  {variant} {task} (n={int(g.n.iloc[0]) if g.n.iloc[0] == g.n.iloc[0] else '?'}): {cells}")
    print(f"wrote {out_dir / 'eval.csv'} and {out_dir / 'eval.json'}")
    return 0


def _manager_without_shipped(include):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=[str(p) for p in include])

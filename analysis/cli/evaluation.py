"""``fixedid-analyze eval``: lm-eval tasks on one or several checkpoints, through the ``fixedid`` model.

    fixedid-analyze eval --ckpt fixedid-demo/checkpoints/canonical --tasks fixedid_ioi,fixedid_agreement,fixedid_lastword

Writes ``eval.json`` (lm-eval's results and configs per checkpoint), ``eval.csv`` (one row per checkpoint x task x
metric: ``variant, task, metric, value, stderr, n``, and for the study's benchmarks the canonical variant's figure
``study_canonical`` from the paper) and ``eval.png``/``.pdf`` (each task's headline metric, variants side by side). The built-in language's tasks are found without ``--include-path``; a
checkpoint of another world (``synthetic:N``) gets that world's task data, written to a temporary directory. The
study's benchmarks (``hellaswag``, ``piqa``, ``lambada_openai``, 0-shot) run the same way where their datasets can be
loaded (they need the Hugging Face hub or its cache).
"""

from __future__ import annotations

import argparse
import json

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints
from analysis.errors import AnalysisError


HELP = "lm-eval tasks (the built-in language's, or any lm-eval task whose data loads) through the fixedid model; JSON and a tidy CSV"
EXAMPLES = """
  fixedid-analyze eval --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 \\
      --tasks fixedid_ioi,fixedid_agreement
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--tasks", default="fixedid_ioi,fixedid_agreement,fixedid_facts,fixedid_lastword",
                   help="comma-separated lm-eval task names (default: the built-in language's four)")
    p.add_argument("--limit", type=int, help="at most this many documents per task")
    p.add_argument("--num-fewshot", type=int, default=0, help="few-shot examples (default 0, as the study)")
    p.add_argument("--batch-size", type=int, default=32, help="requests per forward (default 32)")
    p.add_argument("--device", default="auto", help="device for the model: auto (default: CUDA where present, else "
                   "the CPU), cpu, cuda, cuda:N or mps")
    p.add_argument("--include-path", help="a directory of further lm-eval task YAMLs")
    add_out(p)


def run(args) -> int:
    import pandas as pd

    from fixedid.atomic import write_text_atomic

    from analysis.evaluation.lmeval import evaluate_table
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.figures.evaluation import eval_figure

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise AnalysisError("--tasks is empty; name lm-eval tasks, e.g. fixedid_ioi,fixedid_lastword")
    named = parse_checkpoints(args.ckpt)
    paths = list(named.values())
    out = output_dir(args, "eval", named)
    names = list(named)
    frames, raw = [], {}
    for variant, path in zip(names, paths):
        df = evaluate_table(path, tasks, limit=args.limit, num_fewshot=args.num_fewshot, batch_size=args.batch_size,
                            include_path=args.include_path, device=args.device, progress=True)
        raw[variant] = df.attrs["lm_eval"]
        frames.append(df.assign(variant=variant))
    df = pd.concat(frames, ignore_index=True)
    df = df[["variant"] + [c for c in df.columns if c != "variant"]]
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "eval.json", json.dumps(raw, indent=1, default=str))
    write_csv(df, out / "eval.csv")
    save_figure(eval_figure(df, title=f"lm-eval, {args.num_fewshot}-shot"), out, "eval")
    print(f"lm-eval, {args.num_fewshot}-shot" + (f", at most {args.limit} documents per task" if args.limit else "")
          + ":")
    for (variant, task), g in df.groupby(["variant", "task"], sort=False):
        cells = ", ".join(f"{r.metric} {r.value:.3f}" + (f" +- {1.96 * r.stderr:.3f}" if r.stderr == r.stderr else "")
                          + (f" (study, canonical: {r.study_canonical:.4f})" if r.study_canonical == r.study_canonical
                             else "") for r in g.itertuples())
        print(f"  {variant} {task} (n={int(g.n.iloc[0]) if g.n.iloc[0] == g.n.iloc[0] else '?'}): {cells}")
    print(f"wrote {out / 'eval.csv'}, {out / 'eval.json'} and {out / 'eval.png'} (+ .pdf)")
    return 0

"""``eval``: lm-eval tasks through the ``fixedid`` model (:mod:`analysis.evaluation.lmeval`); the study's ``eval``
measurement."""

from __future__ import annotations

import json

from analysis.evaluation.lmeval import BUILTIN_TASKS
from analysis.specs import types
from analysis.specs.base import Measure, Param, Result, Spec


def evaluate(model, *, tasks, limit, num_fewshot, batch_size, include_path, progress=False) -> Result:
    """One checkpoint's lm-eval results: the tidy table and lm-eval's own record."""
    from analysis.evaluation.lmeval import evaluate_table

    df = evaluate_table(model, list(tasks), limit=limit, num_fewshot=num_fewshot, batch_size=batch_size,
                        include_path=include_path, progress=progress)
    return Result(tables={"eval": df}, records={"eval": json.loads(json.dumps(df.attrs["lm_eval"], default=str))})


def eval_figure(result: Result):
    from analysis.figures.evaluation import eval_figure as draw

    return draw(result.tables["eval"], title=f"lm-eval, {result.params['num_fewshot']}-shot")


def summarize(result: Result) -> str:
    p, df = result.params, result.tables["eval"]
    lines = [f"lm-eval, {p['num_fewshot']}-shot" + (f", at most {p['limit']} documents per task" if p["limit"]
                                                     else "") + ":"]
    for (variant, task), g in df.groupby(["variant", "task"], sort=False):
        cells = ", ".join(f"{r.metric} {r.value:.3f}" + (f" +- {1.96 * r.stderr:.3f}" if r.stderr == r.stderr else "")
                          + (f" (study, canonical: {r.study_canonical:.4f})" if r.study_canonical == r.study_canonical
                             else "") for r in g.itertuples())
        lines.append(f"  {variant} {task} (n={int(g.n.iloc[0]) if g.n.iloc[0] == g.n.iloc[0] else '?'}): {cells}")
    return "\n".join(lines)


def measure(model, reference, sizes):
    """The built-in tasks' lm-eval values on ``sizes.eval_limit`` documents each (no bootstrap: values only)."""
    from analysis.evaluation.lmeval import evaluate_table
    from analysis.specs.rows import rows

    t = evaluate_table(model, limit=sizes.eval_limit, bootstrap_iters=0)
    return rows("eval", [(r.metric, r.task, r.value) for r in t.itertuples()])


SPEC = Spec(
    name="eval", group="evaluation",
    help="lm-eval tasks (the built-in language's, or any lm-eval task whose data loads) through the fixedid model; "
         "JSON and a tidy CSV",
    examples="""
  fixedid-analyze eval --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 \\
      --tasks fixedid_ioi,fixedid_agreement
""",
    params=(
        Param("tasks", tuple(BUILTIN_TASKS), "comma-separated lm-eval task names (default: the built-in language's "
              "four)", type=types.names),
        Param("limit", None, "at most this many documents per task", type=types.positive_int),
        Param("num_fewshot", 0, "few-shot examples (0, as the study)", type=types.nonnegative_int),
        Param("batch_size", 32, "requests per forward", type=types.positive_int),
        Param("include_path", None, "a directory of further lm-eval task YAMLs", metavar="DIR")),
    compute=evaluate,
    figures={"eval": eval_figure},
    summary=summarize,
    library=("analysis.evaluation.lmeval:evaluate_table",),
    measures=(Measure("eval", measure, controls=False),),
)


__all__ = ["SPEC", "evaluate", "measure"]

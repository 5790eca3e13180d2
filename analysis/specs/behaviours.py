"""``behaviours``: held-out accuracy and logit difference on the built-in language's tasks
(:mod:`analysis.evaluation.behaviours`); the study's ``behaviours`` and ``loss`` measurements."""

from __future__ import annotations

from analysis.evaluation.behaviours import CONTROLS, TASKS
from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec


def behaviours(model, *, tasks, n, seed) -> Result:
    """Per task: accuracy and mean logit difference with 95% intervals."""
    from analysis.evaluation.behaviours import behaviour_table

    return Result(tables={"behaviours": behaviour_table(model, tasks, n=n, seed=seed)})


def summarize(result: Result) -> str:
    df = result.tables["behaviours"]
    lines = [f"held-out accuracy (mean logit difference answer - wrong), {int(df.n_pairs.min())}+ pairs per task; "
             "chance is 50%:"]
    for v, g in df.groupby("variant", sort=False):
        lines.append(f"  {v}: " + ", ".join(f"{r.task} {100 * r.accuracy:.0f}% ({r.logit_diff:+.2f})"
                                           for r in g.itertuples()))
    return "\n".join(lines)


def behaviour_figure(result: Result):
    from analysis.figures.evaluation import behaviour_figure

    return behaviour_figure(result.tables["behaviours"])


def measure_behaviours(model, reference, sizes):
    """Accuracy and logit difference per task on 64 pairs, with the per-prompt values for the report's bootstrap."""
    import pandas as pd

    from analysis.evaluation.behaviours import pair_scores, summarize as per_task
    from analysis.specs.rows import rows

    scores = pair_scores(model, n=64)
    t = per_task(scores)
    df = rows("behaviours", [(m, r.task, getattr(r, m)) for r in t.itertuples() for m in ("accuracy", "logit_diff")])
    # per prompt (the same prompts for every seed and variant): the report's bootstrap over seeds and prompts
    df.attrs["items"] = pd.concat([pd.DataFrame({"analysis": "behaviours", "metric": m, "key": scores.task,
                                                 "item": scores.pair, "value": scores[c].astype(float)})
                                   for m, c in (("accuracy", "correct"), ("logit_diff", "logit_diff"))],
                                  ignore_index=True)
    return df


def measure_loss(model, reference, sizes):
    """The validation loss over ``sizes.tokens`` tokens."""
    import torch

    from analysis.corpus import corpus_tokens
    from analysis.specs.rows import rows

    x = corpus_tokens(model, tokens=sizes.tokens)
    with torch.no_grad():
        losses = [float(model(x[i:i + 32], return_type="loss")) * len(x[i:i + 32]) for i in range(0, len(x), 32)]
    return rows("loss", [("val_loss", "validation", sum(losses) / len(x))])


SPEC = Spec(
    name="behaviours", group="evaluation",
    help="held-out accuracy and logit difference on the built-in language's tasks, with 95% intervals",
    examples="""
  fixedid-analyze behaviours --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2
""",
    params=(Param("tasks", TASKS, "comma-separated tasks of the built-in language (add the control "
                  "induction_unlisted: induction on words no training list uses)",
                  type=types.subset_of(TASKS + CONTROLS)),
            Param("n", 64, "held-out pairs per task", type=types.positive_int, option="--n-pairs"),
            shared.seed("seed of the held-out pairs")),
    compute=behaviours,
    figures={"behaviours": behaviour_figure},
    summary=summarize,
    library=("analysis.evaluation.behaviours:behaviour_table",),
    measures=(Measure("behaviours", measure_behaviours, when="all"), Measure("loss", measure_loss, when="all")),
)


__all__ = ["SPEC", "behaviours", "measure_behaviours", "measure_loss"]

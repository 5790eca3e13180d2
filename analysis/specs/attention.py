"""``attention``: every head's attention pattern on one prompt, variants side by side
(:mod:`analysis.readouts.attention`): a table, an offline CircuitsVis page and a static figure."""

from __future__ import annotations

from functools import partial

from analysis.errors import AnalysisError
from analysis.specs import types
from analysis.specs.base import Param, Result, Spec


def check(params: dict) -> None:
    if (params["prompt"] is None) == (params["task"] is None):
        raise AnalysisError("give --prompt TEXT or --task NAME (one of them)")


def _write_page(views, title, path):
    from analysis.interop.circuitsvis_view import write_attention_page

    write_attention_page(views, path, title=title)


def patterns(models, *, prompt, task, pair, heads) -> Result:
    """Every variant's patterns on the one prompt (they must share a tokenizer), and the page of them."""
    from analysis.figures.attention import views_from
    from analysis.readouts.attention import attention_patterns
    from analysis.specs.execute import stacked

    vocabs = {n: m.tokenizer.get_vocab() if getattr(m, "tokenizer", None) else None for n, m in models.items()}
    if len({str(sorted(t.items())) if t else None for t in vocabs.values()}) > 1:
        raise AnalysisError("the checkpoints have different tokenizers: the patterns would not share one prompt")
    frames = {n: attention_patterns(m, prompt, task=task, pair=pair) for n, m in models.items()}
    views = views_from(frames, heads=heads)  # checks the head names before anything is written
    first = next(iter(frames.values()))
    title = "attention: " + "".join(first.attrs["str_tokens"]).strip()
    return Result(tables={"attention": stacked(list(frames.values()), list(frames))},
                  files={"attention.html": partial(_write_page, views, title)},
                  attrs={"frames": frames, "n_heads": len(views[0].head_names)})


def attention_figure(result: Result):
    from analysis.figures.attention import attention_figure as draw

    return draw(result.attrs["frames"], heads=result.params["heads"])


def summarize(result: Result) -> str:
    first = next(iter(result.attrs["frames"].values()))
    return (f"{len(first.attrs['str_tokens'])} tokens, {result.attrs['n_heads']} heads per variant; open "
            "attention.html in a browser")


SPEC = Spec(
    name="attention", group="readouts", joint=True,
    help="attention patterns of every head on one prompt: a CircuitsVis page (offline) and a static figure",
    examples="""
  fixedid-analyze attention --ckpt fixedid-demo/checkpoints/learned \\
      --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --task ioi
  fixedid-analyze attention --ckpt fixedid-demo/checkpoints/gf2 \\
      --prompt "When Mary and John went to the park, John gave" \\
      --heads L1H3,L2H0
""",
    params=(
        Param("prompt", None, "the text to look at (or use --task)"),
        Param("task", None, "a built-in task (ioi, agreement, facts, induction, or the control induction_unlisted): "
              "its clean prompt of --pair"),
        Param("pair", 0, "which of the task's pairs", type=types.nonnegative_int),
        Param("heads", None, "heads for the static figure and the page, e.g. L1H3,L2H0 (default: every head)",
              type=types.names)),
    compute=patterns, check=check,
    figures={"attention": attention_figure},
    summary=summarize,
    library=("analysis.readouts.attention:attention_patterns",),
)


__all__ = ["SPEC", "patterns"]

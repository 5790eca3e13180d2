"""``lens``: the logit lens (:mod:`analysis.readouts.lens`), or beside it the tuned and Jacobian lenses
(:mod:`analysis.readouts.lens_comparison`), of each variant across depth; the study's ``lens`` measurement."""

from __future__ import annotations

from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec


def read_lens(model, *, data, tokens, kind, lens_steps, progress=False) -> Result:
    """The logit lens alone, or the lens comparison of the fitted kinds asked for."""
    fitted = [k for k in dict.fromkeys(kind or ["logit"]) if k != "logit"]
    if fitted:
        from analysis.readouts.lens_comparison import lens_comparison

        df = lens_comparison(model, data, kinds=fitted, tokens=tokens, steps=lens_steps, progress=progress)
    else:
        from analysis.readouts.lens import logit_lens

        df = logit_lens(model, data, tokens=tokens, progress=progress)
    return Result(tables={"lens": df}, attrs={"frame": df, "fitted": fitted})


def lens_figure(result: Result):
    from analysis.figures.output import lens_comparison_figure, lens_figure as logit_figure

    frames = {n: p.attrs["frame"] for n, p in result.parts.items()}
    return (lens_comparison_figure if next(iter(result.parts.values())).attrs["fitted"] else logit_figure)(frames)


def summarize(result: Result) -> str:
    fitted = next(iter(result.parts.values())).attrs["fitted"]
    first = next(iter(result.parts.values())).attrs["frame"].attrs
    lines = [f"{', '.join(['logit'] + fitted)} lens over {first['n_tokens']:,} tokens"
             + (f" (fitted on {first['n_fit_tokens']:,} others)" if fitted else "")
             + ": next-token accuracy by depth (KL to the final distribution in brackets)"]
    for n, part in result.parts.items():
        f = part.attrs["frame"]
        for kind, g in (f.groupby("kind", sort=False) if "kind" in f else [("", f)]):
            lines.append(f"  {n}{' ' + kind if kind else ''}: " + ", ".join(f"{a:.2f} ({k:.2f})"
                                                                           for a, k in zip(g.accuracy, g.kl)))
    return "\n".join(lines)


def measure(model, reference, sizes):
    """The logit lens's next-token accuracy and KL to the final distribution at each depth."""
    from analysis.readouts.lens import logit_lens
    from analysis.specs.rows import rows

    df = logit_lens(model, tokens=sizes.tokens)
    return rows("lens", [(m, f"lens@{r.hook}", getattr(r, m)) for r in df.itertuples() for m in ("accuracy", "kl")])


SPEC = Spec(
    name="lens", group="readouts",
    help="the logit, tuned and Jacobian lenses across depth: accuracy and KL to the final distribution",
    examples="""
  fixedid-analyze lens --kind tuned --kind jacobian --ckpt fixedid-demo/checkpoints/gf2
  fixedid-analyze lens --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2
""",
    params=(
        shared.data(),
        shared.tokens(16_384, "tokens (a fitted lens is fitted on the first half of the sequences and every lens "
                              "read on the second)", low=2),
        Param("kind", None, "logit (the default): the final norm and head at each depth; tuned: an affine translator "
              "per depth fitted to the final distribution; jacobian: TransformerLens's Jacobian lens; repeat to draw "
              "several beside the logit lens", choices=("logit", "tuned", "jacobian"), repeat=True),
        Param("lens_steps", 300, "--kind tuned: Adam steps of the translators' fit", type=types.positive_int)),
    compute=read_lens,
    figures={"lens": lens_figure},
    summary=summarize,
    library=("analysis.readouts.lens:logit_lens",),
    measures=(Measure("lens", measure, when="all"),),
)


__all__ = ["SPEC", "read_lens", "measure"]

"""The verbs that drive the layers above the analyses, as specs of their own: ``demo`` (the main job,
:mod:`analysis.demo`) and ``figures`` (a study's figures redrawn, :mod:`analysis.study.report`)."""

from __future__ import annotations

from pathlib import Path

from analysis.specs.base import Param, Result, Spec


def demo(*, out, overwrite, cache, config) -> Result:
    """Train (or reuse) the three tiny variants, measure them, write the report, link the checkpoints."""
    from analysis.demo.run import run_demo

    run_demo(Path(out), overwrite=overwrite, cache=cache, config=config)
    return Result()


def redraw(*, results) -> Result:
    """Redraw the study's figures into ``results/figures``."""
    from analysis.study.report import redraw as redraw_study

    paths = redraw_study(results)
    return Result(summary=f"redrew {len(paths)} figures (PNG + PDF) in {Path(results) / 'figures'}: "
                  + ", ".join(p.stem for p in paths))


DEMO = Spec(
    name="demo", group="training", models="none", outputs=False,
    help="train the three tiny variants (cached), measure and compare them, and link their checkpoints in "
         "fixedid-demo/checkpoints/",
    examples="""
  fixedid-analyze demo                       # trains once (cached), then writes fixedid-demo/
  fixedid-analyze demo --out demo-again      # the cached variants, analysed again into another folder
""",
    params=(
        Param("out", "fixedid-demo", "where the report, figures and CSVs go, and the links to the three checkpoints "
              "(DIR/checkpoints/<variant>); a non-empty DIR that is not an earlier demo's output is refused unless "
              "--overwrite", metavar="DIR"),
        Param("overwrite", False, "write into a non-empty --out that holds something else", switch=True),
        Param("cache", None, "where trained variants are cached (default $FIXEDID_CACHE or ~/.cache/fixedid)",
              metavar="DIR"),
        Param("config", None, "training config: a TOML file or a packaged config name (default: tiny)")),
    compute=demo,
)

FIGURES = Spec(
    name="figures", group="study", models="none", outputs=False,
    help="redraw every figure of a study directory from its CSVs (no model)",
    examples="""
  cp -r experiments/benchmarks/results/study-tiny my-study    # the committed 5-seed study, from a source checkout
  fixedid-analyze figures --results my-study
""",
    params=(Param("results", None, "a study directory (the --out of fixedid-study); its figures/ folder is "
                  "rewritten", required=True, metavar="DIR"),),
    compute=redraw,
)

#: The command line's own verbs, by name.
TOOLS = {s.name: s for s in (DEMO, FIGURES)}

"""``fixedid-analyze demo``: the main job on the embedded default (:mod:`analysis.demo.run`): train the three tiny
variants (cached), measure and compare them, write ``fixedid-demo/report.md`` with its figures and CSVs, and link
the checkpoints in ``fixedid-demo/checkpoints/<variant>`` for every other verb."""

from __future__ import annotations

import argparse

HELP = ("train the three tiny variants (cached), measure and compare them, and link their checkpoints in "
        "fixedid-demo/checkpoints/")
EXAMPLES = """
  fixedid-analyze demo                       # trains once (cached), then writes fixedid-demo/
  fixedid-analyze demo --out demo-again      # the cached variants, analysed again into another folder
"""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="fixedid-demo", metavar="DIR", help="where the report, figures and CSVs go, and "
                   "the links to the three checkpoints (DIR/checkpoints/<variant>) (default fixedid-demo); a "
                   "non-empty DIR that is not an earlier demo's output is refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="write into a non-empty --out that holds something else")
    p.add_argument("--cache", help="where trained variants are cached (default $FIXEDID_CACHE or ~/.cache/fixedid)")
    p.add_argument("--config", help="training config: a TOML file or a packaged config name (default: tiny)")


def run(args) -> int:
    from analysis.demo.run import run_demo

    return run_demo(args)

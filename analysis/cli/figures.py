"""``fixedid-analyze figures``: every figure of a study directory redrawn from its CSVs (no model)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "redraw every figure of a study directory from its CSVs (no model)"
EXAMPLES = """
  cp -r experiments/benchmarks/results/study-tiny my-study    # the committed 5-seed study, from a source checkout
  fixedid-analyze figures --results my-study
"""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", required=True, metavar="DIR", help="a study directory (the --out of fixedid-study); its figures/ "
                   "folder is rewritten")


def run(args) -> int:
    from analysis.study.report import redraw

    paths = redraw(args.results)
    print(f"redrew {len(paths)} figures (PNG + PDF) in {Path(args.results) / 'figures'}: "
          + ", ".join(p.stem for p in paths))
    return 0

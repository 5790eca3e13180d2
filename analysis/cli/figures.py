"""``fixedid-analyze figures``: every figure of a study directory redrawn from its CSVs (no model)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "redraw every figure of a study directory from its CSVs (no model)"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", required=True, help="a study directory (python -m experiments.study --out)")


def run(args) -> int:
    from analysis.study.report import redraw

    paths = redraw(args.results)
    print(f"redrew {len(paths)} figures (PNG + PDF) in {Path(args.results) / 'figures'}: "
          + ", ".join(p.stem for p in paths))
    return 0

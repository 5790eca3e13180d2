"""``fixedid-analyze demo``: the main job on the embedded default (:mod:`analysis.demo`)."""

from __future__ import annotations

import argparse

HELP = "train the three tiny variants (or use the cache) and compare IOI patching"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="fixedid-demo", help="where the figures and report.md go")
    p.add_argument("--cache", help="where trained variants are cached (default $FIXEDID_CACHE or ~/.cache/fixedid)")
    p.add_argument("--config", help="training config: a TOML file or a packaged config name (default: tiny)")


def run(args) -> int:
    from analysis.demo.run import run_demo

    return run_demo(args)

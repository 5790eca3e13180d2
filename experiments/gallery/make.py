"""The figures the documentation shows: one per how-to page, each drawn by the command the page shows beside it.

Runs every command below from the repository root on the demo's checkpoints (``fixedid-analyze demo`` first, so
``fixedid-demo/checkpoints/`` exists), or copies a committed results figure where the page's figure is one, and
writes ``docs/figures/<page>.png`` with ``docs/figures/sources.json`` (page -> command, the figure it drew, and
where the rest of the run's output was). Usage: python experiments/gallery/make.py [--only PAGE]. A docs test
checks that every how-to page shows its figure next to its command.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "figures"
CK = "fixedid-demo/checkpoints"
#: page -> (command, the PNG it writes, relative to its --out or to the repository root for committed results)
FIGURES = {
    "patching": (f"fixedid-analyze patching --ckpt {CK}/canonical --task ioi", "patching.png"),
    "circuits": (f"fixedid-analyze circuit --ckpt {CK}/gf2 --task ioi --k 24", "faithfulness.png"),
    "interventions-recoding": (f"fixedid-analyze recoding --ckpt {CK}/canonical --ckpt {CK}/gf2 --draws 2",
                               "recoding.png"),
    "probes-erasure": (f"fixedid-analyze probes --ckpt {CK}/gf2 --targets canonical_bits,xor --tokens 4096",
                       "probes.png"),
    "similarity-lens": (f"fixedid-analyze lens --ckpt {CK}/learned --ckpt {CK}/canonical --ckpt {CK}/gf2",
                        "lens.png"),
    "evaluation": (f"fixedid-analyze behaviours --ckpt {CK}/learned --ckpt {CK}/canonical --ckpt {CK}/gf2",
                   "behaviours.png"),
    "interop": (f"fixedid-analyze attention --ckpt {CK}/learned --ckpt {CK}/gf2 --task ioi --heads L1H0,L2H3,L3H1",
                "attention.png"),
    "plugins": (f"fixedid-analyze norms --ckpt {CK}/learned --ckpt {CK}/canonical --ckpt {CK}/gf2", "norms.png"),
    "features": ("python experiments/features/survey.py", "experiments/features/results/features_code.png"),
    "model-diffing": ("python experiments/crosscoders/survey.py", "experiments/crosscoders/results/ternary.png"),
    "scale-gpus": ("python experiments/benchmarks/scale.py", "experiments/benchmarks/results/scale.png"),
    "training": ("fixedid-analyze figures --results experiments/benchmarks/results/study-tiny",
                 "experiments/benchmarks/results/study-tiny/figures/training.png"),
    "study": ("fixedid-analyze figures --results experiments/benchmarks/results/study-tiny-confirmatory",
              "experiments/benchmarks/results/study-tiny-confirmatory/figures/comparisons.png"),
}


def run(page: str, command: str, figure: str) -> None:
    """Draw (or copy) one page's figure into docs/figures/."""
    if "/" in figure:  # a committed results figure, named from the repository root
        src = ROOT / figure
    else:
        out = Path(tempfile.mkdtemp(prefix=f"gallery-{page}-"))
        env = dict(os.environ, MPLBACKEND="Agg")
        if page == "plugins":  # the example plugin, installed beside the project for this run only
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", "--target", str(out / "site"), str(ROOT / "examples" / "plugin")], check=True)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(out / "site"), env.get("PYTHONPATH")]))
        words = shlex.split(command)
        exe = Path(sys.executable).parent / words[0]
        subprocess.run([str(exe), *words[1:], "--out", str(out / "run"), "--device", "cpu"], cwd=ROOT, check=True,
                       env=env, stdout=subprocess.DEVNULL)
        src = out / "run" / figure
    if not src.is_file():
        written = sorted(p.name for p in src.parent.glob("*.png"))
        sys.exit(f"{page}: {command} wrote no {figure} (it wrote {written})")
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = OUT / f".{page}.png.tmp"
    shutil.copyfile(src, tmp)
    tmp.replace(OUT / f"{page}.png")


def main(argv=None) -> None:
    from fixedid.clitools import ArgumentParser  # bad input: one line, exit 2

    p = ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=sorted(FIGURES))
    args = p.parse_args(argv)
    for page, (command, figure) in FIGURES.items():
        if args.only in (None, page):
            print(f"{page}: {command}", flush=True)
            run(page, command, figure)
    sources = {page: {"command": c, "figure": Path(f).name} for page, (c, f) in FIGURES.items()}
    (OUT / "sources.json").write_text(json.dumps(sources, indent=1) + "\n")


if __name__ == "__main__":
    main()

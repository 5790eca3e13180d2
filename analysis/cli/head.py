"""``fixedid-analyze head``: the geometry of each variant's output head.

    fixedid-analyze head --ckpt runs/tiny/learned --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2

Writes ``head.csv`` (variant x measure: R^2 of the head rows from code bits, and against the learned variant's
input table CKA and nearest-neighbour overlap) and ``head.png``/``.pdf``. The learned checkpoint among ``--ckpt``
is the reference unless ``--reference`` names one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.cli.args import checkpoint_dirs, stacked, variant_names
from analysis.errors import AnalysisError

HELP = "the output head's geometry: R^2 from code bits, similarity to the learned input table"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat to compare variants")
    p.add_argument("--reference", help="a learned-interface checkpoint whose input table the heads are compared "
                   "with (default: the learned one among --ckpt)")
    p.add_argument("--k", type=int, default=10, help="nearest neighbours compared (default 10)")
    p.add_argument("--out", help="output directory (default: analysis-out/head)")


def run(args) -> int:
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.figures.output import head_figure
    from analysis.readouts.head import head_geometry
    from analysis.loading import load

    if args.k < 1:
        raise AnalysisError("--k must be positive")
    paths = checkpoint_dirs(args.ckpt)
    models = {n: load(p) for n, p in zip(variant_names(paths), paths)}
    if args.reference:
        reference = load(checkpoint_dirs([args.reference])[0])
        if reference.cfg.is_fixed:
            raise AnalysisError(f"--reference {args.reference} is a fixed-code checkpoint; name a learned one")
    else:
        reference = next((m for m in models.values() if not m.cfg.is_fixed), None)
    df = stacked([head_geometry(m, reference, k=args.k).assign(variant=n) for n, m in models.items()])
    out = Path(args.out) if args.out else Path("analysis-out") / "head"
    write_csv(df, out / "head.csv")
    save_figure(head_figure(df), out, "head")
    print("output head geometry:" + ("" if reference is not None else " (no learned reference: R^2 only)"))
    for n, g in df.groupby("variant", sort=False):
        cells = ", ".join(f"{r.measure} ({r.basis}) {r.value:.3f}" for r in g.itertuples()
                          if r.measure != "nn_overlap_chance")
        print(f"  {n}: {cells}")
    print(f"wrote {out / 'head.csv'} and {out / 'head.png'} (+ .pdf)")
    return 0

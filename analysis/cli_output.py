"""``fixedid-analyze lens`` and ``fixedid-analyze head``: the output side of each variant.

    fixedid-analyze lens --ckpt runs/tiny/learned --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2
    fixedid-analyze head --ckpt runs/tiny/learned --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2

``lens`` writes ``lens.csv`` (variant x depth: next-token accuracy, loss and KL to the final distribution, with 95%
intervals over sequences) and ``lens.png``/``.pdf``; ``head`` writes ``head.csv`` (variant x measure: R^2 of the
head rows from code bits, and against the learned variant's input table CKA and nearest-neighbour overlap) and
``head.png``/``.pdf``. The learned checkpoint among ``--ckpt`` is the reference unless ``--reference`` names one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .cli_interventions import checkpoint_dirs, stacked, variant_names
from .errors import AnalysisError


def add_lens_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat to compare variants")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens (default 16384)")
    p.add_argument("--out", help="output directory (default: analysis-out/lens)")


def add_head_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat to compare variants")
    p.add_argument("--reference", help="a learned-interface checkpoint whose input table the heads are compared "
                   "with (default: the learned one among --ckpt)")
    p.add_argument("--k", type=int, default=10, help="nearest neighbours compared (default 10)")
    p.add_argument("--out", help="output directory (default: analysis-out/head)")


def run_lens(args) -> int:
    from .figures import save_figure, write_csv
    from .lens import lens_figure, logit_lens
    from .model import load

    paths = checkpoint_dirs(args.ckpt)
    if args.tokens < 2:
        raise AnalysisError("--tokens must be at least 2")
    frames = {n: logit_lens(load(p), args.data, tokens=args.tokens, progress=True)
              for n, p in zip(variant_names(paths), paths)}
    df = stacked([f.assign(variant=n) for n, f in frames.items()])
    out = Path(args.out) if args.out else Path("analysis-out") / "lens"
    write_csv(df, out / "lens.csv")
    save_figure(lens_figure(frames), out, "lens")
    print(f"logit lens over {next(iter(frames.values())).attrs['n_tokens']:,} tokens: next-token accuracy by depth "
          "(KL to the final distribution in brackets)")
    for n, f in frames.items():
        print(f"  {n}: " + ", ".join(f"{a:.2f} ({k:.2f})" for a, k in zip(f.accuracy, f.kl)))
    print(f"wrote {out / 'lens.csv'} and {out / 'lens.png'} (+ .pdf)")
    return 0


def run_head(args) -> int:
    from .figures import save_figure, write_csv
    from .head import head_figure, head_geometry
    from .model import load

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

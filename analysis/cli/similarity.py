"""``fixedid-analyze similarity``: linear and debiased CKA between checkpoints, hook point by hook point.

    fixedid-analyze similarity --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2 [--random-init]

Writes ``similarity.csv`` and ``similarity.png``/``.pdf``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.cli.args import checkpoint_dirs
from analysis.errors import AnalysisError

HELP = "linear and debiased CKA between checkpoints, hook point by hook point"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; give two (A, B), or one "
                   "with --random-init")
    p.add_argument("--random-init", action="store_true", help="also compare each checkpoint with its own "
                   "initialisation (the same seed, untrained)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the first checkpoint's validation data)")
    p.add_argument("--tokens", type=int, default=8192, help="tokens to compare on (default 8192)")
    p.add_argument("--out", help="output directory (default: analysis-out/similarity)")


def run(args) -> int:
    import pandas as pd

    from analysis.figures.style import save_figure, short_hook
    from analysis.outputs import write_csv
    from analysis.figures.similarity import cka_figure
    from analysis.loading import load
    from analysis.readouts.similarity import cka_matrix, random_init_twin

    if len(args.ckpt) > 2 or (len(args.ckpt) == 1 and not args.random_init):
        raise AnalysisError("give two checkpoints (--ckpt A --ckpt B), or one with --random-init")
    paths = checkpoint_dirs(args.ckpt)
    models = [load(p) for p in paths]
    names = [p.name for p in paths]
    if len(names) == 2 and names[0] == names[1]:
        names = [str(p) for p in paths]
    pairs = [(f"{names[0]} vs {names[1]}", models[0], models[1])] if len(models) == 2 else []
    if args.random_init:
        pairs += [(f"{n} vs its initialisation", m, random_init_twin(m)) for n, m in zip(names, models)]
    frames = {}
    for label, a, b in pairs:
        frames[label] = cka_matrix(a, b, args.data, tokens=args.tokens, progress=True)
    df = pd.concat([f.assign(comparison=k) for k, f in frames.items()], ignore_index=True)
    df = df[["comparison"] + [c for c in df.columns if c != "comparison"]]
    out = Path(args.out) if args.out else Path("analysis-out") / "similarity"
    write_csv(df, out / "similarity.csv")
    save_figure(cka_figure(frames), out, "similarity")
    n_tok = next(iter(frames.values())).attrs["n_tokens"]
    print(f"debiased linear CKA over {n_tok:,} tokens, same hook point in both (linear CKA in brackets):")
    for label, f in frames.items():
        same = f[f.layer_a == f.layer_b]
        cells = ", ".join(f"{short_hook(h)} {d:.2f} ({c:.2f})"
                          for h, d, c in zip(same.hook_a, same.debiased, same.cka))
        print(f"  {label}: {cells}")
    print(f"wrote {out / 'similarity.csv'} and {out / 'similarity.png'} (+ .pdf)")
    return 0

"""``fixedid-analyze context``: how much each variant leans on context, and on how its text is split.

    fixedid-analyze context --ckpt runs/tiny/learned --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2

Writes ``context_curve.csv`` (loss and accuracy at the same positions with the context cut to k tokens),
``context_shares.csv`` (the loss increase from mean-ablating each layer's attention or MLP output, and its share),
with ``--segmentation`` ``segmentation.csv`` (nats of words written as two smaller pieces instead of one token), and
``context.png``/``.pdf``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.cli.args import checkpoint_dirs, int_list, stacked, variant_names
from analysis.errors import AnalysisError


HELP = "context use: loss with the context cut to k tokens, attention vs MLP ablation shares, alternative segmentations"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat to compare variants")
    p.add_argument("--data", help="a .txt or .jsonl file (.npy for the curve and shares only; default: the "
                   "checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens for the curve and the shares (default 16384)")
    p.add_argument("--ks", default="1,2,4,8,16,32", help="context lengths (default 1,2,4,8,16,32)")
    p.add_argument("--positions", type=int, default=32, help="measured positions per window (default 32)")
    p.add_argument("--segmentation", action="store_true", help="also the cost of alternative segmentations (needs a "
                   "tokenizer with pieces smaller than its words, such as BPE)")
    p.add_argument("--out", help="output directory (default: analysis-out/context)")


def run(args) -> int:
    from analysis.causal.context import component_shares, context_curve, segmentation_cost
    from analysis.figures.context import context_figure
    from analysis.corpus import corpus_texts
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.loading import load

    paths = checkpoint_dirs(args.ckpt)
    ks = int_list(args.ks, "--ks")
    if args.tokens < 2:
        raise AnalysisError("--tokens must be at least 2")
    names = variant_names(paths)
    curves, shares, segs = {}, {}, {}
    for n, p in zip(names, paths):
        m = load(p)
        curves[n] = context_curve(m, args.data, ks=ks, positions=args.positions, tokens=args.tokens, progress=True)
        shares[n] = component_shares(m, args.data, tokens=min(args.tokens, 8192), progress=True)
        if args.segmentation:
            segs[n] = segmentation_cost(m, corpus_texts(m, args.data))
    out = Path(args.out) if args.out else Path("analysis-out") / "context"
    write_csv(stacked([d.assign(variant=n) for n, d in curves.items()]), out / "context_curve.csv")
    write_csv(stacked([d.assign(variant=n) for n, d in shares.items()]), out / "context_shares.csv")
    if segs:
        write_csv(stacked([d.assign(variant=n) for n, d in segs.items()]), out / "segmentation.csv")
    save_figure(context_figure(curves, shares), out, "context")
    print("next-token loss with the context cut to k tokens (whole window in brackets); attention's share of the "
          "ablation loss:")
    for n in names:
        c, s = curves[n], shares[n]
        cells = ", ".join(f"k={int(r.k)} {r.loss:.2f}" for r in c[c.k.notna()].itertuples())
        print(f"  {n}: {cells} ({c[c.k.isna()].loss.iloc[0]:.2f}); attention {s[s.component == 'attn'].share.sum():.2f}")
        if n in segs:
            a = segs[n].attrs
            print(f"    {a['n_words']} words split in two: {a['extra_nats']:+.2f} nats per word "
                  f"[{a['extra_nats_lo']:+.2f}, {a['extra_nats_hi']:+.2f}]")
    print(f"wrote {out / 'context_curve.csv'}, {out / 'context_shares.csv'}" + (", segmentation.csv" if segs else "")
          + f" and {out / 'context.png'} (+ .pdf)")
    return 0

"""``fixedid-analyze erasure``: LEACE erasure of a concept at a hook point, against a random-direction placebo.

    fixedid-analyze erasure --ckpt runs/tiny/gf2 --concept canonical_bit:3 --hook blocks.1.hook_resid_pre

Writes ``erasure.csv`` (per variant: the concept's probe, the loss change and task accuracies with no erasure,
LEACE and each placebo draw) and ``erasure.png``/``.pdf``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.cli.args import checkpoint_dirs, stacked

HELP = "erase a concept at a hook point with LEACE, against a random-direction placebo"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat to compare variants")
    p.add_argument("--concept", required=True, help="what to erase: canonical_bit:I, code_bit:J, xor:I,K, token, "
                   "prev_token or freq_bucket")
    p.add_argument("--hook", default="blocks.1.hook_resid_pre", help="the hook point erased (default "
                   "blocks.1.hook_resid_pre)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens to fit and measure on (default 16384)")
    p.add_argument("--draws", type=int, default=3, help="placebo draws (default 3)")
    p.add_argument("--tasks", default="ioi,agreement", help="built-in tasks measured under erasure ('none' to skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="output directory (default: analysis-out/erasure)")


def run(args) -> int:
    from analysis.causal.erasure import erasure
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.figures.probes import erasure_figure
    from analysis.loading import load

    paths = checkpoint_dirs(args.ckpt)
    tasks = () if args.tasks.strip().lower() == "none" else tuple(t for t in args.tasks.split(",") if t)
    frames = [erasure(load(p), args.concept, args.hook, args.data, tokens=args.tokens, placebo_draws=args.draws,
                      tasks=tasks, seed=args.seed).assign(variant=p.name) for p in paths]
    df = stacked(frames)
    out = Path(args.out) if args.out else Path("analysis-out") / "erasure"
    write_csv(df, out / "erasure.csv")
    save_figure(erasure_figure(df), out, "erasure")
    print(f"LEACE erasure of {args.concept} at {args.hook} ({frames[0].attrs['n_tokens']:,} tokens); placebo: the "
          f"same number of random directions, {args.draws} draws")
    for v, g in df.groupby("variant", sort=False):
        le, pl = g[g.condition == "leace"].iloc[0], g[g.condition == "placebo"]
        none = g[g.condition == "none"].iloc[0]
        print(f"  {v}: probe {none.probe:.2f} -> {le.probe:.2f} (majority {le.majority:.2f}); loss change "
              f"{le.delta_loss:+.3f} [{le.delta_loss_lo:+.3f}, {le.delta_loss_hi:+.3f}] against placebo "
              f"{pl.delta_loss.mean():+.3f} (range {pl.delta_loss.min():+.3f} to {pl.delta_loss.max():+.3f})")
    print(f"wrote {out / 'erasure.csv'} and {out / 'erasure.png'} (+ .pdf)")
    return 0

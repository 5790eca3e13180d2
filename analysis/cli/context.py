"""``fixedid-analyze context``: how much each variant leans on context, and on how its text is split.

    fixedid-analyze context --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2

Writes ``context_curve.csv`` (loss and accuracy at the same positions with the context limited to k tokens, by a
sliding-window attention mask at the true positions - ``mask = window`` - and by keeping only the last k tokens -
``mask = crop``; :func:`analysis.causal.context.context_curve`), ``context_effects.csv`` (the loss increase, nats with
95% intervals over windows, when each layer's attention or MLP output, all attention, all MLP, or both are replaced
by those of other windows, and the interaction terms; :func:`analysis.causal.components.component_effects`), with
``--segmentation`` ``segmentation.csv`` (nats of words written as two smaller pieces instead of one token), and
``context.png``/``.pdf``.
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, int_list, output_dir, parse_checkpoints, stacked
from analysis.errors import AnalysisError


HELP = ("context use: loss with the context limited to k tokens (window mask / crop), attention and MLP ablations "
        "from other windows with their interactions, alternative segmentations")
EXAMPLES = """
  fixedid-analyze context --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2 --tokens 4096
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--data", help="a .txt or .jsonl file (.npy for the curve and ablations only; default: the "
                   "checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens for the curve and the ablations (default 16384; "
                   "the ablations use at most 8192)")
    p.add_argument("--ks", default="1,2,4,8,16,32", help="context lengths (default 1,2,4,8,16,32)")
    p.add_argument("--positions", type=int, default=32, help="measured positions per window (default 32)")
    p.add_argument("--mask", default="window,crop", help="how the context is limited: window (each attention read "
                   "spans the last k positions, true positions), crop (only the last k tokens), or both (default)")
    p.add_argument("--ablation", default="resample", help="resample (another window's output at the same position; "
                   "default) or mean (the per-position mean over a disjoint half of the windows)")
    p.add_argument("--draws", type=int, default=1, help="resample pairings averaged per window (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the pairing or the split (default 0)")
    p.add_argument("--segmentation", action="store_true", help="also the cost of alternative segmentations (needs a "
                   "tokenizer with pieces smaller than its words, such as BPE)")
    add_out(p)


def run(args) -> int:
    from analysis.causal.components import HOWS, component_effects
    from analysis.causal.context import MASKS, context_curve, segmentation_cost
    from analysis.figures.context import context_figure
    from analysis.corpus import corpus_texts
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.loading import load

    named = parse_checkpoints(args.ckpt)
    paths = list(named.values())
    out = output_dir(args, "context", named)
    ks = int_list(args.ks, "--ks")
    masks = [m.strip() for m in args.mask.split(",") if m.strip()]
    if not masks or any(m not in MASKS for m in masks):
        raise AnalysisError(f"--mask must be one or more of {', '.join(MASKS)} (comma-separated), got {args.mask!r}")
    if args.ablation not in HOWS:
        raise AnalysisError(f"--ablation must be one of {', '.join(HOWS)}, got {args.ablation!r}")
    if args.draws < 1 or (args.ablation == "mean" and args.draws != 1):
        raise AnalysisError("--draws must be a positive integer, and 1 with --ablation mean")
    if args.tokens < 2:
        raise AnalysisError("--tokens must be at least 2")
    names = list(named)
    curves, effects, segs = {}, {}, {}
    for n, p in zip(names, paths):
        m = load(p)
        curves[n] = context_curve(m, args.data, ks=ks, positions=args.positions, tokens=args.tokens, mask=masks,
                                  progress=True)
        effects[n] = component_effects(m, args.data, how=args.ablation, draws=args.draws, seed=args.seed,
                                       tokens=min(args.tokens, 8192), progress=True)
        if args.segmentation:
            segs[n] = segmentation_cost(m, corpus_texts(m, args.data))
    write_csv(stacked([d.assign(variant=n) for n, d in curves.items()]), out / "context_curve.csv")
    write_csv(stacked([d.assign(variant=n) for n, d in effects.items()]), out / "context_effects.csv")
    if segs:
        write_csv(stacked([d.assign(variant=n) for n, d in segs.items()]), out / "segmentation.csv")
    save_figure(context_figure(curves, effects), out, "context")
    print("next-token loss with the context limited to k tokens (whole window in brackets); loss increase (nats, "
          f"95% interval over windows) from {args.ablation} ablation of attention and MLP:")
    for n in names:
        c, e = curves[n], effects[n].set_index("effect")
        whole = c[c["mask"] == "none"].loss.iloc[0]
        for mask in masks:
            cells = ", ".join(f"k={int(r.k)} {r.loss:.2f}" for r in c[c["mask"] == mask].itertuples())
            print(f"  {n} {mask}: {cells} ({whole:.2f})")
        cells = "; ".join(f"{eff} {e.delta_loss[eff]:+.3f} [{e.delta_loss_lo[eff]:+.3f}, {e.delta_loss_hi[eff]:+.3f}]"
                          for eff in ("all attn", "all mlp", "all attn + all mlp", "attn x mlp"))
        print(f"  {n} ablation: {cells}")
        if n in segs:
            a = segs[n].attrs
            print(f"    {a['n_words']} words split in two: {a['extra_nats']:+.2f} nats per word "
                  f"[{a['extra_nats_lo']:+.2f}, {a['extra_nats_hi']:+.2f}]")
    print(f"wrote {out / 'context_curve.csv'}, {out / 'context_effects.csv'}" + (", segmentation.csv" if segs else "")
          + f" and {out / 'context.png'} (+ .pdf)")
    return 0

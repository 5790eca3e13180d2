"""``fixedid-analyze lens``: the logit lens (``--kind logit``), or beside it the tuned lens (``--kind tuned``,
:mod:`analysis.readouts.tuned_lens`) and the Jacobian lens (``--kind jacobian``, :mod:`analysis.readouts.jacobian_lens`),
of each variant across depth (:mod:`analysis.readouts.lens_comparison`).

    fixedid-analyze lens --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2

Writes ``lens.csv`` (variant x depth, and ``kind`` with a fitted lens: next-token accuracy, loss and KL to the
final distribution, with 95% intervals over sequences) and ``lens.png``/``.pdf``.
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints, stacked
from analysis.errors import AnalysisError

HELP = "the logit, tuned and Jacobian lenses across depth: accuracy and KL to the final distribution"
EXAMPLES = """
  fixedid-analyze lens --kind tuned --kind jacobian --ckpt fixedid-demo/checkpoints/gf2
  fixedid-analyze lens --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens (default 16384; a fitted lens is fitted on the "
                   "first half of the sequences and every lens read on the second)")
    p.add_argument("--kind", action="append", choices=("logit", "tuned", "jacobian"), help="logit (the default): "
                   "the final norm and head at each depth; tuned: an affine translator per depth fitted to the final "
                   "distribution; jacobian: TransformerLens's Jacobian lens; repeat to draw several beside the logit "
                   "lens")
    p.add_argument("--lens-steps", type=int, default=300, help="--kind tuned: Adam steps of the translators' fit "
                   "(default 300)")
    add_out(p)


def run(args) -> int:
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.figures.output import lens_figure
    from analysis.readouts.lens import logit_lens
    from analysis.loading import load

    named = parse_checkpoints(args.ckpt)
    paths = list(named.values())
    out = output_dir(args, "lens", named)
    if args.tokens < 2:
        raise AnalysisError("--tokens must be at least 2")
    if args.lens_steps < 1:
        raise AnalysisError(f"--lens-steps {args.lens_steps} must be at least 1")
    fitted = [k for k in dict.fromkeys(args.kind or ["logit"]) if k != "logit"]
    if fitted:
        from analysis.figures.output import lens_comparison_figure
        from analysis.readouts.lens_comparison import lens_comparison

        frames = {n: lens_comparison(load(p), args.data, kinds=fitted, tokens=args.tokens, steps=args.lens_steps,
                                     progress=True) for n, p in zip(named, paths)}
        fig = lens_comparison_figure(frames)
    else:
        frames = {n: logit_lens(load(p), args.data, tokens=args.tokens, progress=True)
                  for n, p in zip(named, paths)}
        fig = lens_figure(frames)
    df = stacked([f.assign(variant=n) for n, f in frames.items()])
    write_csv(df, out / "lens.csv")
    save_figure(fig, out, "lens")
    first = next(iter(frames.values())).attrs
    print(f"{', '.join(['logit'] + fitted)} lens over {first['n_tokens']:,} tokens"
          + (f" (fitted on {first['n_fit_tokens']:,} others)" if fitted else "")
          + ": next-token accuracy by depth (KL to the final distribution in brackets)")
    for n, f in frames.items():
        for kind, g in (f.groupby("kind", sort=False) if "kind" in f else [("", f)]):
            print(f"  {n}{' ' + kind if kind else ''}: " + ", ".join(f"{a:.2f} ({k:.2f})"
                                                                     for a, k in zip(g.accuracy, g.kl)))
    print(f"wrote {out / 'lens.csv'} and {out / 'lens.png'} (+ .pdf)")
    return 0



"""``fixedid-analyze lens``: the logit lens of each variant across depth.

    fixedid-analyze lens --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2

Writes ``lens.csv`` (variant x depth: next-token accuracy, loss and KL to the final distribution, with 95%
intervals over sequences) and ``lens.png``/``.pdf``.
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints, stacked
from analysis.errors import AnalysisError

HELP = "the logit lens across depth: accuracy and KL to the final distribution, variants side by side"
EXAMPLES = """
  fixedid-analyze lens --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens (default 16384)")
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
    frames = {n: logit_lens(load(p), args.data, tokens=args.tokens, progress=True)
              for n, p in zip(named, paths)}
    df = stacked([f.assign(variant=n) for n, f in frames.items()])
    write_csv(df, out / "lens.csv")
    save_figure(lens_figure(frames), out, "lens")
    print(f"logit lens over {next(iter(frames.values())).attrs['n_tokens']:,} tokens: next-token accuracy by depth "
          "(KL to the final distribution in brackets)")
    for n, f in frames.items():
        print(f"  {n}: " + ", ".join(f"{a:.2f} ({k:.2f})" for a, k in zip(f.accuracy, f.kl)))
    print(f"wrote {out / 'lens.csv'} and {out / 'lens.png'} (+ .pdf)")
    return 0



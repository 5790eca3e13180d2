"""``fixedid-analyze erasure``: LEACE erasure of a concept at hook points, against a placebo of LEACE erasures of
matched control concepts, fitted on some sequences and measured on others.

    fixedid-analyze erasure --ckpt fixedid-demo/checkpoints/gf2 --concept canonical_bit:3 --hook blocks.1.hook_resid_pre
    fixedid-analyze erasure --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/gf2 --concept canonical_bit:2 --by-depth

Writes ``erasure.csv`` (per variant, concept and hook point: the concept's probe, the edit's rank and size, the loss
change and task accuracies with no erasure, LEACE and each placebo draw, and on the LEACE rows the estimand
``minus_placebo`` with its 95% interval over held-out sequences), ``erasure_sequences.csv`` (the per-sequence
losses behind the intervals) and ``erasure.png``/``.pdf`` (by depth).
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints, stacked

HELP = "erase a concept at hook points with LEACE, against a placebo of matched control concepts"
EXAMPLES = """
  fixedid-analyze erasure --ckpt fixedid-demo/checkpoints/gf2 --concept canonical_bit:3 \\
      --hook blocks.1.hook_resid_pre
  fixedid-analyze erasure --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/gf2 \\
      --concept canonical_bit:2 --by-depth
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--concept", required=True, action="append", help="what to erase: canonical_bit:I (every "
                   "variant), code_bit:J (the model's own code), xor:I,K, token, prev_token or freq_bucket; repeat "
                   "for several")
    p.add_argument("--hook", action="append", help="a hook point erased; repeat for several (default "
                   "blocks.1.hook_resid_pre)")
    p.add_argument("--by-depth", action="store_true", help="erase at every hook point of the residual stream "
                   "(instead of --hook)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens to fit and measure on (default 16384)")
    p.add_argument("--test-fraction", type=float, default=0.5, help="share of the sequences held out for "
                   "measurement; the eraser is fitted on the rest (default 0.5)")
    p.add_argument("--draws", type=int, default=3, help="placebo draws (default 3)")
    p.add_argument("--tasks", default="ioi,agreement", help="built-in tasks measured under erasure ('none' to skip)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of the placebo draws (default 0)")
    add_out(p)


def run(args) -> int:
    from analysis.causal.erasure import erasure_tables, resid_hooks
    from analysis.errors import AnalysisError
    from analysis.figures.erasure import erasure_depth_figure
    from analysis.figures.style import save_figure
    from analysis.loading import load
    from analysis.outputs import write_csv

    if args.by_depth and args.hook:
        raise AnalysisError("give either --hook or --by-depth, not both")
    named = parse_checkpoints(args.ckpt)
    paths = list(named.values())
    out = output_dir(args, "erasure", named)
    names = list(named)
    tasks = () if args.tasks.strip().lower() == "none" else tuple(t for t in args.tasks.split(",") if t)
    tables, seqs = [], []
    for path, name in zip(paths, names):
        model = load(path)
        hooks = resid_hooks(model) if args.by_depth else (args.hook or ["blocks.1.hook_resid_pre"])
        df, per_seq = erasure_tables(model, args.concept, hooks, args.data, tokens=args.tokens,
                                     placebo_draws=args.draws, tasks=tasks, seed=args.seed,
                                     test_fraction=args.test_fraction, progress=True)
        tables.append(df.assign(variant=name))
        seqs.append(per_seq.assign(variant=name))
    df, per_seq = stacked(tables), stacked(seqs)
    write_csv(df, out / "erasure.csv")
    write_csv(per_seq, out / "erasure_sequences.csv")
    save_figure(erasure_depth_figure(df), out, "erasure")
    first = df.iloc[0]
    print(f"LEACE erasure of {', '.join(args.concept)}: fitted on {first.n_fit_sequences} sequences, measured on "
          f"{first.n_test_sequences} others ({tables[0].attrs['n_tokens']:,} tokens); placebo: LEACE of a random "
          f"type-level concept with the same label distribution, {args.draws} draws")
    for (v, concept, hook), g in df.groupby(["variant", "concept", "hook"], sort=False):
        le, pl = g[g.condition == "leace"].iloc[0], g[g.condition == "placebo"]
        none = g[g.condition == "none"].iloc[0]
        print(f"  {v} {concept} at {hook}: probe {none.probe:.2f} -> {le.probe:.2f} (majority {le.majority:.2f}); "
              f"rank {le['rank']}, edit {le.edit_norm:.3g} against placebo {pl.edit_norm.mean():.3g}; loss change "
              f"{le.delta_loss:+.3f} against placebo {pl.delta_loss.mean():+.3f}; LEACE minus placebo "
              f"{le.minus_placebo:+.3f} [{le.minus_placebo_lo:+.3f}, {le.minus_placebo_hi:+.3f}]")
    print(f"wrote {out / 'erasure.csv'}, {out / 'erasure_sequences.csv'} and {out / 'erasure.png'} (+ .pdf)")
    return 0

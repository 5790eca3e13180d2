"""``fixedid-analyze probes``: linear probes across depth with their controls, for one or several checkpoints.

    fixedid-analyze probes --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --targets canonical_bits,xor,token

Writes ``probes.csv`` (one row per variant x hook point x target x split: score, majority baseline, lexical
baseline, control task, selectivity, shuffled labels, random-init model, the C chosen and whether the fits
converged; see :mod:`analysis.readouts.probes`), ``probes.png``/``.pdf`` (score against depth per target group,
variants side by side on the same axes, with the control-task or lexical-baseline and random-init curves),
``probes_selectivity.png``/``.pdf`` (what a probe earns beyond its reference: selectivity for type-level targets,
score minus the lexical baseline for contextual labels), ``probes_types.png``/``.pdf`` (type-level targets on
held-out sequences and on held-out token types) and, with XOR targets, ``probes_xor.png``/``.pdf`` (the XOR probes
by coset-minimal GF(2) weight).
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints, stacked
from analysis.errors import AnalysisError

DEFAULT_TARGETS = "canonical_bits,xor,perm_bits,token,prev_token,position"
LABELS = "pos_tag,number,depth,ioi_role,fact_entity"


HELP = "linear probes across depth with control task, lexical, shuffled-label and random-init baselines"
EXAMPLES = """
  fixedid-analyze probes --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 \\
      --targets canonical_bits,xor,token
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--targets", help=f"comma-separated target families (default {DEFAULT_TARGETS}, plus the latent "
                   f"labels {LABELS} without --data; also code_bits, freq_bucket)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens to probe on (default 16384)")
    p.add_argument("--top-k", type=int, default=32, help="token-identity probes: the K most frequent tokens")
    p.add_argument("--xor-pairs", type=int, default=8, help="random pairs of canonical bits to XOR (default 8)")
    p.add_argument("--C", type=float, help="fix the inverse L2 strength of the probes (default: chosen per target "
                   "by 3-fold cross-validation over the training sequences on 0.01, 0.1, 1, 10, 100)")
    p.add_argument("--no-type-split", action="store_true", help="skip the held-out-token-types split")
    p.add_argument("--no-random-init", action="store_true", help="skip the random-init baseline")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits, the controls and the XOR pairs")
    add_out(p)


def run(args) -> int:
    from analysis.readouts.activations import collect
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.loading import load
    from analysis.figures.probes import (probe_figure, selectivity_figure, target_group, type_split_figure,
                                         xor_figure)
    from analysis.readouts.probes import TARGET_FAMILIES, baseline_activations, probe_table

    text = args.targets or (DEFAULT_TARGETS + ("," + LABELS if args.data is None else ""))
    families = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in families if f not in TARGET_FAMILIES]
    if unknown or not families:
        raise AnalysisError(f"unknown probe target(s) {unknown or '(none)'}; use {', '.join(TARGET_FAMILIES)}")
    if args.top_k < 2 or args.xor_pairs < 0 or (args.C is not None and not args.C > 0):
        raise AnalysisError("--top-k must be >= 2, --xor-pairs >= 0 and --C > 0")
    named = parse_checkpoints(args.ckpt)
    paths = list(named.values())
    out = output_dir(args, "probes", named)
    models = {p.name: load(p) for p in paths}
    if "code_bits" in families and any(not m.cfg.has_code for m in models.values()):
        raise AnalysisError("code_bits targets need models that read an n-bit code; drop the learned (or "
                            "frozen_random) checkpoint or the target")
    splits = ("sequence",) if args.no_type_split else ("sequence", "type")
    frames = []
    for name, model in models.items():
        acts = collect(model, args.data, tokens=args.tokens, progress=True)  # the latent labels without --data
        base = None if args.no_random_init else baseline_activations(model, acts)
        df = probe_table(acts, families, baseline=base, top_k=args.top_k, xor_pairs=args.xor_pairs,
                         C="cv" if args.C is None else args.C, splits=splits, seed=args.seed, progress=True)
        frames.append(df.assign(variant=name))
    df = stacked(frames)
    write_csv(df, out / "probes.csv")
    save_figure(probe_figure(df), out, "probes")
    save_figure(selectivity_figure(df), out, "probes_selectivity")
    written = ["probes.csv", "probes.png", "probes_selectivity.png"]
    if (df.split == "type").any():
        save_figure(type_split_figure(df), out, "probes_types")
        written.append("probes_types.png")
    if df.target.str.startswith("xor:").any():
        save_figure(xor_figure(df), out, "probes_xor")
        written.append("probes_xor.png")
    print(f"linear probes over {frames[0].attrs['n_tokens']:,} tokens (test: {frames[0].attrs['n_test']:,}, whole "
          "sequences); mean test score per target group, first / last hook point (in brackets: the control task "
          "for type-level targets, the lexical baseline for contextual labels; 'types': on held-out token types):")
    for (variant, group, split), g in df.assign(group=df.target.map(target_group)).groupby(
            ["variant", "group", "split"], sort=False):
        g = g[g.status == "fitted"]
        if g.empty:
            continue
        first, last = g[g.depth == g.depth.min()], g[g.depth == g.depth.max()]
        ref = "lexical" if (g.level == "context").all() else ("control" if split == "sequence" else "majority")
        print(f"  {variant} {group}{' (types)' if split == 'type' else ''}: {first.score.mean():.2f} "
              f"({first[ref].mean():.2f}) -> {last.score.mean():.2f} ({last[ref].mean():.2f})")
    missed = int((df.converged == False).sum())  # noqa: E712 (NA stays out)
    if missed:
        print(f"  {missed} row(s) rest on a fit that did not converge (column 'converged')")
    print(f"wrote {', '.join(str(out / w) for w in written)} (+ .pdf)")
    return 0

"""Probe fitting and activation collection speed, measured side by side in one run.

1. The fast path of ``analysis.readouts.probes.fit_probes`` (every class target of a hook point in one batched L-BFGS solve,
   ``analysis.readouts.logistic``; scalar targets in closed form) against the anchor a user would write: one scikit-learn
   ``LogisticRegression`` (or ``Ridge``) per target, same ``C`` and standardisation, on the same activations - for
   the binary targets (canonical bits, XORs), for the CLI's default set on data other than the built-in language's
   (bits, XORs, token and previous-token identity among the 32 most frequent, position), and for the multi-class
   targets alone (token, previous token, frequency bucket: the unfavourable case, where batching shares the least).
   Prints the largest accuracy difference between the two (the target: within 0.01) and the time ratio (target >=
   10x).
2. ``analysis.readouts.activations.collect`` against plain forwards over the same token windows (target >= 0.8x tokens/s).

Model: the demo's tiny recipe, untrained, or with ``--ckpt DIR`` a trained checkpoint on its own validation data, which
adds the built-in language's latent labels (part of speech, number, depth, IOI role, fact entity) to the CLI default
set (a trained model's activations can take a solver more steps than an untrained one's). Usage:
python experiments/benchmarks/probes.py [--ckpt DIR] [--tokens 16384] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _models import untrained_tiny  # noqa: E402
from _timing import median_ratio  # noqa: E402

from analysis import load  # noqa: E402
from analysis.readouts.activations import collect  # noqa: E402
from analysis.corpus import corpus_tokens  # noqa: E402
from analysis.readouts.probes import fit_probes, split_by_sequence, targets  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=16_384)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ckpt", help="a trained checkpoint (default: the tiny recipe, untrained, gf2)")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = load(args.ckpt) if args.ckpt else untrained_tiny("gf2")
    x = corpus_tokens(model, tokens=args.tokens)
    hook = "blocks.1.hook_resid_pre"
    acts = collect(model, None, tokens=args.tokens, hooks=[hook]) if args.ckpt else collect(model, x, hooks=[hook])
    a = acts.acts[hook]
    test = split_by_sequence(acts.tokens["seq"].to_numpy())
    print(f"model: {args.ckpt or 'tiny recipe, gf2, untrained'}; {hook}, {len(acts):,} tokens, width {a.shape[1]}, "
          f"median of {args.rounds} interleaved rounds")
    sets = [("binary targets (canonical bits, XORs)", ["canonical_bits", "xor"]),
            ("CLI default (+ token, previous token, position)", ["canonical_bits", "xor", "token", "prev_token",
                                                                 "position"]),
            ("multi-class only (token, previous token, freq bucket)", ["token", "prev_token", "freq_bucket"])]
    if args.ckpt:
        sets.append(("CLI default on the built-in language (+ latent labels)",
                     sets[1][1] + ["pos_tag", "number", "depth", "ioi_role", "fact_entity"]))
    for label, fams in sets:
        tg = targets(acts, fams)
        res = {}
        fns = {"fast": lambda: res.__setitem__("fast", fit_probes(a, tg, test)),
               "sklearn": lambda: res.__setitem__("sklearn", fit_probes(a, tg, test, method="sklearn"))}
        ratio, t = median_ratio(fns, "sklearn", "fast", rounds=args.rounds, warmup=1)
        diff = max(abs(res["fast"][k] - res["sklearn"][k]) for k in res["fast"] if not np.isnan(res["fast"][k]))
        fitted = sum(not np.isnan(v) for v in res["fast"].values())
        print(f"  {label}: {fitted} fitted targets; fast {t['fast']:.2f} s, per-target scikit-learn "
              f"{t['sklearn']:.2f} s: {ratio:.1f}x (target >= 10x); max accuracy difference {diff:.4f}")

    @torch.no_grad()
    def plain():
        for i in range(0, x.shape[0], 64):
            model(x[i:i + 64])

    fns = {"collect": lambda: collect(model, x), "plain": plain}
    ratio, t = median_ratio(fns, "plain", "collect", rounds=args.rounds, warmup=1)
    print(f"  collect (hook_embed, every block's input, final norm) {x.numel() / t['collect']:,.0f} tok/s, plain "
          f"forwards {x.numel() / t['plain']:,.0f} tok/s: {ratio:.2f}x (target >= 0.8x)")


if __name__ == "__main__":
    main()

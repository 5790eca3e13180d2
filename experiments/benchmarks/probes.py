"""Probe fitting and activation collection speed, measured side by side in one run.

1. The fast path of ``analysis.probes.fit_probes`` (every binary target of a hook point in one batched Newton solve)
   against the anchor a user would write: one scikit-learn ``LogisticRegression`` per target, same ``C`` and
   standardisation, on the same activations - for the binary targets (16 canonical bits + 8 XORs) and for the full
   default target set (with the multi-class token-identity targets, which both paths fit with scikit-learn). Prints
   the largest accuracy difference between the two (the target: within 0.01) and the time ratio (target >= 10x).
2. ``analysis.activations.collect`` against plain forwards over the same token windows (target >= 0.8x tokens/s).

Model: the demo's tiny recipe, untrained (the speed of a fit depends on the activations' shape, not their values;
the agreement is checked on them too). Usage: python experiments/benchmarks/probes.py [--tokens 16384] [--rounds 3]
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

from analysis.activations import collect  # noqa: E402
from analysis.corpus import corpus_tokens  # noqa: E402
from analysis.probes import fit_probes, split_by_sequence, targets  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=16_384)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = untrained_tiny("gf2")
    x = corpus_tokens(model, tokens=args.tokens)
    acts = collect(model, x, hooks=["blocks.1.hook_resid_pre"])
    a = acts.acts["blocks.1.hook_resid_pre"]
    test = split_by_sequence(acts.tokens["seq"].to_numpy())
    print(f"model: tiny recipe, gf2, untrained; {len(acts):,} tokens, width {a.shape[1]}, "
          f"median of {args.rounds} interleaved rounds")
    for label, fams in (("binary targets (canonical bits, XORs)", ["canonical_bits", "xor"]),
                        ("default targets (+ token, previous token)", ["canonical_bits", "xor", "token",
                                                                      "prev_token"])):
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

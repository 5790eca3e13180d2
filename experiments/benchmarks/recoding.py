"""Recoding sweep throughput against plain forwards over the same tokens, measured side by side in one run.

A recoding sweep evaluates a model under many GF(2) maps of its code. Its honest anchor is the work it cannot avoid:
one plain forward (with the loss) per map over the same token windows, with the model already loaded and the data
already tokenised. Prints tokens/s of both and their ratio (target >= 0.9x), for the loss-only sweep and for the
sweep that also scores the built-in task pairs (whose prompt tokens are counted as work too), on an untrained
model of the demo's shape (the speed does not depend on the weights). The sweep's one fixed cost per call
(regenerating and tokenising the validation data, tokenising the prompts) is amortised over the maps: measured here,
24 maps gave 0.97-0.99x, 8 maps 0.87-0.97x (run with --maps 8 for the unfavourable case).

Usage: python experiments/benchmarks/recoding.py [--maps 24] [--tokens 32768] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _models import untrained_tiny  # noqa: E402
from _timing import machine_line, median_ratio  # noqa: E402

from analysis.evaluation.behaviours import TASKS, prepare_pairs  # noqa: E402
from analysis.corpus import corpus_tokens  # noqa: E402
from analysis.causal.recoding import recoding_sweep  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--maps", type=int, default=24, help="recodings per sweep")
    p.add_argument("--tokens", type=int, default=32_768)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    torch.manual_seed(0)
    model = untrained_tiny("gf2")
    x = corpus_tokens(model, tokens=args.tokens)
    groups = prepare_pairs(model, TASKS, 64)
    pair_tokens = sum(g.tokens.numel() for g in groups)
    ks = list(range(args.maps))  # transvection walks of 0..maps-1 steps, one draw each

    @torch.no_grad()
    def plain(with_pairs: bool):
        for m in range(args.maps + 1):  # the sweep also measures the unedited model's loss once
            for i in range(0, x.shape[0], 64):
                model(x[i:i + 64], return_type="loss")
            if with_pairs and m:
                for g in groups:
                    model(g.tokens)

    print(f"model: tiny recipe, gf2 interface, {x.numel():,} tokens in {x.shape[0]} windows, {args.maps} maps; "
          f"task pairs add {pair_tokens:,} prompt tokens per map")
    for name, tasks in (("loss only", ()), ("loss + task pairs", TASKS)):
        with_pairs = bool(tasks)
        work = (args.maps + 1) * x.numel() + (args.maps * pair_tokens if with_pairs else 0)
        fns = {"sweep": lambda: recoding_sweep(model, "transvection", ks, draws=1, tokens=args.tokens, tasks=tasks),
               "plain": lambda: plain(with_pairs)}
        ratio, t = median_ratio(fns, "plain", "sweep", rounds=args.rounds, warmup=1)
        print(f"{name:18s} sweep {work / t['sweep']:9,.0f} tok/s   plain forwards {work / t['plain']:9,.0f} tok/s   "
              f"sweep/plain throughput {ratio:.3f}x (target >= 0.9x)")


if __name__ == "__main__":
    main()

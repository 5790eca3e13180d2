"""Does a frozen input make a model pay more for an unusual segmentation, and lean more on context? Over seeds.

The study explains the fixed-code gap by segmentation: a learned table can smooth over how text is split, a frozen
one cannot, so attention must do more. On the sub-word default (``tiny-bpe``: a 768-token BPE, 1% of each training
document's distinct words written in two pieces at a random cut, the same way throughout the document) this trains
(or loads from the demo's cache) the learned, canonical and gf2 variants of each seed and measures, per variant and
seed:

- ``extra_nats``: the nats a word costs when written as two smaller pieces of the tokenizer instead of its one
  token, in the same context (:func:`analysis.causal.context.segmentation_cost`, the first ``--words`` such words of
  the validation text), beside ``default_nats``, the word's cost as one token;
- ``loss k=K``: next-token loss at the same positions when the model sees only the last K tokens, and ``loss
  whole window`` (:func:`analysis.causal.context.context_curve`): how much each variant leans on context.

Prints each measure's mean over seeds with a Student-t 95% interval, and the paired per-seed differences
canonical - learned and gf2 - learned with their t interval (mean +- t x standard error over seeds) and the exact
sign-flip p (with n seeds never below 2 / 2^n). Writes the
long table to ``experiments/benchmarks/results/segmentation-<config>.csv`` (``--no-save`` to skip).

What it cannot show: a higher ``extra_nats`` says the variant assigns the alternative split less probability, which
mixes robustness with how often the two pieces were seen in that role in training (the same for every variant here:
one data order per seed).

Usage: python experiments/benchmarks/segmentation.py [--config tiny-bpe] [--seeds 0,1,2] [--words 400]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import load
from analysis.causal.context import context_curve, segmentation_cost
from analysis.corpus import corpus_texts
from analysis.stats import paired_difference, t_interval
from analysis.study.pipeline import parse_seeds
from analysis.variants import VARIANTS, cache_root, ensure_variants
from fixedid.train.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
KS = (1, 4, 16)


def measure(model, words: int) -> list[tuple[str, float]]:
    seg = segmentation_cost(model, corpus_texts(model), max_words=words)
    curve = context_curve(model, ks=KS, positions=32, tokens=8192, mask=("window", "crop"))
    out = [("default_nats", float(seg.default_nats.mean())), ("split_nats", float(seg.split_nats.mean())),
           ("extra_nats", seg.attrs["extra_nats"])]
    return out + [("loss whole window" if r.mask == "none" else f"loss {r.mask} k={int(r.k)}", float(r.loss))
                  for r in curve.itertuples()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="tiny-bpe", help="a sub-word config (default: tiny-bpe)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--words", type=int, default=400, help="split words measured per checkpoint")
    p.add_argument("--cache", help="where the runs are cached (default: the demo's cache)")
    p.add_argument("--no-save", action="store_true", help="do not write the results CSV")
    args = p.parse_args()
    base = TrainConfig.load(args.config)
    rows = []
    for seed in parse_seeds(args.seeds):
        run = ensure_variants(base.replace_train(seed=seed), cache_root(args.cache))
        for v in VARIANTS:
            rows += [dict(variant=v, seed=seed, measure=k, value=x) for k, x in measure(load(run / v), args.words)]
    df = pd.DataFrame(rows)
    if not args.no_save:
        from analysis.outputs import write_csv

        name = Path(args.config).name.removesuffix(".toml")
        write_csv(df, ROOT / "experiments" / "benchmarks" / "results" / f"segmentation-{name}.csv")
    wide = df.pivot_table(index=["measure", "seed"], columns="variant", values="value")
    print(f"{args.config}, seeds {sorted(int(s) for s in df.seed.unique())}: mean over seeds [95% interval]; paired differences "
          "from learned (exceeds: the interval excludes 0)")
    for measure_, g in wide.groupby(level=0, sort=False):
        cells = []
        for v in VARIANTS:
            m, lo, hi = t_interval(g[v].to_numpy(float))
            cells.append(f"{v} {m:.3f} [{lo:.3f}, {hi:.3f}]" if np.isfinite(lo) else f"{v} {m:.3f}")
        for v in VARIANTS[1:]:
            d = paired_difference(g[v].to_numpy(float), g["learned"].to_numpy(float))
            tag = ("identical on every seed" if d["identical"] else
                   ("interval excludes 0" if d["exceeds"] else "interval includes 0")
                   + f", sign-flip p {d['p_sign']:.2g}")
            cells.append(f"{v} - learned {d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] {tag}")
        print(f"  {measure_}: " + "; ".join(cells))


if __name__ == "__main__":
    main()

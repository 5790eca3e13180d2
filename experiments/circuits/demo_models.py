"""Edge attribution and circuits on the demo recipe's trained variants, seeds 0-2: how well EAP ranks the edges that
exact patching measures, and how much of IOI the top-k edges recover, the tables behind the circuits page's numbers.

For each seed (trained, or reused from the cache as ``fixedid-analyze demo`` caches them) and variant, on ``--pairs``
IOI pairs (pair seed 0), denoising, the normalised logit difference: EAP scores of every edge
(:func:`analysis.causal.edges.edge_attribution`), the exact effect of patching each edge alone
(:func:`analysis.causal.edges.exact_edge_effects`) and their agreement (:func:`analysis.causal.edges.exact_agreement`),
and the faithfulness curve over k = 0, powers of two, 24 and every edge, the other edges ablated to the corrupted
prompt's writes (:func:`analysis.causal.circuits.faithfulness_curve`). Writes ``agreement.csv`` (one row per seed and
variant) and ``faithfulness.csv`` (one row per seed, variant and k, with the curve's area) under ``--out``.

Usage: python experiments/circuits/demo_models.py        (about a minute on 2 CPU cores with the variants cached)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from analysis.causal.circuits import default_ks, faithfulness_curve
from analysis.causal.edges import edge_attribution, exact_agreement, exact_edge_effects
from analysis.loading import load
from analysis.outputs import write_csv
from analysis.tasks import task_pairs
from analysis.variants import VARIANTS, cache_root, ensure_variants
from fixedid.train.config import TrainConfig

HERE = Path(__file__).parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--out", default=str(HERE / "results"))
    args = p.parse_args()
    agreement, curves = [], []
    for s in args.seeds:
        run = ensure_variants(TrainConfig.load("tiny").replace_train(seed=s), cache_root(None), quiet=True)
        for v in VARIANTS:
            model = load(run / v)
            pairs = task_pairs(model, "ioi", args.pairs, seed=0)
            scores = edge_attribution(model, pairs, method="eap")
            agree = exact_agreement(scores, exact_edge_effects(model, pairs))
            curve = faithfulness_curve(model, pairs, scores, ks=sorted(set(default_ks(len(scores))) | {24}))
            tag = {"seed": s, "variant": v}
            agreement.append({**tag, "n_edges": len(scores), "n_pairs": len(pairs.clean), **agree})
            curves.append(curve.assign(**tag, area=curve.attrs["area"]))
            print(f"  seed {s} {v}: Spearman {agree['spearman']:.2f}, top 24 recover "
                  f"{curve.set_index('k').recovered[24]:.2f}, area {curve.attrs['area']:.2f}", flush=True)
    out = Path(args.out)
    write_csv(pd.DataFrame(agreement), out / "agreement.csv")
    cols = ["seed", "variant", "k", "fraction", "n_edges", "recovered", "area"]
    write_csv(pd.concat(curves, ignore_index=True)[cols], out / "faithfulness.csv")


if __name__ == "__main__":
    main()

"""Attribution graphs of the demo recipe's three variants, seeds 0-2, on IOI and induction prompts: the scores and
where the logits' attribution comes from, the tables behind the circuits page's numbers.

For each seed (trained, or reused from the cache as ``fixedid-analyze demo`` caches them) and variant: one TopK
transcoder per layer (8x, k 16, 131,072 tokens of the checkpoint's validation text), then the graphs of ``--prompts``
clean prompts of each task (:func:`analysis.causal.attribution_graph.attribution_graph`, pruned as circuit-tracer
prunes). Writes ``scores.csv`` (per graph: replacement and completeness, the logits' attribution by node kind, nodes
and edges kept), ``bits.csv`` (input influence by code column) and ``graphs.png``/``.pdf`` (seed 0's first IOI graph
of each variant) under ``--out``, and prints the means over seeds and prompts.

Usage: python experiments/graphs/variants.py          (~5 minutes on 2 CPU cores with the variants cached)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from analysis.causal.attribution_graph import attribution_graph, input_influence, logit_shares
from analysis.features.run import dictionary_config, split_windows
from analysis.features.train import train_dictionary
from analysis.figures.attribution_graph import graph_figure
from analysis.figures.style import save_figure
from analysis.loading import load
from analysis.outputs import write_csv
from analysis.tasks import task_pairs
from analysis.variants import VARIANTS, cache_root, ensure_variants
from fixedid.train.config import TrainConfig

HERE = Path(__file__).parent


def transcoders(model, seed: int) -> dict:
    """One TopK transcoder per layer, 8x wide, k 16, on 131,072 tokens of the model's validation text."""
    train, _ = split_windows(model, train_tokens=131_072, eval_tokens=1024)
    return {L: train_dictionary(model, dictionary_config(model, hook=f"blocks.{L}.ln2.hook_normalized",
                                                         kind="transcoder", expansion=8, k=16),
                                train, seed=seed, progress=False)[0] for L in range(model.cfg.n_layers)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tasks", nargs="+", default=["ioi", "induction"])
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results"))
    args = p.parse_args()
    scores, bits, figure = [], [], {}
    for s in args.seeds:
        run = ensure_variants(TrainConfig.load("tiny").replace_train(seed=s), cache_root(None), quiet=True)
        for v in VARIANTS:
            model = load(run / v)
            tcs = transcoders(model, s)
            for task in args.tasks:
                for i, toks in enumerate(task_pairs(model, task, args.prompts, seed=0).clean):
                    g = attribution_graph(model, toks, tcs)
                    tag = {"seed": s, "variant": v, "task": task, "prompt": i}
                    scores.append({**tag, **g.scores, **logit_shares(g), "n_features": g.attrs["n_features"],
                                   "nodes_kept": int(g.nodes.kept.sum()) - 1, "edges_kept": int(g.edges.kept.sum())})
                    bits.append(input_influence(g).assign(**tag))
                    if s == args.seeds[0] and task == args.tasks[0] and i == 0:
                        figure[f"{v} (seed {s}, {task})"] = g
            print(f"  seed {s} {v}: done", flush=True)
    out = Path(args.out)
    df = pd.DataFrame(scores)
    write_csv(df, out / "scores.csv")
    write_csv(pd.concat(bits, ignore_index=True), out / "bits.csv")
    save_figure(graph_figure(figure), out, "graphs")
    cols = ["replacement", "completeness", "direct_input", "direct_feature", "direct_error", "influence_input",
            "influence_feature", "influence_error"]
    summary = df.groupby(["task", "variant"])[cols].agg(["mean", "min", "max"]).round(3)
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        text = f"attribution graphs, seeds {args.seeds}, {args.prompts} prompts per task (mean, min, max)\n{summary}\n"
    (out / "summary.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

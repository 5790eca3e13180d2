"""``fixedid-analyze graph``: attribution graphs of prompts through per-layer transcoders, from the input code's
bits to the logits (:mod:`analysis.causal.attribution_graph`).

    fixedid-analyze graph --ckpt fixedid-demo/checkpoints/canonical --task ioi --n-prompts 2

For each checkpoint, one TopK transcoder per layer is trained on its validation text (or loaded with
``--transcoders DIR``: a ``fixedid-analyze sae --kind transcoder`` output with one per layer), then each prompt's graph
is built. Writes ``graph_nodes.csv`` and ``graph_edges.csv`` (every node and edge, with ``kept`` after pruning),
``graph_scores.csv`` (replacement and completeness scores, the logits' attribution split by node kind, per graph),
``graph_bits.csv`` (the input nodes' influence by code column), ``graphs/<checkpoint>-<prompt>.json`` (the pruned graph
in circuit-tracer's graph-file schema) and ``.html`` (an offline view: hover a node for its activation, influence and a
feature's top tokens), the transcoders in SAELens's layout, and ``graph.png``/``.pdf`` (the first prompt's pruned
graph of each checkpoint).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints
from analysis.errors import AnalysisError

HELP = "attribution graphs through per-layer transcoders (replacement and completeness scores, pruned graphs)"
EXAMPLES = """
  fixedid-analyze graph --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --task ioi
  fixedid-analyze graph --ckpt fixedid-demo/checkpoints/learned --prompt "When Hannah and Helen ran to the shop, Helen gave a cup to"
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    src = p.add_argument_group("prompts (one of)")
    src.add_argument("--task", help="built-in task whose clean prompts are traced: ioi, agreement, facts, induction")
    src.add_argument("--prompt", action="append", help="a prompt to trace (repeatable)")
    p.add_argument("--n-prompts", type=int, default=2, help="prompts drawn for --task (default 2)")
    p.add_argument("--transcoders", metavar="DIR", help="load the transcoders from a `sae --kind transcoder` output "
                   "(DIR/<checkpoint name>/blocks.L.ln2.hook_normalized-transcoder-<arch>/) instead of training them")
    p.add_argument("--expansion", type=int, default=8, help="trained transcoders: latents per input dimension "
                   "(default 8)")
    p.add_argument("--k", type=int, default=16, help="trained transcoders: active latents per token (default 16)")
    p.add_argument("--tokens", type=int, default=131_072, help="trained transcoders: training tokens (default 131072)")
    p.add_argument("--max-logits", type=int, default=10, help="logit targets at most (default 10)")
    p.add_argument("--desired-prob", type=float, default=0.95, help="logit targets until their probability reaches "
                   "this (default 0.95)")
    p.add_argument("--node-threshold", type=float, default=0.8, help="pruning: share of influence the kept nodes "
                   "carry (default 0.8)")
    p.add_argument("--edge-threshold", type=float, default=0.98, help="pruning: share of edge influence the kept "
                   "edges carry (default 0.98)")
    p.add_argument("--no-prune", action="store_true", help="keep every node and edge (kept is true throughout)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --task prompts and of the transcoders")
    add_out(p)


def _prompts(model, args) -> list:
    import torch

    from analysis.tasks import task_pairs

    if (args.task is None) == (args.prompt is None):
        raise AnalysisError("give exactly one source of prompts: --task NAME or --prompt TEXT (repeatable)")
    if args.task is not None:
        if args.n_prompts < 1:
            raise AnalysisError(f"--n-prompts must be a positive integer, got {args.n_prompts}")
        return list(task_pairs(model, args.task, args.n_prompts, seed=args.seed).clean)
    if getattr(model, "tokenizer", None) is None:
        raise AnalysisError("--prompt needs a checkpoint with a tokenizer")
    out = []
    for text in args.prompt:
        ids = model.to_tokens(text)[0]
        if len(ids) < 1 or len(ids) > model.cfg.context:
            raise AnalysisError(f"--prompt {text!r} is {len(ids)} tokens; it must be 1 to {model.cfg.context}")
        out.append(torch.as_tensor(ids))
    return out


def _examples(model, tcs: dict, g, held) -> dict:
    """The top tokens of the graph's kept features on the held-out windows ``held``, keyed as the graph JSON names
    them."""
    from analysis.causal.graph_export import feature_examples

    kept = g.nodes[g.nodes.kept & (g.nodes.kind == "feature")]
    feats = list(zip(kept.layer.astype(int), kept.feature.astype(int)))
    if not feats:
        return {}
    found = feature_examples(model, tcs, held, feats)
    return {f"{L}_{f}_{p}": found[(L, f)] for L, f, p in zip(kept.layer.astype(int), kept.feature.astype(int),
                                                               kept.position.astype(int))}


def _transcoders(model, name: str, args) -> dict:
    from analysis.features.run import dictionary_config, split_windows
    from analysis.features.saelens_format import load_dictionary
    from analysis.features.train import train_dictionary

    layers = range(model.cfg.n_layers)
    if args.transcoders:
        root = Path(args.transcoders) / name
        found = {}
        for L in layers:
            hits = sorted(root.glob(f"blocks.{L}.ln2.hook_normalized-transcoder-*"))
            if not hits:
                raise AnalysisError(f"no transcoder of layer {L} in {root} (expected blocks.{L}.ln2.hook_normalized-"
                                    "transcoder-<arch>/ from fixedid-analyze sae --kind transcoder)")
            found[L] = load_dictionary(hits[0])
        return found
    train, _ = split_windows(model, train_tokens=args.tokens, eval_tokens=1024)
    out = {}
    for L in layers:
        cfg = dictionary_config(model, hook=f"blocks.{L}.ln2.hook_normalized", kind="transcoder",
                                expansion=args.expansion, k=args.k)
        out[L], _ = train_dictionary(model, cfg, train, seed=args.seed, progress=False)
    return out


def run(args) -> int:
    import pandas as pd

    from analysis.causal.attribution_graph import attribution_graph, input_influence, logit_shares
    from analysis.causal.graph_export import graph_html, graph_json
    from analysis.features.run import split_windows
    from fixedid.atomic import write_text_atomic
    from analysis.features.saelens_format import save_dictionary
    from analysis.figures.attribution_graph import graph_figure
    from analysis.figures.style import save_figure
    from analysis.loading import load
    from analysis.outputs import write_csv, write_json

    named = parse_checkpoints(args.ckpt)
    for opt, value in (("--expansion", args.expansion), ("--k", args.k), ("--tokens", args.tokens),
                       ("--max-logits", args.max_logits)):
        if value < 1:
            raise AnalysisError(f"{opt} must be a positive integer, got {value}")
    for opt, value in (("--node-threshold", args.node_threshold), ("--edge-threshold", args.edge_threshold),
                       ("--desired-prob", args.desired_prob)):
        if not 0 <= value <= 1:
            raise AnalysisError(f"{opt} must be in [0, 1], got {value}")
    out = output_dir(args, "graph", named)
    models = {name: load(path) for name, path in named.items()}
    prompts = {name: _prompts(m, args) for name, m in models.items()}  # every prompt checked before training
    nodes, edges, scores, bits, first, keep, pages = [], [], [], [], {}, [], []
    for name, model in models.items():
        tcs = _transcoders(model, name, args)
        keep += [(d, out / name / "transcoders" / f"blocks.{L}.ln2.hook_normalized-transcoder-{d.cfg.arch}",
                  str(named[name])) for L, d in tcs.items()]
        held = split_windows(model, train_tokens=1024, eval_tokens=4096)[1]  # where features show their top tokens
        for i, toks in enumerate(prompts[name]):
            g = attribution_graph(model, toks, tcs, max_logits=args.max_logits, desired_prob=args.desired_prob,
                                  prune_graph=not args.no_prune, node_threshold=args.node_threshold,
                                  edge_threshold=args.edge_threshold, progress=True)
            tag = {"variant": name, "prompt": i}
            nodes.append(g.nodes.assign(**tag))
            edges.append(g.edges.assign(**tag))
            scores.append(pd.DataFrame([{**tag, "text": "".join(g.attrs["prompt"]), **g.scores, **logit_shares(g),
                                         "n_features": g.attrs["n_features"], "n_logits": g.attrs["n_logits"],
                                         "nodes_kept": int(g.nodes.kept.sum()) - 1,
                                         "edges_kept": int(g.edges.kept.sum())}]))
            bits.append(input_influence(g).assign(**tag))
            data = graph_json(g, slug=f"{name}-{i}", scan=f"fixedid-{name}",
                              transcoders=[d.cfg.hook_name for d in tcs.values()], node_threshold=args.node_threshold)
            pages.append((out / "graphs" / f"{name}-{i}", data,
                          graph_html(data, _examples(model, tcs, g, held), title=f"{name}: prompt {i}")))
            first.setdefault(name, g)
            print(f"  {name} prompt {i}: replacement {g.scores['replacement']:.3f}, completeness "
                  f"{g.scores['completeness']:.3f} ({g.attrs['n_features']} active features)")
    for d, folder, model_name in keep:
        save_dictionary(d, folder, model_name=model_name)
    for stem, data, page in pages:
        write_json(data, stem.with_suffix(".json"))
        write_text_atomic(stem.with_suffix(".html"), page)
    for df, stem in ((nodes, "graph_nodes"), (edges, "graph_edges"), (scores, "graph_scores"), (bits, "graph_bits")):
        table = pd.concat(df, ignore_index=True)
        write_csv(table[["variant", "prompt"] + [c for c in table.columns if c not in ("variant", "prompt")]],
                  out / f"{stem}.csv")
    save_figure(graph_figure(first), out, "graph")
    print(f"wrote {out / 'graph_scores.csv'}, the nodes, edges and bits beside it, and {out / 'graph.png'} (+ .pdf)")
    return 0

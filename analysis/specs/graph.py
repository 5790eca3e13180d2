"""``graph``: attribution graphs of prompts through per-layer transcoders, from the input code's bits to the logits
(:mod:`analysis.causal.attribution_graph`), with circuit-tracer's graph files and an offline view of each."""

from __future__ import annotations

from functools import partial

import pandas as pd

from analysis.errors import AnalysisError
from analysis.specs import types
from analysis.specs.base import Param, Result, Spec

GROUP = "prompts (one of)"


def check(params: dict) -> None:
    if (params["task"] is None) == (params["prompt"] is None):
        raise AnalysisError("give exactly one source of prompts: --task NAME or --prompt TEXT (repeatable)")


def prompts_of(model, params: dict) -> list:
    """The token ids of each prompt traced: a task's clean prompts, or the ``--prompt`` texts."""
    import torch

    from analysis.tasks import task_pairs

    if params["task"] is not None:
        return list(task_pairs(model, params["task"], params["n_prompts"], seed=params["seed"]).clean)
    if getattr(model, "tokenizer", None) is None:
        raise AnalysisError("--prompt needs a checkpoint with a tokenizer")
    out = []
    for text in params["prompt"]:
        ids = model.to_tokens(text)[0]
        if len(ids) < 1 or len(ids) > model.cfg.context:
            raise AnalysisError(f"--prompt {text!r} is {len(ids)} tokens; it must be 1 to {model.cfg.context}")
        out.append(torch.as_tensor(ids))
    return out


def transcoders_of(model, name: str, params: dict) -> dict:
    """One transcoder per layer: loaded from ``--transcoders`` or trained on the model's validation text."""
    from analysis.engine.names import mlp_in
    from analysis.features.run import dictionary_config, split_windows
    from analysis.features.saelens_format import load_dictionary
    from analysis.features.train import train_dictionary

    layers = range(model.cfg.n_layers)
    if params["transcoders"]:
        from pathlib import Path

        root = Path(params["transcoders"]) / name
        found = {}
        for L in layers:
            hits = sorted(root.glob(f"{mlp_in(L)}-transcoder-*"))
            if not hits:
                raise AnalysisError(f"no transcoder of layer {L} in {root} (expected {mlp_in(L)}-transcoder-<arch>/ "
                                    "from fixedid-analyze sae --kind transcoder)")
            found[L] = load_dictionary(hits[0])
        return found
    train, _ = split_windows(model, train_tokens=params["tokens"], eval_tokens=1024)
    out = {}
    for L in layers:
        cfg = dictionary_config(model, hook=mlp_in(L), kind="transcoder", expansion=params["expansion"],
                                k=params["k"])
        out[L], _ = train_dictionary(model, cfg, train, seed=params["seed"], progress=False)
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


def _write_dictionary(d, model_name, path):
    from analysis.features.saelens_format import save_dictionary

    save_dictionary(d, path, model_name=model_name)


def _write_text(text, path):
    from fixedid.atomic import write_text_atomic

    write_text_atomic(path, text)


def _graphs_of(name, model, tcs, prompts, params, result: Result, tables: dict) -> None:
    """Each prompt's graph of one model: its rows into ``tables``, its JSON and HTML view into ``result``."""
    from analysis.causal.attribution_graph import attribution_graph, input_influence, logit_shares
    from analysis.causal.graph_export import graph_html, graph_json
    from analysis.features.run import split_windows

    held = split_windows(model, train_tokens=1024, eval_tokens=4096)[1]  # where features show their top tokens
    for i, toks in enumerate(prompts):
        g = attribution_graph(model, toks, tcs, max_logits=params["max_logits"], desired_prob=params["desired_prob"],
                              prune_graph=not params["no_prune"], node_threshold=params["node_threshold"],
                              edge_threshold=params["edge_threshold"], progress=True)
        tag = {"variant": name, "prompt": i}
        tables["graph_nodes"].append(g.nodes.assign(**tag))
        tables["graph_edges"].append(g.edges.assign(**tag))
        tables["graph_scores"].append(pd.DataFrame([{
            **tag, "text": "".join(g.attrs["prompt"]), **g.scores, **logit_shares(g),
            "n_features": g.attrs["n_features"], "n_logits": g.attrs["n_logits"],
            "nodes_kept": int(g.nodes.kept.sum()) - 1, "edges_kept": int(g.edges.kept.sum())}]))
        tables["graph_bits"].append(input_influence(g).assign(**tag))
        data = graph_json(g, slug=f"{name}-{i}", scan=f"fixedid-{name}",
                          transcoders=[d.cfg.hook_name for d in tcs.values()], node_threshold=params["node_threshold"])
        result.records[f"graphs/{name}-{i}"] = data
        result.files[f"graphs/{name}-{i}.html"] = partial(_write_text, graph_html(data, _examples(model, tcs, g, held),
                                                                                  title=f"{name}: prompt {i}"))
        result.attrs.setdefault("first", {}).setdefault(name, g)
        result.summary += (f"  {name} prompt {i}: replacement {g.scores['replacement']:.3f}, completeness "
                           f"{g.scores['completeness']:.3f} ({g.attrs['n_features']} active features)\n")


def trace(models, *, progress=False, **params) -> Result:
    """Every checkpoint's transcoders and graphs; every prompt is checked before any transcoder is trained."""
    prompts = {name: prompts_of(m, params) for name, m in models.items()}
    result = Result()
    tables: dict = {k: [] for k in ("graph_nodes", "graph_edges", "graph_scores", "graph_bits")}
    for name, model in models.items():
        tcs = transcoders_of(model, name, params)
        source = str(models.paths[name]) if models.paths[name] is not None else name
        for d in tcs.values():
            result.files[f"{name}/transcoders/{d.cfg.hook_name}-transcoder-{d.cfg.arch}"] = partial(
                _write_dictionary, d, source)
        _graphs_of(name, model, tcs, prompts[name], params, result, tables)
    for stem, frames in tables.items():
        df = pd.concat(frames, ignore_index=True)
        result.tables[stem] = df[["variant", "prompt"] + [c for c in df.columns if c not in ("variant", "prompt")]]
    result.summary = result.summary.rstrip("\n")
    return result


def graph_figure(result: Result):
    from analysis.figures.attribution_graph import graph_figure as draw

    return draw(result.attrs["first"])


SPEC = Spec(
    name="graph", group="circuits", joint=True,
    help="attribution graphs through per-layer transcoders (replacement and completeness scores, pruned graphs)",
    examples="""
  fixedid-analyze graph --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --task ioi
  fixedid-analyze graph --ckpt fixedid-demo/checkpoints/learned --prompt "When Hannah and Helen ran to the shop, Helen gave a cup to"
""",
    params=(
        Param("task", None, "built-in task whose clean prompts are traced: ioi, agreement, facts, induction",
              group=GROUP),
        Param("prompt", None, "a prompt to trace (repeatable)", repeat=True, group=GROUP),
        Param("n_prompts", 2, "prompts drawn for --task", type=types.positive_int),
        Param("transcoders", None, "load the transcoders from a `sae --kind transcoder` output (DIR/<checkpoint "
              "name>/blocks.L.ln2.hook_normalized-transcoder-<arch>/) instead of training them", metavar="DIR"),
        Param("expansion", 8, "trained transcoders: latents per input dimension", type=types.positive_int),
        Param("k", 16, "trained transcoders: active latents per token", type=types.positive_int),
        Param("tokens", 131_072, "trained transcoders: training tokens", type=types.positive_int),
        Param("max_logits", 10, "logit targets at most", type=types.positive_int),
        Param("desired_prob", 0.95, "logit targets until their probability reaches this", type=types.unit_interval),
        Param("node_threshold", 0.8, "pruning: share of influence the kept nodes carry", type=types.unit_interval),
        Param("edge_threshold", 0.98, "pruning: share of edge influence the kept edges carry",
              type=types.unit_interval),
        Param("no_prune", False, "keep every node and edge (kept is true throughout)", switch=True),
        Param("seed", 0, "seed of the --task prompts and of the transcoders", type=int)),
    compute=trace, check=check,
    figures={"graph": graph_figure},
    library=("analysis.causal.attribution_graph:attribution_graph",),
)


__all__ = ["SPEC", "prompts_of", "transcoders_of", "trace"]

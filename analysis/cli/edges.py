"""``fixedid-analyze edges``: edge attribution (EAP, EAP-IG) over the whole graph of one checkpoint.

    fixedid-analyze edges --ckpt fixedid-demo/checkpoints/canonical --task ioi
    fixedid-analyze edges --ckpt DIR --task ioi --method eap-ig --steps 8 --interpolate activations --exact

Writes ``edges.csv`` (one row per edge: sender, receiver, score with its 95% interval over pairs), ``nodes.csv``
(each writer's outgoing edges summed) and ``edges.png``/``.pdf`` (the writer x reader map); with ``--exact`` also
``exact.csv`` (each edge patched alone: path patching, the norm recomputed) and ``agreement.json`` (the rank
correlation of the scores with it), beside the map in the figure.
"""

from __future__ import annotations

import argparse
from analysis.causal.edges import INTERPOLATIONS, METHODS
from analysis.causal.patching import MODES
from analysis.errors import AnalysisError

HELP = "edge attribution (EAP, EAP-IG) of every writer -> reader edge, optionally against exact edge patching"
EXAMPLES = """
  fixedid-analyze edges --ckpt fixedid-demo/checkpoints/canonical --task ioi
  fixedid-analyze edges --ckpt fixedid-demo/checkpoints/gf2 --task ioi --method eap-ig --steps 8 --exact
"""


def add_args(p: argparse.ArgumentParser) -> None:
    from analysis.cli.args import add_out
    from analysis.cli.patching import add_metric, add_pair_args

    add_pair_args(p)
    p.add_argument("--mode", default="denoise", choices=MODES, help="denoise: clean writes into the corrupted run; "
                   "noise: corrupted writes into the clean run (default denoise)")
    add_metric(p)
    add_out(p)
    p.add_argument("--method", default="eap", choices=METHODS, help="eap: one gradient at the patched run; eap-ig: "
                   "integrated gradients along --interpolate (default eap)")
    p.add_argument("--steps", type=int, default=5, help="integration steps of eap-ig (default 5)")
    p.add_argument("--interpolate", default="inputs", choices=INTERPOLATIONS,
                   help="eap-ig's path: the input code rows (default) or every writer's output")
    p.add_argument("--exact", action="store_true",
                   help="also patch every edge alone (one path-patching sweep per reader) and report the agreement")
    p.add_argument("--top", type=int, default=8, help="edges printed (default 8)")


def summarize(df, agreement=None, k: int = 8) -> str:
    a = df.attrs
    top = df.loc[df.score.abs().sort_values(ascending=False).index[:k]]
    lines = [f"edge attribution ({a['method']}, {a['mode']}) over {a['n_pairs']} pairs, {a['n_edges']} edges, "
             f"metric {a['metric']}: clean {a['clean']:.3f}, corrupt {a['corrupt']:.3f}",
             "Largest estimated edge effects:"]
    for _, r in top.iterrows():
        lines.append(f"  {r.sender:>8s} -> {r.receiver:<10s} {r.score:+.3f} [{r.score_lo:+.3f}, {r.score_hi:+.3f}]")
    if agreement:
        lines.append(f"Against exact patching of {agreement['n_edges']} edges: Spearman {agreement['spearman']:.2f} "
                     f"(of magnitudes {agreement['spearman_abs']:.2f}), top decile shared "
                     f"{agreement['top_decile_overlap']:.0%}")
    return "\n".join(lines)


def run(args) -> int:
    from analysis.causal.edges import edge_attribution, exact_agreement, exact_edge_effects, node_scores
    from analysis.cli.patching import checkpoint_and_pairs
    from analysis.figures.edges import edges_figure
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv, write_json

    if args.steps < 1:
        raise AnalysisError(f"--steps must be positive, got {args.steps}")
    if args.top < 1:
        raise AnalysisError(f"--top must be positive, got {args.top}")
    name, out, model, pairs = checkpoint_and_pairs(args, "edges")
    df = edge_attribution(model, pairs, mode=args.mode, metric=args.metric, method=args.method, steps=args.steps,
                          interpolate=args.interpolate)
    exact = agreement = None
    if args.exact:
        exact = exact_edge_effects(model, pairs, mode=args.mode, metric=args.metric)
        agreement = exact_agreement(df, exact)
    write_csv(df, out / "edges.csv")
    write_csv(node_scores(df), out / "nodes.csv")
    if exact is not None:
        write_csv(exact, out / "exact.csv")
        write_json({"method": args.method, **agreement}, out / "agreement.json")
    save_figure(edges_figure(df, exact, title=f"{name}: edge attribution ({args.method}, {args.mode}, "
                                              f"{len(pairs)} pairs)"), out, "edges")
    print(summarize(df, agreement, args.top))
    print(f"wrote {out / 'edges.csv'}, {out / 'nodes.csv'} and {out / 'edges.png'} (+ .pdf)")
    return 0

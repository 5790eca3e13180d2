"""``fixedid-analyze circuit``: the circuit of a behaviour - edges scored (EAP or EAP-IG), the top ones kept and the
rest ablated - with its faithfulness curve and its minimality and complement checks, for one or more checkpoints.

    fixedid-analyze circuit --ckpt fixedid-demo/checkpoints/canonical --task ioi
    fixedid-analyze circuit --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/gf2 --task ioi --k 24
    fixedid-analyze circuit --ckpt DIR --task ioi --method eap-ig --ablation mean --unit nodes

Writes ``edges.csv`` (every edge's score), ``faithfulness.csv`` (recovered share against k), ``circuit.csv`` (the
top ``--k`` edges with their score and the drop in recovered when each is ablated too), ``circuit.json`` (its
recovered share, the complement's, the curve's area) and the figures ``faithfulness.png`` and
``circuit_<variant>.png`` (+ .pdf); each table has a ``variant`` column.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.causal.circuits import ABLATIONS, UNITS
from analysis.causal.edges import INTERPOLATIONS, METHODS
from analysis.causal.patching import MODES
from analysis.errors import AnalysisError

HELP = "circuits: score edges, keep the top k, ablate the rest; faithfulness curve, minimality, graph figure"
EXAMPLES = """
  fixedid-analyze circuit --ckpt fixedid-demo/checkpoints/canonical --task ioi
  fixedid-analyze circuit --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2 --task ioi --k 24
"""


def add_args(p: argparse.ArgumentParser) -> None:
    from analysis.cli.args import add_out
    from analysis.cli.patching import add_metric, add_pair_args

    add_pair_args(p, many=True)  # one circuit per checkpoint, the curves in one figure
    p.add_argument("--method", default="eap", choices=METHODS, help="how edges are scored (default eap)")
    p.add_argument("--steps", type=int, default=5, help="integration steps of eap-ig (default 5)")
    p.add_argument("--interpolate", default="inputs", choices=INTERPOLATIONS,
                   help="eap-ig's path: the input code rows (default) or every writer's output")
    p.add_argument("--mode", default="denoise", choices=MODES, help="denoise: clean writes into the corrupted run; "
                   "noise: corrupted writes into the clean run (default denoise)")
    add_metric(p)
    p.add_argument("--ablation", default="corrupt", choices=ABLATIONS,
                   help="what replaces an ablated edge's write (default: the pair's corrupted prompt)")
    p.add_argument("--unit", default="edges", choices=UNITS, help="rank and keep edges, or writers (nodes)")
    p.add_argument("--k", type=int, default=32, help="edges kept in the circuit that is checked and drawn "
                   "(default 32)")
    add_out(p)


def run(args) -> int:
    from analysis.causal.circuits import circuit_checks, faithfulness_curve
    from analysis.causal.edges import edge_attribution
    from analysis.cli.args import output_dir, parse_checkpoints, stacked
    from analysis.cli.patching import pairs_from_args
    from analysis.figures.circuit_graph import circuit_figure, faithfulness_figure
    from analysis.figures.style import save_figure
    from analysis.loading import load
    from analysis.outputs import write_csv, write_json

    for name in ("n_pairs", "steps", "k"):
        if getattr(args, name) < 1:
            raise AnalysisError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    named = parse_checkpoints(args.ckpt)
    out = output_dir(args, "circuit", named)
    edges, curves, circuits, summary, figures = [], {}, [], {}, {}
    for name, path in named.items():
        model = load(path)
        pairs = pairs_from_args(model, args)
        scores = edge_attribution(model, pairs, mode=args.mode, metric=args.metric, method=args.method,
                                  steps=args.steps, interpolate=args.interpolate)
        if args.k > len(scores):
            raise AnalysisError(f"--k {args.k} exceeds the {len(scores)} edges of {name}'s graph")
        curve = faithfulness_curve(model, pairs, scores, unit=args.unit, ablation=args.ablation, metric=args.metric)
        kept = scores.loc[scores.score.abs().sort_values(ascending=False, kind="stable").index[:args.k]]
        checks = circuit_checks(model, pairs, kept, ablation=args.ablation, metric=args.metric)
        circuit = kept.merge(checks, on=["sender", "receiver"])
        edges.append(scores.assign(variant=name))
        curves[name] = curve
        circuits.append(circuit.assign(variant=name))
        summary[name] = {"k": args.k, "recovered": checks.attrs["recovered"], "complement": checks.attrs["complement"],
                         "area": curve.attrs["area"], "unit": args.unit, "ablation": args.ablation,
                         "method": args.method, "n_pairs": len(pairs), "n_edges": len(scores)}
        figures[name] = circuit_figure(circuit, model.cfg.n_layers, model.cfg.n_heads,
                                       title=f"{name}: top {args.k} edges ({args.method}); recovered "
                                             f"{checks.attrs['recovered']:.2f}, complement "
                                             f"{checks.attrs['complement']:.2f}")
    write_csv(stacked(edges), out / "edges.csv")
    write_csv(stacked([c.assign(variant=n) for n, c in curves.items()]), out / "faithfulness.csv")
    write_csv(stacked(circuits), out / "circuit.csv")
    write_json(summary, out / "circuit.json")
    save_figure(faithfulness_figure(curves), out, "faithfulness")
    for name, fig in figures.items():
        save_figure(fig, out, f"circuit_{Path(name).name}")
    for name, s in summary.items():
        print(f"{name}: top {s['k']} of {s['n_edges']} edges ({s['method']}) recover {s['recovered']:.2f} of the "
              f"clean-corrupted gap ({s['ablation']} ablation of the rest; the rest alone {s['complement']:.2f}); "
              f"faithfulness area {s['area']:.2f}")
    print(f"wrote {out / 'circuit.csv'}, {out / 'faithfulness.csv'}, {out / 'faithfulness.png'} and the circuit "
          f"figures (+ .pdf)")
    return 0

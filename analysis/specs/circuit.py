"""``circuit``: the circuit of a behaviour - edges scored, the top ``k`` kept and the rest ablated - with its
faithfulness curve, minimality and complement (:mod:`analysis.causal.circuits`); the study's ``circuits``
measurement."""

from __future__ import annotations

from pathlib import Path

from analysis.causal.circuits import ABLATIONS, UNITS
from analysis.errors import AnalysisError
from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec
from analysis.specs.edges import method_params, mode_param

#: The study's circuits: the top CIRCUIT_K edges by EAP score are the circuit that is checked and compared.
CIRCUIT_K = 32


def find_circuit(model, *, pairs, mode, metric, method, steps, interpolate, ablation, unit, k, name="model",
                 progress=False) -> Result:
    """Every edge's score, the faithfulness curve, and the top ``k`` edges with their checks."""
    from analysis.causal.circuits import circuit_checks, faithfulness_curve
    from analysis.causal.edges import edge_attribution

    scores = edge_attribution(model, pairs, mode=mode, metric=metric, method=method, steps=steps,
                              interpolate=interpolate)
    if k > len(scores):
        raise AnalysisError(f"--k {k} exceeds the {len(scores)} edges of {name}'s graph")
    curve = faithfulness_curve(model, pairs, scores, unit=unit, ablation=ablation, metric=metric)
    kept = scores.loc[scores.score.abs().sort_values(ascending=False, kind="stable").index[:k]]
    checks = circuit_checks(model, pairs, kept, ablation=ablation, metric=metric)
    summary = {"k": k, "recovered": checks.attrs["recovered"], "complement": checks.attrs["complement"],
               "area": curve.attrs["area"], "unit": unit, "ablation": ablation, "method": method,
               "n_pairs": len(pairs), "n_edges": len(scores)}
    return Result(tables={"edges": scores, "faithfulness": curve, "circuit": kept.merge(checks, on=["sender",
                                                                                                   "receiver"])},
                  records={"circuit": summary}, attrs={"curve": curve, "cfg": model.cfg})


def faithfulness_figure(result: Result):
    from analysis.figures.circuit_graph import faithfulness_figure as draw

    return draw({n: p.attrs["curve"] for n, p in result.parts.items()})


def circuit_figures(result: Result) -> dict:
    from analysis.figures.circuit_graph import circuit_figure

    out = {}
    for name, part in result.parts.items():
        s, cfg = part.records["circuit"], part.attrs["cfg"]
        out[f"circuit_{Path(name).name}"] = circuit_figure(
            part.tables["circuit"], cfg.n_layers, cfg.n_heads,
            title=f"{name}: top {s['k']} edges ({s['method']}); recovered {s['recovered']:.2f}, complement "
                  f"{s['complement']:.2f}")
    return out


def summarize(result: Result) -> str:
    return "\n".join(f"{name}: top {s['k']} of {s['n_edges']} edges ({s['method']}) recover {s['recovered']:.2f} of "
                     f"the clean-corrupted gap ({s['ablation']} ablation of the rest; the rest alone "
                     f"{s['complement']:.2f}); faithfulness area {s['area']:.2f}"
                     for name, s in result.records["circuit"].items())


def measure(model, reference, sizes):
    """The IOI circuit: EAP edge scores on the study's IOI pairs, the faithfulness curve (corrupt ablation of the
    rest) at a few k and its area, and the top CIRCUIT_K edges' recovered share and complement (raw logit
    differences: a control without the behaviour has no gap to normalise by)."""
    from analysis.causal.circuits import circuit_checks, faithfulness_curve
    from analysis.causal.edges import edge_attribution
    from analysis.specs.rows import rows
    from analysis.tasks import task_pairs

    pairs = task_pairs(model, "ioi", sizes.n_pairs)
    scores = edge_attribution(model, pairs, metric="logit_diff")
    ks = sorted({0, CIRCUIT_K // 2, CIRCUIT_K, 2 * CIRCUIT_K, len(scores)} & set(range(len(scores) + 1)))
    curve = faithfulness_curve(model, pairs, scores, ks=ks, metric="logit_diff")
    kept = scores.loc[scores.score.abs().sort_values(ascending=False, kind="stable").index[:CIRCUIT_K]]
    checks = circuit_checks(model, pairs, kept, minimality=False, metric="logit_diff")
    items = [("recovered", f"top {int(r.k)} edges", r.recovered) for r in curve.itertuples()]
    items += [("faithfulness_area", "edges", curve.attrs["area"]),
              ("complement", f"top {CIRCUIT_K} edges", checks.attrs["complement"]),
              ("clean_corrupt_gap", "ioi", curve.attrs["clean"] - curve.attrs["corrupt"])]
    return rows("circuits", items)


SPEC = Spec(
    name="circuit", group="circuits",
    help="circuits: score edges, keep the top k, ablate the rest; faithfulness curve, minimality, graph figure",
    examples="""
  fixedid-analyze circuit --ckpt fixedid-demo/checkpoints/canonical --task ioi
  fixedid-analyze circuit --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2 --task ioi --k 24
""",
    params=shared.pair_params() + method_params() + (mode_param(), shared.metric()) + (
        Param("ablation", "corrupt", "what replaces an ablated edge's write (corrupt: the pair's corrupted prompt)",
              choices=ABLATIONS),
        Param("unit", "edges", "rank and keep edges, or writers (nodes)", choices=UNITS),
        Param("k", 32, "edges kept in the circuit that is checked and drawn", type=types.positive_int)),
    compute=find_circuit, prepare=shared.prepare_pairs, check=shared.check_pairs,
    figures={"faithfulness": faithfulness_figure, "circuit_*": circuit_figures},
    summary=summarize,
    library=("analysis.causal.edges:edge_attribution", "analysis.causal.circuits:faithfulness_curve",
             "analysis.causal.circuits:circuit_checks"),
    measures=(Measure("circuits", measure, controls=False),),
)


__all__ = ["SPEC", "CIRCUIT_K", "find_circuit", "measure"]

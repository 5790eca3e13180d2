"""``edges``: edge attribution (EAP, EAP-IG) of every writer -> reader edge, optionally against exact edge patching
(:mod:`analysis.causal.edges`)."""

from __future__ import annotations

from analysis.causal.edges import INTERPOLATIONS, METHODS
from analysis.causal.patching import MODES
from analysis.specs import shared, types
from analysis.specs.base import Param, Result, Spec


def method_params() -> tuple[Param, ...]:
    """How edges are scored: ``--method``, ``--steps``, ``--interpolate`` (shared with ``circuit``)."""
    return (Param("method", "eap", "eap: one gradient at the patched run; eap-ig: integrated gradients along "
                  "--interpolate", choices=METHODS),
            Param("steps", 5, "integration steps of eap-ig", type=types.positive_int),
            Param("interpolate", "inputs", "eap-ig's path: the input code rows or every writer's output",
                  choices=INTERPOLATIONS))


def mode_param() -> Param:
    return Param("mode", "denoise", "denoise: clean writes into the corrupted run; noise: corrupted writes into the "
                 "clean run", choices=MODES)


def score_edges(model, *, pairs, mode, metric, method, steps, interpolate, exact, top) -> Result:
    """Every edge's score and each writer's; with ``exact`` each edge patched alone and the agreement."""
    from analysis.causal.edges import edge_attribution, exact_agreement, exact_edge_effects, node_scores

    df = edge_attribution(model, pairs, mode=mode, metric=metric, method=method, steps=steps,
                          interpolate=interpolate)
    result = Result(tables={"edges": df, "nodes": node_scores(df)})
    if exact:
        result.tables["exact"] = exact_edge_effects(model, pairs, mode=mode, metric=metric)
        result.records["agreement"] = {"method": method, **exact_agreement(df, result.tables["exact"])}
    return result


def edges_figure(result: Result):
    from analysis.figures.edges import edges_figure as draw

    p, df = result.params, result.tables["edges"]
    return draw(df, result.tables.get("exact"), title=f"{result.names[0]}: edge attribution ({p['method']}, "
                                                      f"{p['mode']}, {df.attrs['n_pairs']} pairs)")


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


SPEC = Spec(
    name="edges", group="circuits", models="one",
    help="edge attribution (EAP, EAP-IG) of every writer -> reader edge, optionally against exact edge patching",
    examples="""
  fixedid-analyze edges --ckpt fixedid-demo/checkpoints/canonical --task ioi
  fixedid-analyze edges --ckpt fixedid-demo/checkpoints/gf2 --task ioi --method eap-ig --steps 8 --exact
""",
    params=shared.pair_params() + (mode_param(), shared.metric()) + method_params() + (
        Param("exact", False, "also patch every edge alone (one path-patching sweep per reader) and report the "
              "agreement", switch=True),
        Param("top", 8, "edges printed", type=types.positive_int)),
    compute=score_edges, prepare=shared.prepare_pairs, check=shared.check_pairs,
    figures={"edges": edges_figure},
    summary=lambda r: summarize(r.tables["edges"], r.records.get("agreement"), r.params["top"]),
    library=("analysis.causal.edges:edge_attribution", "analysis.causal.edges:exact_edge_effects"),
)


__all__ = ["SPEC", "method_params", "score_edges"]

"""Influence on the logits through an attribution graph, pruning by it, and the graph's scores, with the definitions
of circuit-tracer (Ameisen et al., 2025, "Circuit Tracing"; the ``circuit-tracer`` library)."""

from __future__ import annotations

import numpy as np

from analysis.errors import AnalysisError


def normalize_rows(adjacency: np.ndarray) -> np.ndarray:
    """``|A|`` with every row divided by its sum (rows summing to 0 stay 0)."""
    a = np.abs(adjacency)
    return a / np.maximum(a.sum(1, keepdims=True), 1e-10)


def influence(normalized: np.ndarray, logit_weights: np.ndarray, max_iter: int = 1000) -> np.ndarray:
    """``w A + w A^2 + ...`` for the row-normalised adjacency ``A`` and the logit weights ``w`` (zero but on the
    logit nodes); an error if the paths do not end (the graph is not a DAG)."""
    step = logit_weights @ normalized
    total = step.copy()
    for _ in range(max_iter):
        if not step.any():
            return total
        step = step @ normalized
        total += step
    raise AnalysisError(f"influence did not converge in {max_iter} steps: the attribution graph has a cycle")


def _threshold(scores: np.ndarray, share: float) -> float:
    """The score above which the highest scores add up to ``share`` of the total."""
    order = np.sort(scores.ravel())[::-1]
    cum = np.cumsum(order) / max(order.sum(), 1e-30)
    return float(order[min(int(np.searchsorted(cum, share)), len(order) - 1)])


def prune(adjacency: np.ndarray, logit_weights: np.ndarray, kinds: np.ndarray, *, node_threshold: float = 0.8,
          edge_threshold: float = 0.98) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(node_mask, edge_mask, node_influence)`` of the module docstring's pruning; ``kinds`` is each node's kind
    (``feature``, ``error``, ``input``, ``logit``)."""
    for name, t in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not 0 <= t <= 1:
            raise AnalysisError(f"{name} must be in [0, 1], got {t}")
    node_inf = influence(normalize_rows(adjacency), logit_weights)
    keep = node_inf >= _threshold(node_inf, node_threshold)
    keep |= np.isin(kinds, ("input", "logit"))
    pruned = adjacency * keep[:, None] * keep[None, :]
    norm = normalize_rows(pruned)
    edge_scores = norm * (influence(norm, logit_weights) + logit_weights)[:, None]
    edges = edge_scores >= _threshold(edge_scores, edge_threshold)
    edges &= pruned != 0
    inner, feature = np.isin(kinds, ("feature", "error")), kinds == "feature"
    while True:
        before = keep.copy()
        keep[inner] &= edges[:, inner].any(0)  # feature and error nodes keep an outgoing edge
        keep[feature] &= edges[feature].any(1)  # feature nodes keep an incoming edge
        edges &= keep[:, None] & keep[None, :]
        if (keep == before).all():
            return keep, edges, node_inf


def graph_scores(adjacency: np.ndarray, logit_weights: np.ndarray, kinds: np.ndarray) -> dict:
    """``replacement`` and ``completeness`` scores (module docstring) of a graph."""
    norm = normalize_rows(adjacency)
    inf = influence(norm, logit_weights)
    inputs, errors = inf[kinds == "input"].sum(), inf[kinds == "error"].sum()
    weight = inf + logit_weights
    non_error = 1 - norm[:, kinds == "error"].sum(1)
    return {"replacement": float(inputs / (inputs + errors)) if inputs + errors > 0 else float("nan"),
            "completeness": float((non_error * weight).sum() / weight.sum())}


__all__ = ["normalize_rows", "influence", "prune", "graph_scores"]

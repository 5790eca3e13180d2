"""Do two checkpoints use the same circuit? The overlap of their top-k edges, read against the overlap between seeds of
one interface and against chance."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats
from tqdm.auto import tqdm

from analysis.causal.edges import edge_attribution
from analysis.errors import AnalysisError
from analysis.stats import seed_bootstrap


def jaccard_null(k: int, total: int) -> float:
    """The expected Jaccard overlap of two independent uniformly random ``k``-subsets of ``total`` items."""
    if not 0 < k <= total:
        raise AnalysisError(f"k must lie in 1..{total}, got {k}")
    i = np.arange(max(0, 2 * k - total), k + 1)
    p = stats.hypergeom.pmf(i, total, k, k)
    return float((p * i / (2 * k - i)).sum())


def _kind(a, b) -> str:
    if a[0] == b[0]:
        return "same_interface_cross_seed"
    return "cross_interface_same_seed" if a[1] == b[1] else "cross_interface_cross_seed"


def circuit_overlap(scores: dict, k: int = 32) -> pd.DataFrame:
    """Every pair of the edge-score tables ``{(variant, seed): edge_attribution(...)}`` (one graph, the same
    pairs): ``variant_a, seed_a, variant_b, seed_b, kind, k, jaccard, shared, null, spearman, n_edges``."""
    keys = list(scores)
    if len(keys) < 2:
        raise AnalysisError("give the edge scores of at least two checkpoints")
    index = None
    tops, mags = {}, {}
    for key in keys:
        s = scores[key].set_index(["sender", "receiver"]).score
        if index is None:
            index = s.index
        elif not s.index.equals(index):
            raise AnalysisError(f"checkpoint {key} has another graph than {keys[0]}; compare models of one shape")
        mags[key] = s.abs().to_numpy()
        tops[key] = set(np.argsort(-mags[key], kind="stable")[:k])
    total = len(index)
    if not 0 < k <= total:
        raise AnalysisError(f"k must lie in 1..{total} (the edges of the graph), got {k}")
    null = jaccard_null(k, total)
    rows = []
    for a, b in combinations(keys, 2):
        shared = len(tops[a] & tops[b])
        rows.append({"variant_a": a[0], "seed_a": a[1], "variant_b": b[0], "seed_b": b[1], "kind": _kind(a, b),
                     "k": k, "jaccard": shared / (2 * k - shared), "shared": shared, "null": null,
                     "spearman": float(stats.spearmanr(mags[a], mags[b]).statistic), "n_edges": total})
    return pd.DataFrame(rows)


def circuit_overlap_of_models(models: dict, pairs_of, k: int = 32, *, method: str = "eap",
                              metric: str = "logit_diff", progress: bool = False) -> pd.DataFrame:
    """:func:`~analysis.causal.circuit_overlap.circuit_overlap` of ``models`` (``{(variant, seed): model}``), each
    scored on ``pairs_of(model)`` under ``metric`` (the raw logit difference by default: the ranking is the
    normalised metric's, and a checkpoint without the behaviour has no gap to normalise by)."""
    scores = {key: edge_attribution(m, pairs_of(m), metric=metric, method=method)
              for key, m in tqdm(models.items(), desc="edge scores", unit="model", disable=not progress)}
    return circuit_overlap(scores, k)


def overlap_reading(table: pd.DataFrame) -> pd.DataFrame:
    """Per pair of variants: the mean Jaccard overlap across seeds (``cross_seed``) and within a seed
    (``same_seed``), each variant's own across-seed overlap (``within_a``, ``within_b``: NaN with one seed) and
    ``chance`` (the null), with the number of checkpoint pairs each mean is over and its 95% interval over seeds
    (``seed_lo``/``seed_hi``, :func:`analysis.stats.seed_bootstrap`: the seeds resampled with every pair they are
    in; NaN with one seed)."""
    def row(va, vb, quantity, part):
        if not len(part):
            return (va, vb, quantity, np.nan, np.nan, np.nan, 0)
        _, lo, hi = seed_bootstrap(part.jaccard.to_numpy(), part.seed_a.to_numpy(), part.seed_b.to_numpy())
        return (va, vb, quantity, float(part.jaccard.mean()), lo, hi, len(part))

    within = table[table.kind == "same_interface_cross_seed"]
    rows = []
    cross = table[table.kind != "same_interface_cross_seed"].copy()
    swap = cross.variant_a > cross.variant_b
    cross.loc[swap, ["variant_a", "variant_b"]] = cross.loc[swap, ["variant_b", "variant_a"]].to_numpy()
    cross.loc[swap, ["seed_a", "seed_b"]] = cross.loc[swap, ["seed_b", "seed_a"]].to_numpy()
    for (va, vb), g in cross.groupby(["variant_a", "variant_b"], sort=True):
        for quantity, part in (("cross_seed", g[g.kind == "cross_interface_cross_seed"]),
                               ("same_seed", g[g.kind == "cross_interface_same_seed"])):
            if len(part):
                rows.append(row(va, vb, quantity, part))
        for quantity, v in (("within_a", va), ("within_b", vb)):
            rows.append(row(va, vb, quantity, within[within.variant_a == v]))
        rows.append((va, vb, "chance", float(g.null.iloc[0]), np.nan, np.nan, 0))
    return pd.DataFrame(rows, columns=["variant_a", "variant_b", "quantity", "jaccard", "seed_lo", "seed_hi",
                                       "n_pairs"])


__all__ = ["circuit_overlap", "circuit_overlap_of_models", "overlap_reading", "jaccard_null"]

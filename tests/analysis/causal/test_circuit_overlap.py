"""The overlap of circuits: the chance level against a brute-force enumeration, the overlaps of made-up score tables
whose top edges are known, and the reading per pair of variants."""

from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from analysis import AnalysisError
from analysis.causal.circuit_overlap import circuit_overlap, jaccard_null, overlap_reading


def test_the_chance_overlap_is_the_mean_over_every_pair_of_subsets():
    total, k = 7, 3
    subsets = [set(c) for c in combinations(range(total), k)]
    brute = np.mean([len(a & b) / len(a | b) for a in subsets for b in subsets])
    assert np.isclose(jaccard_null(k, total), brute)
    assert jaccard_null(total, total) == 1.0
    with pytest.raises(AnalysisError):
        jaccard_null(0, total)


def table(top):
    """Scores over 10 edges whose largest |score| are the edges ``top`` (in that order), signs alternating."""
    edges = [(f"L0H{i}", "logits") for i in range(10)]
    score = np.full(10, 0.01)
    for rank, e in enumerate(top):
        score[e] = (-1) ** rank * (10 - rank)
    return pd.DataFrame({"sender": [s for s, _ in edges], "receiver": [r for _, r in edges], "score": score})


def test_overlaps_of_known_top_sets_and_their_reading():
    scores = {("canonical", 0): table([0, 1, 2]), ("canonical", 1): table([0, 1, 3]),
              ("gf2", 0): table([4, 5, 6]), ("gf2", 1): table([4, 5, 0])}
    ov = circuit_overlap(scores, k=3).set_index(["variant_a", "seed_a", "variant_b", "seed_b"])
    assert ov.loc[("canonical", 0, "canonical", 1), "jaccard"] == 2 / 4  # {0,1,2} & {0,1,3}
    assert ov.loc[("canonical", 0, "gf2", 0), "jaccard"] == 0 and ov.loc[("canonical", 0, "gf2", 1), "shared"] == 1
    assert ov.loc[("canonical", 0, "gf2", 0), "kind"] == "cross_interface_same_seed"
    assert ov.loc[("canonical", 1, "gf2", 0), "kind"] == "cross_interface_cross_seed"
    reading = overlap_reading(ov.reset_index()).set_index("quantity").jaccard
    assert reading["within_a"] == 0.5 and reading["within_b"] == 0.5  # gf2: {4,5,6} & {4,5,0}
    # across variants and seeds: (c0, g1) shares edge 0 -> 1/5; (c1, g0) shares none -> 0
    assert np.isclose(reading["cross_seed"], (1 / 5 + 0) / 2)
    assert np.isclose(reading["chance"], jaccard_null(3, 10))
    # the interval over seeds: the cross-seed pairs are (c0, g1) 1/5 and (c1, g0) 0; a seed draw of {0, 0} or {1, 1}
    # keeps no cross pair, {0, 1} keeps both: every draw's mean is 0.1 (the interval is the point)
    full = overlap_reading(ov.reset_index()).set_index("quantity")
    assert full.loc["cross_seed", "seed_lo"] == pytest.approx(0.1) and full.loc["cross_seed", "seed_hi"] == \
        pytest.approx(0.1)
    assert np.isnan(full.loc["chance", "seed_lo"])
    with pytest.raises(AnalysisError, match="another graph"):
        circuit_overlap({("a", 0): table([0]), ("b", 0): table([0]).iloc[:5]}, k=1)
    with pytest.raises(AnalysisError, match="k must lie"):
        circuit_overlap(scores, k=11)

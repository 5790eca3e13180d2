"""fit_affine: an affine GF(2) map recovered from the rows it maps, checked against known maps and brute force."""

import itertools

import numpy as np
import pytest

from fixedid.codes import GF2Code, bits_to_ids, fit_affine, gf2_rank, ids_to_bits
from fixedid.errors import CodeError


@pytest.mark.parametrize("n, affine, seed", [(4, False, 0), (8, True, 1), (12, True, 2)])
def test_every_id_recovers_the_map_exactly(n, affine, seed):
    code = GF2Code.random(n, seed, affine=affine)
    x = ids_to_bits(np.arange(1 << n), n)
    fit, determined = fit_affine(x, code.encode_bits(x))
    assert fit == code and determined == n


def test_a_vocabulary_past_half_the_ids_fixes_every_column():
    code = GF2Code.random(10, 5, affine=True)
    x = ids_to_bits(np.arange(513), 10)  # 513 > 2**9: ids 0, 1, 2, 4, ..., 512 all occur
    fit, determined = fit_affine(x, code.encode_bits(x))
    assert fit == code and determined == 10


def test_rows_without_the_unit_ids_are_solved_from_what_they_have():
    # ids that avoid 0, 1, 2, 4, 8 still span all 4 bits affinely: the map is recovered exactly
    code = GF2Code.random(4, 3, affine=True)
    ids = np.array([3, 5, 6, 9, 12, 15])
    x = ids_to_bits(ids, 4)
    assert gf2_rank(x ^ x[0]) == 3  # differences span 3 directions, the affine span is 4-dimensional with x[0]
    fit, determined = fit_affine(x, code.encode_bits(x))
    assert determined == gf2_rank(x ^ x[0]) and fit.agrees_on(x, code.encode_bits(x))
    ids = np.array([3, 5, 6, 7, 9, 12, 15])  # now 4 difference directions: every column is fixed
    x = ids_to_bits(ids, 4)
    assert gf2_rank(x ^ x[0]) == 4
    assert fit_affine(x, code.encode_bits(x)) == (code, 4)


def test_a_partial_span_is_completed_to_an_invertible_map_that_agrees_on_the_rows():
    code = GF2Code.random(8, 7, affine=True)
    x = ids_to_bits(np.arange(20), 8)  # ids below 32: bits 5..7 are always 0
    fit, determined = fit_affine(x, code.encode_bits(x))
    assert determined == 5 and gf2_rank(fit.matrix) == 8
    assert np.array_equal(fit.matrix[:, :5], code.matrix[:, :5]) and np.array_equal(fit.offset, code.offset)
    assert fit.agrees_on(x, code.encode_bits(x)) and not fit == code  # the free columns are the rule's, not A's


def test_the_identity_on_a_partial_span_completes_to_the_identity():
    x = ids_to_bits(np.arange(6), 8)
    assert fit_affine(x, x) == (GF2Code.identity(8), 3)


def test_maps_that_are_not_affine_or_not_one_to_one_are_refused():
    x = ids_to_bits(np.arange(16), 4)
    anded = x.copy()
    anded[:, 0] = x[:, 0] & x[:, 1]  # AND is not affine over GF(2)
    assert fit_affine(x, anded) is None
    squashed = x.copy()
    squashed[:, 3] = x[:, 2]  # affine but two ids share one output
    assert fit_affine(x, squashed) is None
    # brute force over every map of 3 bits: fit_affine finds one exactly for the invertible affine ones
    x3 = ids_to_bits(np.arange(8), 3)
    affine_tables = set()
    for rows in itertools.product([0, 1], repeat=9):
        a = np.array(rows, dtype=np.uint8).reshape(3, 3)
        if gf2_rank(a) == 3:
            for b in itertools.product([0, 1], repeat=3):
                affine_tables.add(tuple(GF2Code(a, np.array(b)).encode_ids(np.arange(8))))
    rng = np.random.default_rng(0)
    assert len(affine_tables) == 1344  # |AGL(3, 2)| = 8 * 168
    some_affine = [sorted(affine_tables)[i] for i in rng.choice(1344, 100, replace=False)]
    for perm in some_affine + [tuple(rng.permutation(8)) for _ in range(100)]:
        fit = fit_affine(x3, ids_to_bits(np.array(perm), 3))
        assert (fit is not None) == (perm in affine_tables)
        if fit is not None:
            assert tuple(bits_to_ids(fit[0].encode_bits(x3))) == perm


def test_bad_shapes_are_refused():
    with pytest.raises(CodeError, match="one shape"):
        fit_affine(np.zeros((3, 4)), np.zeros((3, 5)))
    with pytest.raises(CodeError, match="0/1"):
        fit_affine(np.full((2, 2), 2), np.zeros((2, 2)))

import galois
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixedid.codes import (GF2Code, bits_to_ids, canonical_code, code_table, coset_min_weight, gf2_inverse, gf2_matmul,
                           gf2_null_space, gf2_rank, ids_to_bits, is_invertible, min_weight_representation,
                           random_invertible, render_bits, table_sha256)
from fixedid.errors import CodeError

GF2 = galois.GF(2)


def bit_matrices(max_n=10, square=True):
    @st.composite
    def draw(d):
        n = d(st.integers(1, max_n))
        m = n if square else d(st.integers(1, max_n))
        flat = d(st.lists(st.integers(0, 1), min_size=n * m, max_size=n * m))
        return np.array(flat, dtype=np.uint8).reshape(n, m)
    return draw()


def test_canonical_code_msb_pm1_default():
    c = canonical_code([0, 1, 5, 65535])
    assert c.shape == (4, 16) and c.dtype == np.float32
    assert (c[0] == -1).all() and (c[3] == 1).all()
    assert c[1, -1] == 1 and (c[1, :-1] == -1).all()  # MSB first: bit 0 is the last column
    assert list(canonical_code([5], 4, value_map="01")[0]) == [0, 1, 0, 1]
    assert list(canonical_code([1], 4, bit_order="lsb", value_map="01", scale=2.0)[0]) == [2, 0, 0, 0]


def test_ids_bits_round_trip_and_range():
    ids = np.arange(1 << 12)
    assert np.array_equal(bits_to_ids(ids_to_bits(ids, 12)), ids)
    with pytest.raises(CodeError, match="must lie in"):
        ids_to_bits([4096], 12)
    with pytest.raises(CodeError, match="bit_order"):
        render_bits(ids_to_bits([1], 4), bit_order="middle")
    with pytest.raises(CodeError, match="value_map"):
        render_bits(ids_to_bits([1], 4), value_map="gray")


@settings(max_examples=80, deadline=None)
@given(bit_matrices(max_n=12, square=False))
def test_rank_agrees_with_galois(m):
    assert gf2_rank(m) == np.linalg.matrix_rank(GF2(m))


@settings(max_examples=80, deadline=None)
@given(bit_matrices(max_n=12))
def test_inverse_agrees_with_galois(m):
    invertible = np.linalg.matrix_rank(GF2(m)) == m.shape[0]
    assert is_invertible(m) == invertible
    if invertible:
        inv = gf2_inverse(m)
        assert np.array_equal(inv, np.array(np.linalg.inv(GF2(m))))
        assert np.array_equal(gf2_matmul(m, inv), np.eye(m.shape[0], dtype=np.uint8))
    else:
        with pytest.raises(CodeError, match="singular"):
            gf2_inverse(m)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 2**32), st.booleans())
def test_every_invertible_affine_code_is_a_bijection(n, seed, affine):
    code = GF2Code.random(n, seed, affine=affine)
    ids = np.arange(1 << n)
    out = code.encode_ids(ids)
    assert np.array_equal(np.sort(out), ids)
    assert np.array_equal(code.inverse().encode_ids(out), ids)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 10), st.integers(0, 10**6), st.integers(0, 10**6))
def test_composition_and_inverse(n, s1, s2):
    f, g = GF2Code.random(n, s1, affine=True), GF2Code.random(n, s2, affine=True)
    ids = np.arange(1 << n)
    assert np.array_equal((g @ f).encode_ids(ids), g.encode_ids(f.encode_ids(ids)))
    assert f.inverse() @ f == GF2Code.identity(n)
    assert f @ f.inverse() == GF2Code.identity(n)


def test_encode_matches_explicit_matrix_vector_product():
    code = GF2Code.random(16, 3, affine=True)
    A, b = GF2(code.matrix), GF2(code.offset)
    for t in (0, 1, 777, 40000, 65535):
        x = GF2(((t >> np.arange(16)) & 1).astype(np.uint8))
        y = np.array(A @ x + b).astype(np.int64)
        assert code.encode_ids([t])[0] == int((y << np.arange(16)).sum())


def test_random_is_seeded_and_full_rank():
    a, b = random_invertible(16, 7), random_invertible(16, 7)
    assert np.array_equal(a, b) and gf2_rank(a) == 16
    assert not np.array_equal(a, random_invertible(16, 8))
    assert GF2Code.random(16, 0).is_linear and not GF2Code.random(16, 0, affine=True).is_linear


def test_json_round_trip_and_validation():
    code = GF2Code.random(16, 11, affine=True)
    j = code.to_json()
    assert set(j) == {"matrix", "offset"} and all(v in (0, 1) for row in j["matrix"] for v in row)
    assert GF2Code.from_json(j) == code
    singular = np.zeros((4, 4), dtype=np.uint8)
    with pytest.raises(CodeError, match="singular"):
        GF2Code(singular, np.zeros(4))
    with pytest.raises(CodeError, match="0 or 1"):
        GF2Code(np.eye(4) * 2, np.zeros(4))
    with pytest.raises(CodeError, match="offset"):
        GF2Code(np.eye(4), np.zeros(3))
    with pytest.raises(CodeError):
        GF2Code.from_json({"matrix": [[1]]})


def test_code_table_whole_16_bit_vocabulary():
    code = GF2Code.random(16, 0)
    t = code_table(65536, 16, recoding=code)
    assert t.shape == (65536, 16)
    # rows are distinct (a bijection) and the gf2 table is the canonical table permuted by the recoding
    assert len(np.unique(t, axis=0)) == 65536
    canon = code_table(65536, 16)
    assert np.array_equal(t, canon[code.encode_ids(np.arange(65536))])
    assert table_sha256(t) != table_sha256(canon)
    with pytest.raises(CodeError, match="does not fit"):
        code_table(70000, 16)


@settings(max_examples=80, deadline=None)
@given(bit_matrices(max_n=10, square=False))
def test_null_space_agrees_with_galois(m):
    basis = gf2_null_space(m)
    assert basis.shape == (m.shape[1] - np.linalg.matrix_rank(GF2(m)), m.shape[1])
    assert not gf2_matmul(m, basis.T).any()  # every basis vector is in the null space
    if len(basis):  # independent, and the same space as galois's
        assert gf2_rank(basis) == len(basis)
        assert gf2_rank(np.vstack([basis, np.array(GF2(m).null_space())])) == len(basis)


def brute_force_weight(values, codes):
    """The fewest code bits whose XOR equals ``values`` up to a constant, over all 2**n masks; None if none does."""
    n = codes.shape[1]
    found = [bin(r).count("1") for r in range(1 << n)
             if len(set(((codes.astype(int) @ ids_to_bits(r, n)) % 2 ^ values).tolist())) == 1]
    return min(found) if found else None


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 64), st.lists(st.integers(0, 1), min_size=6, max_size=6), st.booleans())
def test_coset_min_weight_is_the_brute_force_minimum(seed, vocab, target, affine):
    """n = 6 and a vocabulary 0..V-1 that leaves the high bits constant (V <= 32): the lightest mask of the coset is
    the lightest of all 64 masks that give the same function, and the mask returned does give it."""
    code = GF2Code.random(6, seed, affine=affine)
    x = ids_to_bits(np.arange(vocab), 6)
    c = code.encode_bits(x)
    values = (x.astype(int) @ np.array(target)) % 2
    weight, mask = min_weight_representation(np.array(target), np.arange(vocab), 6, code)
    assert weight == brute_force_weight(values, c)
    assert len(set(((c.astype(int) @ mask) % 2 ^ values).tolist())) == 1
    if vocab == 64:  # every id: the representation is unique, the row combination of A^-1
        row = gf2_matmul(np.array(target)[None], gf2_inverse(code.matrix))[0]
        assert np.array_equal(mask, row)


def test_min_weight_is_one_where_the_row_of_the_inverse_is_heavier():
    """A known answer: code bit 0 = x0 ^ x3 ^ x4 ^ x5, every other code bit its own id bit. Over all 64 ids canonical
    bit 0 is code bits 0, 3, 4, 5 (the row of A^-1 has weight 4); over ids 0..7, where x3..x5 are 0, it is code bit 0
    alone (weight 1), and canonical bits 3..5 are constant (weight 0)."""
    a = np.eye(6, dtype=np.uint8)
    a[0, [3, 4, 5]] = 1
    code = GF2Code(a, np.zeros(6, dtype=np.uint8))
    assert gf2_inverse(a)[0].sum() == 4
    e0 = np.eye(6, dtype=np.uint8)[0]
    assert min_weight_representation(e0, np.arange(64), 6, code)[0] == 4
    weight, mask = min_weight_representation(e0, np.arange(8), 6, code)
    assert weight == 1 and mask.tolist() == [1, 0, 0, 0, 0, 0]
    assert min_weight_representation(np.eye(6, dtype=np.uint8)[4], np.arange(8), 6, code)[0] == 0


def test_coset_min_weight_refuses_what_no_mask_gives_and_oversized_cosets():
    rng = np.random.default_rng(0)
    codes = ids_to_bits(np.arange(64), 6)
    values = rng.integers(0, 2, 64)  # a random function of 6 bits: affine with probability 2**-57
    assert brute_force_weight(values, codes) is None and coset_min_weight(values, codes) is None
    dup = np.vstack([codes[:2], codes[:1]])  # one code, two values: no function of the code
    assert coset_min_weight(np.array([0, 1, 1]), dup) is None
    wide = ids_to_bits(np.arange(4), 24)  # 2 of 24 directions vary: 2**22 masks per function
    with pytest.raises(CodeError, match="refused"):
        coset_min_weight(np.array([0, 1, 0, 1]), wide)
    assert coset_min_weight(np.array([0, 1, 0, 1]), wide, max_free=22)[0] == 1
    with pytest.raises(CodeError, match="one per code row"):
        coset_min_weight(np.array([0, 1]), codes)
    with pytest.raises(CodeError, match="canonical bits"):
        min_weight_representation(np.ones(5), np.arange(8), 6)

import galois
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixedid.codes import (GF2Code, bits_to_ids, canonical_code, code_table, gf2_inverse, gf2_matmul, gf2_rank,
                           ids_to_bits, is_invertible, random_invertible, render_bits, table_sha256)
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

"""Fixed token-identity codes and the GF(2) algebra behind them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .errors import CodeError

BIT_ORDERS = ("msb", "lsb")
VALUE_MAPS = ("pm1", "01")


# --------------------------------------------------------------------------------------------------------------
# bit vectors <-> ids


def ids_to_bits(ids, n_bits: int) -> np.ndarray:
    """Bits of each id, least significant first: ``[..., n_bits]`` uint8 with ``out[..., j] = (id >> j) & 1``."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= (1 << n_bits)):
        raise CodeError(f"token ids must lie in [0, 2**{n_bits}) = [0, {1 << n_bits}); got min {ids.min()}, "
                        f"max {ids.max()}")
    return ((ids[..., None] >> np.arange(n_bits, dtype=np.int64)) & 1).astype(np.uint8)


def bits_to_ids(bits) -> np.ndarray:
    """Inverse of :func:`~fixedid.codes.ids_to_bits`: ``[..., n_bits]`` bits (least significant first) -> int64 ids."""
    bits = np.asarray(bits, dtype=np.int64)
    return (bits << np.arange(bits.shape[-1], dtype=np.int64)).sum(-1)


def render_bits(bits, *, bit_order: str = "msb", value_map: str = "pm1", scale: float = 1.0) -> np.ndarray:
    """Turn LSB-first bit vectors ``[..., n]`` into the real-valued code a model reads (float32 ``[..., n]``)."""
    if bit_order not in BIT_ORDERS:
        raise CodeError(f"unknown bit_order {bit_order!r}; use one of {BIT_ORDERS}")
    if value_map not in VALUE_MAPS:
        raise CodeError(f"unknown value_map {value_map!r}; use one of {VALUE_MAPS}")
    bits = np.asarray(bits, dtype=np.float32)
    if bit_order == "msb":
        bits = bits[..., ::-1]
    values = 2.0 * bits - 1.0 if value_map == "pm1" else bits
    return np.ascontiguousarray(values * np.float32(scale), dtype=np.float32)


def canonical_code(ids, n_bits: int = 16, *, bit_order: str = "msb", value_map: str = "pm1",
                   scale: float = 1.0) -> np.ndarray:
    """The canonical ``n_bits`` code of each id as float32 ``[..., n_bits]``."""
    return render_bits(ids_to_bits(ids, n_bits), bit_order=bit_order, value_map=value_map, scale=scale)


# --------------------------------------------------------------------------------------------------------------
# GF(2) linear algebra on uint8 matrices


def _as_bit_matrix(m, name: str = "matrix") -> np.ndarray:
    a = np.asarray(m)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise CodeError(f"{name} must be a non-empty square matrix, got shape {a.shape}")
    if not np.isin(a, (0, 1)).all():
        raise CodeError(f"{name} entries must be 0 or 1")
    return a.astype(np.uint8)


def _row_reduce(a: np.ndarray, aug: np.ndarray | None = None) -> tuple[int, np.ndarray, np.ndarray | None]:
    """Gauss-Jordan elimination over GF(2). Returns (rank, reduced a, reduced aug)."""
    a = a.copy()
    aug = None if aug is None else aug.copy()
    rows, cols = a.shape
    rank = 0
    for col in range(cols):
        pivots = np.nonzero(a[rank:, col])[0]
        if pivots.size == 0:
            continue
        p = rank + pivots[0]
        if p != rank:
            a[[rank, p]] = a[[p, rank]]
            if aug is not None:
                aug[[rank, p]] = aug[[p, rank]]
        others = np.nonzero(a[:, col])[0]
        others = others[others != rank]
        a[others] ^= a[rank]
        if aug is not None:
            aug[others] ^= aug[rank]
        rank += 1
        if rank == rows:
            break
    return rank, a, aug


def gf2_rank(m) -> int:
    """Rank of a 0/1 matrix over GF(2) (any shape)."""
    a = np.asarray(m)
    if a.ndim != 2 or not np.isin(a, (0, 1)).all():
        raise CodeError("gf2_rank needs a 2-D matrix of 0/1 entries")
    return _row_reduce(a.astype(np.uint8))[0]


def is_invertible(m) -> bool:
    """Whether a square 0/1 matrix is invertible over GF(2)."""
    a = _as_bit_matrix(m)
    return gf2_rank(a) == a.shape[0]


def gf2_inverse(m) -> np.ndarray:
    """Inverse over GF(2); raises :class:`~fixedid.errors.CodeError` if the matrix is singular."""
    a = _as_bit_matrix(m)
    n = a.shape[0]
    rank, _, inv = _row_reduce(a, np.eye(n, dtype=np.uint8))
    if rank != n:
        raise CodeError(f"matrix is singular over GF(2) (rank {rank} < {n}); an invertible matrix is required")
    return inv


def gf2_matmul(a, b) -> np.ndarray:
    """Matrix product over GF(2)."""
    return (np.asarray(a, dtype=np.int64) @ np.asarray(b, dtype=np.int64) % 2).astype(np.uint8)


def gf2_null_space(m) -> np.ndarray:
    """A basis of the null space ``{w : m w = 0}`` over GF(2) of a 0/1 matrix ``[rows, cols]`` (any number of rows,
    none included): ``[cols - rank, cols]`` uint8, one basis vector per row, from the reduced row echelon form."""
    a = np.asarray(m)
    if a.ndim != 2 or a.shape[1] == 0 or not np.isin(a, (0, 1)).all():
        raise CodeError("gf2_null_space needs a 2-D matrix of 0/1 entries with at least one column")
    cols = a.shape[1]
    rank, red, _ = _row_reduce(a.astype(np.uint8))
    red = red[:rank]
    pivots = [int(np.flatnonzero(row)[0]) for row in red]
    free = [c for c in range(cols) if c not in set(pivots)]
    basis = np.zeros((len(free), cols), dtype=np.uint8)
    for i, f in enumerate(free):
        basis[i, f] = 1
        basis[i, pivots] = red[:, f]  # row r of the reduced form: x[pivot r] = sum of its free entries
    return basis


#: The most free directions :func:`~fixedid.codes.coset_min_weight` enumerates (2**20 candidates, 8 MB).
MAX_FREE_BITS = 20


def coset_min_weight(values, codes, *, max_free: int = MAX_FREE_BITS) -> tuple[int, np.ndarray] | None:
    """The fewest code bits whose XOR gives ``values`` over the rows of ``codes``, up to a constant.

    ``codes`` ``[N, n]`` are bit vectors (0/1, any bit order: the mask comes back in the same order), ``values``
    ``[N]`` a 0/1 function of the rows. A mask ``r`` represents ``values`` where ``r . c XOR values`` is the same for
    every row ``c`` (an affine read-out: the constant, a NOT, is free). When the rows' affine span has a direction
    space ``U`` of dimension ``m < n``, the masks that represent one function form a coset ``r0 + U^perp`` of
    ``2**(n - m)`` masks; all of them are enumerated and the lightest returned as ``(weight, mask)`` (ties: the mask
    with the smallest integer value, bit ``j`` worth ``2**j``). Weight 0: ``values`` is constant over the rows.
    ``None``: no mask represents ``values`` (it is not an affine function of the code). Raises
    :class:`~fixedid.errors.CodeError` when the coset has more than ``2**max_free`` masks."""
    c = np.asarray(codes)
    v = np.asarray(values)
    if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] == 0 or not np.isin(c, (0, 1)).all():
        raise CodeError("codes must be a non-empty [rows, bits] matrix of 0/1 entries")
    if v.shape != (c.shape[0],) or not np.isin(v, (0, 1)).all():
        raise CodeError(f"values must be {c.shape[0]} entries of 0/1 (one per code row), got shape {v.shape}")
    if c.shape[1] > 62:
        raise CodeError(f"codes of {c.shape[1]} bits are too wide (at most 62)")
    c = c.astype(np.uint8)
    n = c.shape[1]
    weights = 1 << np.arange(n, dtype=np.int64)
    _, first, inverse = np.unique(c.astype(np.int64) @ weights, return_index=True, return_inverse=True)
    rows, v_rows = c[first], v.astype(np.uint8)[first]
    if not np.array_equal(v.astype(np.uint8), v_rows[inverse]):
        return None  # two rows with one code but different values: no function of the code at all
    # a particular solution of [codes 1] (r, const) = values
    aug = np.concatenate([rows, np.ones((len(rows), 1), dtype=np.uint8)], 1)
    rank, red, rhs = _row_reduce(aug, v_rows[:, None])
    if rhs[rank:].any():
        return None
    r0 = np.zeros(n + 1, dtype=np.uint8)
    for i in range(rank):
        r0[int(np.flatnonzero(red[i])[0])] = rhs[i, 0]
    basis = gf2_null_space(rows ^ rows[0])  # U^perp: the masks that are constant over the rows
    if len(basis) > max_free:
        raise CodeError(f"the code rows span {n - len(basis)} of {n} directions, so 2**{len(basis)} masks represent "
                        f"each function; enumerating more than 2**{max_free} is refused (give more rows or fewer bits)")
    cand = np.array([int(r0[:n].astype(np.int64) @ weights)], dtype=np.int64)
    for b in basis.astype(np.int64) @ weights:
        cand = np.concatenate([cand, cand ^ b])
    pop = np.bitwise_count(cand)
    best = int(cand[np.lexsort((cand, pop))[0]])
    return int(np.bitwise_count(best)), ((best >> np.arange(n)) & 1).astype(np.uint8)


def min_weight_representation(target, ids, n_bits: int, recoding: "GF2Code | None" = None, *,
                              max_free: int = MAX_FREE_BITS) -> tuple[int, np.ndarray]:
    """The GF(2) weight of an XOR of canonical id bits in a model's own code, over the ids that occur.

    ``target`` ``[n_bits]`` (0/1, LSB first) selects the canonical bits XORed together (canonical bit ``i``: the unit
    vector ``e_i``); ``ids`` are the token ids the weight is taken over (a model's vocabulary ``0 .. V-1``);
    ``recoding`` is the model's ``c = A x XOR b`` (``None``: the canonical code). Over all ``2**n_bits`` ids the
    answer is the row combination ``target . A^-1``; over fewer ids other masks give the same function, and
    :func:`~fixedid.codes.coset_min_weight` returns the lightest: ``(weight, mask of code bits, LSB first)``."""
    t = np.asarray(target)
    if t.shape != (n_bits,) or not np.isin(t, (0, 1)).all():
        raise CodeError(f"target must be {n_bits} entries of 0/1 (canonical bits, LSB first), got shape {t.shape}")
    x = ids_to_bits(np.unique(np.asarray(ids, dtype=np.int64)), n_bits)
    if recoding is not None and recoding.n_bits != n_bits:
        raise CodeError(f"recoding has {recoding.n_bits} bits but the code has {n_bits}")
    code = x if recoding is None else recoding.encode_bits(x)
    values = (x.astype(np.int64) @ t.astype(np.int64)) % 2
    return coset_min_weight(values, code, max_free=max_free)


def random_invertible(n: int, seed: int) -> np.ndarray:
    """A matrix drawn uniformly from GL(n, 2) by rejection sampling (about 3.5 draws on average) from ``seed``."""
    if n < 1:
        raise CodeError(f"n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    while True:
        a = rng.integers(0, 2, size=(n, n), dtype=np.uint8)
        if gf2_rank(a) == n:
            return a


# --------------------------------------------------------------------------------------------------------------
# affine GF(2) recodings


@dataclass(frozen=True, eq=False)
class GF2Code:
    """An invertible affine recoding ``x -> A x XOR b`` of n-bit vectors (bit j = bit j of the id).

    ``GF2Code.random(16, seed=0)`` draws ``A`` uniformly from GL(16, 2) (``b = 0`` unless ``affine=True``, then
    ``b`` is uniform too). ``encode_ids`` maps token ids to recoded ids and is a bijection on ``[0, 2**n)``.
    Composition ``g @ f`` applies ``f`` first. The JSON form is ``{"matrix": [[0/1,...],...], "offset": [0/1,...]}``.
    """

    matrix: np.ndarray
    offset: np.ndarray

    def __post_init__(self):
        a = _as_bit_matrix(self.matrix, "GF(2) matrix A")
        n = a.shape[0]
        b = np.asarray(self.offset)
        if b.shape != (n,) or not np.isin(b, (0, 1)).all():
            raise CodeError(f"GF(2) offset b must be {n} entries of 0/1, got shape {b.shape}")
        rank = gf2_rank(a)
        if rank != n:
            raise CodeError(f"GF(2) matrix A is singular (rank {rank} < {n}); the recoding must be invertible. "
                            "Draw one with GF2Code.random(n_bits, seed) or fix the matrix")
        a = a.copy()
        b = b.astype(np.uint8).copy()
        a.flags.writeable = False
        b.flags.writeable = False
        object.__setattr__(self, "matrix", a)
        object.__setattr__(self, "offset", b)

    @property
    def n_bits(self) -> int:
        """The code's width ``n`` (``A`` is ``[n, n]``)."""
        return self.matrix.shape[0]

    @classmethod
    def identity(cls, n_bits: int = 16) -> "GF2Code":
        """The identity recoding ``A = I, b = 0`` on ``n_bits`` bits: the ``gf2`` interface with it renders the
        canonical code."""
        return cls(np.eye(n_bits, dtype=np.uint8), np.zeros(n_bits, dtype=np.uint8))

    @classmethod
    def random(cls, n_bits: int = 16, seed: int = 0, affine: bool = False) -> "GF2Code":
        """Uniform over GL(n_bits, 2) from ``seed``; with ``affine`` also a uniform offset from the same stream."""
        a = random_invertible(n_bits, seed)
        b = np.zeros(n_bits, dtype=np.uint8)
        if affine:
            b = np.random.default_rng([seed, 1]).integers(0, 2, size=n_bits, dtype=np.uint8)
        return cls(a, b)

    def encode_bits(self, bits) -> np.ndarray:
        """Apply the map to bit vectors ``[..., n]`` (LSB first)."""
        bits = np.asarray(bits, dtype=np.int64)
        return ((bits @ self.matrix.T.astype(np.int64)) % 2).astype(np.uint8) ^ self.offset

    def encode_ids(self, ids) -> np.ndarray:
        """Recode token ids: ``id -> int(A bits(id) XOR b)``, int64 of the same shape."""
        return bits_to_ids(self.encode_bits(ids_to_bits(ids, self.n_bits)))

    def inverse(self) -> "GF2Code":
        """The recoding that undoes this one: ``x -> A^-1 x XOR A^-1 b``, so ``self.inverse() @ self`` is the
        identity."""
        inv = gf2_inverse(self.matrix)
        return GF2Code(inv, gf2_matmul(inv, self.offset[:, None])[:, 0])

    def compose(self, first: "GF2Code") -> "GF2Code":
        """``self ∘ first``: apply ``first``, then ``self``."""
        if first.n_bits != self.n_bits:
            raise CodeError(f"cannot compose codes of {self.n_bits} and {first.n_bits} bits")
        a = gf2_matmul(self.matrix, first.matrix)
        b = gf2_matmul(self.matrix, first.offset[:, None])[:, 0] ^ self.offset
        return GF2Code(a, b)

    __matmul__ = compose

    @property
    def is_linear(self) -> bool:
        """Whether the offset ``b`` is zero (a linear map; else affine)."""
        return not self.offset.any()

    def __eq__(self, other) -> bool:
        return (isinstance(other, GF2Code) and np.array_equal(self.matrix, other.matrix)
                and np.array_equal(self.offset, other.offset))

    def __hash__(self) -> int:
        return hash((self.matrix.tobytes(), self.offset.tobytes()))

    def __repr__(self) -> str:
        kind = "linear" if self.is_linear else "affine"
        return f"GF2Code(n_bits={self.n_bits}, {kind}, sha={self.fingerprint()[:12]})"

    def fingerprint(self) -> str:
        """Hex sha256 of the matrix and offset bytes: equal for equal recodings (``repr`` shows its first 12
        characters)."""
        return hashlib.sha256(self.matrix.tobytes() + self.offset.tobytes()).hexdigest()

    def agrees_on(self, inputs, outputs) -> bool:
        """Whether the map takes every row of ``inputs`` ``[N, n]`` to the same row of ``outputs`` (bit vectors)."""
        return bool(np.array_equal(self.encode_bits(inputs), np.asarray(outputs, dtype=np.uint8)))

    def to_json(self) -> dict:
        """The JSON form ``{"matrix": [[0/1, ...], ...], "offset": [0/1, ...]}`` (plain ints, rows of ``A`` in
        order); :meth:`fixedid.codes.GF2Code.from_json` reads it back."""
        return {"matrix": self.matrix.astype(int).tolist(), "offset": self.offset.astype(int).tolist()}

    @classmethod
    def from_json(cls, d: dict) -> "GF2Code":
        """A recoding from its JSON form (:meth:`fixedid.codes.GF2Code.to_json`); any other keys, a singular matrix
        or entries other than 0/1 raise :class:`~fixedid.errors.CodeError`."""
        if not isinstance(d, dict) or set(d) != {"matrix", "offset"}:
            raise CodeError("a GF2Code JSON form is {'matrix': [[0/1,...],...], 'offset': [0/1,...]}")
        return cls(np.array(d["matrix"]), np.array(d["offset"]))


def fit_affine(inputs, outputs) -> tuple[GF2Code, int] | None:
    """The invertible affine map ``c = A x XOR b`` that takes each row of ``inputs`` to the same row of ``outputs``.

    ``inputs`` and ``outputs`` are ``[N, n]`` bit vectors (0/1, LSB first). Returns ``(code, determined)``, where
    ``determined`` is the dimension of the inputs' affine span, or ``None`` where no invertible affine map does it
    (the outputs are not an affine function of the inputs, or two different inputs share an output). The rows fix
    ``b`` and ``A`` on that span (from the row-reduced differences ``x_i XOR x_0`` and the same combinations of the
    outputs); beyond it ``A`` is completed by a fixed rule so that it is invertible: each unit vector ``e_j`` the span
    lacks (in increasing ``j``) maps to ``e_j`` where that keeps the images independent, else to the first unit vector
    that does. Over ids ``0 .. V-1`` with ``V > 2**(n-1)`` nothing is completed: the ids ``0, 1, 2, 4, ...`` give
    ``b`` and every column of ``A``. The map is verified on every row before it is returned."""
    x, c = np.asarray(inputs), np.asarray(outputs)
    if x.ndim != 2 or x.shape != c.shape or x.shape[0] == 0 or x.shape[1] == 0:
        raise CodeError(f"inputs and outputs must be two non-empty [rows, bits] matrices of one shape, got "
                        f"{x.shape} and {c.shape}")
    if not (np.isin(x, (0, 1)).all() and np.isin(c, (0, 1)).all()):
        raise CodeError("inputs and outputs must hold 0/1 entries")
    x, c = x.astype(np.uint8), c.astype(np.uint8)
    n = x.shape[1]
    rank, red, aug = _row_reduce(x ^ x[0], c ^ c[0])
    if aug[rank:].any():  # a combination of input differences that vanishes while the outputs' does not
        return None
    basis, images = [*red[:rank]], [*aug[:rank]]
    if rank and gf2_rank(np.array(images)) < rank:  # two inputs share an output: not one-to-one
        return None
    unit = np.eye(n, dtype=np.uint8)
    for j in range(n):
        if gf2_rank(np.array(basis + [unit[j]])) == len(basis):
            continue
        for cand in [unit[j], *unit]:
            if gf2_rank(np.array(images + [cand])) > len(images):
                break
        basis.append(unit[j])
        images.append(cand)
    # A B = I_m with the basis vectors as the columns of B and their images as the columns of I_m
    a = gf2_matmul(np.array(images).T, gf2_inverse(np.array(basis).T))
    b = c[0] ^ gf2_matmul(a, x[0][:, None])[:, 0]
    code = GF2Code(a, b)
    if not code.agrees_on(x, c):
        return None
    return code, rank


# --------------------------------------------------------------------------------------------------------------
# the table a model reads


def code_table(vocab_size: int, n_bits: int = 16, *, recoding: GF2Code | None = None, bit_order: str = "msb",
               value_map: str = "pm1", scale: float = 1.0) -> np.ndarray:
    """The ``[vocab_size, n_bits]`` float32 code table of the canonical (``recoding=None``) or a recoded interface."""
    if vocab_size < 1 or vocab_size > (1 << n_bits):
        raise CodeError(f"vocab_size {vocab_size} does not fit a {n_bits}-bit code (at most {1 << n_bits} ids)")
    ids = np.arange(vocab_size, dtype=np.int64)
    bits = ids_to_bits(ids, n_bits)
    if recoding is not None:
        if recoding.n_bits != n_bits:
            raise CodeError(f"recoding has {recoding.n_bits} bits but the code has {n_bits}")
        bits = recoding.encode_bits(bits)
    return render_bits(bits, bit_order=bit_order, value_map=value_map, scale=scale)


def id_permutation(vocab_size: int, seed: int) -> np.ndarray:
    """The seeded permutation of ``0..vocab_size-1`` of the ``permuted`` interface: token t reads the canonical code
    of ``perm[t]``, so ids that are neighbours share no code structure."""
    return np.random.default_rng([int(seed), 7]).permutation(vocab_size)


def frozen_random_table(vocab_size: int, width: int, seed: int, norm: float) -> np.ndarray:
    """The ``[vocab_size, width]`` float32 table of the ``frozen_random`` interface: seeded Gaussian rows, each
    scaled to ``norm`` (the code rows' norm), frozen like a code."""
    rows = np.random.default_rng([int(seed), 11]).standard_normal((vocab_size, width))
    rows *= norm / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows.astype(np.float32)


def random_head(vocab_size: int, width: int, seed: int) -> np.ndarray:
    """The ``[vocab_size, width]`` float32 rows of the ``output = "random"`` head: seeded Gaussian rows scaled to
    unit norm (like the ``output = "code"`` head's rows), from a stream of their own (not the ``frozen_random``
    input table's, so the two controls do not share rows)."""
    rows = np.random.default_rng([int(seed), 17]).standard_normal((vocab_size, width))
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows.astype(np.float32)


def code_features(code, width: int, seed: int, bandwidth: float = 0.25) -> np.ndarray:
    """A fixed, full-rank expansion of ``[vocab, n_bits]`` code rows to ``[vocab, width]``: random Fourier features
    ``cos(code @ W + b)`` with ``W ~ N(0, bandwidth)`` and ``b ~ U(0, 2 pi)`` (for {-1,+1} codes the rows' inner
    products approximate ``exp(-2 * bandwidth * hamming)``: codes one bit apart stay alike, distant ones do not),
    each row scaled to unit norm. The output head of ``output = "code"``."""
    code = np.asarray(code, dtype=np.float64)
    rng = np.random.default_rng([int(seed), 13])
    w = rng.normal(0.0, np.sqrt(bandwidth), size=(code.shape[1], width))
    b = rng.uniform(0.0, 2 * np.pi, size=width)
    rows = np.cos(code @ w + b)
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows.astype(np.float32)


def table_sha256(table) -> str:
    """sha256 of a code table as contiguous little-endian float32 bytes, prefixed by its shape."""
    t = np.ascontiguousarray(np.asarray(table, dtype="<f4"))
    h = hashlib.sha256(f"{t.shape}".encode())
    h.update(t.tobytes())
    return h.hexdigest()

"""Recognise a fixed token-identity code in an input table: ``infer_code(rows)``."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import torch

from fixedid import ModelConfig
from fixedid.codes import GF2Code, bits_to_ids, code_table, fit_affine, id_permutation, ids_to_bits, random_invertible
from fixedid.errors import FixedIdWarning

from analysis.errors import AnalysisError

#: Seeds tried for the toolkit's own seeded draws (gf2 matrices, the permuted control's permutation).
MAX_SEED = 256
#: The widest code a ModelConfig accepts.
MAX_BITS = 24
#: Entries sampled to find the two levels (the whole table is checked afterwards).
_SAMPLE = 1 << 20
#: Entries per chunk of the full checks (bounded memory at 65,536 x 2,048).
_CHUNK = 1 << 22


class CodeInferredWarning(FixedIdWarning):
    """A model was imported as a fixed-code interface because its input rows are exactly a code (no record said so)."""


@dataclass(frozen=True)
class InferredCode:
    """What :func:`~analysis.interop.codeinfer.infer_code` recognised (``kind`` not None) or why not (``kind`` None,
    ``reason``)."""

    kind: str | None
    reason: str
    vocab_size: int
    d_model: int
    n_bits: int | None = None
    bit_order: str | None = None
    value_map: str | None = None
    code_scale: float | None = None
    repeat: str | None = None
    recoding: GF2Code | None = None
    gf2_seed: int | None = None
    gf2_affine: bool | None = None
    table_seed: int | None = None
    determined_bits: int | None = None
    max_deviation: float | None = None
    rtol: float | None = None
    dtype: str = ""

    @property
    def interface(self) -> str | None:
        """The :class:`~fixedid.config.ModelConfig` ``interface`` these rows are (``kind``), None when they are not a
        code."""
        return self.kind

    def __bool__(self) -> bool:
        return self.kind is not None

    def config_fields(self) -> dict:
        """The :class:`~fixedid.config.ModelConfig` fields that render these rows (empty when they are not a code)."""
        if self.kind is None:
            return {}
        out = dict(interface=self.kind, n_bits=self.n_bits, bit_order=self.bit_order, value_map=self.value_map,
                   code_scale=self.code_scale, repeat=self.repeat)
        if self.kind == "gf2":
            j = self.recoding.to_json()
            out.update(gf2_matrix=j["matrix"], gf2_offset=j["offset"])
            if self.gf2_seed is not None:  # the draw that renders the rows; an explicit matrix needs neither
                out.update(gf2_seed=self.gf2_seed, gf2_affine=self.gf2_affine)
        if self.kind == "permuted":
            out["table_seed"] = self.table_seed
        return out

    def apply(self, cfg: ModelConfig) -> ModelConfig:
        """``cfg`` (a shape: vocabulary, width, backbone) with this code as its input interface."""
        if self.kind is None:
            raise AnalysisError(f"these rows are not a code ({self.reason}); there is no interface to apply")
        if (cfg.vocab_size, cfg.d_model) != (self.vocab_size, self.d_model):
            raise AnalysisError(f"the rows are {self.vocab_size} x {self.d_model} but the config is "
                                f"{cfg.vocab_size} x {cfg.d_model}; give the config of the model the rows came from")
        return cfg.replace(**self.config_fields())

    def describe(self) -> str:
        """One line: the code, or why the rows are not one."""
        if self.kind is None:
            return f"not a code: {self.reason}"
        what = {"canonical": "the canonical code", "permuted": "the canonical code of permuted ids",
                "gf2": f"a GF(2) {'linear' if self.recoding is not None and self.recoding.is_linear else 'affine'} "
                       "recoding"}[self.kind]
        seed = (f", gf2_seed {self.gf2_seed}" if self.gf2_seed is not None else ", explicit A and b") \
            if self.kind == "gf2" else (f", table_seed {self.table_seed}" if self.kind == "permuted" else "")
        return (f"{what} ({self.n_bits} bits, {self.bit_order} first, {self.value_map}, scale {self.code_scale:g}, "
                f"{self.repeat}d x{self.d_model // self.n_bits}{seed}; the rows fix {self.determined_bits} of "
                f"{self.n_bits} bit directions; largest deviation {self.max_deviation:.2g} of the scale)")

    def to_dict(self) -> dict:
        """JSON-safe form (the recoding as its matrix and offset)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "recoding"}
        d["recoding"] = None if self.recoding is None else self.recoding.to_json()
        return d


# --------------------------------------------------------------------------------------------------------------
# the table as numbers, and its dtype's rounding


def _as_table(rows) -> tuple[np.ndarray, torch.dtype]:
    """``rows`` (a tensor, an array, nested lists) as a float32/float64 numpy matrix, and the dtype it was stored in."""
    if isinstance(rows, torch.Tensor):
        dtype = rows.dtype
        if not (dtype.is_floating_point or dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                                                     torch.int64)):
            raise AnalysisError(f"the rows must be real numbers, got a {dtype} tensor")
        t = rows.detach().to("cpu")
        arr = t.double().numpy() if dtype == torch.float64 else t.float().numpy()
    else:
        arr = np.asarray(rows)
        if arr.dtype.kind not in "fiub":
            raise AnalysisError(f"the rows must be real numbers, got an array of {arr.dtype}")
        dtype = {np.dtype("float16"): torch.float16, np.dtype("float32"): torch.float32}.get(arr.dtype, torch.float64)
        arr = arr.astype(np.float64 if dtype == torch.float64 else np.float32)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise AnalysisError(f"the rows must be a non-empty [vocab, d_model] matrix, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise AnalysisError("the rows hold NaN or infinite entries; a code has neither")
    return arr, dtype


def default_rtol(dtype: torch.dtype) -> float:
    """One unit in the last place of ``dtype`` relative to 1, never below float32's (the toolkit renders in float32)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    return float(max(eps, torch.finfo(torch.float32).eps))


def _stored(value: float, dtype: torch.dtype) -> float:
    """``value`` rendered as the toolkit renders (float32), then stored in ``dtype``."""
    return float(torch.tensor(np.float32(value)).to(dtype).double())


def _short_scale(s: float, dtype: torch.dtype) -> float:
    """The shortest decimal whose rendering, stored in ``dtype``, is the stored scale ``s`` (else ``s`` itself)."""
    want = s if not dtype.is_floating_point or dtype == torch.float64 else _stored(s, dtype)
    for digits in range(1, 18):
        cand = float(f"{s:.{digits}g}")
        if cand > 0 and _stored(cand, dtype if dtype.is_floating_point else torch.float64) == want:
            return cand
    return float(str(np.float32(s)))


# --------------------------------------------------------------------------------------------------------------
# steps


def _levels(table: np.ndarray, rtol: float) -> tuple[float, float] | str:
    """The two values a code's entries take (the two commonest in a sample, told apart by more than ``rtol``)."""
    flat = table.reshape(-1)
    sample = flat[:: max(1, flat.size // _SAMPLE)]
    values, counts = np.unique(sample, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    v1 = float(values[order[0]])
    apart = np.abs(values - v1) > rtol * np.maximum(np.abs(values), abs(v1))
    if not apart.any():
        return f"every entry is {v1:.6g}: no bit varies, so no token is told apart"
    rest = order[apart[order]]
    v2 = float(values[rest[0]])
    share = (counts[order[0]] + counts[rest[0]]) / sample.size
    if share < 0.5:
        return (f"its entries take many values (the two commonest, {min(v1, v2):.4g} and {max(v1, v2):.4g}, cover "
                f"{share:.1%} of a sample); a code's entries take two, -s/+s or 0/s (a learned or random table)")
    return min(v1, v2), max(v1, v2)


def _value_map(lo: float, hi: float, rtol: float) -> tuple[str, float] | str:
    if hi > 0 and abs(lo + hi) <= rtol * hi:
        return "pm1", hi
    if hi > 0 and abs(lo) <= rtol * hi:
        return "01", hi
    return (f"its two values are {lo:.6g} and {hi:.6g}: a code renders -s/+s (value map pm1) or 0/s (value map 01) "
            "with s > 0")


def _quantise(table: np.ndarray, lo: float, hi: float, tol: float) -> np.ndarray | str:
    """The 0/1 matrix of which level each entry is at; a reason where entries sit further than ``tol`` off both."""
    bits = np.empty(table.shape, dtype=np.uint8)
    mid, step = (lo + hi) / 2, max(1, _CHUNK // table.shape[1])
    off, worst = 0, (0.0, 0, 0, 0.0)
    for start in range(0, table.shape[0], step):
        chunk = table[start:start + step]
        b = chunk > mid
        dev = np.abs(chunk - np.where(b, hi, lo))
        bits[start:start + step] = b
        bad = dev > tol
        if bad.any():
            off += int(bad.sum())
            i, j = np.unravel_index(int(np.argmax(dev)), dev.shape)
            if dev[i, j] > worst[0]:
                worst = (float(dev[i, j]), start + int(i), int(j), float(chunk[i, j]))
    if not off:
        return bits
    dev, i, j, value = worst
    frac, scale = off / table.size, max(abs(lo), abs(hi))
    if frac > 0.01:
        return (f"{frac:.1%} of its entries lie off its two commonest values {lo:.4g} and {hi:.4g} (the largest by "
                f"{dev:.3g}); a code's entries take two (a learned or random table)")
    return (f"almost but not exactly a code: {off:,} of {table.size:,} entries are off the two values {lo:.6g} and "
            f"{hi:.6g} by more than the rows' dtype rounds (the largest: token {i}, column {j} holds {value:.6g}, "
            f"{dev / scale:.3g} of the scale off); an edited or fine-tuned code is not rendered by any fixed-code "
            "interface, so study it as a learned table")


def _widths(vocab: int, d: int, n_bits: int | None) -> list[int]:
    if n_bits is not None:
        if isinstance(n_bits, bool) or not isinstance(n_bits, int) or not 1 <= n_bits <= MAX_BITS:
            raise AnalysisError(f"n_bits must be an integer in [1, {MAX_BITS}], got {n_bits!r}")
        if d % n_bits or vocab > (1 << n_bits):
            raise AnalysisError(f"n_bits {n_bits} cannot describe {vocab} x {d} rows: it must divide the width and "
                                f"2**n_bits must be at least the vocabulary")
        return [n_bits]
    return [n for n in range(1, min(d, MAX_BITS) + 1) if d % n == 0 and (1 << n) >= vocab]


def _base(bits: np.ndarray, n: int, repeat: str) -> np.ndarray | None:
    """The ``[V, n]`` code whose widening by ``repeat`` is ``bits``, or None."""
    v, d = bits.shape
    r = d // n
    base = bits[:, :n] if repeat == "tile" else bits[:, ::r]
    step = max(1, _CHUNK // d)
    for start in range(0, v, step):
        chunk, b = bits[start:start + step], base[start:start + step]
        grid = chunk.reshape(-1, r, n) if repeat == "tile" else chunk.reshape(-1, n, r)
        if not (grid == (b[:, None, :] if repeat == "tile" else b[:, :, None])).all():
            return None
    return np.ascontiguousarray(base)


@functools.lru_cache(maxsize=4096)
def _draw(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``GF2Code.random(n, seed, affine=True)``'s matrix and offset (the linear draw shares the matrix)."""
    a = random_invertible(n, seed)
    b = np.random.default_rng([seed, 1]).integers(0, 2, size=n, dtype=np.uint8)
    a.flags.writeable = b.flags.writeable = False
    return a, b


def _seeded_gf2(code: GF2Code, x: np.ndarray, c: np.ndarray, full: bool, max_seed: int):
    """The first toolkit draw ``(seed, affine)`` below ``max_seed`` that renders the rows, and its code."""
    n, probe = code.n_bits, slice(0, min(len(x), 64))
    xt = x.astype(np.int64)
    for seed in range(max_seed):
        a, b_aff = _draw(n, seed)
        for affine in (False, True):
            b = b_aff if affine else np.zeros(n, dtype=np.uint8)
            if not np.array_equal(b, code.offset):  # b is fixed by the row of id 0 whatever the rows' span
                continue
            if full:
                hit = np.array_equal(a, code.matrix) and np.array_equal(b, code.offset)
            else:
                hit = all(np.array_equal((xt[part] @ a.T.astype(np.int64)) % 2 ^ b, c[part])
                          for part in (probe, slice(None)))
            if hit:
                return seed, affine, GF2Code(a, b)
    return None


def _recognise(base: np.ndarray, max_seed: int) -> dict | str:
    """The code of ``[V, n]`` bit rows (in rendered column order), or why they are not one."""
    v, n = base.shape
    ids = np.arange(v, dtype=np.int64)
    x = ids_to_bits(ids, n)
    readings = {"msb": base[:, ::-1], "lsb": base}  # LSB-first code bits under each bit order
    for order, c in readings.items():
        if np.array_equal(c, x):
            return dict(kind="canonical", bit_order=order, determined_bits=int(v - 1).bit_length())
    fit = fit_affine(x, readings["msb"])
    if fit is not None:  # then the lsb reading (a permutation of the code bits) is affine too
        determined = fit[1]
        for order in ("msb", "lsb"):
            code = fit[0] if order == "msb" else fit_affine(x, readings["lsb"])[0]
            found = _seeded_gf2(code, x, readings[order], determined == n, max_seed)
            if found is not None:
                return dict(kind="gf2", bit_order=order, recoding=found[2], gf2_seed=found[0], gf2_affine=found[1],
                            determined_bits=determined)
        return dict(kind="gf2", bit_order="msb", recoding=fit[0], gf2_seed=None, gf2_affine=None,
                    determined_bits=determined)
    for order, c in readings.items():
        decoded = bits_to_ids(c)
        if not np.array_equal(np.sort(decoded), ids):
            continue
        for seed in range(max_seed):
            if np.array_equal(id_permutation(v, seed), decoded):
                return dict(kind="permuted", bit_order=order, table_seed=seed, determined_bits=int(v - 1).bit_length())
        return (f"its {n}-bit rows are the canonical codes ({order} first) of a permutation of the ids that is not "
                f"affine over GF(2) and not the permuted control's draw for any table_seed below {max_seed}; no "
                "fixed-code interface renders it")
    decoded = bits_to_ids(readings["msb"])
    uniq, first, counts = np.unique(decoded, return_index=True, return_counts=True)
    if (counts > 1).any():
        t1 = int(first[np.argmax(counts > 1)])
        t2 = int(np.flatnonzero(decoded == decoded[t1])[1])
        return f"tokens {t1} and {t2} have the same {n}-bit row, so the rows do not name every token"
    return (f"its {n}-bit rows name every token but are not an affine function of the token id over GF(2) (nor the "
            "canonical code of permuted ids)")


def _render(found: dict, v: int, n: int, value_map: str, scale: float) -> np.ndarray:
    table = code_table(v, n, recoding=found.get("recoding"), bit_order=found["bit_order"], value_map=value_map,
                       scale=scale)
    if found["kind"] == "permuted":
        table = table[id_permutation(v, found["table_seed"])]
    return table


def _deviation(table: np.ndarray, code: np.ndarray, repeat: str, scale: float) -> float:
    """The largest ``|row entry - widened code entry| / scale``."""
    r = table.shape[1] // code.shape[1]
    step, worst = max(1, _CHUNK // table.shape[1]), 0.0
    for start in range(0, table.shape[0], step):
        c = code[start:start + step]
        wide = np.tile(c, (1, r)) if repeat == "tile" else np.repeat(c, r, axis=1)
        worst = max(worst, float(np.abs(table[start:start + step] - wide).max()))
    return worst / scale


# --------------------------------------------------------------------------------------------------------------


def infer_code(rows, vocab_size: int | None = None, *, n_bits: int | None = None, rtol: float | None = None,
               max_seed: int = MAX_SEED) -> InferredCode:
    """Whether the input rows ``[vocab, d_model]`` (a tensor or array, any float dtype) are a fixed code, and which.

    ``vocab_size`` takes the first that many rows (an embedding padded past the vocabulary; default all);
    ``n_bits`` fixes the code width instead of trying every divisor of the width; ``rtol`` (default: one unit in the
    last place of the rows' dtype, at least float32's) is how far, relative to the scale, an entry may sit from its
    level; ``max_seed`` how many of the toolkit's seeded draws are tried to name a seed. See the module docstring for
    the rules; the result's ``kind`` is None (with ``reason``) when the rows are not a code."""
    table, dtype = _as_table(rows)
    if vocab_size is not None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or not 1 <= vocab_size <= table.shape[0]:
            raise AnalysisError(f"vocab_size must be an integer in [1, {table.shape[0]}] (the rows), got {vocab_size!r}")
        table = table[:vocab_size]
    v, d = table.shape
    rtol = default_rtol(dtype) if rtol is None else float(rtol)
    if not 0 <= rtol < 0.5:
        raise AnalysisError(f"rtol must be in [0, 0.5), got {rtol}")
    widths = _widths(v, d, n_bits)
    common = dict(vocab_size=v, d_model=d, rtol=rtol, dtype=str(dtype).removeprefix("torch."))

    def no(reason: str) -> InferredCode:
        return InferredCode(kind=None, reason=reason, **common)

    if not widths:
        return no(f"no code width fits: {v} tokens need at least {int(v - 1).bit_length()} bits, and no width from "
                  f"there to {MAX_BITS} divides d_model {d}")
    levels = _levels(table, rtol)
    if isinstance(levels, str):
        return no(levels)
    vm = _value_map(*levels, rtol)
    if isinstance(vm, str):
        return no(vm)
    value_map, stored = vm
    bits = _quantise(table, *levels, rtol * stored)
    if isinstance(bits, str):
        return no(bits)
    first_reason = None
    for n in widths:
        for repeat in ("tile", "interleave") if d > n else ("tile",):
            base = _base(bits, n, repeat)
            if base is None:
                continue
            found = _recognise(base, max_seed)
            if isinstance(found, str):
                first_reason = first_reason or found
                continue
            scale = _short_scale(stored, dtype)
            code = _render(found, v, n, value_map, scale)
            dev = _deviation(table, code, repeat, scale)
            if dev > rtol:  # the rendered table is checked against the rows themselves
                first_reason = first_reason or (f"the {found['kind']} code it looks like differs from the rows by "
                                                f"{dev:.3g} of the scale (more than rtol {rtol:.3g})")
                continue
            return InferredCode(reason="", n_bits=n, value_map=value_map, code_scale=scale, repeat=repeat,
                                max_deviation=dev, **found, **common)
    if first_reason is None:
        return no(f"its columns do not repeat as an n-bit code widened to {d} does (tiled or interleaved), for any "
                  f"n in {widths}")
    return no(first_reason)


__all__ = ["CodeInferredWarning", "InferredCode", "infer_code"]

"""How far an edit moves each token's input row, and whether it lands on another token's code."""

from __future__ import annotations

import numpy as np
import torch

from analysis.errors import AnalysisError

#: Rows x vocabulary entries of one block of the nearest-row search (float64: 128 MiB).
NEAREST_BLOCK = 1 << 24


def bit_values(model) -> tuple[float, float]:
    """The two values a code column takes (0 and 1 rendered with the model's value map and scale)."""
    s = float(model.cfg.code_scale)
    return (-s, s) if model.cfg.value_map == "pm1" else (0.0, s)


def table_bits(model, table) -> np.ndarray:
    """``[vocab, n_bits]`` 0/1 bits (uint8, the table's column order) of a rendered code table of ``model``."""
    a, b = bit_values(model)
    t = table.detach().float().cpu().numpy() if isinstance(table, torch.Tensor) else np.asarray(table, np.float32)
    return (t > (a + b) / 2).astype(np.uint8)


def code_keys(bits: np.ndarray) -> np.ndarray:
    """One int64 key per code row: column ``j`` of ``bits`` ``[..., n]`` as bit ``j``."""
    bits = np.asarray(bits, dtype=np.int64)
    return (bits << np.arange(bits.shape[-1], dtype=np.int64)).sum(-1)


def popcount(x) -> np.ndarray:
    """Set bits of each non-negative integer (the Hamming distance of two keys is ``popcount(a ^ b)``)."""
    return np.bitwise_count(np.asarray(x, dtype=np.int64)).astype(np.int64)


class CodeSupport:
    """The code table a model reads as keys, with the token that owns each code (``landing``)."""

    def __init__(self, model):
        if not getattr(model.cfg, "has_code", False):
            raise AnalysisError(f"the {model.cfg.interface} variant reads no n-bit code, so an edit has no "
                                "Hamming distance or code support (its rows are reported as NaN)")
        self.n_bits = int(model.cfg.n_bits)
        self.keys = code_keys(table_bits(model, model.embed.code))  # [vocab]
        self.owner = np.full(1 << self.n_bits, -1, dtype=np.int64)
        self.owner[self.keys[::-1]] = np.arange(len(self.keys))[::-1]  # the lowest id where two share a code

    @classmethod
    def of(cls, model):
        """The support of ``model``'s code, or None for a variant without one."""
        return cls(model) if getattr(model.cfg, "has_code", False) else None

    def landing(self, keys) -> np.ndarray:
        """The token whose code is each key, -1 where no token has it."""
        return self.owner[np.asarray(keys, dtype=np.int64)]

    def stats(self, own_tokens, edited_keys, weights=None) -> tuple[float, float]:
        """(``on_support``, ``hamming``) of edited codes ``edited_keys`` of tokens ``own_tokens`` (same shape),
        each row weighted by ``weights`` (default 1: every occurrence once)."""
        own = self.keys[np.asarray(own_tokens, dtype=np.int64)]
        edited = np.asarray(edited_keys, dtype=np.int64)
        w = np.ones(own.shape) if weights is None else np.asarray(weights, dtype=np.float64)
        total = w.sum()
        if total <= 0:
            return float("nan"), float("nan")
        on = (self.landing(edited) >= 0).astype(np.float64)
        return float((w * on).sum() / total), float((w * popcount(own ^ edited)).sum() / total)

    def table_stats(self, edited_table, counts) -> tuple[float, float]:
        """(``on_support``, ``hamming``) of a whole edited code table ``[vocab, n_bits]`` (rendered), each token
        weighted by its count in the measured data."""
        edited = code_keys(edited_table)
        return self.stats(np.arange(len(self.keys)), edited, counts)


def token_counts(tokens, vocab: int) -> np.ndarray:
    """How often each id of ``0..vocab-1`` occurs in ``tokens`` (the frequency weights)."""
    t = tokens.detach().cpu().numpy() if isinstance(tokens, torch.Tensor) else np.asarray(tokens)
    return np.bincount(t.reshape(-1).astype(np.int64), minlength=vocab).astype(np.float64)


def input_table(model) -> torch.Tensor:
    """The table the model's input rows come from, before widening: the ``[vocab, n_bits]`` code (or the frozen
    ``[vocab, d_model]`` table), else the learned ``W_E``."""
    return (model.embed.code if model.cfg.is_fixed else model.embed.W_E).detach()


def nearest_rows(rows, table) -> np.ndarray:
    """For each row of ``rows`` ``[N, w]`` the index of the nearest row of ``table`` ``[V, w]`` (Euclidean; the
    lowest index on an exact tie). Computed where the table is: float64 on the CPU, float32 on an accelerator (a
    learned table of a large vocabulary)."""
    t = torch.as_tensor(table).detach()
    dtype = torch.float64 if t.device.type == "cpu" else torch.float32
    t = t.to(dtype)
    r = torch.as_tensor(rows).detach().to(t.device, dtype)
    if r.dim() != 2 or t.dim() != 2 or r.shape[1] != t.shape[1]:
        raise AnalysisError(f"rows {tuple(r.shape)} and table {tuple(t.shape)} must be 2-D of the same width")
    out = torch.empty(r.shape[0], dtype=torch.long)
    t2 = (t * t).sum(1)
    step = max(1, NEAREST_BLOCK // max(1, t.shape[0]))
    for i in range(0, r.shape[0], step):
        block = r[i:i + step]
        d = (block * block).sum(1, keepdim=True) - 2 * block @ t.T + t2[None]  # squared distances
        out[i:i + step] = d.argmin(1).cpu()
    return out.numpy()


def decode_hits(rows, own_tokens, table) -> int:
    """How many of ``rows`` ``[N, w]`` have the row of their own token (``own_tokens`` ``[N]``) nearest."""
    own = np.asarray(torch.as_tensor(own_tokens).cpu(), dtype=np.int64).reshape(-1)
    return int((nearest_rows(rows, table) == own).sum())


__all__ = ["CodeSupport", "bit_values", "table_bits", "code_keys", "popcount", "token_counts", "input_table",
           "nearest_rows", "decode_hits", "NEAREST_BLOCK"]

"""GF(2) recoding ablations: a trained fixed-code model fed its own code rows through an invertible affine map."""

from __future__ import annotations

import json
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from fixedid.codes import GF2Code, id_permutation, ids_to_bits, render_bits
from fixedid.model import constant_code_bits

from analysis.causal.support import CodeSupport, code_keys, table_bits, token_counts
from analysis.evaluation.behaviours import TASKS, prepare_pairs, score_pairs
from analysis.corpus import DEFAULT_TOKENS, corpus_tokens
from analysis.errors import AnalysisError

#: The recoding families of :func:`~analysis.causal.recoding.draw_recodings` (see the module docstring).
FAMILIES = ("uniform", "transvection", "permutation", "offset", "other-variant", "token-permutation")
#: Default ``k`` per family: transvection counts, token counts; offsets default to every bit.
#: The transvection walk lengths over which the demo and the study compare the fixed-code variants (k = 0, the own
#: code, anchors the matched curve, so a code whose first transvection already moves it more than 0.5 bits still has
#: a value at 0.5 bits).
WALK = (0, 1, 2, 4, 8, 16)
DEFAULT_KS = {"transvection": (0, 1, 2, 4, 8, 16, 32), "token-permutation": (0, 2, 4, 8, 16, 32, 64, 128)}


def _fixed(model, what: str):
    if not getattr(model.cfg, "has_code", False):
        raise AnalysisError(f"{what} needs a model that reads an n-bit code; the {model.cfg.interface} variant has "
                            "no code to recode (use family 'token-permutation', which applies to every variant)")
    return model.embed


def own_bits(model) -> np.ndarray:
    """The ``[vocab, n_bits]`` code bits (LSB first) that the model reads, before rendering."""
    _fixed(model, "own_bits")
    ids = np.arange(model.cfg.vocab_size)
    if model.cfg.interface == "permuted":
        ids = id_permutation(model.cfg.vocab_size, model.cfg.table_seed)
    bits = ids_to_bits(ids, model.cfg.n_bits)
    code = model.cfg.recoding()
    return bits if code is None else code.encode_bits(bits)


def recoded_table(model, code: GF2Code) -> torch.Tensor:
    """The ``[vocab, n_bits]`` code table the model reads under ``code`` (rendered as its own code is)."""
    embed = _fixed(model, "a recoding")
    if not isinstance(code, GF2Code):
        raise AnalysisError(f"a recoding is a fixedid.codes.GF2Code, got {type(code).__name__}")
    if code.n_bits != model.cfg.n_bits:
        raise AnalysisError(f"the recoding acts on {code.n_bits} bits but the model's code has {model.cfg.n_bits}")
    c = model.cfg
    table = render_bits(code.encode_bits(own_bits(model)), bit_order=c.bit_order, value_map=c.value_map,
                        scale=c.code_scale)
    return torch.from_numpy(table).to(device=embed.code.device, dtype=embed.code.dtype)


@contextmanager
def recoded(model, code: GF2Code, rows=None):
    """Inside the block the model reads ``R c(t) xor r`` for every token ``t`` (or only for the token ids where the
    boolean ``rows`` ``[vocab]`` is True, the others reading their own code); its own code is restored on exit."""
    table = recoded_table(model, code)
    buf = model.embed.code
    saved = buf.clone()
    if rows is not None:
        rows = torch.as_tensor(np.asarray(rows, dtype=bool))
        if rows.shape != (buf.shape[0],):
            raise AnalysisError(f"rows is a boolean mask over the {buf.shape[0]} token ids, got shape "
                                f"{tuple(rows.shape)}")
        table = torch.where(rows.to(buf.device)[:, None], table, saved)
    try:
        buf.copy_(table)
        yield model
    finally:
        buf.copy_(saved)


@contextmanager
def permuted_inputs(model, perm):
    """Inside the block token ``t`` reads the input row (code or embedding) of token ``perm[t]``; every variant."""
    perm = torch.as_tensor(np.asarray(perm), dtype=torch.long)
    vocab = model.cfg.vocab_size
    if perm.shape != (vocab,) or not torch.equal(perm.sort().values, torch.arange(vocab)):
        raise AnalysisError(f"a token permutation is a permutation of 0..{vocab - 1} (the model's vocabulary)")
    table = model.embed.code if model.cfg.is_fixed else model.embed.W_E.data
    saved = table.clone()
    try:
        table.copy_(saved[perm.to(table.device)])
        yield model
    finally:
        table.copy_(saved)


# ------------------------------------------------------------------------------------------------------ families
def transvection_walk(n_bits: int, k: int, rng: np.random.Generator) -> GF2Code:
    """The product of ``k`` random transvections ``I + e_i e_j^T`` (``i != j``): a walk of length ``k`` in GL(n, 2)."""
    m = np.eye(n_bits, dtype=np.uint8)
    for _ in range(k):
        i, j = rng.choice(n_bits, size=2, replace=False)
        m[i] ^= m[j]  # (I + e_i e_j^T) m: row i += row j
    return GF2Code(m, np.zeros(n_bits, dtype=np.uint8))


def bit_permutation(n_bits: int, rng: np.random.Generator) -> GF2Code:
    """A uniformly drawn permutation of the ``n_bits`` code bits as a linear recoding (offset 0)."""
    return GF2Code(np.eye(n_bits, dtype=np.uint8)[rng.permutation(n_bits)], np.zeros(n_bits, dtype=np.uint8))


def column_offset(model, column: int) -> GF2Code:
    """``r = e_j`` for code column ``column`` in the model's configured bit order: that bit flipped everywhere."""
    n = model.cfg.n_bits
    if not isinstance(column, (int, np.integer)) or not 0 <= column < n:
        raise AnalysisError(f"bit {column!r} is out of range for a {n}-bit code (0..{n - 1})")
    lsb = n - 1 - column if model.cfg.bit_order == "msb" else column
    offset = np.zeros(n, dtype=np.uint8)
    offset[lsb] = 1
    return GF2Code(np.eye(n, dtype=np.uint8), offset)


def other_variant_code(model) -> GF2Code:
    """gf2 model: the recoding that makes it read canonical codes; canonical model: its gf2 sibling's code
    (the config's ``gf2_*`` fields with ``interface = "gf2"``)."""
    _fixed(model, "the other-variant recoding")
    if model.cfg.interface not in ("canonical", "gf2"):
        raise AnalysisError(f"the other-variant recoding maps between canonical and gf2; the {model.cfg.interface} "
                            "variant has no such sibling")
    own = model.cfg.recoding()
    return own.inverse() if own is not None else model.cfg.replace(interface="gf2").recoding()


def token_cycle(vocab: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation of ``0..vocab-1`` that cycles ``k`` random ids (no id keeps its row when ``k >= 2``)."""
    if not 0 <= k <= vocab:
        raise AnalysisError(f"k = {k} tokens to permute is outside [0, {vocab}] (the vocabulary)")
    perm = np.arange(vocab)
    if k >= 2:
        ids = rng.choice(vocab, size=k, replace=False)
        perm[ids] = np.roll(ids, 1)
    return perm


def draw_recodings(model, family: str, ks=None, draws: int = 4, seed: int = 0):
    """``(k, draw, edit)`` triples of a family: ``edit`` a :class:`~fixedid.codes.GF2Code`, or a token permutation
    array."""
    if family not in FAMILIES:
        raise AnalysisError(f"unknown recoding family {family!r}; use one of {', '.join(FAMILIES)}")
    if not isinstance(draws, int) or draws < 1:
        raise AnalysisError(f"draws must be a positive integer, got {draws!r}")
    if family != "token-permutation":
        _fixed(model, f"recoding family {family!r}")
    n, vocab = model.cfg.n_bits, model.cfg.vocab_size
    if family == "offset":
        cols = range(n) if ks is None else ks
        return [(int(j), 0, column_offset(model, j)) for j in cols]
    if family == "other-variant":
        return [(0, 0, other_variant_code(model))]
    ks = list(DEFAULT_KS.get(family, (0,)) if ks is None else ks)
    for k in ks:
        if not isinstance(k, (int, np.integer)) or k < 0:
            raise AnalysisError(f"k must be non-negative integers, got {k!r}")
    out = []
    for k in ks:
        for d in range(draws):
            rng = np.random.default_rng([seed, d, int(k), FAMILIES.index(family)])
            if family == "transvection":
                out.append((int(k), d, transvection_walk(n, int(k), rng)))
            elif family == "uniform":
                out.append((int(k), d, GF2Code.random(n, int(rng.integers(1 << 62)))))
            elif family == "permutation":
                out.append((int(k), d, bit_permutation(n, rng)))
            else:
                out.append((int(k), d, token_cycle(vocab, int(k), rng)))
    return out


def recoding_to_json(edit) -> str:
    """A recoding (rows of ``R`` as integers, ``r`` as an integer) or a token permutation as one JSON string."""
    if isinstance(edit, GF2Code):
        weights = 1 << np.arange(edit.n_bits, dtype=np.int64)
        return json.dumps({"R": [int(row @ weights) for row in edit.matrix.astype(np.int64)],
                           "r": int(edit.offset.astype(np.int64) @ weights)})
    return json.dumps({"token_permutation": [int(x) for x in edit]})


def recoding_from_json(text: str):
    """Invert :func:`~analysis.causal.recoding.recoding_to_json`: a :class:`~fixedid.codes.GF2Code`, or a token
    permutation array."""
    d = json.loads(text)
    if "token_permutation" in d:
        return np.asarray(d["token_permutation"], dtype=np.int64)
    n = len(d["R"])
    rows = np.array([[(v >> i) & 1 for i in range(n)] for v in d["R"]], dtype=np.uint8)
    return GF2Code(rows, np.array([(d["r"] >> i) & 1 for i in range(n)], dtype=np.uint8))


def _apply(model, edit):
    return recoded(model, edit) if isinstance(edit, GF2Code) else permuted_inputs(model, edit)


# --------------------------------------------------------------------------------------------------------- sweep
@torch.no_grad()
def corpus_loss(model, tokens: torch.Tensor, max_batch: int = 64) -> float:
    """Mean next-token cross-entropy over every predicted position of ``tokens`` ``[n, T]``."""
    device = model.unembed.weight.device
    total, count = 0.0, 0
    for i in range(0, tokens.shape[0], max_batch):
        x = tokens[i:i + max_batch].to(device)
        n = x.shape[0] * (x.shape[1] - 1)
        total += float(model(x, return_type="loss")) * n
        count += n
    return total / count


@torch.no_grad()
def recoding_sweep(model, family: str, ks=None, *, draws: int = 4, seed: int = 0, data=None,
                   tokens: int = DEFAULT_TOKENS, tasks=TASKS, n_pairs: int = 64, max_batch: int = 64,
                   split: bool = False, progress: bool = False) -> pd.DataFrame:
    """Evaluate the model under every recoding of a family (see the module docstring for the columns).

    ``split``: also measure each GF(2) recoding in two parts (two more passes over the data): applied only to the
    token ids whose recoded code is another token's (``delta_on``) and only to those whose recoded code is no token's
    (``delta_off``), with the shares of all measured occurrences each part moves (``share_on``, ``share_off``; ids
    whose code the map leaves unchanged are in neither). :func:`analysis.causal.landing.matched_landing` compares
    variants from these at a matched landing share. NaN for token-row cycles (every cycled row is another token's).

    The data (``data``/``tokens``, see :func:`analysis.corpus.corpus_tokens`; ``data`` may also be token ids
    ``[n, T]`` already prepared, for several sweeps over the same windows) and the task prompts are tokenised once;
    each recoding then costs one code-table swap and the forwards. ``tasks=()`` skips the task accuracies.
    """
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() (analysis.load returns it in eval mode)")
    edits = draw_recodings(model, family, ks, draws, seed)
    x = corpus_tokens(model, data, tokens=tokens)
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    groups = prepare_pairs(model, tasks, n_pairs) if tasks else []
    base = corpus_loss(model, x, max_batch)
    rows = []
    own = (model.embed.code if model.cfg.is_fixed else model.embed.W_E).detach().clone()
    support, counts = CodeSupport.of(model), token_counts(x, model.cfg.vocab_size)  # the own code, before any map
    constant = set(constant_code_bits(model.cfg))
    for k, d, edit in tqdm(edits, desc=f"recoding {family}", unit="map", disable=not progress):
        with _apply(model, edit):
            now = model.embed.code if model.cfg.is_fixed else model.embed.W_E
            changed = float((now != own).any(dim=1).float().mean())
            on, ham = support.table_stats(table_bits(model, now), counts) if support else (np.nan, np.nan)
            loss = corpus_loss(model, x, max_batch)
            acc = score_pairs(model, groups).groupby("task").correct.mean() if groups else pd.Series(dtype=float)
            keys = code_keys(table_bits(model, now)) if split and support else None
        parts = _landing_parts(model, edit, keys, support, counts, x, base, max_batch) if split else {}
        rows.append({"interface": model.cfg.interface, "family": family, "k": k, "draw": d, "changed": changed,
                     "on_support": on, "hamming": ham, **parts,
                     **({"bit_constant": int(k) in constant} if family == "offset" else {}),
                     "loss": loss, "delta_loss": loss - base, **{f"acc_{t}": float(acc.get(t, np.nan)) for t in tasks},
                     "recoding": recoding_to_json(edit)})
    df = pd.DataFrame(rows)
    df.attrs.update(base_loss=base, n_tokens=int(x.numel()), n_sequences=int(x.shape[0]), n_bits=model.cfg.n_bits)
    return df


def _landing_parts(model, edit, keys, support, counts, x, base, max_batch) -> dict:
    """The on- and off-support parts of one recoding (``recoding_sweep(split=True)``)."""
    if keys is None or not isinstance(edit, GF2Code):
        return dict.fromkeys(("delta_on", "delta_off", "share_on", "share_off"), np.nan)
    moved = keys != support.keys
    on = moved & (support.landing(keys) >= 0)
    off = moved & ~on
    out = {"share_on": float(counts[on].sum() / counts.sum()), "share_off": float(counts[off].sum() / counts.sum())}
    for name, rows in (("delta_on", on), ("delta_off", off)):
        if not rows.any():
            out[name] = 0.0  # nothing moved: the model reads its own code
            continue
        with recoded(model, edit, rows):
            out[name] = corpus_loss(model, x, max_batch) - base
    return out


def matched_hamming(df: pd.DataFrame, at=None, *, families=("transvection",)) -> pd.DataFrame:
    """Each variant's loss change at common Hamming distances, so variants are compared at matched disturbance.

    Per variant (``variant`` column, else ``interface``) the rows of ``families`` are averaged per (family, ``k``)
    over draws (``hamming``, ``delta_loss``, ``on_support``), sorted by ``hamming`` and interpolated linearly at each
    distance of ``at``; default: every per-k mean distance any variant measured, inside the range every variant
    covers. Outside a variant's measured range the values are NaN (nothing is extrapolated). One row per (variant,
    distance): ``variant, hamming, delta_loss, on_support, measured`` (True where the variant measured that distance
    itself rather than it being interpolated between two of its points)."""
    label = "variant" if "variant" in df.columns else "interface"
    if "hamming" not in df.columns:
        raise AnalysisError("matched_hamming needs the hamming column of a recoding sweep (recoding_sweep writes it)")
    g = df[df.family.isin(list(families)) & df.hamming.notna()]
    if not len(g):
        raise AnalysisError(f"no rows of families {list(families)} with a Hamming distance (variants without an "
                            "n-bit code have none)")
    curves = {}
    for v, rows in g.groupby(label, sort=False):
        pts = rows.groupby(["family", "k"])[["hamming", "delta_loss", "on_support"]].mean()
        pts = pts.groupby("hamming").mean().sort_index()  # equal distances: one point
        curves[v] = pts
    if at is None:
        lo = max(float(p.index.min()) for p in curves.values())
        hi = min(float(p.index.max()) for p in curves.values())
        at = sorted({float(h) for p in curves.values() for h in p.index if lo <= h <= hi})
    at = np.asarray(list(at), dtype=float)
    out = []
    for v, pts in curves.items():
        h = pts.index.to_numpy(float)
        inside = (at >= h.min()) & (at <= h.max())
        for col in ("delta_loss", "on_support"):
            pts[col] = pts[col].astype(float)
        dl = np.where(inside, np.interp(at, h, pts.delta_loss.to_numpy()), np.nan)
        on = np.where(inside, np.interp(at, h, pts.on_support.to_numpy()), np.nan)
        measured = np.isin(at, h)
        out += [{"variant": v, "hamming": float(a), "delta_loss": float(d), "on_support": float(o), "measured": bool(m)}
                for a, d, o, m in zip(at, dl, on, measured)]
    return pd.DataFrame(out)


__all__ = ["FAMILIES", "recoded", "permuted_inputs", "recoded_table", "own_bits", "draw_recodings",
           "transvection_walk", "bit_permutation", "column_offset", "other_variant_code", "token_cycle",
           "recoding_to_json", "recoding_from_json", "corpus_loss", "recoding_sweep", "matched_hamming"]

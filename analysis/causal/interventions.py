"""Causal interventions on the input: edits of the code rows (or embedding rows) the model reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis import engine
from analysis.causal.support import CodeSupport, bit_values, decode_hits, input_table, popcount
from analysis.corpus import MEASURE_TOKENS
from analysis.engine.effects import InterventionResult, Measurer, check_eval, chunks, nonempty, position, result, rows_per_forward, target
from analysis.errors import AnalysisError

#: The input edits of :func:`~analysis.causal.interventions.input_intervention` (see the module docstring).
KINDS = ("bitflip", "midpoint", "swap", "noise")
#: The default ``noise`` scales, relative to the RMS of the model's input rows over the vocabulary.
DEFAULT_SCALES = (0.1, 0.25, 0.5, 1.0)


# ---------------------------------------------------------------------------------------------- input edits
def _fixed(model, kind):
    if not model.cfg.has_code:
        raise AnalysisError(f"a {kind} edit acts on code bits; the {model.cfg.interface} variant has none (use kind "
                            "'swap' or 'noise', which act on its input row)")


_bit_values = bit_values  # the two values of a code column (kept for the bit x layer maps)


def _bit_mask(model, bit: int) -> torch.Tensor:
    n = model.cfg.n_bits
    if not isinstance(bit, (int, np.integer)) or isinstance(bit, (bool, np.bool_)) or not 0 <= bit < n:
        raise AnalysisError(f"bit {bit!r} is out of range for a {n}-bit code (0..{n - 1})")
    e = torch.zeros(n, device=model.embed.code.device, dtype=model.embed.code.dtype)
    e[int(bit)] = 1
    return model.embed.widen(e)


def input_rms(model) -> float:
    """RMS of the model's input rows over the vocabulary (the unit of ``noise`` scales)."""
    table = model.embed.code if model.cfg.is_fixed else model.embed.W_E
    return float(table.detach().float().pow(2).mean().sqrt())


@dataclass
class _InputEdit:
    ids: dict  # the identifying columns
    start: int  # first edited position
    apply: object  # (x [n, T, d] embedded input, tokens [n, T], seq index [n]) -> edited x (a new tensor)
    # (tokens [n, T], seq index [n]) -> sums over the edited rows: rows, and on (on support), ham (bits moved),
    # dec (nearest row is the own row) where defined
    support: object = None


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.int64)


def _bit_edit(model, kind, bit, pos, sup):
    mask = _bit_mask(model, bit)
    a, b = _bit_values(model)
    sl = slice(None) if pos is None else slice(pos, pos + 1)

    def apply(x, tokens, seq):
        x = x.clone()
        part = x[:, sl]
        target = (a + b) - part if kind == "bitflip" else torch.full_like(part, (a + b) / 2)
        x[:, sl] = part + mask * (target - part)
        return x

    def support(tokens, seq):
        t = _np(tokens[:, sl])
        if kind == "midpoint":
            return dict(rows=t.size, on=0.0, ham=0.5 * t.size)
        flipped = sup.keys[t] ^ (1 << int(bit))
        return dict(rows=t.size, on=float((sup.landing(flipped) >= 0).sum()), ham=float(t.size))
    return _InputEdit(dict(kind=kind, bit=int(bit), pos=pos), pos or 0, apply, support)


def _swap_edit(model, pos, token, seed, sup):
    vocab = model.cfg.vocab_size
    if token is not None and (not isinstance(token, (int, np.integer)) or isinstance(token, (bool, np.bool_))
                              or not 0 <= token < vocab):
        raise AnalysisError(f"swap token {token!r} is not an id of this model's vocabulary (0..{vocab - 1})")

    def new_tokens(tokens, seq):
        if token is None:  # a random other token per sequence, fixed by (seed, sequence, position)
            return torch.tensor([_other_token(vocab, int(tokens[i, pos]), seed, int(s), pos)
                                 for i, s in enumerate(seq.tolist())], device=tokens.device)
        return torch.full((tokens.shape[0],), int(token), device=tokens.device)

    def apply(x, tokens, seq):
        x = x.clone()
        x[:, pos] = model.embed(new_tokens(tokens, seq))
        return x

    def support(tokens, seq):
        own, new = _np(tokens[:, pos]), _np(new_tokens(tokens, seq))
        if sup is None:
            return dict(rows=own.size)
        return dict(rows=own.size, on=float(own.size), ham=float(popcount(sup.keys[own] ^ sup.keys[new]).sum()))
    return _InputEdit(dict(kind="swap", pos=pos, token=token), pos, apply, support)


def _other_token(vocab, own, seed, seq, pos):
    t = int(np.random.default_rng([seed, seq, pos]).integers(vocab - 1))
    return t + (t >= own)


def _noise_edit(model, scale, draw, pos, seed, sup):
    if not isinstance(scale, (int, float, np.floating)) or isinstance(scale, bool) or not 0 <= scale < float("inf"):
        raise AnalysisError(f"a noise scale is a finite non-negative number, got {scale!r}")
    sd = float(scale) * input_rms(model)
    table = input_table(model)
    width = table.shape[-1]
    sl = slice(None) if pos is None else slice(pos, pos + 1)

    def draws(seq, T):  # [n, T, width] in the table's space, one generator per (seed, draw, sequence)
        z = torch.stack([torch.randn(T, width, generator=torch.Generator().manual_seed(
            int(np.random.default_rng([seed, draw, int(s)]).integers(1 << 62)))) for s in seq.tolist()])
        return z * sd

    def apply(x, tokens, seq):
        x = x.clone()
        z = draws(seq, x[:, sl].shape[1]).to(x.device, x.dtype)
        x[:, sl] = x[:, sl] + (model.embed.widen(z) if model.cfg.is_fixed else z)
        return x

    def support(tokens, seq):
        t = tokens[:, sl].cpu()
        own = table[t.to(table.device)].to("cpu", torch.float64)
        rows = (own + draws(seq, t.shape[1]).double()).reshape(-1, width)  # the rows apply feeds the model
        out = dict(rows=t.numel(), dec=float(decode_hits(rows, t.reshape(-1), table)))
        if sup is not None:
            out.update(on=float(t.numel()) if scale == 0 else 0.0, ham=0.0 if scale == 0 else float("nan"))
        return out
    return _InputEdit(dict(kind="noise", pos=pos, scale=float(scale), draw=int(draw)), pos or 0, apply, support)


def input_edits(model, kind: str, *, bits=None, pos=None, positions=None, token=None, scales=DEFAULT_SCALES,
                draws: int = 1, seed: int = 0, n_pos: int):
    """The edits of one input sweep (see :func:`~analysis.causal.interventions.input_intervention`)."""
    sup = CodeSupport.of(model)
    if kind in ("bitflip", "midpoint"):
        _fixed(model, kind)
        bits = range(model.cfg.n_bits) if bits is None else nonempty(bits, "bits")
        return [_bit_edit(model, kind, b, pos, sup) for b in bits]
    if kind == "swap":
        positions = range(n_pos) if positions is None else [position(p, n_pos)
                                                            for p in nonempty(positions, "positions")]
        return [_swap_edit(model, p, token, seed, sup) for p in positions]
    if kind == "noise":
        if not isinstance(draws, int) or draws < 1:
            raise AnalysisError(f"draws must be a positive integer, got {draws!r}")
        return [_noise_edit(model, s, d, pos, seed, sup) for s in nonempty(scales, "noise scales")
                for d in range(draws)]
    raise AnalysisError(f"unknown input edit {kind!r}; use one of bitflip, midpoint, swap, noise")


# ------------------------------------------------------------------------------------------------ input sweeps
#: How far an edit moves the input, one value per edit (see the module docstring); ``noise`` adds ``decode_acc``.
SUPPORT_COLUMNS = ("edited", "on_support", "hamming")


def run_input_edits(model, tgt, edits, *, what: str, max_batch: int = 128, progress: bool = False):
    """Run every edit of ``edits`` on the sequences of ``tgt``: the measures ``{measure: [n_edits, n_items]}`` and
    one dict of support columns per edit (see the module docstring)."""
    n, T = tgt.tokens.shape
    n_layers = model.cfg.n_layers
    values = {me: np.full((len(edits), n), np.nan) for me in tgt.measures}
    sums = [dict() for _ in edits]
    bar = tqdm(total=len(edits) * n, desc=what, unit="seq", disable=not progress, leave=False)
    rows = rows_per_forward(tgt, model.cfg.vocab_size, max_batch)
    for seq in chunks(n, rows):
        toks = tgt.tokens[seq]
        m = len(seq)
        for acc, e in zip(sums, edits):
            for key, v in (e.support(toks, seq) if e.support is not None else {}).items():
                acc[key] = acc.get(key, 0.0) + v
        base_logits, cache = engine.cache_run(model, toks, engine.kv_names(n_layers))
        measure = Measurer(tgt, seq, base_logits)
        x0 = model.input_code(toks)
        # an edit from position s leaves earlier positions as they are: run s.. from the cached keys and values
        starts = [min(e.start, T - 1) for e in edits]
        for s, group in engine.groups(starts, m, rows):
            k = len(group)
            x = torch.cat([edits[g].apply(x0, toks, seq)[:, s:] for g in group])
            logits = engine.run_from(model, x, 0, past=engine.past_kv(cache, 0, n_layers, s, k), last_only=tgt.pairs)
            for me, v in measure(logits, k, s).items():
                values[me][np.ix_(group, seq.numpy())] = v.double().cpu().numpy()
            bar.update(k * m)
    bar.close()
    return values, [_support_columns(acc, n * T) for acc in sums]


def _support_columns(acc: dict, n_rows: int) -> dict:
    rows = acc.get("rows", 0.0)
    share = lambda key: acc[key] / rows if key in acc and rows > 0 else float("nan")  # noqa: E731
    out = {"edited": rows / n_rows, "on_support": share("on"), "hamming": share("ham")}
    if "dec" in acc:
        out["decode_acc"] = share("dec")
    return out


@torch.no_grad()
def input_intervention(model, kind: str, data=None, *, task: str | None = None, bits=None, pos=None,
                       positions=None, token=None, scales=DEFAULT_SCALES, draws: int = 1, seed: int = 0,
                       tokens: int = MEASURE_TOKENS, n_pairs: int = 64, max_batch: int = 128,
                       progress: bool = False) -> InterventionResult:
    """Edit the input rows and measure (see the module docstring).

    ``kind``: ``bitflip`` / ``midpoint`` (one edit per bit of ``bits``, default every bit, at position ``pos``,
    default every position), ``swap`` (one edit per position of ``positions``, default each; the row of ``token``,
    default a random other token per sequence), ``noise`` (one edit per scale and draw, at ``pos``). Data: corpus
    windows (``data``: None, a file, or token ids; ``tokens``) or the prompts of ``task`` (``n_pairs``, ``seed``) or
    a :class:`~analysis.pairs.PairBatch` as ``data``. Negative positions count from the end. ``max_batch``: rows per
    forward.
    """
    check_eval(model)
    tgt = target(model, data, task, tokens, n_pairs, seed)
    n, T = tgt.tokens.shape
    pos = position(pos, T)
    edits = input_edits(model, kind, bits=bits, pos=pos, positions=positions, token=token, scales=scales,
                        draws=draws, seed=seed, n_pos=T)
    values, columns = run_input_edits(model, tgt, edits, what=f"{kind} edits", max_batch=max_batch,
                                      progress=progress)
    attrs = dict(kind=kind, pos=pos, seed=seed, input_rms=input_rms(model))
    return result(model, [e.ids for e in edits], values, tgt, attrs, columns)


def bit_groups(summary: pd.DataFrame, measure: str = "delta_loss") -> pd.DataFrame:
    """Per-bit edits summarised over the code columns that vary over the vocabulary and, apart, over the constant
    ones (``bit_constant``): one row per group present (``group``: ``varying``/``constant``) with ``n_bits``, the
    mean of ``measure`` over those bits, the largest and its ``bit`` with its 95% interval, and the mean
    ``on_support``. Add grouping columns (e.g. ``variant``) by applying it per group."""
    if ({"bit_constant", "bit", measure} - set(summary.columns)) or summary["bit"].isna().any():
        raise AnalysisError("bit_groups summarises per-bit edits (bitflip or midpoint summaries, with bit_constant)")
    rows = []
    for group, const in (("varying", False), ("constant", True)):
        g = summary[summary.bit_constant.astype(bool) == const]
        if not len(g):
            continue
        top = g.loc[g[measure].idxmax()]
        rows.append({"group": group, "n_bits": len(g), f"mean_{measure}": float(g[measure].mean()),
                     f"max_{measure}": float(top[measure]), "max_bit": int(top.bit),
                     f"max_{measure}_lo": float(top.get(f"{measure}_lo", np.nan)),
                     f"max_{measure}_hi": float(top.get(f"{measure}_hi", np.nan)),
                     "mean_on_support": float(g["on_support"].mean()) if "on_support" in g else np.nan})
    return pd.DataFrame(rows)


def matched_decoding(summary: pd.DataFrame, levels=(0.9, 0.5), measure: str = "delta_loss") -> pd.DataFrame:
    """Noise effects at common decoding accuracies, so variants are compared at matched decodability.

    Per variant (``variant`` column, else ``interface``) the noise rows are averaged over draws per scale
    (``decode_acc``, ``measure``), and ``measure`` is interpolated linearly against ``decode_acc`` at each level of
    ``levels``; where several scales decode equally (typically every row still decoding) the largest of them is the
    curve's point (the last before decoding falls). Outside the measured range: NaN (nothing is extrapolated). One
    row per (variant, level): ``variant, decode_acc, <measure>, scale`` (the noise scale interpolated the same
    way: how much noise that variant takes to reach the level)."""
    if "decode_acc" not in summary.columns:
        raise AnalysisError("matched_decoding needs noise summaries with decode_acc (input_intervention 'noise')")
    label = "variant" if "variant" in summary.columns else "interface"
    out = []
    for v, g in summary[summary.kind == "noise"].groupby(label, sort=False):
        pts = g.groupby("scale")[["decode_acc", measure]].mean().reset_index()
        pts = pts.sort_values("scale").groupby("decode_acc").last().reset_index().sort_values("decode_acc")
        d = pts.decode_acc.to_numpy(float)
        for level in levels:
            inside = d.min() <= level <= d.max()
            out.append({"variant": v, "decode_acc": float(level),
                        measure: float(np.interp(level, d, pts[measure].to_numpy(float))) if inside else np.nan,
                        "scale": float(np.interp(level, d, pts.scale.to_numpy(float))) if inside else np.nan})
    return pd.DataFrame(out)


__all__ = ["KINDS", "DEFAULT_SCALES", "SUPPORT_COLUMNS", "InterventionResult", "input_intervention", "input_edits",
           "input_rms", "run_input_edits", "bit_groups", "matched_decoding"]

"""Attention and MLP effects on the next-token loss, with the reference taken from other windows."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from analysis.engine.effects import LOGIT_BUDGET, check_eval
from analysis.errors import AnalysisError
from analysis.stats import t_intervals
from analysis.engine import names as hooknames

#: How :func:`~analysis.causal.components.component_effects` replaces an output: by another window's at the same
#: position (``resample``) or by its mean at that position over a disjoint reference set (``mean``).
HOWS = ("resample", "mean")
#: The hook point, under ``blocks.{i}``, of each component's output.
COMPONENT_HOOKS = {"attn": "hook_attn_out", "mlp": "hook_mlp_out"}


@contextmanager
def hooked(model, hooks: dict):
    """Forward hooks ``{hook name: function(output) -> replacement}`` on the model's hook points for the duration,
    removed on exit, even on error."""
    mods, handles = model.mod_dict, []
    try:
        for name, fn in hooks.items():
            if name not in mods:
                raise AnalysisError(f"the model has no hook point {name!r}")
            handles.append(mods[name].register_forward_hook(lambda mod, inp, out, fn=fn: fn(out)))
        yield model
    finally:
        for h in handles:
            h.remove()


def _window_losses(model, x: torch.Tensor) -> torch.Tensor:
    """Per window: the mean next-token loss over its ``T - 1`` predictions (float64, on the CPU)."""
    logits = model(x)[:, :-1].float()
    ce = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="none")
    return ce.view(len(x), -1).mean(1).double().cpu()


def _captured(model, x: torch.Tensor, names: list[str]) -> dict:
    cache = {}
    with hooked(model, {n: (lambda out, n=n: cache.__setitem__(n, out.detach())) for n in names}):
        model(x)
    return cache


def _conditions(n_layers: int) -> list[tuple[str, str, str, float, list[str]]]:
    """``(effect, kind, component, layer, hook names replaced)`` for every single-layer and joint ablation."""
    name = lambda c, i: hooknames.block(i, COMPONENT_HOOKS[c])  # noqa: E731
    out = [(f"{c} L{i}", "single", c, float(i), [name(c, i)]) for c in COMPONENT_HOOKS for i in range(n_layers)]
    everything = {c: [name(c, i) for i in range(n_layers)] for c in COMPONENT_HOOKS}
    out += [(f"all {c}", "joint", c, np.nan, everything[c]) for c in COMPONENT_HOOKS]
    out.append(("all attn + all mlp", "joint", "attn+mlp", np.nan, everything["attn"] + everything["mlp"]))
    return out


def _reference(model, reference, T: int) -> torch.Tensor:
    from analysis.corpus import corpus_tokens

    ref = corpus_tokens(model, reference)
    if ref.shape[1] != T:
        raise AnalysisError(f"reference windows must have the data's length {T} (got {ref.shape[1]}): a component's "
                            "output is replaced position by position")
    return ref


def _check_how(how: str, draws: int) -> None:
    if how not in HOWS:
        raise AnalysisError(f"unknown ablation {how!r}; use one of {', '.join(HOWS)}")
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 1:
        raise AnalysisError(f"draws must be a positive integer, got {draws!r}")
    if how == "mean" and draws != 1:
        raise AnalysisError("draws apply to resample ablation only (a mean over a fixed reference set is one value)")


def _measured_and_reference(model, x: torch.Tensor, how: str, reference, seed: int):
    """``(measured windows, reference windows, what the table records of a split)``: mean ablation without a
    reference splits the data into two seeded halves; else the reference is ``reference`` or the data itself."""
    N, T = x.shape
    if how == "mean" and reference is None:  # a disjoint half of the data is the reference
        if N < 4:
            raise AnalysisError(f"mean ablation without a reference splits the data in two; {N} windows are too few "
                                "(give at least 4, or a reference set)")
        perm = np.random.default_rng([seed, 11]).permutation(N)
        ref_idx, meas_idx = np.sort(perm[:N // 2]), np.sort(perm[N // 2:])
        return x[meas_idx], x[ref_idx], dict(measured=meas_idx.tolist(), reference=ref_idx.tolist())
    if reference is not None:
        return x, _reference(model, reference, T), {}
    return x, x, {}


def _reference_means(model, ref: torch.Tensor, names: list[str], rows: int) -> dict:
    """Per-position means over the reference windows, ``[T, d_model]`` per hook point."""
    device = model.unembed.weight.device
    sums = {n: 0.0 for n in names}
    for i in range(0, len(ref), rows):
        cache = _captured(model, ref[i:i + rows].to(device), names)
        for n in names:
            sums[n] = sums[n] + cache[n].double().sum(0)
    return {n: (s / len(ref)) for n, s in sums.items()}


@dataclass(frozen=True)
class _Source:
    """Where an ablated hook point's values come from: the ``ref`` windows a pairing picks (resample ablation), or
    their per-position ``means`` (mean ablation; None for resample)."""

    ref: torch.Tensor
    names: list[str]
    means: dict | None

    def values(self, model, pairing, sl: slice) -> dict:
        """The replacement values of the measured windows ``sl`` (``pairing``: a reference window for each measured
        one; None for the means)."""
        device = model.unembed.weight.device
        if pairing is None:
            return {n: m.to(device) for n, m in self.means.items()}
        return _captured(model, self.ref[pairing[sl]].to(device), self.names)


def _ablation_losses(model, x: torch.Tensor, conds: list, source: _Source, pairings: list, rows: int, bar):
    """``(delta, ablated, base)``: per condition and window the loss change and the ablated loss (means over the
    pairings), and each window's clean loss."""
    N = len(x)
    device = model.unembed.weight.device
    delta = np.zeros((len(conds), N))
    ablated = np.zeros((len(conds), N))
    base = np.zeros(N)
    for pairing in pairings:
        for i in range(0, N, rows):
            sl = slice(i, min(N, i + rows))
            xb = x[sl].to(device)
            clean = _window_losses(model, xb).numpy()
            values = source.values(model, pairing, sl)
            for c, (_, _, _, _, sites) in enumerate(conds):
                with hooked(model, {n: (lambda out, n=n: values[n].to(out.dtype).expand_as(out)) for n in sites}):
                    loss = _window_losses(model, xb).numpy()
                ablated[c, sl] += loss / len(pairings)
                delta[c, sl] += (loss - clean) / len(pairings)
            base[sl] = clean
            bar.update(sl.stop - sl.start)
    return delta, ablated, base


@torch.no_grad()
def component_effects(model, data=None, *, how: str = "resample", reference=None, draws: int = 1, seed: int = 0,
                      tokens: int = 8192, max_batch: int = 64, progress: bool = False) -> pd.DataFrame:
    """The loss increase when attention or MLP outputs are replaced from other windows, one layer at a time and
    jointly, with the interaction terms (see the module docstring). ``data``/``reference``: token windows as
    :func:`analysis.corpus.corpus_tokens` reads them (``reference`` windows of the data's length)."""
    from analysis.causal.ablation import resample_order
    from analysis.corpus import corpus_tokens

    check_eval(model)
    _check_how(how, draws)
    x = corpus_tokens(model, data, tokens=tokens)
    T = x.shape[1]
    attrs = dict(ablation=how, seed=seed, draws=draws)
    x, ref, split = _measured_and_reference(model, x, how, reference, seed)
    attrs.update(split)
    N = len(x)
    if how == "resample" and ref.shape[0] < 2:
        raise AnalysisError("resample ablation needs at least two windows (a window is never paired with itself)")
    L = model.cfg.n_layers
    conds = _conditions(L)
    names = sorted({n for c in conds for n in c[4]})
    rows = max(1, min(max_batch, LOGIT_BUDGET // (T * model.cfg.vocab_size)))
    if how == "mean":
        source, pairings = _Source(ref, names, _reference_means(model, ref, names, rows)), [None]
    else:
        source = _Source(ref, names, None)
        pairings = [resample_order(N, len(ref), seed + d, same=reference is None) for d in range(draws)]
        attrs["pairing"] = [p.tolist() for p in pairings]
    bar = tqdm(total=len(pairings) * N, desc=f"{how} ablation of attn / mlp", unit="window", disable=not progress,
               leave=False)
    delta, ablated, base = _ablation_losses(model, x, conds, source, pairings, rows, bar)
    bar.close()
    return _table(conds, delta, ablated, L, how, attrs | dict(base_loss=float(base.mean()), n_windows=int(N),
                                                               n_reference=int(len(ref))))


def _table(conds, delta: np.ndarray, ablated: np.ndarray, L: int, how: str, attrs: dict) -> pd.DataFrame:
    at = {c[0]: j for j, c in enumerate(conds)}
    per = {c[0]: delta[j] for j, c in enumerate(conds)}
    entries = [(e, k, comp, layer, ablated[at[e]].mean()) for e, k, comp, layer, _ in conds]
    for c in COMPONENT_HOOKS:
        per[f"{c} across layers"] = per[f"all {c}"] - sum(per[f"{c} L{i}"] for i in range(L))
        entries.append((f"{c} across layers", "interaction", c, np.nan, np.nan))
    per["attn x mlp"] = per["all attn + all mlp"] - per["all attn"] - per["all mlp"]
    entries.append(("attn x mlp", "interaction", "attn+mlp", np.nan, np.nan))
    mean, lo, hi = t_intervals(np.stack([per[e[0]] for e in entries]))
    df = pd.DataFrame([dict(effect=e, kind=k, component=comp, layer=layer, ablation=how, loss=loss)
                       for e, k, comp, layer, loss in entries])
    df["delta_loss"], df["delta_loss_lo"], df["delta_loss_hi"] = mean, lo, hi
    df["n"] = delta.shape[1]

    def of(row) -> str:
        if row.kind == "single" or row.effect.endswith("across layers"):
            return f"all {row.component}"
        return "" if row.effect == "all attn + all mlp" else "all attn + all mlp"

    df["share_of"] = [of(r) for r in df.itertuples()]
    d = df.set_index("effect")
    usable = {e: d.delta_loss[e] for e in d.index if d.delta_loss_lo[e] > 0 or d.delta_loss_hi[e] < 0}
    df["share"] = [df.delta_loss[j] / usable[s] if s in usable else np.nan for j, s in enumerate(df.share_of)]
    df.attrs.update(attrs)
    return df


def component_shares(model, data=None, *, tokens: int = 8192, how: str = "resample", reference=None, seed: int = 0,
                     progress: bool = False) -> pd.DataFrame:
    """The single-layer rows of :func:`~analysis.causal.components.component_effects`: one row per (component, layer)
    with ``delta_loss`` and its interval, ``share`` (of that component's joint effect over all layers, unclipped; NaN
    where that effect's interval includes zero) and ``share_of``. The joint effects and the interaction terms are in
    :func:`~analysis.causal.components.component_effects` only: read them before reading shares."""
    df = component_effects(model, data, how=how, reference=reference, seed=seed, tokens=tokens, progress=progress)
    out = df[df.kind == "single"].reset_index(drop=True)
    out["layer"] = out.layer.astype(int)
    out = out[["component", "layer", "ablation", "delta_loss", "delta_loss_lo", "delta_loss_hi", "n", "share",
               "share_of"]]
    out.attrs.update(df.attrs)
    return out


__all__ = ["HOWS", "COMPONENT_HOOKS", "component_effects", "component_shares", "hooked"]

"""Similarity with its references: every cross-variant CKA (and Procrustes) value beside the ceiling of two runs of
one variant, the level of variants that share no initialisation, each model against its initialisation, and a
null, with a bootstrap interval over windows for every value."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from analysis.corpus import corpus_tokens
from analysis.errors import AnalysisError
from analysis.readouts import resampling
from analysis.loading import random_init_twin
from analysis.readouts.similarity import layer_activations
from analysis.stats import seed_bootstrap

#: The reference kinds (column ``reference``) and what each pair of models is.
KINDS = {
    "same_interface_cross_seed": "one variant, two seeds: the ceiling",
    "cross_interface_cross_seed": "two variants, two seeds: no shared initialisation",
    "cross_interface_same_seed": "two variants of one seed: bit-identical initial backbones",
    "own_initialisation": "a model against its untrained initialisation",
    "permutation_null": "one side's token rows permuted: unrelated representations",
}
#: The similarity measures (column ``measure``): debiased and linear CKA, and Procrustes similarity.
MEASURES = ("debiased_cka", "linear_cka", "procrustes")
#: Measures whose bootstrap draws are shifted onto the estimate before the interval is read (see the docstring).
SHIFTED = ("linear_cka", "procrustes")
LEVEL = 0.95


@dataclass
class SimilarityReferences:
    """``table``: the tidy table (module docstring); ``draws``: ``[len(table), boot]``, each row's bootstrap draws
    (shifted for ``SHIFTED`` measures; NaN for null rows and without a bootstrap)."""

    table: pd.DataFrame
    draws: np.ndarray

    def reading(self) -> pd.DataFrame:
        """Each cross-variant value against its ceiling and null
        (:func:`~analysis.readouts.references.read_references`)."""
        return read_references(self)


def _entries(models) -> list:
    if not hasattr(models, "items") or not len(models):
        raise AnalysisError("give the models as a mapping {(variant, seed): model or checkpoint directory}")
    out = []
    for key, m in models.items():
        if (not isinstance(key, tuple) or len(key) != 2 or not isinstance(key[0], str)
                or isinstance(key[1], bool) or not isinstance(key[1], (int, np.integer))):
            raise AnalysisError(f"model keys must be (variant name, seed) tuples such as ('gf2', 0), got {key!r}")
        out.append((key[0], int(key[1]), m))
    return out


def _model(m, device=None, dtype=None):
    if isinstance(m, (str, Path)):
        from analysis.loading import load
        return load(m, device=device, dtype=dtype)
    return m


def _same_tokens(first, model, name) -> None:
    ta, tb = getattr(first, "tokenizer", None), getattr(model, "tokenizer", None)
    if first.cfg.vocab_size != model.cfg.vocab_size or (
            ta is not None and tb is not None and ta.get_vocab() != tb.get_vocab()):
        raise AnalysisError(f"{name} has another tokenizer than the first model: similarity needs the same tokens")


def _windows(acts: dict, n: int, t: int, skip_first: bool) -> dict:
    return {h: a.reshape(n, t, -1)[:, 1 if skip_first else 0:] for h, a in acts.items()}


def _interval(draws: np.ndarray):
    ok = draws[np.isfinite(draws)]
    if not len(ok):
        return np.nan, np.nan
    lo, hi = np.quantile(ok, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return float(lo), float(hi)


def _kind(a, b) -> str:
    if a[0] == b[0]:
        return "same_interface_cross_seed"
    return "cross_interface_same_seed" if a[1] == b[1] else "cross_interface_cross_seed"


def _keys(entries, init: bool, boot: int, null_draws: int) -> list[tuple[str, int]]:
    """The models' ``(variant, seed)`` keys, once the request is checked."""
    keys = [(v, s) for v, s, _ in entries]
    if len(set(keys)) != len(keys):
        raise AnalysisError(f"two models share a (variant, seed) key: {keys}; name each run apart")
    if len(entries) < 2 and not init:
        raise AnalysisError("give at least two models, or one with init=True")
    if boot < 0 or null_draws < 0:
        raise AnalysisError(f"boot and null_draws must be >= 0, got {boot} and {null_draws}")
    return keys


@dataclass(frozen=True)
class _Reader:
    """How every model's activations are read: at which hook points, with position 0 or without, its untrained
    initialisation beside it or not, in batches of how many windows, and a directory loaded on what device in what
    dtype."""

    hooks: object
    skip_first: bool
    init: bool
    max_batch: int
    device: object = None
    dtype: object = None

    def runs(self, model) -> list:
        """``(state, model)`` of the trained model and, with ``init``, its initialisation."""
        return [("trained", model)] + ([("init", random_init_twin(model))] if self.init else [])

    def windows(self, model, x) -> dict:
        """``{hook: [windows, positions, d]}`` of ``model`` on the windows ``x``."""
        return _windows(layer_activations(model, x, self.hooks, max_batch=self.max_batch), *x.shape, self.skip_first)


def _collect(entries, data, tokens: int, reader: _Reader, progress: bool) -> tuple[dict, list, object]:
    """Every model's (and initialisation's) activations on the windows the first model reads from ``data``:
    ``({(variant, seed, state): {hook: windows}}, the hook points in order, the windows)``."""
    acts, order, x = {}, None, None
    first = None
    for variant, s, m in tqdm(entries, desc="activations", unit="model", disable=not progress):
        model = _model(m, reader.device, reader.dtype)
        if first is None:
            first = model
            x = corpus_tokens(model, data, tokens=tokens)
            if x.shape[1] - reader.skip_first < 1:
                raise AnalysisError("windows of one token leave nothing once position 0 is skipped")
        _same_tokens(first, model, f"model {(variant, s)}")
        runs = reader.runs(model)
        for state, mod in runs:
            got = reader.windows(mod, x)
            if order is None:
                order = list(got)
            elif list(got) != order:
                raise AnalysisError(f"model {(variant, s)} has hook points {list(got)}, the first {order}; pass "
                                    "hooks common to every model")
            acts[(variant, s, state)] = got
        del model, runs
    return acts, order, x


def _check_windows(n: int, t: int, boot: int) -> None:
    """Enough windows for the bootstrap and enough tokens for debiased CKA."""
    if boot and n < 2:
        raise AnalysisError(f"a bootstrap over windows needs at least 2 windows, got {n}; give more tokens or boot=0")
    if n * t < 4:
        raise AnalysisError(f"debiased CKA needs at least 4 tokens, got {n * t}")


def _pairs(keys: list, init: bool) -> list[tuple[str, tuple, tuple]]:
    """``(kind, side a, side b)`` of every comparison: each pair of trained models, and each against its
    initialisation (``init``)."""
    pairs = [(_kind(a, b), (*a, "trained"), (*b, "trained")) for a, b in combinations(keys, 2)]
    pairs += [("own_initialisation", (*k, "trained"), (*k, "init")) for k in keys] if init else []
    return pairs


@dataclass(frozen=True)
class _Comparison:
    """How every pair is compared: ``boot`` bootstrap draws of the window ``counts`` (None without a bootstrap),
    ``null_draws`` permutations seeded by ``seed``, and Procrustes or not."""

    boot: int
    counts: object
    null_draws: int
    procrustes: bool
    seed: int

    @property
    def measures(self) -> tuple[str, ...]:
        """The measures compared."""
        return MEASURES if self.procrustes else MEASURES[:2]


def _self_stats(sides: dict, how: _Comparison):
    """A function of a side's key: its statistics against itself (point, bootstrap draws), computed once."""
    selves = {}

    def self_stats(k):
        if k not in selves:
            side = sides[k]
            bt = resampling.Pair(side, side, nuclear=False).evaluate(how.counts) if how.boot else None
            selves[k] = (side.point(side, nuclear=False), bt)
        return selves[k]

    return self_stats


def _measured_rows(how: _Comparison, kind: str, base: dict, a, b, own_a, own_b) -> tuple[list[dict], list]:
    """One row per measure of sides ``a`` and ``b`` (their self-statistics ``own_a``, ``own_b``): the value with its
    bootstrap interval (shifted draws for ``SHIFTED`` measures), and each row's draws."""
    (pa, ba), (pb, bb) = own_a, own_b
    point = resampling.measures(a.point(b, nuclear=how.procrustes), pa, pb)
    boots = (resampling.measures(resampling.Pair(a, b, nuclear=how.procrustes).evaluate(how.counts), ba, bb)
             if how.boot else {})
    rows, draws = [], []
    for measure in how.measures:
        value = float(point[measure])
        d = np.asarray(boots.get(measure, np.full(max(how.boot, 1), np.nan)), dtype=float)
        bias = float(np.nanmean(d) - value) if how.boot and np.isfinite(d).any() else np.nan
        if measure in SHIFTED and np.isfinite(bias):
            d = d - bias
        lo, hi = _interval(d) if how.boot else (np.nan, np.nan)
        rows.append({"reference": kind, **base, "measure": measure, "value": value, "lo": lo, "hi": hi,
                     "boot_bias": bias, "draws": how.boot})
        draws.append(d[:how.boot] if how.boot else np.empty(0))
    return rows, draws


def _null_rows(how: _Comparison, base: dict, a, b, pa, pb, seed) -> tuple[list[dict], list]:
    """One ``permutation_null`` row per measure of sides ``a`` and ``b`` (their self-points ``pa``, ``pb``), the
    permutations seeded by ``seed``, and each row's (NaN) draws."""
    null = resampling.measures(resampling.permuted(a, b, how.null_draws, seed=seed, nuclear=how.procrustes), pa, pb)
    rows, draws = [], []
    for measure in how.measures:
        lo, hi = _interval(null[measure])
        rows.append({"reference": "permutation_null", **base, "measure": measure,
                     "value": float(np.mean(null[measure])), "lo": lo, "hi": hi, "boot_bias": np.nan,
                     "draws": how.null_draws})
        draws.append(np.full(how.boot, np.nan))
    return rows, draws


def _hook_rows(acts: dict, layer: int, hook: str, pairs: list, how: _Comparison, bar) -> tuple[list[dict], list]:
    """The rows (and their draws) of every pair at one hook point."""
    sides = {k: resampling.Side(a[hook]) for k, a in acts.items()}
    self_stats = _self_stats(sides, how)
    rows, draws = [], []
    for p, (kind, ka, kb) in enumerate(pairs):
        a, b = sides[ka], sides[kb]
        own_a, own_b = self_stats(ka), self_stats(kb)
        base = {"variant_a": ka[0], "seed_a": ka[1], "variant_b": kb[0], "seed_b": kb[1], "hook": hook,
                "layer": layer}
        got = [_measured_rows(how, kind, base, a, b, own_a, own_b)]
        if how.null_draws and kind != "own_initialisation":
            got.append(_null_rows(how, base, a, b, own_a[0], own_b[0], seed=[how.seed, p, layer]))
        for r, d in got:
            rows += r
            draws += d
        bar.update()
    return rows, draws


def similarity_references(models, data=None, *, hooks=None, tokens: int = 8192, skip_first: bool = True,
                          boot: int = 1000, null_draws: int = 20, init: bool = True, procrustes: bool = True,
                          seed: int = 0, max_batch: int = 64, device=None, dtype=None,
                          progress: bool = False) -> SimilarityReferences:
    """Every pair of ``models`` (``{(variant, seed): model or checkpoint directory}``, a directory loaded on
    ``device`` in ``dtype`` when its turn comes), each model against its
    initialisation (``init``) and a permutation null (``null_draws``; 0: none), at every hook point, on the same
    windows (``data`` as :func:`analysis.corpus.corpus_tokens`, tokenised by the first model; all models must share
    its tokenizer), with ``boot`` bootstrap draws over windows (0: no intervals). See the module docstring."""
    entries = _entries(models)
    keys = _keys(entries, init, boot, null_draws)
    reader = _Reader(hooks, skip_first, init, max_batch, device, dtype)
    acts, order, x = _collect(entries, data, tokens, reader, progress)
    n, t = x.shape[0], x.shape[1] - int(skip_first)
    _check_windows(n, t, boot)
    how = _Comparison(boot, resampling.window_counts(n, boot, seed) if boot else None, null_draws, procrustes, seed)
    pairs = _pairs(keys, init)
    rows, draws = [], []
    bar = tqdm(total=len(order) * len(pairs), desc="similarity", unit="pair", disable=not progress)
    for layer, hook in enumerate(order):
        hook_rows, hook_draws = _hook_rows(acts, layer, hook, pairs, how, bar)
        rows += hook_rows
        draws += hook_draws
    bar.close()
    table = pd.DataFrame(rows).assign(n_windows=n, n_tokens=n * t)
    table.attrs.update(n_tokens=n * t, n_windows=n, skip_first=skip_first, boot=boot, null_draws=null_draws,
                       seed=seed)
    return SimilarityReferences(table, np.vstack(draws) if boot else np.empty((len(table), 0)))


def _mean(refs: SimilarityReferences, mask) -> tuple[float, np.ndarray, int]:
    idx = np.flatnonzero(np.asarray(mask))
    if not len(idx):
        return np.nan, np.full(refs.draws.shape[1], np.nan), 0
    value = float(refs.table.value.to_numpy()[idx].mean())
    d = refs.draws[idx].mean(0) if refs.draws.shape[1] else np.empty(0)
    return value, d, len(idx)


def read_references(refs: SimilarityReferences) -> pd.DataFrame:
    """For every pair of variants ``A``, ``B`` compared across interfaces, hook point and measure: ``quantity``
    ``cross_seed`` (the mean over the seed pairs of ``cross_interface_cross_seed``), ``same_seed`` (of
    ``cross_interface_same_seed``), ``ceiling_a`` and ``ceiling_b`` (``same_interface_cross_seed`` of ``A``, of
    ``B``), ``relative`` (``cross_seed / sqrt(ceiling_a * ceiling_b)``: 1 at the ceiling), ``shared_init``
    (``same_seed - cross_seed``: the part a shared initialisation adds) and ``null`` (the permutation null of the
    pair's rows: mean, lowest 2.5% and highest 97.5% quantile). ``seed_lo``/``seed_hi``: the 95% interval over seeds
    of a mean over pairs (``cross_seed``, ``same_seed``, the ceilings; :func:`analysis.stats.seed_bootstrap`
    resamples the seeds the models come from, NaN with one seed) - the interval to read; ``lo``/``hi``, from the
    common bootstrap draws over windows, are the within-seed detail (and the only interval of ``relative`` and
    ``shared_init``). ``n_pairs``: the pairs of models each quantity averages. Columns ``variant_a, variant_b, hook,
    layer, measure, quantity, value, lo, hi, seed_lo, seed_hi, n_pairs``."""
    t = refs.table
    variants = list(dict.fromkeys(list(t.variant_a) + list(t.variant_b)))
    cross_pairs = [(a, b) for a, b in combinations(variants, 2)
                   if (t.reference.str.startswith("cross_interface")
                       & (((t.variant_a == a) & (t.variant_b == b)) | ((t.variant_a == b) & (t.variant_b == a))))
                   .any()]
    cells = list(t[["hook", "layer", "measure"]].drop_duplicates().itertuples(index=False))
    rows = []

    def over_seeds(mask) -> tuple[float, float]:
        g = t[mask]
        return seed_bootstrap(g.value.to_numpy(), g.seed_a.to_numpy(), g.seed_b.to_numpy())[1:] if len(g) else \
            (np.nan, np.nan)

    for (va, vb), (hook, layer, measure) in ((p, c) for p in cross_pairs for c in cells):
        at = (t.hook == hook) & (t.measure == measure)
        pair = ((t.variant_a == va) & (t.variant_b == vb)) | ((t.variant_a == vb) & (t.variant_b == va))
        masks = {"cross_seed": at & pair & (t.reference == "cross_interface_cross_seed"),
                 "same_seed": at & pair & (t.reference == "cross_interface_same_seed"),
                 "ceiling_a": at & (t.reference == "same_interface_cross_seed") & (t.variant_a == va),
                 "ceiling_b": at & (t.reference == "same_interface_cross_seed") & (t.variant_a == vb)}
        got = {q: _mean(refs, m) for q, m in masks.items()}
        with np.errstate(invalid="ignore", divide="ignore"):
            (c, cd, cn), (s, sd, sn) = got["cross_seed"], got["same_seed"]
            (ca, cad, can), (cb, cbd, cbn) = got["ceiling_a"], got["ceiling_b"]
            ok = ca > 0 and cb > 0
            got["relative"] = (c / np.sqrt(ca * cb) if ok else np.nan, cd / np.sqrt(cad * cbd) if ok else cd * np.nan,
                               cn)
            got["shared_init"] = (s - c, sd - cd, min(sn, cn))
        base = {"variant_a": va, "variant_b": vb, "hook": hook, "layer": layer, "measure": measure}
        for quantity, (value, d, k) in got.items():
            if k:
                lo, hi = _interval(d) if len(d) else (np.nan, np.nan)
                s_lo, s_hi = over_seeds(masks[quantity]) if quantity in masks else (np.nan, np.nan)
                rows.append({**base, "quantity": quantity, "value": value, "lo": lo, "hi": hi, "seed_lo": s_lo,
                             "seed_hi": s_hi, "n_pairs": k})
        null = t[at & pair & (t.reference == "permutation_null")]
        if len(null):
            rows.append({**base, "quantity": "null", "value": float(null.value.mean()), "lo": float(null.lo.min()),
                         "hi": float(null.hi.max()), "seed_lo": np.nan, "seed_hi": np.nan, "n_pairs": len(null)})
    cols = ["variant_a", "variant_b", "hook", "layer", "measure", "quantity", "value", "lo", "hi", "seed_lo",
            "seed_hi", "n_pairs"]
    return pd.DataFrame(rows, columns=cols)


def verdict(q: dict) -> str:
    """A reading of one pair at one hook point from its quantities ``{quantity: (value, lo, hi)}``: ``at the null``
    (the cross-seed interval reaches the null's 97.5% quantile), ``at the ceiling`` (the relative interval reaches
    1), ``between the null and the ceiling``, or what is missing for a reading."""
    level = q.get("cross_seed") or q.get("same_seed")
    if level is None:
        return "no cross-variant value"
    null_hi = q["null"][2] if "null" in q else np.nan
    lo = level[1] if np.isfinite(level[1]) else level[0]
    if np.isfinite(null_hi) and lo <= null_hi:
        return "at the null"
    if "cross_seed" not in q:
        return "above the null; no cross-seed value (train a second seed)"
    if "relative" not in q or not np.isfinite(q["relative"][0]):
        return "above the null; no ceiling (give each variant two seeds)"
    rel_hi = q["relative"][2] if np.isfinite(q["relative"][2]) else q["relative"][0]
    return "at the ceiling" if rel_hi >= 1 else "between the null and the ceiling"


def reading_lines(reading: pd.DataFrame, measure: str = "debiased_cka", *, verdicts: bool = True) -> list[str]:
    """One sentence per (pair of variants, hook point): each cross-variant value against its ceiling and null, with
    its interval over seeds where the reading has one (``seed_lo``/``seed_hi``), else over windows; ``verdicts``:
    end each with :func:`verdict`'s reading (a study's report leaves it out: its conclusions are its claims)."""
    from_rows = reading[reading.measure == measure]
    lines = []

    def cell(v, lo, hi):
        return f"{v:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) else "")

    def interval(r):
        if "seed_lo" in r._fields and np.isfinite(r.seed_lo):
            return r.value, r.seed_lo, r.seed_hi
        return r.value, r.lo, r.hi

    for (va, vb, layer, hook), g in from_rows.groupby(["variant_a", "variant_b", "layer", "hook"], sort=False):
        q = {r.quantity: interval(r) if r.quantity != "null" else (r.value, r.lo, r.hi) for r in g.itertuples()}
        parts = []
        if "cross_seed" in q:
            parts.append(f"across seeds {cell(*q['cross_seed'])}")
        if "same_seed" in q:
            parts.append(f"same seed {cell(*q['same_seed'])}")
        if "shared_init" in q:
            parts.append(f"shared initialisation adds {cell(*q['shared_init'])}")
        ceil = [f"{v} {q[k][0]:.2f}" for k, v in (("ceiling_a", va), ("ceiling_b", vb)) if k in q]
        if ceil:
            parts.append("ceiling " + ", ".join(ceil))
        if "relative" in q and np.isfinite(q["relative"][0]):
            parts.append(f"{cell(*q['relative'])} of the ceiling")
        if "null" in q:
            parts.append(f"null [{q['null'][1]:.2f}, {q['null'][2]:.2f}]")
        lines.append(f"{va} vs {vb} @ {hook}: " + "; ".join(parts) + (f" - {verdict(q)}" if verdicts else ""))
    return lines


__all__ = ["KINDS", "MEASURES", "SimilarityReferences", "similarity_references", "read_references", "verdict",
           "reading_lines"]

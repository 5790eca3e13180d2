"""Paired comparisons between a study's variants over seeds: what each difference is and how sure (descriptions; a
study's findings are its claims, :mod:`analysis.study.claims`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats import crossed_bootstrap, crossed_mean, paired_difference

#: The columns that name one measurement: analysis, metric and key.
KEYS = ["analysis", "metric", "key"]
#: The variant name of the pooled gf2 rows: per seed, the mean over the trained recodings
#: (:func:`~analysis.study.comparisons.with_pooled`).
POOLED = "gf2 (pooled)"
#: The variants the report compares with one another (with the pooled gf2 rows;
#: :func:`~analysis.study.sections.study_pairs`).
ORDER = ("learned", "canonical", "gf2", "canonical-matched", "gf2-matched")
#: The controls the study trains by default, in the order tables and figures show them (after ORDER's variants).
CONTROLS = ("permuted", "frozen_random", "canonical-matched", "learned-randomhead", "canonical-randomhead")
_DISPLAY = ("learned", "canonical", "gf2", POOLED) + CONTROLS + ("gf2-matched", "canonical-codehead")


def variant_order(variants) -> list[str]:
    """The study's variants first (learned, canonical, gf2), then the controls, then the others (gf2-r1, ...) by
    name."""
    return sorted(dict.fromkeys(variants), key=lambda v: (_DISPLAY.index(v) if v in _DISPLAY else len(_DISPLAY), v))


#: The columns of :func:`~analysis.study.comparisons.compare` (see the module docstring).
COLUMNS = KEYS + ["step", "a", "b", "n", "diff", "lo", "hi", "p", "p_sign", "identical", "excludes_zero", "exceeds",
                  "boot_lo", "boot_hi", "boot"]


def recodings_of(variants) -> list[str]:
    """The gf2 variants of a study: ``gf2`` and its further trained recodings ``gf2-r<R>``."""
    return sorted(v for v in set(variants) if v == "gf2" or str(v).startswith("gf2-r"))


def _order(variants) -> list[str]:
    vs = variant_order([v for v in variants if v != POOLED])
    if POOLED in set(variants):
        vs.insert(vs.index("gf2") + 1 if "gf2" in vs else len(vs), POOLED)
    return vs


def with_pooled(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` plus the ``gf2 (pooled)`` rows (per seed, the mean over the trained recodings) when more than one
    recoding was trained."""
    recs = recodings_of(df.variant)
    if len(recs) < 2:
        return df
    g = df[df.variant.isin(recs)]
    pooled = g.groupby(KEYS + ["seed", "step"], sort=False, as_index=False).value.mean()
    return pd.concat([df, pooled.assign(variant=POOLED)], ignore_index=True)


def _recoding_table(wide: pd.DataFrame, a: str, b: str, recs: list[str]) -> np.ndarray | None:
    """[seeds, recodings] of ``a - gf2_r`` (or ``gf2_r - b``) for a pair with the pooled variant on one side;
    ``wide``: one metric's values, seeds x variants; ``recs``: the recodings measured (one without a value is a
    column of NaN)."""
    other = b if a == POOLED else a
    if other not in wide or other == POOLED:
        return None
    table = np.stack([wide[r].to_numpy(float) if r in wide else np.full(len(wide), np.nan) for r in recs], 1)
    other_v = wide[other].to_numpy(float)[:, None]
    return table - other_v if a == POOLED else other_v - table


def _random_recodings(d: dict, table) -> dict:
    """A pooled comparison's ``n``, ``diff``, ``lo``, ``hi``, ``p`` and ``identical`` from
    :func:`analysis.stats.crossed_mean` of its [seeds, recodings] table of differences (the seeds with every recoding
    measured; no sign-flip p: that treats the recodings as fixed)."""
    if table is None:
        return dict(d, lo=np.nan, hi=np.nan, p=np.nan, p_sign=np.nan, exceeds=False)
    r = crossed_mean(table)
    same = bool(r["n"] >= 2 and r["k"] >= 2 and r["lo"] == r["hi"])  # every seed x recoding difference the same
    return dict(d, n=r["n"], diff=r["mean"], lo=r["lo"], hi=r["hi"], p=r["p"], p_sign=np.nan, identical=same,
                exceeds=bool(not same and np.isfinite(r["lo"]) and (r["lo"] > 0 or r["hi"] < 0)))


def _present(wide: pd.DataFrame) -> pd.DataFrame:
    """A block of a wide table with what a pivot of that block alone keeps: no all-NaN columns or rows."""
    return wide.dropna(axis=1, how="all").dropna(axis=0, how="all")


def _item_table(items: pd.DataFrame, a: str, b: str) -> np.ndarray | None:
    """[seeds, items] of per-item ``a - b`` (the same items for every seed), or for the pooled gf2 on one side
    [seeds, recodings, items]; ``items``: one metric's per-item values, seeds x (variant, item)."""
    variants = set(items.columns.get_level_values(0))

    def wide(v):
        return _present(items[v]) if v in variants else pd.DataFrame()

    if POOLED not in (a, b):
        wa, wb = wide(a), wide(b)
        if wa.empty or wb.empty:
            return None
        wa, wb = wa.align(wb, join="inner")
        return (wa - wb).to_numpy(float) if wa.size else None
    other = wide(b if a == POOLED else a)
    recs = [wide(r) for r in recodings_of(variants)]
    if other.empty or len(recs) < 2 or any(r.empty for r in recs):
        return None
    for r in recs:
        other, _ = other.align(r, join="inner")
    if not other.size:
        return None
    stack = np.stack([r.reindex(index=other.index, columns=other.columns).to_numpy(float) for r in recs], 1)
    base = other.to_numpy(float)[:, None, :]
    return stack - base if a == POOLED else base - stack


def _blocks(df: pd.DataFrame, index: list[str], columns) -> dict:
    """One pivot of ``df`` (mean ``value`` by ``index`` x ``columns``), cut into its blocks by ``KEYS + step``:
    what a pivot of each group alone gives, at the cost of one."""
    if df is None or not len(df):
        return {}
    wide = df.pivot_table(index=KEYS + ["step"] + index, columns=columns, values="value")
    return {k: block.droplevel(list(range(len(KEYS) + 1)))
            for k, block in wide.groupby(level=list(range(len(KEYS) + 1)), sort=False)}


def compare(df: pd.DataFrame, items: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every paired comparison of the table (see the module docstring), ``a - b`` with ``b`` the earlier variant
    (canonical - learned, gf2 - canonical)."""
    df = with_pooled(df)
    by_item = _blocks(items, ["seed"], ["variant", "item"])
    blocks = _blocks(df, ["seed"], "variant")
    rows = []
    for k, g in df.groupby(KEYS + ["step"], sort=False):
        if k not in blocks:
            continue  # every value NaN (a measurement some model could not make): nothing to compare
        wide = _present(blocks[k])
        variants = _order([v for v in dict.fromkeys(g.variant) if v in wide.columns])  # all-NaN ones dropped
        for i, b in enumerate(variants):
            for a in variants[i + 1:]:
                if POOLED in (a, b) and ({a, b} - {POOLED}) <= set(recodings_of([a, b])):
                    continue  # a recoding against the pool it is part of
                d = paired_difference(wide[a].to_numpy(float), wide[b].to_numpy(float))
                if not d["n"]:
                    continue
                if POOLED in (a, b):  # recodings as a random effect: the interval and p for recodings in general
                    d = _random_recodings(d, _recoding_table(wide, a, b, recodings_of(g.variant)))
                boot, table = "", None
                if k in by_item:
                    table = _item_table(by_item[k], a, b)
                    boot = "seeds x recodings x prompts" if POOLED in (a, b) else "seeds x prompts"
                if table is None and POOLED in (a, b):
                    table, boot = _recoding_table(wide, a, b, recodings_of(g.variant)), "seeds x recodings"
                lo_b = hi_b = np.nan
                if table is not None and np.isfinite(table).sum() >= 2:
                    _, lo_b, hi_b = crossed_bootstrap(table)
                else:
                    boot = ""
                rows.append(dict(zip(KEYS + ["step"], k), a=a, b=b, **d, excludes_zero=d["exceeds"], boot_lo=lo_b,
                                 boot_hi=hi_b, boot=boot))
    return pd.DataFrame(rows, columns=COLUMNS)


__all__ = ["compare", "with_pooled", "recodings_of", "POOLED"]

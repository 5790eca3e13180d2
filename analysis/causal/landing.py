"""Input edits compared at a matched landing share: the share of re-coded token rows that land on another token's code."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.errors import AnalysisError

#: The columns :func:`~analysis.causal.landing.landing_parts` and :func:`~analysis.causal.landing.matched_landing`
#: read.
PART_COLUMNS = ("delta_on", "delta_off", "share_on", "share_off")

#: The landing shares (of moved rows landing on another token's code) at which the study compares bit flips and
#: transvection walks across variants, fixed in advance so every model is measured at the same ones.
STUDY_SHARES = (0.75, 0.9)


def landing_parts(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``moved`` (the share of occurrences the edit moves) and ``landing`` (the share of those that land
    on another token's code; NaN for an edit that moves none) added; needs :data:`PART_COLUMNS`."""
    missing = [c for c in PART_COLUMNS if c not in df.columns]
    if missing:
        raise AnalysisError(f"a landing-share comparison needs the columns {', '.join(PART_COLUMNS)} (the on- and "
                            f"off-support parts of an edit); this table lacks {', '.join(missing)}: use "
                            "recoding_sweep(split=True) or split_parts(split_table(...))")
    out = df.copy()
    on, off = out.share_on.to_numpy(float), out.share_off.to_numpy(float)
    if np.any(on < 0) or np.any(off < 0) or np.any(on + off > 1 + 1e-9):
        raise AnalysisError("share_on and share_off are shares of the measured occurrences: each >= 0, sum <= 1")
    out["moved"] = on + off
    with np.errstate(divide="ignore", invalid="ignore"):
        out["landing"] = np.where(out.moved > 0, on / np.where(out.moved > 0, out.moved, 1.0), np.nan)
    return out


def split_parts(split: pd.DataFrame) -> pd.DataFrame:
    """A :func:`analysis.causal.flipsplit.split_table` with the part columns of this module: a flip moves every
    occurrence it edits, ``on_support`` of them land (``share_on``), the rest do not."""
    missing = {"on", "off", "on_support"} - set(split.columns)
    if missing:
        raise AnalysisError(f"split_parts reads a flip split table (split_table); this one lacks {sorted(missing)}")
    return split.assign(delta_on=split["on"], delta_off=split["off"], share_on=split.on_support,
                        share_off=1 - split.on_support)


def matched_landing(df: pd.DataFrame, at=None, *, by=("variant",), measure: str = "delta_loss") -> pd.DataFrame:
    """Each group of ``by`` (variants, or variants and walk lengths) at the landing shares of ``at``: the loss change
    its edits would have had with that share of the occurrences they move landing on another token's code (the
    module docstring's standardisation), so groups are compared at a matched landing share.

    Default ``at``: the mean of the groups' own landing shares (one common share between them). One row per (group,
    share): the ``by`` columns, ``landing_at``, ``delta_loss`` (NaN where the share needs a rate the group has not
    got), ``landing_own`` (the group's pooled own landing share), ``moved`` (its mean share of occurrences moved),
    ``measure_own`` (the mean measured ``measure`` of its whole edits: the unmatched value), ``rate_on``,
    ``rate_off`` and ``rows`` (the group's edits that move any occurrence)."""
    by = [by] if isinstance(by, str) else list(by)
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise AnalysisError(f"no column {', '.join(missing)} to group by; the table has {', '.join(df.columns)}")
    p = landing_parts(df)
    p = p[p.moved > 0]
    if not len(p):
        raise AnalysisError("no edit in the table moves any occurrence (share_on + share_off is 0 everywhere)")
    groups = []
    for key, g in p.groupby(by, sort=False):
        on, off = g.share_on.sum(), g.share_off.sum()
        groups.append(({**dict(zip(by, key if isinstance(key, tuple) else (key,)))}, dict(
            landing_own=float(on / (on + off)), moved=float(g.moved.mean()),
            measure_own=float(g[measure].mean()) if measure in g else np.nan,
            rate_on=float(g.delta_on.sum() / on) if on > 0 else np.nan,
            rate_off=float(g.delta_off.sum() / off) if off > 0 else np.nan, rows=len(g))))
    at = [float(np.mean([s["landing_own"] for _, s in groups]))] if at is None else \
        [float(a) for a in np.atleast_1d(at)]
    if any(not 0 <= a <= 1 for a in at):
        raise AnalysisError(f"a landing share is in [0, 1], got {[a for a in at if not 0 <= a <= 1][0]:g}")
    rows = []
    for key, s in groups:
        for a in at:
            on = a * s["rate_on"] if a > 0 else 0.0  # a stratum with weight 0 needs no rate
            off = (1 - a) * s["rate_off"] if a < 1 else 0.0
            rows.append({**key, "landing_at": a, "delta_loss": s["moved"] * (on + off), **s})
    return pd.DataFrame(rows)


__all__ = ["PART_COLUMNS", "landing_parts", "split_parts", "matched_landing"]

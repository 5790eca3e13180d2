"""The study's long-format rows (``analysis, metric, key, value``): from ``(metric, key, value)`` triples, and from
any analysis's tables for a spec that declares no measurement of its own."""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ["analysis", "metric", "key", "value"]


def rows(analysis: str, items) -> pd.DataFrame:
    """Rows of ``(metric, key, value)`` triples."""
    return pd.DataFrame([{"analysis": analysis, "metric": m, "key": str(k), "value": float(v)} for m, k, v in items],
                        columns=COLUMNS)


def table_rows(analysis: str, tables: dict) -> pd.DataFrame:
    """Every measured number of ``tables``: per table and floating-point or count column (``n``, ``n_*``) a metric
    ``<table>:<column>``, keyed by the row's other columns (labels, integers such as a layer) joined with ``|`` (its
    position when it has none)."""
    items = []
    for stem, df in tables.items():
        numeric = [c for c in df.columns if pd.api.types.is_float_dtype(df[c]) or (
            pd.api.types.is_integer_dtype(df[c]) and (c == "n" or str(c).startswith("n_")))]
        labels = [c for c in df.columns if c not in numeric]
        keys = (df[labels].astype(str).agg("|".join, axis=1) if labels
                else pd.Series([str(i) for i in range(len(df))], index=df.index))
        for column in numeric:
            values = df[column].astype(float).to_numpy()
            items += [(f"{stem}:{column}", k, v) for k, v in zip(keys, values) if np.isfinite(v)]
    return rows(analysis, items)


__all__ = ["COLUMNS", "rows", "table_rows"]

"""Result files written whole or not at all: a table as CSV, a record as JSON (temp file, then rename); and the
check that an output directory may be written (never silently into another run's results)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from fixedid.atomic import atomic_path, write_text_atomic

from analysis.errors import AnalysisError


def write_csv(df: pd.DataFrame, path) -> Path:
    """``df`` as CSV at ``path``, without the index (temp file, then rename). Returns ``path`` as a ``Path``."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return Path(path)


def read_csv(path, **kw) -> pd.DataFrame:
    """A table as :func:`write_csv` wrote it: an empty field is a missing value (how it writes NaN) and every other
    text is kept as written - pandas' default would read keys such as ``null``, ``NA`` or ``None`` (a reference
    named ``null``, the word "None") as missing and drop them from every groupby."""
    return pd.read_csv(path, keep_default_na=False, na_values=[""], **kw)


def write_json(obj, path, **kw) -> Path:
    """``obj`` as indented JSON at ``path`` (temp file, then rename)."""
    write_text_atomic(Path(path), json.dumps(obj, indent=1, **kw) + "\n")
    return Path(path)


def check_out(path, *, overwrite: bool = True) -> None:
    """Refuse an output directory ``path`` that is a file, or (unless ``overwrite``) a directory with something in
    it, before anything is computed or written (:class:`analysis.errors.AnalysisError`, one line)."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise AnalysisError(f"--out {path} is a file, not a directory; give a directory (it is created if missing)")
    if not overwrite and path.is_dir() and any(path.iterdir()):
        raise AnalysisError(f"--out {path} already holds results; pass --overwrite to replace them, or another --out")

"""Result files written whole or not at all: a table as CSV, a record as JSON (temp file, then rename)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from fixedid.atomic import atomic_path, write_text_atomic


def write_csv(df: pd.DataFrame, path) -> Path:
    """``df`` as CSV at ``path``, without the index (temp file, then rename). Returns ``path`` as a ``Path``."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return Path(path)


def write_json(obj, path, **kw) -> Path:
    """``obj`` as indented JSON at ``path`` (temp file, then rename)."""
    write_text_atomic(Path(path), json.dumps(obj, indent=1, **kw) + "\n")
    return Path(path)

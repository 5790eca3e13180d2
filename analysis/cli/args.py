"""Argument helpers every ``fixedid-analyze`` verb shares: lists of numbers, checkpoint directories, variant names,
and one table per variant stacked into one."""

from __future__ import annotations

from pathlib import Path

from analysis.errors import AnalysisError


def int_list(text, what):
    """Comma-separated integers (None passes through); one clear error otherwise."""
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise AnalysisError(f"{what} must be comma-separated integers, got {text!r}") from None


def checkpoint_dirs(values) -> list[Path]:
    """The ``--ckpt`` directories, each checked to exist (one clear error otherwise)."""
    paths = [Path(p) for p in values]
    for path in paths:
        if not path.is_dir():
            raise AnalysisError(f"no checkpoint directory at {path}; train one with fixedid-train or pass --ckpt DIR")
    return paths


def check_out(path) -> None:
    """Refuse an ``--out`` that exists and is not a directory, before anything is computed or written."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise AnalysisError(f"--out {path} is a file, not a directory; give a directory (it is created if missing)")


def variant_names(paths) -> list[str]:
    """A label per checkpoint: its directory name, or the whole path where two names collide."""
    return [p.name if len({q.name for q in paths}) == len(paths) else str(p) for p in paths]


def stacked(frames):
    """Per-variant tables (each with a ``variant`` column) as one table with ``variant`` first."""
    import pandas as pd

    df = pd.concat(frames, ignore_index=True)
    return df[["variant"] + [c for c in df.columns if c != "variant"]]


def float_list(text, what):
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise AnalysisError(f"{what} must be comma-separated numbers, got {text!r}") from None

"""Atomic, durable file writes: the one way fixedid writes a file that a crash must not leave half-written."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "write_bytes_atomic", "write_text_atomic", "fsync_file", "fsync_dir"]


def fsync_file(path) -> None:
    """Flush a written file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path) -> None:
    """Make renames and creations inside directory ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory file descriptors
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    """A hidden, unique temporary name beside ``path`` (same directory, hence the same file system)."""
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def atomic_path(path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that needs a file name (matplotlib, pandas,
    safetensors); when the block exits normally the file is fsynced and renamed over ``path``, on error removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and durably (see :func:`fixedid.atomic.atomic_path`), creating its
    parent directories. Returns ``path`` as a ``Path``."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return Path(path)


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` to ``path`` as UTF-8, atomically and durably (:func:`fixedid.atomic.write_bytes_atomic`).
    Returns ``path`` as a ``Path``."""
    return write_bytes_atomic(path, text.encode("utf-8"))

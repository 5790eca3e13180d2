"""What the command lines share: one-line usage errors, the FixedIdError -> exit 2 rule, and atomic file writes."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import uuid
from pathlib import Path
from typing import Callable, Iterator

from .errors import FixedIdError


class ArgumentParser(argparse.ArgumentParser):
    """argparse with bad usage reported as one line on stderr (exit status 2), like every other bad input."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def run_main(prog: str, fn: Callable[[], int], cleanup: Callable[[], None] | None = None) -> None:
    """Run a command; a :class:`FixedIdError` becomes one line on stderr and exit status 2, never a traceback."""
    try:
        code = fn()
    except FixedIdError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        code = 2
    finally:
        if cleanup is not None:
            cleanup()
    sys.exit(code)


@contextlib.contextmanager
def atomic_path(path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed over ``path``, on failure removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)

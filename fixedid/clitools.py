"""What the command lines share: one-line usage errors and the FixedIdError -> exit 2 rule."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

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

"""What the command lines share: one-line usage errors and the FixedIdError -> exit 2 rule."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Callable

from .errors import FixedIdError, FixedIdWarning


class ArgumentParser(argparse.ArgumentParser):
    """argparse with bad usage reported as one line on stderr (exit status 2), like every other bad input."""

    def error(self, message):
        """Print ``<prog>: error: <message> (see --help)`` on stderr and exit with status 2, without the usage
        block argparse prints."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def one_line_warnings(prog: str, default_format=None) -> Callable:
    """A ``warnings.formatwarning`` that writes a :class:`~fixedid.errors.FixedIdWarning` as one line
    ``<prog>: warning: ...`` (not Python's file, line and source) and any other warning as ``default_format`` does
    (default: the format in place when this is called)."""
    default_format = default_format or warnings.formatwarning

    def one_line(message, category, filename, lineno, line=None):
        if issubclass(category, FixedIdWarning):
            return f"{prog}: warning: {message}\n"
        return default_format(message, category, filename, lineno, line)

    return one_line


def run_main(prog: str, fn: Callable[[], int], cleanup: Callable[[], None] | None = None) -> None:
    """Run a command; a :class:`~fixedid.errors.FixedIdError` becomes one line on stderr and exit status 2, never a
    traceback, and a :class:`~fixedid.errors.FixedIdWarning` one line ``<prog>: warning: ...`` (not Python's file, line
    and source)."""
    default_format = warnings.formatwarning
    warnings.formatwarning = one_line_warnings(prog, default_format)
    try:
        code = fn()
    except FixedIdError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        code = 2
    finally:
        warnings.formatwarning = default_format
        if cleanup is not None:
            cleanup()
    sys.exit(code)

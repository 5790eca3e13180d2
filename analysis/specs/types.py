"""Converters that read and check one command-line value (``argparse`` ``type=``): a bad value is refused with
what was wrong, and argparse turns that into one line ``fixedid-analyze VERB: error: argument --x: ...`` and exit 2."""

from __future__ import annotations

from argparse import ArgumentTypeError
from pathlib import Path
from typing import Callable


def _number(text, kind, name):
    try:
        return kind(text)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"must be {name}, got {text!r}") from None


def at_least(low: int) -> Callable[[str], int]:
    """An integer of at least ``low``."""
    def convert(text) -> int:
        value = _number(text, int, "an integer")
        if value < low:
            raise ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    convert.__name__ = f"integer >= {low}"
    return convert


def positive_int(text) -> int:
    """An integer of at least 1."""
    value = _number(text, int, "a positive integer")
    if value < 1:
        raise ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def nonnegative_int(text) -> int:
    """An integer of at least 0."""
    value = _number(text, int, "an integer >= 0")
    if value < 0:
        raise ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text) -> float:
    """A number above 0."""
    value = _number(text, float, "a number")
    if not value > 0:
        raise ArgumentTypeError(f"must be positive, got {value:g}")
    return value


def nonnegative_float(text) -> float:
    """A number of at least 0."""
    value = _number(text, float, "a number")
    if not value >= 0:
        raise ArgumentTypeError(f"must be >= 0, got {value:g}")
    return value


def unit_interval(text) -> float:
    """A number in [0, 1]."""
    value = _number(text, float, "a number")
    if not 0 <= value <= 1:
        raise ArgumentTypeError(f"must be in [0, 1], got {value:g}")
    return value


def share(text) -> float:
    """A number in (0, 1]."""
    value = _number(text, float, "a number")
    if not 0 < value <= 1:
        raise ArgumentTypeError(f"must be in (0, 1], got {value:g}")
    return value


def open_share(text) -> float:
    """A number in (0, 1)."""
    value = _number(text, float, "a number")
    if not 0 < value < 1:
        raise ArgumentTypeError(f"must be in (0, 1), got {value:g}")
    return value


def directory(text) -> Path:
    """An existing directory (``NAME=DIR`` is read as ``DIR`` where ``NAME=DIR`` itself is not a directory)."""
    path = Path(text).expanduser()
    if not path.is_dir() and "=" in str(text):
        path = Path(str(text).partition("=")[2]).expanduser()
    if not path.is_dir():
        raise ArgumentTypeError(f"no directory at {path}")
    return path


def named_file(text) -> tuple[str, Path]:
    """``NAME=FILE``: a name and a file path (the file's existence is checked where it is read)."""
    name, sep, path = str(text).partition("=")
    if not sep or not name.strip() or not path.strip():
        raise ArgumentTypeError(f"{text!r}: give NAME=FILE")
    return name.strip(), Path(path.strip()).expanduser()


def _items(text) -> list[str]:
    return [v.strip() for v in str(text).split(",") if v.strip()]


def _list_of(text, kind, what: str) -> tuple:
    try:
        values = tuple(kind(v) for v in _items(text))
    except ValueError:
        values = ()
    if not values:
        raise ArgumentTypeError(f"must be comma-separated {what}, got {text!r}")
    return values


def int_list(text) -> tuple[int, ...]:
    """Comma-separated integers."""
    return _list_of(text, int, "integers")


def positive_int_list(text) -> tuple[int, ...]:
    """Comma-separated integers of at least 1."""
    values = int_list(text)
    if min(values) < 1:
        raise ArgumentTypeError(f"must be positive integers, got {text!r}")
    return values


def float_list(text) -> tuple[float, ...]:
    """Comma-separated numbers."""
    return _list_of(text, float, "numbers")


def names(text) -> tuple[str, ...]:
    """Comma-separated names (at least one)."""
    values = tuple(_items(text))
    if not values:
        raise ArgumentTypeError(f"must name at least one, got {text!r}")
    return values


def names_or_none(text) -> tuple[str, ...]:
    """Comma-separated names, or ``none`` for no names at all."""
    return () if str(text).strip().lower() == "none" else names(text)


def subset_of(options) -> Callable[[str], tuple[str, ...]]:
    """Comma-separated names, each one of ``options``."""
    options = tuple(options)

    def convert(text) -> tuple[str, ...]:
        values = names(text)
        bad = [v for v in values if v not in options]
        if bad:
            raise ArgumentTypeError(f"must be one or more of {', '.join(options)} (comma-separated), got {text!r}")
        return tuple(dict.fromkeys(values))

    convert.__name__ = "names"
    return convert


__all__ = ["directory", "named_file", "at_least", "positive_int", "nonnegative_int", "positive_float",
           "nonnegative_float", "unit_interval",
           "share", "open_share", "int_list", "positive_int_list", "float_list", "names", "names_or_none",
           "subset_of"]

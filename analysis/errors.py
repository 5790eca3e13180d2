"""The analysis package's exception type (a :class:`fixedid.errors.FixedIdError`, so one ``except`` catches both)."""

from fixedid.errors import FixedIdError, FixedIdWarning


class AnalysisError(FixedIdError, ValueError):
    """Bad input to an analysis: prompts of unequal length, an answer that is not one token, an unknown site..."""


class AnalysisWarning(FixedIdWarning):
    """A result that is computed but should not be read as it stands (e.g. a normalised metric over a tiny gap)."""

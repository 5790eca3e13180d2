"""The package's own exception types."""


class FixedIdWarning(UserWarning):
    """Something a result depends on that the user should know, though nothing is wrong with the input."""


class FixedIdError(Exception):
    """Base class of every error fixedid raises on bad input."""


class ConfigError(FixedIdError, ValueError):
    """A model or training configuration is invalid (unknown field, impossible shape, unknown preset...)."""


class CodeError(FixedIdError, ValueError):
    """A GF(2) code is invalid: a singular matrix, a wrong shape, bits that are not 0/1."""


class CheckpointError(FixedIdError):
    """A checkpoint directory is missing, corrupted, inconsistent or of an unknown format."""


class DataError(FixedIdError):
    """A corpus, tokenizer or token shard cannot be used as asked."""

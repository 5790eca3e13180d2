"""fixedid: language models whose input embedding is a fixed token-identity code."""

from .version import __version__  # noqa: E402,F401
from .codes import GF2Code, canonical_code, code_table  # noqa: E402
from .config import PRESETS, ModelConfig  # noqa: E402
from .errors import CheckpointError, CodeError, ConfigError, DataError, FixedIdError, FixedIdWarning  # noqa: E402
from .model import FixedIdLM  # noqa: E402
from .checkpoint import load_checkpoint, save_checkpoint  # noqa: E402

__all__ = ["__version__", "GF2Code", "canonical_code", "code_table", "PRESETS", "ModelConfig", "FixedIdLM", "save_checkpoint",
           "load_checkpoint", "FixedIdError", "FixedIdWarning", "ConfigError", "CodeError", "CheckpointError",
           "DataError"]

"""fixedid: language models whose input embedding is a fixed token-identity code.

Everything that *produces* a checkpoint lives here: the GF(2) codes (:mod:`fixedid.codes`), the model config
(:class:`~fixedid.config.ModelConfig`), the hookable model (:class:`~fixedid.model.FixedIdLM`), verified checkpoints,
the data pipeline (:mod:`fixedid.data`) and the trainer (:mod:`fixedid.train`). The ``analysis`` package studies what
this one makes.
"""

from .version import __version__  # noqa: E402,F401
from .codes import GF2Code, canonical_code, code_table  # noqa: E402
from .config import PRESETS, ModelConfig  # noqa: E402
from .errors import CheckpointError, CodeError, ConfigError, DataError, FixedIdError, FixedIdWarning  # noqa: E402
from .model import FixedIdLM  # noqa: E402
from .checkpoint import load_checkpoint, save_checkpoint  # noqa: E402

__all__ = ["__version__", "GF2Code", "canonical_code", "code_table", "PRESETS", "ModelConfig", "FixedIdLM", "save_checkpoint",
           "load_checkpoint", "FixedIdError", "FixedIdWarning", "ConfigError", "CodeError", "CheckpointError",
           "DataError"]

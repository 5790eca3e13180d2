"""analysis: studies fixedid checkpoints.

``analysis.load(path)`` gives the checkpoint's own model with notebook conveniences and views for TransformerLens
(``.to_transformer_lens()``) and nnsight (``.to_nnsight()``); :mod:`analysis.patching` runs activation and
attribution patching; :mod:`analysis.behaviours` measures the built-in tasks (with a no-context n-gram control);
:mod:`analysis.recoding` feeds a fixed-code model its code through GF(2) maps (:mod:`analysis.corpus` gives the
token data of such corpus-level measurements); :mod:`analysis.evaluate` registers the model ``fixedid`` with lm-eval
on import; the ``fixedid-analyze`` command line wraps them and writes CSV and
figures.
"""

from .behaviours import NGramLM, behaviour_table, pair_scores, prepare_pairs, score_pairs
from .errors import AnalysisError, AnalysisWarning
from .model import HookedFixedIdLM, load
from .pairs import PairBatch, make_pairs, read_pairs_jsonl
from .patching import activation_patching, attribution_patching, to_tensor
from .recoding import permuted_inputs, recoded, recoding_sweep
from . import evaluate as _evaluate

_evaluate.register()  # lm-eval finds the model "fixedid" (analysis.evaluate)

__all__ = ["AnalysisError", "AnalysisWarning", "HookedFixedIdLM", "load", "PairBatch", "make_pairs", "read_pairs_jsonl",
           "activation_patching", "attribution_patching", "to_tensor", "NGramLM", "behaviour_table", "pair_scores",
           "prepare_pairs", "score_pairs", "recoded", "permuted_inputs", "recoding_sweep"]

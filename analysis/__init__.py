"""analysis: studies fixedid checkpoints."""

from analysis.causal.patching import activation_patching, attribution_patching, to_tensor
from analysis.causal.recoding import permuted_inputs, recoded, recoding_sweep
from analysis.errors import AnalysisError, AnalysisWarning
from analysis.evaluation.behaviours import NGramLM, behaviour_table, pair_scores, prepare_pairs, score_pairs
from analysis.interop.codeinfer import CodeInferredWarning, InferredCode, infer_code
from analysis.interop.statedict import import_state_dict
from analysis.loading import load
from analysis.model import HookedFixedIdLM
from analysis.pairs import PairBatch, make_pairs, read_pairs_jsonl

__all__ = ["AnalysisError", "AnalysisWarning", "HookedFixedIdLM", "load", "PairBatch", "make_pairs", "read_pairs_jsonl",
           "activation_patching", "attribution_patching", "to_tensor", "NGramLM", "behaviour_table", "pair_scores",
           "prepare_pairs", "score_pairs", "recoded", "permuted_inputs", "recoding_sweep", "infer_code", "InferredCode",
           "CodeInferredWarning", "import_state_dict"]

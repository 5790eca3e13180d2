"""Behaviour on tasks: held-out accuracy on the built-in language's tasks with the n-gram control
(:mod:`analysis.evaluation.behaviours`) and the lm-eval adapter with its tasks (:mod:`analysis.evaluation.lmeval`, its
model class in :mod:`analysis.evaluation.lmeval_model`; imported on use)."""

from analysis.evaluation.behaviours import NGramLM, behaviour_table, pair_scores, prepare_pairs, score_pairs

__all__ = ["NGramLM", "behaviour_table", "pair_scores", "prepare_pairs", "score_pairs"]

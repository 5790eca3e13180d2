"""The study over seeds: train, measure every kept checkpoint with every registered analysis
(:mod:`analysis.study.pipeline`), aggregate with intervals and paired differences and draw
(:mod:`analysis.study.report`)."""

from analysis.study.pipeline import ANALYSES, measure, register, run_study, run_study_worker, study_tasks

__all__ = ["ANALYSES", "measure", "register", "run_study", "run_study_worker", "study_tasks"]

"""The study over seeds: train, measure every kept checkpoint with every registered analysis
(:mod:`analysis.study.pipeline`, on Dask: :mod:`analysis.study.graph`), aggregate with intervals and paired differences and draw
(:mod:`analysis.study.report`)."""

from analysis.study.pipeline import ANALYSES, measure, register, run_study, run_study_dask, study_tasks

__all__ = ["ANALYSES", "measure", "register", "run_study", "run_study_dask", "study_tasks"]

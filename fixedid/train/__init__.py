"""The trainer: configs (:mod:`fixedid.train.config`), data preparation (:mod:`fixedid.train.prepare`), optimizer and
schedule (:mod:`fixedid.train.optim`), torchrun (:mod:`fixedid.train.distributed`), the loop
(:mod:`fixedid.train.loop`), variants side by side on a CPU (:mod:`fixedid.train.parallel`) and the ``fixedid-train``
command (:mod:`fixedid.train.cli`)."""

from .config import DataConfig, OptimConfig, TrainConfig
from .loop import check_resumable, kept_dir, run_complete, train
from .cli import main

__all__ = ["TrainConfig", "DataConfig", "OptimConfig", "train", "check_resumable", "kept_dir", "run_complete", "main"]

"""The trainer: configs (:mod:`.config`), data preparation (:mod:`.prepare`), optimizer and schedule (:mod:`.optim`),
torchrun (:mod:`.distributed`), the loop (:mod:`.loop`), variants side by side on a CPU (:mod:`.parallel`) and the
``fixedid-train`` command (:mod:`.cli`)."""

from .config import DataConfig, OptimConfig, TrainConfig
from .loop import check_resumable, kept_dir, run_complete, train
from .cli import main

__all__ = ["TrainConfig", "DataConfig", "OptimConfig", "train", "check_resumable", "kept_dir", "run_complete", "main"]

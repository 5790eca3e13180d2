"""Patching metrics: a number per prompt from the logits at the final position."""

from __future__ import annotations

from typing import Callable

import torch

from analysis.errors import AnalysisError

Metric = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def logit_diff(logits, answer, wrong):
    """Answer logit minus wrong logit at the final position: ``logits [batch, pos, vocab]``, ``answer``/``wrong``
    ``[batch]`` token ids -> float32 ``[batch]``."""
    last = logits[:, -1].float()
    return last.gather(1, answer[:, None])[:, 0] - last.gather(1, wrong[:, None])[:, 0]


def answer_prob(logits, answer, wrong):
    """The softmax probability of ``answer`` at the final position, float32 ``[batch]`` (``wrong`` is ignored)."""
    return logits[:, -1].float().softmax(-1).gather(1, answer[:, None])[:, 0]


def answer_loss(logits, answer, wrong):
    """The cross-entropy of ``answer`` at the final position, ``-log p(answer)``, float32 ``[batch]``
    (``wrong`` is ignored)."""
    return -logits[:, -1].float().log_softmax(-1).gather(1, answer[:, None])[:, 0]


#: The metric every causal analysis uses unless told otherwise, in the library and on the command line alike: the
#: logit difference rescaled so the corrupted run reads 0 and the clean run 1, so effects are fractions of the
#: behaviour's own gap and compare across variants and tasks whose raw gaps differ. Edge and path scores under it are
#: the raw logit-difference scores divided by that gap: the same ranking.
DEFAULT_METRIC = "normalized_logit_diff"

METRICS: dict[str, Metric] = {"logit_diff": logit_diff, "normalized_logit_diff": logit_diff,
                              "answer_prob": answer_prob, "answer_loss": answer_loss}


def resolve(metric) -> tuple[str, Metric, bool]:
    """(name, per-example function, normalize?) of a metric name or callable."""
    if callable(metric):
        return getattr(metric, "__name__", "custom"), metric, False
    if metric not in METRICS:
        raise AnalysisError(f"unknown metric {metric!r}; use one of {sorted(METRICS)} or a callable "
                            "(logits, answer, wrong) -> tensor[batch]")
    return metric, METRICS[metric], metric == "normalized_logit_diff"


def normalize(value, clean, corrupt):
    """Rescale so that ``corrupt`` maps to 0 and ``clean`` to 1 (works on floats and tensors)."""
    return (value - corrupt) / (clean - corrupt)

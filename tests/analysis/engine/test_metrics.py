"""The patching metrics on a hand-built logits tensor: each reads only the final position and gives the value worked
out by hand; ``resolve`` names a metric and says whether it is normalized, refusing unknown names; ``normalize`` maps
the corrupted run to 0 and the clean run to 1."""

import math
from functools import partial

import pytest
import torch

from analysis import AnalysisError
from analysis.engine.metrics import (DEFAULT_METRIC, METRICS, answer_loss, answer_prob, logit_diff, normalize,
                                     resolve)


@pytest.fixture
def logits():
    """Two prompts of three positions over four tokens. At the final position the softmax weights are
    (1, 1, 2, 5) / 9 for the first prompt and (3, 1, 1, 1) / 6 for the second; the earlier positions are noise that no
    metric may read."""
    t = torch.full((2, 3, 4), 50.0)
    t[:, :2] = torch.tensor([[9.0, -9.0, 4.0, 0.0], [0.0, 7.0, -3.0, 1.0]])
    t[0, -1] = torch.tensor([0.0, 0.0, math.log(2), math.log(5)])
    t[1, -1] = torch.tensor([math.log(3), 0.0, 0.0, 0.0]) + 10.0  # a shift changes no probability
    return t


ANSWER, WRONG = torch.tensor([3, 0]), torch.tensor([2, 1])


def test_logit_diff_is_answer_minus_wrong_at_the_final_position(logits):
    out = logit_diff(logits, ANSWER, WRONG)
    assert out.shape == (2,) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([math.log(5) - math.log(2), math.log(3)]))


def test_answer_prob_is_the_answers_softmax_weight(logits):
    torch.testing.assert_close(answer_prob(logits, ANSWER, WRONG), torch.tensor([5 / 9, 1 / 2]))


def test_answer_loss_is_minus_the_log_probability_of_the_answer(logits):
    torch.testing.assert_close(answer_loss(logits, ANSWER, WRONG), torch.tensor([math.log(9 / 5), math.log(2)]))


@pytest.mark.parametrize("metric", [answer_prob, answer_loss])
def test_the_wrong_token_does_not_change_probability_and_loss(logits, metric):
    torch.testing.assert_close(metric(logits, ANSWER, WRONG), metric(logits, ANSWER, torch.tensor([1, 3])))


@pytest.mark.parametrize("metric", [logit_diff, answer_prob, answer_loss])
def test_metrics_read_only_the_final_position(logits, metric):
    other = logits.clone()
    other[:, :2] = torch.randn(2, 2, 4)
    assert torch.equal(metric(other, ANSWER, WRONG), metric(logits, ANSWER, WRONG))


@pytest.mark.parametrize("metric", [logit_diff, answer_prob, answer_loss])
def test_metrics_of_half_precision_logits_are_float32(logits, metric):
    out = metric(logits.to(torch.bfloat16), ANSWER, WRONG)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, metric(logits.to(torch.bfloat16).float(), ANSWER, WRONG))


def test_the_registry_holds_the_four_built_in_metrics():
    assert set(METRICS) == {"logit_diff", "normalized_logit_diff", "answer_prob", "answer_loss"}
    assert DEFAULT_METRIC == "normalized_logit_diff" and DEFAULT_METRIC in METRICS


@pytest.mark.parametrize("name, fn, normalized", [("logit_diff", logit_diff, False),
                                                  ("normalized_logit_diff", logit_diff, True),
                                                  ("answer_prob", answer_prob, False),
                                                  ("answer_loss", answer_loss, False)])
def test_resolve_a_name(name, fn, normalized):
    assert resolve(name) == (name, fn, normalized)


def test_resolve_a_callable_keeps_it_unnormalized_under_its_own_name():
    def top_logit(logits, answer, wrong):
        return logits[:, -1].max(-1).values

    assert resolve(top_logit) == ("top_logit", top_logit, False)
    nameless = partial(logit_diff)
    assert resolve(nameless) == ("custom", nameless, False)


@pytest.mark.parametrize("bad", ["logit-diff", "", "LOGIT_DIFF", None])
def test_resolve_refuses_an_unknown_name(bad):
    with pytest.raises(AnalysisError, match="unknown metric") as e:
        resolve(bad)
    assert all(name in str(e.value) for name in METRICS)


def test_normalize_maps_corrupt_to_0_and_clean_to_1():
    assert normalize(1.5, clean=3.5, corrupt=1.5) == 0.0
    assert normalize(3.5, clean=3.5, corrupt=1.5) == 1.0
    assert normalize(2.0, clean=3.5, corrupt=1.5) == 0.25
    assert normalize(4.5, clean=3.5, corrupt=1.5) == 1.5  # past the clean run
    assert normalize(-1.0, clean=-2.0, corrupt=2.0) == 0.75  # a clean run below the corrupted one


def test_normalize_works_elementwise_on_tensors():
    value = torch.tensor([1.0, 3.0, 2.0, 0.0])
    torch.testing.assert_close(normalize(value, torch.tensor(3.0), torch.tensor(1.0)),
                               torch.tensor([0.0, 1.0, 0.5, -0.5]))
    torch.testing.assert_close(normalize(value, torch.tensor([3.0, 3.0, 5.0, 2.0]), torch.tensor([1.0, 1.0, 1.0, 0.0])),
                               torch.tensor([0.0, 1.0, 0.25, 0.0]))

"""What an intervention measures and how its result is assembled: positions, chunks and rows per forward; the
measures of edited logits against the unedited run (prompts: logit difference, correctness, KL at the final position;
corpus windows: loss and KL over the predicted positions, earlier positions unedited), each checked against the
definition computed directly; and the items and summary tables with Student-t intervals."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from analysis import AnalysisError
from analysis.engine.effects import (ID_COLUMNS, LOGIT_BUDGET, MEASURES_CORPUS, MEASURES_PAIRS, Measurer, Target,
                                     check_eval, chunks, nonempty, position, result, rows_per_forward, target)
from analysis.pairs import PairBatch

GEN = torch.Generator().manual_seed(0)


def kl(p_logits, q_logits):
    """KL(p || q) along the last axis, from its definition sum p (log p - log q), in float64."""
    lp, lq = p_logits.double().log_softmax(-1), q_logits.double().log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1)


@pytest.mark.parametrize("pos, T, expected", [(0, 5, 0), (4, 5, 4), (-1, 5, 4), (-5, 5, 0), (np.int64(2), 5, 2),
                                              (None, 5, None)])
def test_position_is_a_non_negative_index(pos, T, expected):
    out = position(pos, T)
    assert out == expected and (out is None or type(out) is int)


@pytest.mark.parametrize("pos", [5, -6, 1.0, True, np.bool_(False), "1"])
def test_position_refuses_what_is_not_a_position_of_the_sequence(pos):
    with pytest.raises(AnalysisError, match="out of range for sequences of 5 tokens"):
        position(pos, 5)


def test_chunks_cut_the_rows_in_order():
    assert [c.tolist() for c in chunks(5, 2)] == [[0, 1], [2, 3], [4]]
    assert [c.tolist() for c in chunks(3, 10)] == [[0, 1, 2]]
    assert [c.tolist() for c in chunks(3, 0)] == [[0], [1], [2]]  # at least one row each
    assert chunks(0, 4) == [] and all(c.dtype == torch.int64 for c in chunks(5, 2))


def test_nonempty_refuses_an_empty_selection():
    assert nonempty(range(3), "layers") == [0, 1, 2]
    assert nonempty((i for i in [4]), "heads") == [4]
    with pytest.raises(AnalysisError, match="no layers selected"):
        nonempty([], "layers")


def test_rows_per_forward_keeps_a_corpus_sweeps_logits_within_the_budget():
    prompts = Target(torch.zeros(4, 1024, dtype=torch.long), torch.zeros(4), torch.zeros(4))
    corpus = Target(torch.zeros(4, 1024, dtype=torch.long))
    assert rows_per_forward(prompts, 1 << 20, 64) == 64  # only the final position is unembedded
    assert rows_per_forward(prompts, 100, 0) == 1
    assert rows_per_forward(corpus, 100, 64) == 64
    assert rows_per_forward(corpus, 1 << 14, 64) == LOGIT_BUDGET // (1024 << 14) == 8
    assert rows_per_forward(corpus, 1 << 20, 64) == 1  # past the budget in one row, still one row


def test_a_target_of_prompts_or_of_corpus_windows_has_its_measures():
    tokens = torch.zeros(2, 3, dtype=torch.long)
    assert Target(tokens).pairs is False and Target(tokens).measures == MEASURES_CORPUS
    pairs = Target(tokens, torch.tensor([1, 2]), torch.tensor([2, 1]))
    assert pairs.pairs is True and pairs.measures == MEASURES_PAIRS
    assert MEASURES_PAIRS == ["logit_diff", "delta_logit_diff", "correct", "kl"]
    assert MEASURES_CORPUS == ["loss", "delta_loss", "kl"]


def test_target_takes_the_clean_prompts_of_a_pair_batch(learned):
    b = PairBatch(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[1, 2, 4], [4, 5, 7]]), torch.tensor([7, 8]),
                  torch.tensor([9, 10]))
    t = target(learned, b, None, None, None, 0)
    assert torch.equal(t.tokens, b.clean) and torch.equal(t.answer, b.answer) and torch.equal(t.wrong, b.wrong)
    with pytest.raises(AnalysisError, match="not both"):
        target(learned, b, "ioi", None, None, 0)


def test_check_eval_refuses_a_model_in_train_mode_without_switching_it(learned):
    check_eval(learned)
    learned.train()
    try:
        with pytest.raises(AnalysisError, match="train mode"):
            check_eval(learned)
        assert learned.training
    finally:
        learned.eval()


def test_measures_of_prompts_at_the_final_position():
    """Three prompts (two of them measured, rows 2 and 0 of the target), two edited runs of each, unit-major."""
    V, T = 6, 4
    tgt = Target(torch.zeros(3, T, dtype=torch.long), answer=torch.tensor([1, 4, 2]), wrong=torch.tensor([0, 5, 3]))
    seq = torch.tensor([2, 0])
    base = torch.randn(2, T, V, generator=GEN)
    edited = torch.randn(2 * 2, T, V, generator=GEN)
    edited[1, -1, 1] = edited[1, -1, 0] - 1.0  # edit 0 of prompt 0 (answer 1, wrong 0): the answer loses
    edited[2, -1, 2] = edited[2, -1, 3] + 1.0  # edit 1 of prompt 2 (answer 2, wrong 3): the answer wins
    out = Measurer(tgt, seq, base)(edited, 2, 0)
    assert set(out) == set(MEASURES_PAIRS) and all(v.shape == (2, 2) for v in out.values())
    answer, wrong = [2, 1], [3, 0]
    for u in range(2):
        for j in range(2):
            e, b = edited[u * 2 + j, -1], base[j, -1]
            ld = float(e[answer[j]] - e[wrong[j]])
            assert out["logit_diff"][u, j].item() == pytest.approx(ld, abs=1e-5)
            assert out["delta_logit_diff"][u, j].item() == pytest.approx(ld - float(b[answer[j]] - b[wrong[j]]),
                                                                         abs=1e-5)
            assert out["correct"][u, j].item() == float(ld > 0)
            assert out["kl"][u, j].item() == pytest.approx(kl(b, e).item(), abs=1e-5)
    assert out["correct"][0, 1].item() == 0.0 and out["correct"][1, 0].item() == 1.0


def test_an_unedited_run_measures_zero_change():
    tgt = Target(torch.zeros(2, 3, dtype=torch.long), answer=torch.tensor([1, 2]), wrong=torch.tensor([0, 0]))
    base = torch.randn(2, 3, 5, generator=GEN)
    out = Measurer(tgt, torch.arange(2), base)(base.clone(), 1, 0)
    torch.testing.assert_close(out["delta_logit_diff"], torch.zeros(1, 2))
    torch.testing.assert_close(out["kl"], torch.zeros(1, 2))


@pytest.mark.parametrize("start", [0, 2, 4])
def test_measures_of_corpus_windows_over_the_predicted_positions(start):
    """Edited logits begin at ``start``; the positions before it are the unedited run's, so the expected measures are
    those of full-length logits whose first ``start`` positions are the base's."""
    V, T, m, k = 7, 5, 3, 2
    tokens = torch.randint(0, V, (m, T), generator=GEN)
    base = torch.randn(m, T, V, generator=GEN)
    full = torch.randn(k * m, T, V, generator=GEN)
    full[:, :start] = base.repeat(k, 1, 1)[:, :start]
    out = Measurer(Target(tokens), torch.arange(m), base)(full[:, start:], k, start)
    assert set(out) == set(MEASURES_CORPUS) and all(v.shape == (k, m) for v in out.values())

    def loss(logits):  # mean next-token cross-entropy over the T - 1 predicted positions
        return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens.repeat(len(logits) // m, 1)[:, 1:],
                               reduction="none").mean(1)

    expected = loss(full).view(k, m)
    torch.testing.assert_close(out["loss"], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["delta_loss"], expected - loss(base)[None], atol=1e-5, rtol=1e-5)
    expected_kl = kl(base.repeat(k, 1, 1)[:, :-1], full[:, :-1]).mean(1).view(k, m).float()
    torch.testing.assert_close(out["kl"], expected_kl, atol=1e-5, rtol=1e-5)


def test_result_tables_items_and_summary(learned):
    tgt = Target(torch.zeros(3, 4, dtype=torch.long))
    ids = [{"kind": "ablate", "layer": 1, "pos": 2, "component": "mlp"}, {"kind": "ablate", "layer": 0}]
    values = {"loss": np.array([[1.0, 2.0, 3.0], [4.0, np.nan, 8.0]]), "delta_loss": np.zeros((2, 3)),
              "kl": np.array([[0.5, 0.5, 0.5], [0.0, 1.0, 2.0]])}
    attrs = {"setting": "x"}
    res = result(learned, ids, values, tgt, attrs, columns=[{"moved": 0.25}, {"moved": 0.5}])

    items = res.items
    assert len(items) == 6 and items["item"].tolist() == [0, 1, 2, 0, 1, 2]
    assert items["layer"].tolist() == [1, 1, 1, 0, 0, 0] and str(items["layer"].dtype) == "Int64"
    assert items["pos"].isna().tolist() == [False] * 3 + [True] * 3
    assert items["moved"].tolist() == [0.25] * 3 + [0.5] * 3
    np.testing.assert_array_equal(items["loss"].to_numpy(), [1.0, 2.0, 3.0, 4.0, np.nan, 8.0])
    assert set(ID_COLUMNS) <= set(items.columns) and (items["interface"] == learned.cfg.interface).all()
    assert "bit_constant" not in items.columns  # no edit names a bit

    s = res.summary
    assert len(s) == 2 and s["n"].tolist() == [3, 2]  # NaN items are not counted
    assert s["loss"].tolist() == [2.0, 6.0] and s["kl"].tolist() == pytest.approx([0.5, 1.0])
    half = stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)  # [1, 2, 3]: standard deviation 1
    assert (s["loss_lo"][0], s["loss_hi"][0]) == pytest.approx((2.0 - half, 2.0 + half))
    half = stats.t.ppf(0.975, 1) * math.sqrt(8.0) / math.sqrt(2)  # [4, 8]: variance 8
    assert (s["loss_lo"][1], s["loss_hi"][1]) == pytest.approx((6.0 - half, 6.0 + half))
    assert s["kl_lo"][0] == pytest.approx(0.5) and s["kl_hi"][0] == pytest.approx(0.5)  # no spread

    assert res.attrs is attrs and attrs["setting"] == "x"
    assert {k: attrs[k] for k in ("n_items", "n_pos", "data", "n_tokens", "interface")} == {
        "n_items": 3, "n_pos": 4, "data": "corpus", "n_tokens": 12, "interface": learned.cfg.interface}
    assert attrs["measures"] == MEASURES_CORPUS
    assert "2 edits x 3 items" in repr(res)


def test_result_marks_whether_an_edited_bit_is_constant_over_the_vocabulary(learned):
    tgt = Target(torch.zeros(2, 3, dtype=torch.long), torch.tensor([1, 2]), torch.tensor([0, 0]))
    ids = [{"kind": "flip", "bit": 0}, {"kind": "other"}]
    values = {me: np.zeros((2, 2)) for me in MEASURES_PAIRS}
    res = result(learned, ids, values, tgt, {})
    col = res.summary["bit_constant"]
    assert str(col.dtype) == "boolean" and pd.isna(col.iloc[1])  # an edit without a bit
    assert not pd.isna(col.iloc[0]) and not col.iloc[0]  # a learned table has no code, so no bit is constant
    assert res.attrs["data"] == "pairs"
    with pytest.raises(AnalysisError, match="1 dicts of edit columns for 2 edits"):
        result(learned, ids, values, tgt, {}, columns=[{}])

"""Behaviour checks: the task pair sets stay tasks (a model without context scores at chance), and the scoring."""

import dataclasses

import numpy as np
import pytest
import torch

from analysis import AnalysisError
from analysis.evaluation.behaviours import NGramLM, TASKS, behaviour_table, pair_scores, summarize
from fixedid import FixedIdLM, ModelConfig
from fixedid.train.prepare import prepare_data
from fixedid.train.config import TrainConfig


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    """The demo's own training data (the packaged tiny config's [data] table), at a fraction of its size."""
    d = dataclasses.replace(TrainConfig.load("tiny").data, train_tokens=400_000, val_tokens=4096)
    return prepare_data(d, tmp_path_factory.mktemp("data") / "data", n_bits=16)


@pytest.mark.parametrize("order", [1, 2])
def test_a_model_without_context_scores_at_chance(demo_data, order):
    train = demo_data.train
    vocab = demo_data.tokenizer.get_vocab_size(with_added_tokens=True)
    lm = NGramLM(train.slice(0, len(train)), vocab, order=order, tokenizer=demo_data.tokenizer)
    table = behaviour_table(lm, n=400, seed=7).set_index("task")
    # near chance, far from the >= 90% a context-using model reaches; not a Wilson test against 0.5: the 400 pairs
    # reuse the same 64 names (or word pools), so a sample's small frequency differences between two names tilt
    # many pairs alike and the items are not independent (with the tiny mixture, ioi read 56% [51%, 61%])
    for task in TASKS:
        acc = table.loc[task, "accuracy"]
        assert table.loc[task, "n_pairs"] >= 300
        assert 0.4 <= acc <= 0.6, (task, order, acc)


def test_ngram_is_a_real_model_of_its_tokens():
    tokens = np.array([1, 2, 1, 2, 1, 3, 1, 2], dtype=np.int64)
    lm = NGramLM(tokens, 4, order=2, alpha=0.0 + 1e-9)
    logp = lm(torch.tensor([[1]]))[0, 0].exp()
    assert logp[2].item() == pytest.approx(3 / 4, abs=1e-6) and logp[3].item() == pytest.approx(1 / 4, abs=1e-6)
    uni = NGramLM(tokens, 4, order=1, alpha=1.0)(torch.tensor([[0, 3]]))[0].exp()
    assert torch.allclose(uni[0], uni[1]) and uni[0, 1].item() == pytest.approx(5 / 12)
    with pytest.raises(AnalysisError, match="order"):
        NGramLM(tokens, 4, order=3)
    with pytest.raises(AnalysisError, match="token ids"):
        NGramLM(np.array([0, 9]), 4)


def test_pair_scores_match_the_model_and_aggregate_with_intervals(demo_data):
    tok = demo_data.tokenizer
    cfg = ModelConfig.preset("toy", vocab_size=tok.get_vocab_size(with_added_tokens=True), d_model=32, n_layers=1,
                             n_heads=2, d_ff=64, init_std=0.5)
    model = FixedIdLM(cfg).eval()
    model.tokenizer = tok
    scores = pair_scores(model, ("ioi", "induction"), n=12)
    assert list(scores.columns) == ["task", "pair", "n_tokens", "logit_diff", "correct"]
    assert (scores.groupby("task").size() == 12).all()
    from analysis.evaluation.behaviours import fitting_pairs

    p = fitting_pairs(model, "induction", 12)[5]
    ids = torch.tensor([tok.encode(p.clean).ids])
    with torch.no_grad():
        last = model(ids)[0, -1]
    a, w = tok.encode(" " + p.answer).ids[0], tok.encode(" " + p.wrong).ids[0]
    row = scores[(scores.task == "induction") & (scores.pair == 5)].iloc[0]
    assert row.logit_diff == pytest.approx((last[a] - last[w]).item(), abs=1e-5)
    assert row.n_tokens == ids.shape[1]
    table = summarize(scores.assign(variant="gf2"))
    assert list(table.columns[:3]) == ["variant", "task", "n_pairs"]
    for _, r in table.iterrows():
        assert r.accuracy_low <= r.accuracy <= r.accuracy_high and r.logit_diff_low <= r.logit_diff <= \
            r.logit_diff_high
    with pytest.raises(AnalysisError, match="unknown task"):
        pair_scores(model, "sarcasm")


class _Copier:
    """Induction from nothing but the context, callable like a model: at each position the token that followed the
    latest earlier occurrence of the current token gets logit 1, every other token 0; with ``only``, just the tokens
    in it are copied (a copier of the list pool's words only)."""

    def __init__(self, tokenizer, only=None):
        self.tokenizer, self.only = tokenizer, only
        self.vocab = tokenizer.get_vocab_size(with_added_tokens=True)

    def __call__(self, tokens):
        out = torch.zeros(*tokens.shape, self.vocab)
        for b, row in enumerate(tokens.tolist()):
            for t, tok in enumerate(row):
                earlier = [j for j in range(t) if row[j] == tok]
                if earlier and (self.only is None or row[earlier[-1] + 1] in self.only):
                    out[b, t, row[earlier[-1] + 1]] = 1.0
        return out


def test_the_unlisted_control_tells_a_general_copier_from_a_copier_of_the_pool(demo_data):
    from fixedid.data.lexicon import POOL

    tok = demo_data.tokenizer
    pool = {tok.encode(" " + w, add_special_tokens=False).ids[0] for w, _, _ in POOL}
    tasks = ("induction", "induction_unlisted")
    general = behaviour_table(_Copier(tok), tasks, n=32).set_index("task").accuracy
    pooled = behaviour_table(_Copier(tok, pool), tasks, n=32).set_index("task").accuracy
    # a tie (neither word copied) is not correct: the pool's copier gets no unlisted pair
    assert general.to_dict() == {"induction": 1.0, "induction_unlisted": 1.0}
    assert pooled.to_dict() == {"induction": 1.0, "induction_unlisted": 0.0}
    with pytest.raises(AnalysisError, match="induction_unlisted"):
        pair_scores(_Copier(tok), "inductions")


def test_the_unlisted_control_is_at_chance_without_context(demo_data):
    vocab = demo_data.tokenizer.get_vocab_size(with_added_tokens=True)
    train = demo_data.train
    for order in (1, 2):
        lm = NGramLM(train.slice(0, len(train)), vocab, order=order, tokenizer=demo_data.tokenizer)
        d = pair_scores(lm, ("induction_unlisted",), n=400, seed=7).logit_diff
        # no list pairs these words in training, so a bigram often cannot choose (a tie, which is not correct):
        # chance counts a tie as half a pair
        acc = ((d > 0).sum() + 0.5 * (d == 0).sum()) / len(d)
        assert len(d) >= 300 and 0.4 <= acc <= 0.6, (order, acc)

"""Context use and segmentation: the cut-context curve against hand-run short windows, ablation shares, the cost
of an alternative segmentation against a hand computation, and the command line."""

import numpy as np
import pandas as pd
import pytest
import torch

from analysis import AnalysisError, load
from analysis.causal.context import component_shares, context_curve, segmentation_cost
from fixedid import FixedIdLM, ModelConfig, save_checkpoint
from fixedid.data import SyntheticLanguage, train_bpe


def test_context_curve_matches_hand_run_short_windows(model):
    x = torch.randint(0, model.cfg.vocab_size, (5, 24), generator=torch.Generator().manual_seed(0))
    df = context_curve(model, x, ks=(1, 3, 100), positions=6)
    assert list(df.k.fillna(-1)) == [-1, 1, 3]  # k = 100 does not fit 24-token windows with 6 positions
    with torch.no_grad():
        losses = []
        for n in range(5):
            per = []
            for p in range(24 - 1 - 6, 23):  # predictions at the last 6 positions, 3 tokens of context each
                lp = torch.log_softmax(model(x[n:n + 1, p - 2:p + 1])[0, -1], -1)
                per.append(-float(lp[x[n, p + 1]]))
            losses.append(np.mean(per))
        full = torch.log_softmax(model(x)[:, 17:23], -1)
        full_loss = -full.gather(-1, x[:, 18:, None]).mean()
    assert abs(df.set_index("k").loc[3.0, "loss"] - np.mean(losses)) < 1e-4
    assert abs(df[df.k.isna()].loss.iloc[0] - float(full_loss)) < 1e-4
    with pytest.raises(AnalysisError, match="positions must be"):
        context_curve(model, x, positions=24)


def test_component_shares_sum_to_one(model):
    from analysis.causal.ablation import ablation

    x = torch.randint(0, model.cfg.vocab_size, (8, 24), generator=torch.Generator().manual_seed(1))
    df = component_shares(model, x)
    assert set(df.component) == {"attn", "mlp"} and len(df) == 2 * model.cfg.n_layers
    ref = ablation(model, x, component="mlp", how="mean").summary
    assert np.allclose(df[df.component == "mlp"].delta_loss, ref.delta_loss)
    if (df.delta_loss > 0).any():  # shares of the loss increases (a random model may gain from an ablation)
        assert abs(df.share.sum() - 1) < 1e-9 and (df.share >= 0).all()
        assert (df[df.delta_loss <= 0].share == 0).all()
    else:
        assert df.share.isna().all()


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory):
    tok = train_bpe(SyntheticLanguage(0).documents(800), 600)
    cfg = ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(with_added_tokens=True), d_model=32, n_layers=2,
                             n_heads=2, d_ff=64, context=48, init_std=0.2, seed=4)
    path = save_checkpoint(FixedIdLM(cfg), tmp_path_factory.mktemp("bpe") / "canonical", tokenizer=tok)
    return load(path)


def test_segmentation_cost_against_a_hand_computation(bpe_model, model):
    texts = list(SyntheticLanguage(0).documents(3, seed=9))
    df = segmentation_cost(bpe_model, texts)
    assert len(df) > 5 and (df.extra_nats == df.split_nats - df.default_nats).all()
    r = df.iloc[0]
    tok = bpe_model.tokenizer
    ids = tok.encode(texts[int(r.text)], add_special_tokens=False).ids
    from analysis.causal.context import _alternatives

    alt = _alternatives(tok, ids[int(r.pos)])
    assert tok.decode(alt) == tok.decode([ids[int(r.pos)]])  # the same text, in two pieces
    with torch.no_grad():
        lp = torch.log_softmax(bpe_model(torch.tensor([ids[:int(r.pos)] + alt[:1]]))[0], -1)
    assert abs(r.split_nats + float(lp[-2, alt[0]] + lp[-1, alt[1]])) < 1e-4
    with pytest.raises(AnalysisError, match="no word of the text"):
        segmentation_cost(model, texts)  # the word-level tokenizer has no smaller pieces


def test_context_command_line(bpe_model, tmp_path, capsys):
    from analysis.cli.main import main

    text = tmp_path / "docs.txt"
    text.write_text("\n".join(SyntheticLanguage(0).documents(40, seed=5)))
    out = tmp_path / "ctx"
    with pytest.raises(SystemExit) as e:
        main(["context", "--ckpt", str(bpe_model.checkpoint_path), "--data", str(text), "--tokens", "1024", "--ks",
              "1,4", "--positions", "8", "--segmentation", "--out", str(out)])
    assert e.value.code == 0
    assert {"context_curve.csv", "context_shares.csv", "segmentation.csv", "context.png", "context.pdf"} <= {
        p.name for p in out.iterdir()}
    assert set(pd.read_csv(out / "context_curve.csv").k.dropna()) == {1, 4}
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["context", "--ckpt", str(bpe_model.checkpoint_path), "--ks", "a,b", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2 and not (tmp_path / "bad").exists()

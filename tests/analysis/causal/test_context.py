"""Context use and segmentation: the window mask against the unmasked model, single-token runs, a recursive crop
construction and transformers' own attention with a hand-built mask; the crop against hand-run short windows and
against masking at the true positions; the cost of an alternative segmentation against a hand computation; the
command line. (Ablation effects: test_components.py.)"""

import numpy as np
import pandas as pd
import pytest
import torch

from analysis import AnalysisError, load
from analysis.causal.context import context_curve, hooked, segmentation_cost, window_hooks
from fixedid import FixedIdLM, ModelConfig, save_checkpoint
from fixedid.data import SyntheticLanguage, train_bpe


def _x(model, n, T, seed):
    return torch.randint(0, model.cfg.vocab_size, (n, T), generator=torch.Generator().manual_seed(seed))


def _loss_at(logits, x, first):
    """Mean over windows of the mean loss of the predictions at positions first..T-2."""
    lp = torch.log_softmax(logits[:, first:-1].float(), -1)
    return float(-lp.gather(-1, x[:, first + 1:, None]).mean())


def test_crop_matches_hand_run_short_windows(model):
    x = _x(model, 5, 24, 0)
    df = context_curve(model, x, ks=(1, 3, 100), positions=6, mask="crop")
    assert list(df["mask"]) == ["none", "crop", "crop"] and list(df.k.fillna(-1)) == [-1, 1, 3]  # k = 100 does not fit
    assert list(df.reach.fillna(-1)) == [-1, 1, 3]
    with torch.no_grad():
        losses = []
        for n in range(5):
            per = []
            for p in range(24 - 1 - 6, 23):  # predictions at the last 6 positions, 3 tokens of context each
                lp = torch.log_softmax(model(x[n:n + 1, p - 2:p + 1])[0, -1], -1)
                per.append(-float(lp[x[n, p + 1]]))
            losses.append(np.mean(per))
        full_loss = _loss_at(model(x), x, 17)
    assert abs(df.set_index("k").loc[3.0, "loss"] - np.mean(losses)) < 1e-4
    assert abs(df[df.k.isna()].loss.iloc[0] - full_loss) < 1e-4
    with pytest.raises(AnalysisError, match="positions must be"):
        context_curve(model, x, positions=24)
    with pytest.raises(AnalysisError, match="unknown context mask"):
        context_curve(model, x, mask="band")


def test_crop_is_masking_the_earlier_keys_at_the_true_positions(model):
    """The model has no absolute position signal (RoPE), so the crop (tokens moved to positions 0..k-1) equals the
    full window with every key before the last k tokens of a prediction masked, at the tokens' own positions."""
    x, k, positions = _x(model, 3, 20, 4), 4, 5
    first = 20 - 1 - positions
    crop = context_curve(model, x, ks=(k,), positions=positions, mask="crop").set_index("mask").loc["crop", "loss"]
    per = []
    with torch.no_grad():
        for p in range(first, 19):
            s = p - k + 1  # the first kept token; queries before it do not matter to p (left unmasked: no NaN rows)

            def start_mask(scores, s=s):
                q = torch.arange(scores.shape[-2])[:, None]
                j = torch.arange(scores.shape[-1])[None, :]
                return scores.masked_fill((q >= s) & (j < s), float("-inf"))

            with hooked(model, {f"blocks.{i}.attn.hook_attn_scores": start_mask for i in range(model.cfg.n_layers)}):
                lp = torch.log_softmax(model(x)[:, p].float(), -1)
            per.append(-lp.gather(-1, x[:, p + 1:p + 2])[:, 0])
    assert abs(crop - float(torch.stack(per).mean())) < 1e-4


def test_window_of_the_whole_length_is_the_unmasked_model(model):
    x = _x(model, 4, 24, 1)
    with torch.no_grad():
        plain = model(x)  # scaled_dot_product_attention, no hook
        for k in (24, 40):
            with hooked(model, window_hooks(model, k)):
                assert (model(x) - plain).abs().max() < 1e-4
        with hooked(model, window_hooks(model, 23)):  # the first key leaves the last query's window
            assert (model(x)[:, -1] - plain[:, -1]).abs().max() > 1e-3
    df = context_curve(model, x, ks=(20,), positions=4, mask="window")
    assert abs(df.set_index("mask").loc["none", "loss"] - _loss_at(plain, x, 19)) < 1e-5
    with pytest.raises(AnalysisError, match="k >= 1"):
        window_hooks(model, 0)


def test_window_of_one_token_sees_only_itself(model):
    """k = 1: every position's output equals the model run on that single token alone."""
    x = _x(model, 3, 16, 2)
    with torch.no_grad():
        alone = torch.stack([model(x[:, p:p + 1])[:, 0] for p in range(16)], 1)
        with hooked(model, window_hooks(model, 1)):
            masked = model(x)
    assert (masked - alone).abs().max() < 1e-4
    df = context_curve(model, x, ks=(1,), positions=5, mask=("window", "crop")).set_index("mask")
    assert abs(df.loc["window", "loss"] - _loss_at(alone, x, 10)) < 1e-5
    assert abs(df.loc["window", "loss"] - df.loc["crop", "loss"]) < 1e-5 and df.loc["window", "reach"] == 1


def test_window_pattern_is_the_band(model):
    """A known answer for the pattern itself: zero outside q-k < key <= q, positive inside, rows summing to 1."""
    x, k = _x(model, 2, 12, 3), 3
    seen = {}
    hooks = window_hooks(model, k) | {"blocks.1.attn.hook_pattern": lambda a: seen.setdefault("p", a)}
    with torch.no_grad(), hooked(model, hooks):
        model(x)
    band = torch.tensor([[0 <= q - j < k for j in range(12)] for q in range(12)])
    pat = seen["p"]
    assert (pat[..., ~band] == 0).all() and (pat[..., band] > 0).all()
    assert torch.allclose(pat.sum(-1), torch.ones(()), atol=1e-6)


def test_window_against_a_recursive_crop_construction(model):
    """Two layers, window k: the residual after block 0 at position q is the crop of tokens q-k+1..q through block 0
    (RoPE is relative); block 1 at p reads those residuals at p-k+1..p only. Built from crops alone (no mask hook)."""
    assert model.cfg.n_layers == 2
    x, k, T = _x(model, 2, 14, 5), 3, 14
    with torch.no_grad():
        r0 = torch.stack([model(x[:, max(0, q - k + 1):q + 1], stop_at_layer=1)[:, -1] for q in range(T)], 1)
        brute = torch.stack([model(r0[:, max(0, p - k + 1):p + 1], start_at_layer=1)[:, -1] for p in range(T)], 1)
        with hooked(model, window_hooks(model, k)):
            masked = model(x)
    assert (masked - brute).abs().max() < 1e-4
    assert (brute[:, k:] - model(x)[:, k:]).abs().max() > 1e-3  # and it is not the unmasked model


def test_window_against_transformers_attention_with_a_hand_built_mask(model, tmp_path):
    """An independent implementation: the exported Llama model, its eager attention given the band as a 4-D mask."""
    from transformers import LlamaForCausalLM

    from analysis.interop.hf import export_hf

    hf = LlamaForCausalLM.from_pretrained(export_hf(model, tmp_path / "hf"), attn_implementation="eager").eval()
    x, k, T = _x(model, 3, 20, 6), 4, 20
    band = torch.tensor([[0 <= q - j < k for j in range(T)] for q in range(T)])
    mask = torch.zeros(T, T).masked_fill(~band, float("-inf"))[None, None].expand(3, 1, T, T)
    with torch.no_grad():
        theirs = hf(x, attention_mask=mask).logits
        with hooked(model, window_hooks(model, k)):
            ours = model(x)
    assert (ours - theirs).abs().max() < 1e-4
    df = context_curve(model, x, ks=(k,), positions=8).set_index("mask")
    assert abs(df.loc["window", "loss"] - _loss_at(theirs, x, 11)) < 1e-5
    assert df.loc["window", "reach"] == model.cfg.n_layers * (k - 1) + 1


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory):
    tok = train_bpe(SyntheticLanguage(0).documents(800), 600)
    cfg = ModelConfig.preset("toy", vocab_size=tok.get_vocab_size(with_added_tokens=True), d_model=32, n_layers=2,
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
    assert {"context_curve.csv", "context_effects.csv", "segmentation.csv", "context.png", "context.pdf"} <= {
        p.name for p in out.iterdir()}
    curve = pd.read_csv(out / "context_curve.csv")
    assert set(curve.k.dropna()) == {1, 4} and set(curve["mask"]) == {"none", "window", "crop"}
    eff = pd.read_csv(out / "context_effects.csv")
    assert {"all attn", "all mlp", "all attn + all mlp", "attn x mlp"} <= set(eff.effect)
    assert set(eff.ablation) == {"resample"}
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["context", "--ckpt", str(bpe_model.checkpoint_path), "--ks", "a,b", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2 and not (tmp_path / "bad").exists()
    for bad in (["--mask", "band"], ["--ablation", "zero"], ["--ablation", "mean", "--draws", "2"]):
        with pytest.raises(SystemExit) as e:
            main(["context", "--ckpt", str(bpe_model.checkpoint_path), *bad, "--out", str(tmp_path / "bad")])
        assert e.value.code == 2 and not (tmp_path / "bad").exists()
    assert capsys.readouterr().err.count("\n") >= 3

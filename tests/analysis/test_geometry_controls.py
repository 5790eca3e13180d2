"""The geometry controls: ``permuted`` (the canonical code of a seeded id permutation) and ``frozen_random`` (a
frozen Gaussian table with the code rows' norm) build, save, train and pass through every analysis, with bit-level
analyses refused where there are no bits."""

import numpy as np
import pytest
import torch

from analysis import AnalysisError, load
from analysis.readouts.activations import collect
from analysis.readouts.head import head_geometry
from analysis.causal.interventions import input_intervention
from analysis.readouts.probes import probe_table
from analysis.causal.recoding import own_bits, recoding_sweep
from fixedid import FixedIdLM
from fixedid.codes import code_table, id_permutation, ids_to_bits

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module")
def permuted(tmp_path_factory, tokenizer):
    return tiny_checkpoint(tmp_path_factory, tokenizer, "permuted", table_seed=5)


@pytest.fixture(scope="module")
def frozen(tmp_path_factory, tokenizer):
    return tiny_checkpoint(tmp_path_factory, tokenizer, "frozen_random")


def test_tables(permuted, frozen):
    c = permuted.cfg
    perm = id_permutation(c.vocab_size, 5)
    canon = code_table(c.vocab_size, c.n_bits)
    assert torch.equal(permuted.embed.code, torch.from_numpy(canon[perm]))
    assert sorted(map(tuple, permuted.embed.code.tolist())) == sorted(map(tuple, canon.tolist()))  # same rows
    assert np.array_equal(own_bits(permuted), ids_to_bits(perm, c.n_bits))
    assert permuted.param_counts()["input_interface"] == frozen.param_counts()["input_interface"] == 0
    rows = frozen.input_code(torch.arange(frozen.cfg.vocab_size))
    assert torch.allclose(rows.norm(dim=1), torch.full((len(rows),), frozen.cfg.d_model ** 0.5), atol=1e-4)
    assert torch.linalg.matrix_rank(rows) == frozen.cfg.d_model  # full rank, unlike a 16-bit code
    other = FixedIdLM(frozen.cfg.replace(table_seed=1))
    assert not torch.equal(other.embed.code, frozen.embed.code)
    for m in (permuted, frozen):  # the saved checkpoint reloads to the same model
        back = load(m.ckpt_dir)
        assert torch.equal(back.embed.code, m.embed.code)


def test_analyses_accept_them_and_refuse_bits_where_there_are_none(permuted, frozen):
    x = torch.randint(0, permuted.cfg.vocab_size, (6, 24), generator=torch.Generator().manual_seed(0))
    flips = input_intervention(permuted, "bitflip", x, bits=[0, 15]).summary
    assert len(flips) == 2 and np.isfinite(flips.delta_loss).all()
    assert abs(recoding_sweep(permuted, "transvection", [0], data=x, tasks=()).delta_loss.iloc[0]) < 1e-6
    with pytest.raises(AnalysisError, match="frozen_random variant has none"):
        input_intervention(frozen, "bitflip", x)
    with pytest.raises(AnalysisError, match="no code to recode"):
        recoding_sweep(frozen, "transvection", [1], data=x, tasks=())
    for m in (permuted, frozen):
        assert np.isfinite(input_intervention(m, "noise", x, scales=(0.5,)).summary.delta_loss).all()
        assert np.isfinite(input_intervention(m, "swap", x, pos=3).summary.delta_loss).all()
        assert len(recoding_sweep(m, "token-permutation", [0, 8], draws=1, data=x, tasks=())) == 2
        assert (head_geometry(m).measure == "bits_r2").any()
    acts = collect(permuted, x, hooks=["hook_embed"])
    df = probe_table(acts, ["code_bits", "canonical_bits"], controls=False).set_index("target")
    varying = [j for j in range(16) if df.loc[f"code_bit:{j}", "status"] == "fitted"]
    assert varying and (df.loc[[f"code_bit:{j}" for j in varying], "score"] == 1.0).all()  # its own bits: linear
    assert df.loc["canonical_bit:0", "gf2_weight"] is pd_na()  # no GF(2) relation to the canonical bits
    with pytest.raises(AnalysisError, match="frozen_random variant has none"):
        probe_table(collect(frozen, x, hooks=["hook_embed"]), ["code_bits"])


def pd_na():
    import pandas as pd

    return pd.NA


def test_they_train_and_export(tmp_path, capsys):
    from analysis.interop.hf import export_hf, import_hf
    from tests._fixtures import TRAIN_CONFIG, run_inproc, write_config

    cfg = write_config(tmp_path, TRAIN_CONFIG.replace("steps = 12", "steps = 3").replace("keep = [4]", "keep = []"))
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet", "--variants",
                       "permuted,frozen_random"]) == 0
    for v in ("permuted", "frozen_random"):
        m = load(tmp_path / "o" / v)
        assert m.cfg.interface == v
        back = import_hf(export_hf(m, tmp_path / f"hf-{v}"))
        x = torch.randint(0, m.cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            assert back.cfg.interface == v and torch.equal(back(x), m(x))


def test_fixed_output_head(tmp_path):
    from analysis.interop.hf import export_hf, import_hf
    from fixedid import ModelConfig, save_checkpoint
    from fixedid.codes import code_table

    cfg = ModelConfig.preset("toy", vocab_size=300, d_model=64, n_layers=2, n_heads=4, d_ff=128, context=32,
                             interface="gf2", output="code")
    m = FixedIdLM(cfg)
    W = m.unembed.weight
    assert "unembed.weight" not in dict(m.named_parameters()) and m.param_counts()["output_head"] == 0
    assert torch.linalg.matrix_rank(W) == cfg.d_model and torch.allclose(W.norm(dim=1), torch.ones(300), atol=1e-5)
    # rows follow the code's Hamming geometry: codes one bit apart are far more alike than codes eight bits apart
    code = (m.embed.code > 0).numpy()
    ham = (code[:, None, :] != code[None, :, :]).sum(-1)
    sim = (W @ W.T).numpy()
    assert sim[ham == 1].mean() > 0.4 > sim[ham == 8].mean() + 0.3
    learned_input = FixedIdLM(cfg.replace(interface="learned"))  # no input code: the canonical code of the id
    assert torch.linalg.matrix_rank(learned_input.unembed.weight) == cfg.d_model
    with pytest.raises(Exception, match="output"):
        ModelConfig.preset("toy", output="logits")
    x = _step_leaves_head(m)
    path = save_checkpoint(m, tmp_path / "ck")
    back = load(path)
    with torch.no_grad():
        assert torch.equal(back(x), m(x))
        hf = import_hf(export_hf(back, tmp_path / "hf"))
        assert torch.equal(hf(x), m(x))
    assert code_table(300, 16).shape == (300, 16)


def _step_leaves_head(m):
    """One optimizer step on random tokens; the frozen head must come out unchanged. Returns the tokens."""
    from fixedid.train.optim import make_optimizer

    opt = make_optimizer(m, cfg_train())
    x = torch.randint(0, m.cfg.vocab_size, (4, 32))
    before = m.unembed.weight.clone()
    m.train()
    m(x, return_type="loss").backward()
    opt.step()
    m.eval()
    assert torch.equal(m.unembed.weight, before)  # frozen
    return x


def cfg_train():
    from fixedid.train.config import TrainConfig

    return TrainConfig.load("tiny").train


def test_random_output_head_and_the_head_control_variants(tmp_path):
    """output = "random": frozen unit-norm Gaussian rows, with no code in them; the trainer's -randomhead and
    -codehead variants set the output field on any interface."""
    from analysis.interop.hf import export_hf, import_hf
    from fixedid import ModelConfig, save_checkpoint
    from fixedid.config import trainable_params, variant_interface
    from fixedid.train.config import TrainConfig

    cfg = ModelConfig.preset("toy", vocab_size=300, d_model=64, n_layers=2, n_heads=4, d_ff=128, context=32,
                             interface="canonical", output="random")
    m = FixedIdLM(cfg)
    W = m.unembed.weight
    assert "unembed.weight" not in dict(m.named_parameters()) and m.param_counts()["output_head"] == 0
    assert torch.allclose(W.norm(dim=1), torch.ones(300), atol=1e-5)
    # no code in it: rows of tokens one bit apart are no more alike than any two rows (|cos| ~ 1/sqrt(64))
    code = (m.embed.code > 0).numpy()
    ham = (code[:, None, :] != code[None, :, :]).sum(-1)
    sim = (W @ W.T).numpy()
    assert abs(sim[ham == 1].mean()) < 0.05 and abs(sim[ham == 8].mean()) < 0.05
    # the same rows whatever the input interface, other rows for another table_seed
    assert torch.equal(FixedIdLM(cfg.replace(interface="learned")).unembed.weight, W)
    assert not torch.equal(FixedIdLM(cfg.replace(table_seed=1)).unembed.weight, W)
    x = _step_leaves_head(m)
    back = load(save_checkpoint(m, tmp_path / "ck"))
    with torch.no_grad():
        assert torch.equal(back(x), m(x)) and torch.equal(import_hf(export_hf(back, tmp_path / "hf"))(x), m(x))

    assert variant_interface("canonical-randomhead") == ("canonical", {"output": "random"})
    assert variant_interface("canonical-codehead") == ("canonical", {"output": "code"})
    assert variant_interface("gf2-matched") == ("gf2", {"match_params": True})
    assert variant_interface("learned") == ("learned", {})
    t = TrainConfig.load("tiny")
    learned, head = t.model_config("learned", 380), t.model_config("learned-randomhead", 380)
    assert head.output == "random" and head.interface == "learned"
    assert trainable_params(learned) - trainable_params(head) == 380 * learned.d_model  # the head's rows
    assert t.model_config("canonical-matched", 380).match_params == "width"

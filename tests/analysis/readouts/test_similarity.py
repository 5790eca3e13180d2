"""Linear and debiased CKA: identities, invariances, and the direct Gram-matrix formulas on small arrays."""

import copy

import numpy as np
import pytest
import torch

from analysis import AnalysisError, load
from analysis.loading import random_init_twin
from analysis.readouts.similarity import cka_matrix, debiased_cka, layer_activations, linear_cka
from fixedid import FixedIdLM, ModelConfig, save_checkpoint
from fixedid.data import SyntheticLanguage
from fixedid.data.tokenizer import train_words


def gram_cka(x, y):
    n = len(x)
    h = np.eye(n) - 1 / n
    k, l_ = h @ x @ x.T @ h, h @ y @ y.T @ h
    return (k * l_).sum() / np.sqrt((k * k).sum() * (l_ * l_).sum())


def hsic_unbiased(k, l_):
    n = len(k)
    k, l_ = k - np.diag(np.diag(k)), l_ - np.diag(np.diag(l_))
    one = np.ones(n)
    return (np.trace(k @ l_) + (one @ k @ one) * (one @ l_ @ one) / ((n - 1) * (n - 2))
            - 2 / (n - 2) * one @ k @ l_ @ one) / (n * (n - 3))


def test_cka_identities_and_invariances():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 7))
    y = x @ rng.normal(size=(7, 5)) + 0.3 * rng.normal(size=(60, 5))
    q, _ = np.linalg.qr(rng.normal(size=(7, 7)))
    for f in (linear_cka, debiased_cka):
        assert f(x, x) == pytest.approx(1.0)
        assert f(x @ q, y) == pytest.approx(f(x, y))            # orthogonal transform
        assert f(3.7 * x, 0.2 * y) == pytest.approx(f(x, y))     # isotropic scaling
        assert f(x + 5.0, y) == pytest.approx(f(x, y))           # a constant shift
    assert linear_cka(x, y) == pytest.approx(gram_cka(x, y))
    xc, yc = x - x.mean(0), y - y.mean(0)
    want = hsic_unbiased(xc @ xc.T, yc @ yc.T) / np.sqrt(hsic_unbiased(xc @ xc.T, xc @ xc.T)
                                                         * hsic_unbiased(yc @ yc.T, yc @ yc.T))
    assert debiased_cka(x, y) == pytest.approx(want)


def test_debiasing_removes_the_small_sample_bias():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 200)), rng.normal(size=(40, 200))  # independent, wide, few samples
    assert linear_cka(x, y) > 0.5 and abs(debiased_cka(x, y)) < 0.1


@pytest.mark.parametrize("n,p,q", [(400, 40, 40), (300, 20, 60), (100, 50, 50)])
def test_linear_cka_of_independent_gaussians_sits_at_its_closed_form(n, p, q):
    """For independent standard Gaussian X [n, p], Y [n, q] (centred: n - 1 degrees of freedom),
    E||X'Y||^2 = (n-1) p q and E||X'X||^2 = (n-1) p (n + p), so linear CKA ~ sqrt(p q / ((n + p)(n + q))); debiased
    CKA ~ 0."""
    rng = np.random.default_rng(n + p)
    draws = [(linear_cka(x, y), debiased_cka(x, y))
             for x, y in ((rng.normal(size=(n, p)), rng.normal(size=(n, q))) for _ in range(30))]
    lin, deb = np.array(draws).T
    assert lin.mean() == pytest.approx(np.sqrt(p * q / ((n + p) * (n + q))), abs=4 * lin.std() / np.sqrt(30) + 1e-3)
    assert abs(deb.mean()) < 4 * deb.std() / np.sqrt(30)


def test_cka_of_an_orthogonal_transform_is_one():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(80, 12))
    q, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    assert linear_cka(x, x @ q) == pytest.approx(1.0) and debiased_cka(x, 2.0 * x @ q - 1.0) == pytest.approx(1.0)


def test_bad_shapes():
    with pytest.raises(AnalysisError, match="same tokens"):
        linear_cka(np.zeros((5, 2)), np.zeros((6, 2)))
    with pytest.raises(AnalysisError, match="at least 4"):
        debiased_cka(np.ones((3, 2)), np.ones((3, 2)))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tok = train_words(SyntheticLanguage(0).documents(300), 4096)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    out = {}
    for interface in ("canonical", "gf2"):
        cfg = ModelConfig.preset("toy", vocab_size=vocab, d_model=64, n_layers=2, n_heads=4, d_ff=128, context=32,
                                 interface=interface, init_std=0.2, seed=1)
        path = tmp_path_factory.mktemp("ck") / interface
        save_checkpoint(FixedIdLM(cfg), path, tokenizer=tok,
                        train_config={"data": {"source": "synthetic", "val_split": "validation"}})
        out[interface] = load(path)
        out[interface].ckpt_dir = path
    return out


def test_layer_by_layer_matrix_and_the_random_init_twin(models):
    a, b = models["canonical"], models["gf2"]
    x = torch.randint(0, a.cfg.vocab_size, (6, 32), generator=torch.Generator().manual_seed(0))
    acts = layer_activations(a, x)
    assert list(acts) == ["hook_embed", "blocks.1.hook_resid_pre", "ln_final.hook_normalized"]
    assert acts["hook_embed"].shape == (6 * 32, 64)
    df = cka_matrix(a, a, x)
    diag = df[df.layer_a == df.layer_b]
    assert np.allclose(diag.cka, 1.0) and np.allclose(diag.debiased, 1.0) and len(df) == 9
    cross = cka_matrix(a, b, x)
    assert (cross.cka < 1.0 - 1e-6).any()
    # a "trained" copy (every weight moved): its twin is the initialisation its seed draws, not the copy itself
    trained = copy.deepcopy(a)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    twin = random_init_twin(trained)
    fresh = FixedIdLM(a.cfg)  # what training started from, drawn independently of random_init_twin
    assert all(torch.equal(t, f) for t, f in zip(twin.state_dict().values(), fresh.state_dict().values()))
    assert not torch.equal(twin.blocks[0].attn.q_proj.weight, trained.blocks[0].attn.q_proj.weight)
    assert twin.tokenizer is trained.tokenizer and not twin.training
    moved = cka_matrix(trained, twin, x).query("layer_a == layer_b and hook_a != 'hook_embed'")  # a fixed code: 1
    assert (moved.cka < 1.0 - 1e-4).all()
    # position 0 left out: the same as dropping those rows by hand
    skip = cka_matrix(a, b, x, skip_first=True)
    keep = np.arange(6 * 32) % 32 != 0
    acts_b = layer_activations(b, x)
    for r in skip.itertuples():
        assert r.debiased == pytest.approx(debiased_cka(acts[r.hook_a][keep], acts_b[r.hook_b][keep]))
        assert r.cka == pytest.approx(linear_cka(acts[r.hook_a][keep], acts_b[r.hook_b][keep]))
    assert skip.attrs["n_tokens"] == 6 * 31 and skip.attrs["skip_first"]
    other = random_init_twin(a, seed=9)
    assert not torch.equal(other.blocks[0].attn.q_proj.weight, a.blocks[0].attn.q_proj.weight)
    with pytest.raises(AnalysisError, match="unknown hook"):
        layer_activations(a, x, ["blocks.7.hook_resid_pre"])


def test_cli_writes_the_matrices_and_refuses_bad_input(models, tmp_path, tmp_path_factory, capsys):
    from analysis.cli.main import main

    a = models["canonical"]
    npy = tmp_path / "ids.npy"
    np.save(npy, torch.randint(0, a.cfg.vocab_size, (4, 32), generator=torch.Generator().manual_seed(1)).numpy())
    out = tmp_path / "sim"
    dirs = [str(models[k].ckpt_dir) for k in ("canonical", "gf2")]
    with pytest.raises(SystemExit) as e:
        main(["similarity", "--ckpt", dirs[0], "--ckpt", dirs[1], "--random-init", "--data", str(npy),
              "--out", str(out)])
    assert e.value.code == 0
    assert {"similarity.csv", "similarity.png", "similarity.pdf"} <= {p.name for p in out.iterdir()}
    assert "vs its initialisation" in capsys.readouterr().out
    other_tok = train_words(SyntheticLanguage(5).documents(50), 4096)
    cfg = ModelConfig.preset("toy", vocab_size=other_tok.get_vocab_size(with_added_tokens=True), d_model=64,
                             n_layers=2, n_heads=4, d_ff=128, context=32, interface="canonical")
    odd = save_checkpoint(FixedIdLM(cfg), tmp_path / "odd", tokenizer=other_tok)
    for i, args in enumerate([["--ckpt", dirs[0]], ["--ckpt", dirs[0], "--ckpt", str(odd), "--data", str(npy)]]):
        with pytest.raises(SystemExit) as e:
            main(["similarity", *args, "--out", str(tmp_path / f"bad{i}")])
        assert e.value.code == 2 and not (tmp_path / f"bad{i}").exists()
        assert len(capsys.readouterr().err.strip().splitlines()) == 1

"""Muon on the blocks' matrices (``[train] optimizer = "muon"``): the update against torch's own Muon and AdamW, the
parameter split, a state that saves and restores exactly, and the config's checks."""

import pytest
import torch

from fixedid import FixedIdLM
from fixedid.errors import ConfigError
from fixedid.train.config import TrainConfig
from fixedid.train.muon import MuonAdamW, orthogonalize
from fixedid.train.optim import (deserialize_optimizer_state, load_named_optimizer_state, make_optimizer,
                                 named_optimizer_state, serialize_optimizer_state)


@pytest.mark.parametrize("shape", [(24, 40), (40, 24), (32, 32)])
def test_orthogonalize_keeps_the_singular_vectors_and_flattens_the_values(shape):
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u, s, vh = torch.linalg.svd(g, full_matrices=False)
    o = orthogonalize(g)
    s_o = torch.linalg.svdvals(o)
    assert s.max() / s.min() > 5 and s_o.min() > 0.6 and s_o.max() < 1.25  # the spread is gone
    # in g's singular basis, o is (nearly) diagonal: the same singular vectors
    inner = u.T @ o @ vh.T
    off = inner - torch.diag(torch.diagonal(inner))
    assert off.abs().max() < 1e-6 and torch.diagonal(inner).min() > 0.6


def _pair(seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(48, 20, generator=gen)
    b = torch.randn(20, generator=gen)
    grads = [(torch.randn(48, 20, generator=gen), torch.randn(20, generator=gen)) for _ in range(3)]
    return w, b, grads


def test_one_optimizer_follows_torchs_muon_on_matrices_and_adamw_on_the_rest():
    w, b, grads = _pair()
    mine_w, mine_b = w.clone().requires_grad_(), b.clone().requires_grad_()
    ref_w, ref_b = w.clone().requires_grad_(), b.clone().requires_grad_()
    lr, wd, ratio = 0.01, 0.1, 2.0
    mine = MuonAdamW([{"params": [mine_w], "weight_decay": wd, "muon": True},
                      {"params": [mine_b], "weight_decay": wd}], lr=lr, betas=(0.9, 0.99), muon_lr_ratio=ratio)
    # the decay per step is lr * wd, the ratio left out (torch's Muon decays by its own lr * weight_decay)
    muon = torch.optim.Muon([ref_w], lr=lr * ratio, weight_decay=wd / ratio, momentum=0.95, nesterov=True,
                            adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW([ref_b], lr=lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=wd, foreach=False)
    for gw, gb in grads:
        mine_w.grad, mine_b.grad, ref_w.grad, ref_b.grad = gw.clone(), gb.clone(), gw.clone(), gb.clone()
        mine.step(), muon.step(), adamw.step()
        torch.testing.assert_close(mine_b, ref_b, rtol=0, atol=1e-6)
        # torch's Muon orthogonalises in bfloat16, this one in the parameter's float32: the same step to bf16's
        # precision (a few % after five iterations), against a distance between two unrelated steps of ~140%
        assert (mine_w - ref_w).norm() < 0.05 * (ref_w - w).norm()
    assert (mine_w - w).abs().mean() > 0.005  # it moved (each step: an RMS of 0.2 x lr x ratio = 0.004)


def test_the_split_state_and_restore():
    cfg = TrainConfig.load("tiny").replace_train(optimizer="muon", muon_lr_ratio=3.0)
    model = FixedIdLM(cfg.model_config("learned", 64))
    opt = make_optimizer(model, cfg.train)
    muon = [p for g in opt.param_groups if g["muon"] for p in g["params"]]
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in muon) == sorted(
        n for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2)
    assert all(g["lr_ratio"] == (3.0 if g["muon"] else 1.0) for g in opt.param_groups)
    x = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))

    def step(m, o):
        o.zero_grad()
        m(x[:, :-1], return_type="loss", targets=x[:, 1:]).backward()
        o.step()

    step(model, opt)
    tensors, groups = serialize_optimizer_state(named_optimizer_state(model, opt))
    twin = FixedIdLM(cfg.model_config("learned", 64))
    twin.load_state_dict(model.state_dict())
    twin_opt = make_optimizer(twin, cfg.train)
    load_named_optimizer_state(twin, twin_opt, deserialize_optimizer_state(tensors, groups))
    step(model, opt), step(twin, twin_opt)
    for (n, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(a, b), n


@pytest.mark.parametrize("change, message", [
    (dict(optimizer="sgd"), r"optimizer 'sgd' is not one of \('adamw', 'muon'\)"),
    (dict(optimizer="muon", parallel="fsdp"), "FSDP shards"),
    (dict(muon_lr_ratio=0), "muon_lr_ratio > 0"),
    (dict(muon_momentum=1.0), r"muon_momentum in \[0, 1\)"),
    (dict(optimizer=1), "optimizer must be a string"),
])
def test_bad_optimizer_keys(change, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.load("tiny").replace_train(**change)


def test_the_optimizer_is_keyed_only_when_not_adamw():
    adamw = TrainConfig.load("small")
    assert "optimizer" not in adamw.to_dict()["train"]
    muon = adamw.replace_train(optimizer="muon")
    assert muon.trained_key() != adamw.trained_key() and muon.differences(adamw) == ["train.optimizer"]


def test_a_muon_run_stopped_and_resumed_ends_with_the_weights_of_one_straight_run(tmp_path):
    """Through the trainer's checkpoints: 6 steps, then --resume to 12, against 12 at once (a constant rate after
    warm-up, so the shorter run's schedule is the longer one's first half)."""
    from fixedid.train import train
    from tests._fixtures import TRAIN_CONFIG

    path = tmp_path / "muon.toml"
    path.write_text(TRAIN_CONFIG.replace("log_every = 1\n", 'log_every = 1\noptimizer = "muon"\nmuon_lr_ratio = 4.0\n'
                                                            "min_lr_ratio = 1.0\n"))
    cfg = TrainConfig.load(str(path))
    train(cfg, tmp_path / "straight", ["gf2"], quiet=True)
    train(cfg.replace_train(steps=6), tmp_path / "resumed", ["gf2"], quiet=True)
    train(cfg, tmp_path / "resumed", ["gf2"], resume=True, quiet=True)
    a = (tmp_path / "straight" / "gf2" / "model.safetensors").read_bytes()
    assert a == (tmp_path / "resumed" / "gf2" / "model.safetensors").read_bytes()

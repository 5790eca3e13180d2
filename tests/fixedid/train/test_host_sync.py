"""The train loop reads nothing back from the device during a training step, and its log is bit for bit what a
loop that reads every micro-batch loss with ``.item()`` writes."""

import json
import math
import sys

import pytest
import torch

import fixedid.train.loop as loop
from fixedid import FixedIdLM
from fixedid.data import batch_at
from fixedid.train.config import TrainConfig
from fixedid.train.optim import lr_at, make_optimizer
from fixedid.train.prepare import load_prepared

from tests._fixtures import TRAIN_CONFIG

# two micro-batches per step (the losses are summed over them), a log every 3 steps, evaluations at 4 (kept) and 6
ACCUM = TRAIN_CONFIG.replace("steps = 12", "steps = 6") \
    .replace("batch_size = 8", "batch_size = 8\nmicro_batch_size = 4") \
    .replace("log_every = 1", "log_every = 3").replace("eval_batches = 2", "eval_batches = 3")

READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One variant trained with every tensor read from fixedid code recorded, inside and outside a step."""
    tmp = tmp_path_factory.mktemp("sync")
    cfg = TrainConfig._parse(ACCUM, "test config")
    reads, inside = [], [False]
    mp = pytest.MonkeyPatch()

    def recording(name):
        original = getattr(torch.Tensor, name)

        def read(self, *a, **k):
            caller = sys._getframe(1).f_code.co_filename
            if "/fixedid/" in caller.replace("\\", "/"):  # torch's own internals (AdamW's CPU step count) aside
                reads.append((name, inside[0], caller))
            return original(self, *a, **k)
        return read

    original_step = loop._train_step

    def step(*a, **k):
        inside[0] = True
        try:
            return original_step(*a, **k)
        finally:
            inside[0] = False

    with mp.context() as m:
        for name in READS:
            m.setattr(torch.Tensor, name, recording(name))
        m.setattr(loop, "_train_step", step)
        loop.train(cfg, tmp / "out", ["learned"], quiet=True, device="cpu")
    return cfg, tmp / "out", reads


def test_a_training_step_reads_nothing_back_from_the_device(run):
    _, _, reads = run
    assert [r for r in reads if r[1]] == []
    # the losses are read where they are logged: steps 3 and 6, one read each (and one per evaluation)
    assert sum(1 for name, _, f in reads if name == "tolist" and f.endswith("loop.py")) == 2 + 2


def _reference_log(cfg: TrainConfig, out) -> list[str]:
    """The log of the same recipe, written by a plain loop that calls ``.item()`` on every micro-batch loss."""
    t = cfg.train
    data = load_prepared(out / "data", cfg.data)
    model = FixedIdLM(cfg.model_config("learned", data.tokenizer.get_vocab_size(with_added_tokens=True)))
    opt = make_optimizer(model, t)
    micro, accum = t.micro_batch_size, t.batch_size // t.micro_batch_size
    lines = []
    model.train()
    for step in range(t.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, t)
        loss_sum = 0.0
        for m in range(accum):
            x, y = batch_at(data.train, step, micro, model.cfg.context, seed=t.seed, rank=m, world_size=accum)
            loss = model(x, return_type="loss", targets=y)
            (loss / accum).backward()
            loss_sum += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip if t.grad_clip > 0 else math.inf)
        opt.step()
        opt.zero_grad(set_to_none=True)
        done = step + 1
        if done % t.log_every == 0:
            lines.append(json.dumps({"step": done, "loss": loss_sum / accum, "lr": lr_at(step, t),
                                     "grad_norm": float(norm), "tokens": done * t.batch_size * model.cfg.context}))
        if done % t.eval_every == 0 or done == t.steps or done in t.kept_steps:
            model.eval()
            with torch.no_grad():
                val = []
                for i in range(t.eval_batches):
                    x, y = batch_at(data.val, i, micro, model.cfg.context, seed=t.seed + 1, rank=0, world_size=1)
                    val.append(model(x, return_type="loss", targets=y).item())
            model.train()
            lines.append(json.dumps({"step": done, "val_loss": sum(val) / len(val)}))
    return lines


def test_the_log_is_bit_for_bit_a_loop_that_reads_every_micro_batch(run):
    cfg, out, _ = run
    logged = (out / "learned" / "metrics.jsonl").read_text()
    expected = _reference_log(cfg, out)
    assert [json.loads(line)["step"] for line in expected] == [3, 4, 6, 6]
    assert logged == "".join(line + "\n" for line in expected)


def test_host_sum_is_the_sum_of_item_reads_in_order():
    values = torch.tensor([0.1, 1e8, -1e8, 0.3, 1 / 3], dtype=torch.float32)
    by_item = 0.0
    for v in values:
        by_item += v.item()
    assert loop.host_sum(list(values)) == by_item  # not float32's sum, nor a re-ordered one
    assert loop.host_sum(list(values)) != float(values.sum())

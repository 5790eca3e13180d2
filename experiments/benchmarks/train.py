"""Trainer throughput, measured side by side in one run.

Prints two ratios on one prepared dataset (the tiny config's model, batch and optimizer):
  trainer/bare     tokens/s of fixedid.train.train_variant (data sampling, LR schedule, clipping, logging, eval and
                   checkpoint included) divided by a bare loop's: the same model, batch, fused AdamW and autocast,
                   batches pre-sampled in memory, nothing else. Target >= 0.9.
  fixed/learned    the trainer's tokens/s for canonical and gf2 divided by learned's. Target >= 1.0.
  muon/adamw       the trainer's tokens/s for gf2 with ``optimizer = "muon"`` divided by AdamW's, beside its bound:
                   the multiply-adds of a training step (forward and backward of every matrix and of attention)
                   over those plus Muon's five Newton-Schulz iterations per block matrix.

Rounds are interleaved so machine noise hits every contender alike; ratios are medians over rounds.
Usage: python experiments/benchmarks/train.py [--config experiments/configs/tiny.toml] [--steps 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from fixedid import FixedIdLM
from fixedid.data import batch_at
from fixedid.train.optim import make_optimizer
from fixedid.train.prepare import prepare_data
from fixedid.train.distributed import Dist
from fixedid.train.loop import autocast_ctx, train_variant
from fixedid.train.config import TrainConfig


def trainer_tok_s(cfg, variant, data, workdir, n):
    out = Path(tempfile.mkdtemp(dir=workdir))
    t0 = time.perf_counter()
    train_variant(cfg, variant, out, data, Dist(), resume=False, quiet=True)
    return n * cfg.train.batch_size * cfg.model_config(variant, 2).context / (time.perf_counter() - t0)


def bare_tok_s(cfg, variant, data, n):
    t = cfg.train
    vocab = data.tokenizer.get_vocab_size(with_added_tokens=True)
    model = FixedIdLM(cfg.model_config(variant, vocab)).train()
    ctx = model.cfg.context
    opt = make_optimizer(model, t)
    batches = [batch_at(data.train, s, t.batch_size, ctx, seed=t.seed) for s in range(n)]
    dev = torch.device("cpu")
    t0 = time.perf_counter()
    for x, y in batches:
        with autocast_ctx(t.dtype, dev):
            loss = model(x, return_type="loss", targets=y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return n * t.batch_size * ctx / (time.perf_counter() - t0)


def muon_bound(cfg) -> float:
    """tokens/s of Muon over AdamW if a step cost its multiply-adds: forward + backward (3x the forward) of every
    matrix and of causal attention, against that plus five Newton-Schulz iterations (2 m^2 n + m^3 for an m x n
    matrix, m <= n) per matrix Muon updates."""
    from fixedid.train.muon import is_muon_param

    m = FixedIdLM(cfg.model_config("gf2", 512))
    tokens, ctx = cfg.train.batch_size * m.cfg.context, m.cfg.context
    matrices = sum(p.numel() for p in m.parameters() if p.dim() == 2 and p.requires_grad)
    attention = m.cfg.n_layers * ctx * m.cfg.d_model  # q.k and p.v over ~ctx/2 keys each, per token
    step = 3 * tokens * (matrices + attention)
    ns = sum(5 * (2 * min(p.shape) ** 2 * max(p.shape) + min(p.shape) ** 3)
             for n, p in m.named_parameters() if is_muon_param(n, p))
    return step / (step + ns)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="experiments/configs/tiny.toml")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    base = TrainConfig.load(args.config)
    n = args.steps
    cfg = base.replace_train(steps=n, save_every=n, eval_every=n, log_every=10, keep=[])
    with tempfile.TemporaryDirectory() as work:
        data = prepare_data(cfg.data, Path(work) / "data", n_bits=cfg.model_config("canonical", 2).n_bits)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.config}: {n} steps x "
              f"{cfg.train.batch_size} seqs per measurement, {args.rounds} interleaved rounds", file=sys.stderr)
        rows = {k: [] for k in ("bare", "learned", "canonical", "gf2", "gf2 muon")}
        muon = cfg.replace_train(optimizer="muon")  # the rate does not change the work of a step
        for r in range(args.rounds):
            rows["bare"].append(bare_tok_s(cfg, "canonical", data, n))
            for v in ("learned", "canonical", "gf2"):
                rows[v].append(trainer_tok_s(cfg, v, data, work, n))
            rows["gf2 muon"].append(trainer_tok_s(muon, "gf2", data, work, n))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} tok/s" for k, v in rows.items()),
                  file=sys.stderr)
    med = lambda a, b: statistics.median(x / y for x, y in zip(rows[a], rows[b]))  # noqa: E731
    print(f"trainer/bare tokens/s (canonical): {med('canonical', 'bare'):.3f}  (target >= 0.9)")
    print(f"fixed/learned tokens/s: canonical {med('canonical', 'learned'):.3f}, gf2 {med('gf2', 'learned'):.3f}"
          "  (target >= 1.0)")
    print(f"muon/adamw tokens/s (gf2): {med('gf2 muon', 'gf2'):.3f}  (the multiply-add bound {muon_bound(base):.3f})")


if __name__ == "__main__":
    main()

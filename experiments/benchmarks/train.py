"""Trainer throughput, measured side by side in one run.

Prints these ratios on one prepared dataset (the config's model, batch and optimizer):
  trainer/bare     the training loop's tokens/s in fixedid.train.train_variant (data sampling, LR schedule,
                   clipping, logging; read from the trainer's own timing log, the first logged interval, warm-up, left
                   out) divided by a bare loop's over the same steps: the same model, batch, fused AdamW and
                   autocast, batches pre-sampled in memory, no clipping, nothing else. Target >= 0.97.
  end to end       the same with the trainer's set-up, final evaluation and checkpoint inside its time (fixed costs
                   that a short measurement over-weights: a real run pays them once, or every eval_every steps).
  fixed/learned    the trainer's tokens/s for canonical and gf2 divided by learned's. Target >= 1.0.
  muon/adamw       the trainer's tokens/s for gf2 with ``optimizer = "muon"`` divided by AdamW's, beside its bound:
                   the multiply-adds of a training step (forward and backward of every matrix and of attention)
                   over those plus Muon's five Newton-Schulz iterations per block matrix.

Rounds are interleaved so machine noise hits every contender alike; ratios are medians over rounds.
Usage: python experiments/benchmarks/train.py [--config experiments/configs/tiny.toml] [--steps 40] [--rounds 3]
[--threads N] [--batch-size B] [--trainer-only]
"""

from __future__ import annotations

import argparse
import json
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

sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine_line  # noqa: E402


def trainer_tok_s(cfg, variant, data, workdir, n, loop=False):
    """End-to-end tokens/s of a trainer run of ``n`` steps; with ``loop``, also the training loop's own (the median
    of the trainer's logged intervals after the first)."""
    out = Path(tempfile.mkdtemp(dir=workdir))
    t0 = time.perf_counter()
    train_variant(cfg, variant, out, data, Dist(), resume=False, quiet=True)
    whole = n * cfg.train.batch_size * cfg.model_config(variant, 2).context / (time.perf_counter() - t0)
    if not loop:
        return whole
    rows = [json.loads(line) for line in (out / variant / "timing.jsonl").read_text().splitlines()]
    return whole, statistics.median(r["tok_per_s"] for r in rows[1:])


def bare_tok_s(cfg, variant, data, n):
    t = cfg.train
    vocab = data.tokenizer.get_vocab_size(with_added_tokens=True)
    model = FixedIdLM(cfg.model_config(variant, vocab)).train()
    ctx = model.cfg.context
    opt = make_optimizer(model, t)
    batches = [batch_at(data.train, s, t.batch_size, ctx, seed=t.seed) for s in range(n)]
    dev = torch.device("cpu")
    skip = min(t.log_every, n - 1)  # timed from where the trainer's second logged interval starts (warm-up out)
    for i, (x, y) in enumerate(batches):
        if i == skip:
            t0 = time.perf_counter()
        with autocast_ctx(t.dtype, dev):
            loss = model(x, return_type="loss", targets=y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (n - skip) * t.batch_size * ctx / (time.perf_counter() - t0)


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
    p.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    p.add_argument("--batch-size", type=int, help="sequences per step (default: the config's)")
    p.add_argument("--trainer-only", action="store_true", help="only trainer/bare (no fixed/learned, no Muon)")
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    base = TrainConfig.load(args.config)
    if args.batch_size:
        base = base.replace_train(batch_size=args.batch_size, micro_batch_size=0)
    n = args.steps
    cfg = base.replace_train(steps=n, save_every=n, eval_every=n, log_every=min(10, n // 3), keep=[])
    with tempfile.TemporaryDirectory() as work:
        data = prepare_data(cfg.data, Path(work) / "data", n_bits=cfg.model_config("canonical", 2).n_bits)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.config}: {n} steps x "
              f"{cfg.train.batch_size} seqs per measurement, {args.rounds} interleaved rounds", file=sys.stderr)
        rows = {k: [] for k in ("bare", "canonical loop", "canonical")}
        if not args.trainer_only:
            rows.update({k: [] for k in ("learned", "gf2", "gf2 muon")})
        muon = cfg.replace_train(optimizer="muon")  # the rate does not change the work of a step
        for r in range(args.rounds):
            rows["bare"].append(bare_tok_s(cfg, "canonical", data, n))
            whole, loop = trainer_tok_s(cfg, "canonical", data, work, n, loop=True)
            rows["canonical"].append(whole)
            rows["canonical loop"].append(loop)
            if not args.trainer_only:
                for v in ("learned", "gf2"):
                    rows[v].append(trainer_tok_s(cfg, v, data, work, n))
                rows["gf2 muon"].append(trainer_tok_s(muon, "gf2", data, work, n))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} tok/s" for k, v in rows.items()),
                  file=sys.stderr)
    med = lambda a, b: statistics.median(x / y for x, y in zip(rows[a], rows[b]))  # noqa: E731
    print(f"{args.config}, {torch.get_num_threads()} threads, batch {cfg.train.batch_size}: trainer/bare tokens/s "
          f"(canonical) {med('canonical loop', 'bare'):.3f} (target >= 0.97), each round "
          + ", ".join(f"{x / y:.3f}" for x, y in zip(rows["canonical loop"], rows["bare"]))
          + f"; end to end {med('canonical', 'bare'):.3f}")
    if args.trainer_only:
        return
    print(f"fixed/learned tokens/s: canonical {med('canonical', 'learned'):.3f}, gf2 {med('gf2', 'learned'):.3f}"
          "  (target >= 1.0)")
    print(f"muon/adamw tokens/s (gf2): {med('gf2 muon', 'gf2'):.3f}  (the multiply-add bound {muon_bound(base):.3f})")


if __name__ == "__main__":
    main()

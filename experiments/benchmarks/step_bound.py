"""Where the cold demo's training time goes, and what a faster step could save: measured side by side in one run.

The cold demo is bound by training (three tiny variants of 1,600 steps of 32 x 96 tokens; ``demo.py`` prints its
share of the run). At each thread count this prints:
  products    a single-precision [3072 x 72] x [72 x 288] product, the shape of the recipe's MLP input (every
              linear layer of a step has batch x context = 3,072 rows), in GFLOP/s: the rate the step's FLOPs are
              held to;
  step        a bare training step of the recipe (canonical code, random init, AdamW), its milliseconds, and its
              FLOPs (``flops_per_token``: 6 N plus the attention scores) at the products' rate: the step's bound
              if all of it ran as fast as that product;
  attention   the share of the step's time in scaled_dot_product_attention's forward and backward (profiled);
  compiled    the same step under ``torch.compile`` (a fresh process with an empty compile cache at each thread
              count, as on a first run): its speed-up once
              compiled, the seconds of compiling, the steps after which it pays, and what it would save on one of the
              demo's variants (the recipe's steps; a variant's model compiles once).
Usage: python experiments/benchmarks/step_bound.py [--threads 1,2] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from fixedid import FixedIdLM
from fixedid.clitools import ArgumentParser
from fixedid.train.config import TrainConfig
from fixedid.train.loop import flops_per_token

sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine_line, thread_counts  # noqa: E402


def product_rate(rows: int, d: int, out: int, repeats: int = 50) -> float:
    """GFLOP/s of a single-precision ``[rows x d] x [d x out]`` product (median of ``repeats``)."""
    a, b = torch.randn(rows, d), torch.randn(d, out)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * rows * d * out / statistics.median(times) / 1e9


def stepper(cfg: TrainConfig, compiled: bool):
    """A training step of the recipe's canonical variant on one batch (random init, AdamW), and the model."""
    torch.manual_seed(0)
    model = FixedIdLM(cfg.model_config("canonical", 380)).train()
    run = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 380, (cfg.train.batch_size, model.cfg.context + 1), generator=g)

    def step():
        loss = run(x[:, :-1], return_type="loss", targets=x[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, model


def step_ms(step, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t0) / n * 1e3


def attention_share(step, n: int) -> float:
    """The share of ``n`` steps' profiled CPU time in scaled_dot_product_attention (forward and backward)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    return sum(e.self_cpu_time_total for e in events if "scaled_dot_product" in e.key) / total


def measure(cfg: TrainConfig, steps: int) -> None:
    rows = cfg.train.batch_size * cfg.model["context"]
    rate = product_rate(rows, cfg.model["d_model"], 2 * cfg.model["d_ff"])
    eager, model = stepper(cfg, compiled=False)
    for _ in range(3):
        eager()
    ms = statistics.median(step_ms(eager, steps) for _ in range(3))
    flops = flops_per_token(model) * rows
    bound_ms = flops / (rate * 1e9) * 1e3
    share = attention_share(eager, max(3, steps // 4))
    torch._dynamo.reset()
    fast, _ = stepper(cfg, compiled=True)
    t0 = time.perf_counter()
    fast()
    first = time.perf_counter() - t0
    for _ in range(2):
        fast()
    ms_eager, ms_fast = [], []
    for _ in range(3):  # interleaved rounds
        ms_eager.append(step_ms(eager, steps))
        ms_fast.append(step_ms(fast, steps))
    me, mf = statistics.median(ms_eager), statistics.median(ms_fast)
    compile_s = first - mf / 1e3
    saved = (me - mf) / 1e3
    print(f"  products [{rows} x {cfg.model['d_model']}] x [{cfg.model['d_model']} x {2 * cfg.model['d_ff']}]: "
          f"{rate:.0f} GFLOP/s")
    print(f"  training step: {ms:.1f} ms for {flops / 1e9:.2f} GFLOP; at the products' rate {bound_ms:.1f} ms "
          f"({bound_ms / ms:.0%} of the step); attention {share:.0%} of the step's time")
    pays = f"pays after {compile_s / saved:,.0f} steps" if saved > 0 else "never pays"
    print(f"  compiled: {me / mf:.2f}x the eager step ({mf:.1f} ms against {me:.1f} ms, {steps} steps x 3 "
          f"interleaved rounds) after {compile_s:.0f} s of compiling: {pays}; on one variant of the recipe "
          f"({cfg.train.steps:,} steps) it would save {cfg.train.steps * saved - compile_s:+.0f} s")


def main(argv=None) -> None:
    p = ArgumentParser(prog="step_bound.py", description=__doc__.split("\n")[0])  # bad input: one line, exit 2
    p.add_argument("--config", default="tiny")
    p.add_argument("--threads", type=thread_counts, default=[1, 2])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # one thread count, in this process
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be at least 1")
    if args.worker:
        torch.set_num_threads(args.worker)
        print(machine_line(), flush=True)
        measure(TrainConfig.load(args.config), args.steps)
        return
    for threads in args.threads:  # each in a process of its own with an empty compile cache: a first run's compile
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
            subprocess.run([sys.executable, __file__, "--config", args.config, "--steps", str(args.steps),
                            "--worker", str(threads)], env=env, check=True)


if __name__ == "__main__":
    main()

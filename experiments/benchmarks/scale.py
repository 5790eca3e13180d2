"""Cost against model size: a plain forward, a resid_pre patching sweep, edge attribution (EAP) and one DAS fit, on
random-init canonical models from tiny to the study's paper-1.7b shape, each measurement in a fresh process so that
its peak memory is its own.

For each preset and analysis: wall time, the time as a multiple of one plain no-grad forward of the same batch
(the fastest of three in the same process, after a warm-up), the process's peak resident memory (VmHWM) and the model's own
size (float32 parameters and buffers). The prompts are random token pairs (``--pairs`` x ``--tokens``, differing at
one position): the cost of these analyses does not depend on the weights or the words. EAP uses its default chunk
of 16 pairs; DAS fits rank 4 at the middle layer for ``--das-epochs`` epochs of batch 16 (its pairs split in half,
so it fits on ``--pairs`` examples). Each analysis runs once on 4 of the pairs first (a warm-up: imports and first-call
set-up are not its cost), then on all of them, timed.

What it does not cover yet: load + verify of a checkpoint, probes over many tokens, lm-eval requests (see the README's
scale notes for what was measured on them).

Usage: python experiments/benchmarks/scale.py [--presets tiny,small,gpt2-small,paper-1.7b] [--ops forward,patching,edges,das]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

OPS = ("forward", "patching", "edges", "das")


def _peak_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def child(preset: str, op: str, pairs: int, tokens: int, das_epochs: int) -> dict:
    import torch

    from analysis.model import HookedFixedIdLM
    from analysis.pairs import PairBatch
    from fixedid import ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset, interface="canonical")
    model = HookedFixedIdLM(cfg).eval()
    size = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers())) / 2**30
    n_params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(0, cfg.vocab_size, (pairs, tokens), generator=g)
    corrupt = clean.clone()
    corrupt[:, tokens // 2] = torch.randint(0, cfg.vocab_size, (pairs,), generator=g)
    batch = PairBatch(clean, corrupt, torch.randint(0, cfg.vocab_size, (pairs,), generator=g),
                      torch.randint(0, cfg.vocab_size, (pairs,), generator=g))

    def forward():
        with torch.no_grad():
            model(clean)

    forward()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        forward()
        times.append(time.perf_counter() - t)
    t_forward = min(times)
    def run(b):
        if op == "patching":
            from analysis.causal.patching import activation_patching

            activation_patching(model, b, site="resid_pre")
        elif op == "edges":
            from analysis.causal.edges import edge_attribution

            edge_attribution(model, b)
        elif op == "das":
            from analysis.causal.das import Streams, fit_subspace
            from analysis.causal.das_data import das_data

            data = das_data(model, "ioi", pairs=b, solved_only=False)
            layer = cfg.n_layers // 2
            fit_subspace(Streams(model, data, [layer]), layer, 4, epochs=das_epochs, batch_size=16)
        elif op != "forward":
            raise SystemExit(f"unknown op {op!r}; use one of {OPS}")

    if op == "forward":
        seconds = t_forward
    else:
        small = PairBatch(clean[:4], corrupt[:4], batch.answer[:4], batch.wrong[:4])
        run(small)  # a warm-up on a part of the batch: first-call costs (imports, autograd set-up) are not the op's
        t = time.perf_counter()
        run(batch)
        seconds = time.perf_counter() - t
    return dict(preset=preset, params_m=n_params / 1e6, op=op, seconds=seconds, x_forward=seconds / t_forward,
                peak_gb=_peak_gb(), model_gb=size)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="tiny,small,gpt2-small,paper-1.7b")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--das-epochs", type=int, default=2)
    p.add_argument("--child", nargs=2, metavar=("PRESET", "OP"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.pairs, args.tokens, args.das_epochs)))
        return
    print(f"random-init canonical models, {args.pairs} pairs x {args.tokens} tokens, one process per measurement")
    print(f"{'preset':>12s} {'params':>8s} {'analysis':>9s} {'seconds':>8s} {'x forward':>9s} {'peak GB':>8s} "
          f"{'model GB':>8s}")
    for preset in args.presets.split(","):
        for op in args.ops.split(","):
            cmd = [sys.executable, __file__, "--child", preset, op, "--pairs", str(args.pairs), "--tokens",
                   str(args.tokens), "--das-epochs", str(args.das_epochs)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                print(f"{preset:>12s} {op:>9s} failed: {out.stderr.strip().splitlines()[-1]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{preset:>12s} {r['params_m']:>7.0f}M {op:>9s} {r['seconds']:>8.2f} {r['x_forward']:>9.1f} "
                  f"{r['peak_gb']:>8.2f} {r['model_gb']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()

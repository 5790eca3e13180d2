"""Crosscoder training: its speed against per-model SAEs of the same width, and its memory as the tokens grow.

1. **Speed** (``--models`` random-init models of ``--shape``, the activations of ``--hook`` collected once): one
   BatchTopK crosscoder over all of them (:func:`analysis.features.crosscoder_train.train_crosscoder`) against one
   TopK SAE per model of the same width and ``k`` (:func:`analysis.features.train.train_on_activations`), trained one
   after the other on the same activations, in ``--rounds`` interleaved rounds. The ratio is the crosscoder's tokens/s
   over the SAEs' (their times summed): target >= 1.0. The anchor is equal work: a crosscoder's encoder and decoder
   are the SAEs' stacked (the same ``models x d x latents`` multiply-adds per token), and it selects its top latents
   once per token, not once per model. The models' bare forward to the hook is timed and printed beside it, so the
   machine's speed is on record (collecting the activations costs both sides the same: each model runs once per
   token either way).
2. **Memory**: :func:`train_crosscoder` streaming from the models over ``--tokens`` and 8x as many, each in a
   process of its own, peak resident memory (``ru_maxrss``) compared: flat when the stream's buffer, not the tokens,
   bounds it (target: within 10%). ``--memory-only --shape paper-1.7b`` is the same check at the study's width.

Usage: python experiments/benchmarks/crosscoder.py                  (CPU, the toy shape, ~2 minutes)
       python experiments/benchmarks/crosscoder.py --memory-only --shape paper-1.7b --models 2 \
           --hook blocks.0.hook_resid_post --tokens 16384 --expansion 4 --batch 256   (CPU, ~15 GB of memory)
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from analysis.features.crosscoder import CrosscoderConfig
from analysis.features.crosscoder_data import ModelSource
from analysis.features.crosscoder_train import train_crosscoder
from analysis.features.dictionary import DictionaryConfig
from analysis.features.stream import model_activations
from analysis.features.train import train_on_activations
from analysis.model import HookedFixedIdLM
from fixedid import ModelConfig
from fixedid.clitools import ArgumentParser

sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine_line  # noqa: E402


class InMemory:
    """Activations already collected ``[tokens, models, d]``, handed out in order."""

    def __init__(self, x: torch.Tensor, batch: int):
        self.x, self.batch_tokens, self.n_tokens = x, batch, x.shape[0]

    def batches(self):
        for i in range(0, self.n_tokens, self.batch_tokens):
            yield self.x[i:i + self.batch_tokens]

    def sample(self, n: int = 16384):
        return self.x[:n]


def models_of(args) -> list:
    """``--models`` random-init models of ``--shape`` (interfaces canonical, gf2, learned, in turn)."""
    kinds = ("canonical", "gf2", "learned")
    out = []
    for i in range(args.models):
        cfg = ModelConfig.preset(args.shape, interface=kinds[i % 3], seed=i)
        out.append(HookedFixedIdLM(cfg).eval())
    return out


def windows_of(model, tokens: int) -> torch.Tensor:
    T = min(128, model.cfg.context)
    return torch.randint(0, model.cfg.vocab_size, (max(1, tokens // T), T), generator=torch.Generator().manual_seed(0))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def speed(args) -> None:
    """Crosscoder against the per-model SAEs, on the same collected activations, ``--rounds`` interleaved."""
    print(machine_line(), flush=True)
    models = models_of(args)
    w = windows_of(models[0], args.tokens)
    with torch.no_grad():
        t_fwd = timed(lambda: [model_activations(m, w, [args.hook]) for m in models])
        x = torch.stack([model_activations(m, w, [args.hook])[0] for m in models], 1)
    d, n = x.shape[-1], x.shape[0]
    L = args.expansion * d
    cfg = CrosscoderConfig(models=tuple(f"m{i}" for i in range(len(models))), d=d, n_latents=L, k=args.k)
    sae = DictionaryConfig(kind="sae", arch="topk", d_in=d, d_sae=L, hook_name=args.hook, k=args.k)
    warm = x[: 8 * args.batch]  # one untimed short run of each first: the first call pays for allocation and dispatch
    train_crosscoder(cfg, InMemory(warm, args.batch), progress=False)
    train_on_activations(sae, warm[:, 0].contiguous(), batch_tokens=args.batch, progress=False)
    cross, saes = [], []
    for r in range(args.rounds):
        cross.append(timed(lambda: train_crosscoder(cfg, InMemory(x, args.batch), seed=r, progress=False)))
        saes.append(timed(lambda: [train_on_activations(sae, x[:, i].contiguous(), batch_tokens=args.batch, seed=r,
                                                        progress=False) for i in range(len(models))]))
    ratios = [s / c for c, s in zip(cross, saes)]
    print(f"{args.shape} {args.hook}, {len(models)} models, d {d}, {L} latents, k {args.k}, {n:,} tokens, batch "
          f"{args.batch}; bare forward of the models to the hook: {len(models) * n / t_fwd:,.0f} tokens/s")
    print(f"  crosscoder {n / statistics.median(cross):,.0f} tokens/s; {len(models)} SAEs one after the other "
          f"{n / statistics.median(saes):,.0f} tokens/s")
    print(f"crosscoder / SAEs (tokens/s): {statistics.median(ratios):.3f} (rounds "
          f"{', '.join(f'{v:.3f}' for v in ratios)}; target >= 1.0; the multiply-adds alone give ~1.0, the crosscoder "
          "selects its latents once per token, the SAEs once per model)")


def memory_child(args) -> None:
    """One streamed training in this process; prints the peak resident memory in GiB."""
    models = models_of(args)
    start = time.perf_counter()
    source = ModelSource({f"m{i}": m for i, m in enumerate(models)}, args.hook, windows_of(models[0], args.tokens),
                         batch_tokens=args.batch, model_batch=4)
    d = models[0].cfg.d_model
    cfg = CrosscoderConfig(models=tuple(source.models), d=d, n_latents=args.expansion * d, k=args.k)
    train_crosscoder(cfg, source, progress=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{peak:.3f} {time.perf_counter() - start:.0f}")


def memory(args, argv) -> None:
    """Peak resident memory of a streamed training over ``--tokens`` and 8x as many, each in a fresh process."""
    peaks = []
    for scale in (1, 8):
        tokens = args.tokens * scale
        cmd = [sys.executable, __file__, *argv, "--tokens", str(tokens), "--child"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        peak, seconds = done.stdout.split()[-2:]
        peaks.append(float(peak))
        print(f"  {args.shape} {args.hook}, {args.models} models, {tokens:,} tokens: peak resident {peak} GiB "
              f"({seconds} s)")
    d = models_of(args)[0].cfg.d_model
    held = 8 * args.tokens * args.models * d * 4 / 2**30
    print(f"peak memory at 8x the tokens / at 1x: {peaks[1] / peaks[0]:.3f} (target within 10%); difference "
          f"{peaks[1] - peaks[0]:+.2f} GiB, against {held:.2f} GiB for the 8x run's activations held at once")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = ArgumentParser(prog="crosscoder.py", description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="toy", help="a ModelConfig preset (default toy)")
    p.add_argument("--models", type=int, default=3, help="models the crosscoder reads (default 3)")
    p.add_argument("--hook", default="blocks.0.hook_resid_post", help="the hook read")
    p.add_argument("--tokens", type=int, default=65_536, help="tokens (the memory check runs 1x and 8x)")
    p.add_argument("--expansion", type=int, default=8, help="latents per dimension (default 8)")
    p.add_argument("--k", type=int, default=32, help="active latents per token (default 32)")
    p.add_argument("--batch", type=int, default=1024, help="tokens per step (default 1024)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the speed comparison (default 3)")
    p.add_argument("--memory-only", action="store_true", help="only the memory check")
    p.add_argument("--child", action="store_true", help=argparse_hidden())
    args = p.parse_args(argv)
    if args.models < 2 or args.tokens < args.batch:
        p.error("give --models >= 2 and --tokens of at least one --batch")
    if args.child:
        return memory_child(args)
    if not args.memory_only:
        speed(args)
    clean = [a for a in argv if a not in ("--memory-only",)]
    clean = [a for i, a in enumerate(clean) if a != "--tokens" and (i == 0 or clean[i - 1] != "--tokens")]
    memory(args, clean)


def argparse_hidden():
    """The help of an option only the benchmark passes to its own child processes."""
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()

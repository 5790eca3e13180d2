"""Sparse-dictionary training: the toolkit's trainer against a bare eai-sparsify loop on the same activations, and
its memory as the training tokens grow (bounded by the stream's buffer, not by the tokens).

1. **Throughput** (TopK SAE, ``--expansion`` x d_model latents, ``k``): the activations of ``--hook`` of a
   random-init model of ``--shape`` are collected once; then, side by side over the same shuffled batches,
   (a) the toolkit (:func:`analysis.features.train.train_on_activations`: eai-sparsify's SparseCoder, Adam, the
   decoder kept at unit norm, dead-latent tracking with AuxK, history logging) and (b) the bare loop a user of
   eai-sparsify writes (its SparseCoder forward with the dead mask, backward, parallel-gradient removal, Adam,
   renormalisation), in ``--rounds`` interleaved rounds; the ratio is (a)/(b) in tokens/s (target >= 1.0, i.e. "at
   least eai-sparsify's"). The natives (batchtopk, jumprelu, relu) are timed beside them for reference. The bound:
   a step is three matrix products of ``tokens x d_model x d_sae`` (encoder forward and its two gradients) plus the
   sparse decoder's, so its FLOPs are about ``6 * tokens * d_model * d_sae``; the printed GFLOP/s puts each loop
   against the device's matrix-product rate.
2. **Memory**: :func:`analysis.features.train.train_dictionary` from the model itself over ``--tokens`` and 4x as
   many; on a GPU the peak of allocated GPU memory of both (the same up to the allocator's rounding when the stream's
   buffer, not the token count, bounds it) and the model's weights for scale. ``--memory-only`` on the CPU runs each
   in a process of its own and compares their peak resident memory (``ru_maxrss``) beside the activations the 4x run
   would hold if it kept them all: the bounded-memory check at a shape (the paper's 1.7B) no GPU is needed for.

Usage: python experiments/benchmarks/sae.py                         (CPU, the tiny shape, ~1 minute)
       python experiments/benchmarks/sae.py --memory-only --shape paper-1.7b --hook blocks.0.hook_resid_post \
           --tokens 32768 --expansion 4 --batch 256                    (CPU, ~8 minutes, ~9 GB of memory)
       python experiments/benchmarks/sae.py --device cuda --shape paper-1.7b --hook blocks.12.hook_resid_post
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from analysis.features.dictionary import DictionaryConfig, sparsify
from analysis.features.stream import model_activations
from analysis.features.train import default_lr, train_dictionary, train_on_activations
from analysis.model import HookedFixedIdLM
from fixedid import ModelConfig
from fixedid.clitools import ArgumentParser

sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine_line  # noqa: E402


def argparse_hidden():
    """The help of an option only the benchmark passes to its own child processes."""
    import argparse

    return argparse.SUPPRESS


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_sparsify(acts: torch.Tensor, d_sae: int, k: int, batch: int, seed: int) -> float:
    """Seconds of the bare eai-sparsify loop over ``acts`` (shuffled as the toolkit shuffles them)."""
    sp = sparsify()
    torch.manual_seed(seed)
    coder = sp.SparseCoder(acts.shape[1], sp.SparseCoderConfig(num_latents=d_sae, k=k), device=acts.device)
    opt = torch.optim.Adam(coder.parameters(), lr=default_lr(d_sae))
    perm = torch.randperm(acts.shape[0], generator=torch.Generator().manual_seed(seed)).to(acts.device)
    since = torch.zeros(d_sae, dtype=torch.long, device=acts.device)
    dead_after = max(batch, acts.shape[0] // 10)
    sync(acts.device)
    t = time.perf_counter()
    for i in range(0, acts.shape[0], batch):
        x = acts[perm[i:i + batch]]
        out = coder(x, dead_mask=since >= dead_after)
        loss = out.fvu + out.auxk_loss / 32
        opt.zero_grad(set_to_none=True)
        loss.backward()
        coder.remove_gradient_parallel_to_decoder_directions()
        opt.step()
        coder.set_decoder_norm_to_unit_norm()
        since += x.shape[0]
        since[out.latent_indices.flatten()] = 0
    sync(acts.device)
    return time.perf_counter() - t


def toolkit(acts, cfg, batch, seed) -> float:
    sync(acts.device)
    t = time.perf_counter()
    train_on_activations(cfg, acts, batch_tokens=batch, seed=seed, progress=False)
    sync(acts.device)
    return time.perf_counter() - t


def memory(model, args, d: int, d_sae: int, T: int, device) -> None:
    """Peak GPU memory of training from the model over ``--tokens`` and 4x as many (bounded: the same)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
    cfg = DictionaryConfig(kind="sae", arch="topk", d_in=d, d_sae=d_sae, k=args.k, hook_name=args.hook)
    peaks = []
    for n in (args.tokens, 4 * args.tokens):
        w = torch.randint(0, model.cfg.vocab_size, (max(1, n // T), T))
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        t = time.perf_counter()
        train_dictionary(model, cfg, w, batch_tokens=args.batch, model_batch=4, progress=False)
        sync(device)
        peaks.append(torch.cuda.max_memory_allocated(device) / 2**30)
        print(f"  train_dictionary from the model, {w.numel():,} tokens: peak {peaks[-1]:.2f} GiB allocated "
              f"(weights {weights:.2f} GiB), {w.numel() / (time.perf_counter() - t):,.0f} tok/s incl. forwards",
              flush=True)
    print(f"peak memory at 4x the tokens / at 1x: {peaks[1] / peaks[0]:.3f} (bounded: ~1.0)")


def memory_child(args) -> None:
    """One training from a random-init model of ``--shape`` over ``--child-tokens`` tokens; prints the process's peak
    resident memory in GiB (the parent compares two of these)."""
    torch.manual_seed(0)
    model = HookedFixedIdLM(ModelConfig.preset(args.shape, interface="canonical")).eval()
    T = min(model.cfg.context, 512)
    d = model.cfg.d_model
    cfg = DictionaryConfig(kind="sae", arch="topk", d_in=d, d_sae=args.expansion * d, k=args.k, hook_name=args.hook)
    w = torch.randint(0, model.cfg.vocab_size, (max(1, args.child_tokens // T), T))
    t = time.perf_counter()
    train_dictionary(model, cfg, w, batch_tokens=args.batch, model_batch=4, progress=False)
    print(f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.3f} {w.numel()} "
          f"{time.perf_counter() - t:.1f}")


def memory_cpu(args, argv) -> None:
    """Peak resident memory of a training over ``--tokens`` and over 4x as many, each in a fresh process."""
    peaks = []
    for n in (args.tokens, 4 * args.tokens):
        out = subprocess.run([sys.executable, __file__, *argv, "--child-tokens", str(n)], check=True,
                             capture_output=True, text=True).stdout.split()
        peak, tokens, secs = float(out[-3]), int(out[-2]), float(out[-1])
        peaks.append(peak)
        print(f"  {args.shape} {args.hook}, {tokens:,} tokens: peak resident {peak:.2f} GiB ({secs:.0f} s)",
              flush=True)
    d = ModelConfig.preset(args.shape).d_model
    held = 4 * args.tokens * d * 4 / 2**30
    print(f"peak memory at 4x the tokens / at 1x: {peaks[1] / peaks[0]:.3f} (bounded: ~1.0); difference "
          f"{peaks[1] - peaks[0]:+.2f} GiB, against {held:.2f} GiB for the 4x run's activations held at once")


def main(argv=None) -> None:
    p = ArgumentParser(prog="sae.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--shape", default="tiny")
    p.add_argument("--hook", default="blocks.1.hook_resid_post")
    p.add_argument("--tokens", type=int, default=65_536, help="activations timed per loop (default 65536)")
    p.add_argument("--expansion", type=int, default=8)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--batch", type=int, default=1024, help="tokens per step (default 1024)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--memory-only", action="store_true", help="only the memory part (on the CPU: peak resident "
                   "memory of two trainings, each in its own process)")
    p.add_argument("--child-tokens", type=int, help=argparse_hidden())
    raw = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(raw)
    if args.child_tokens:
        return memory_child(args)
    if args.memory_only and args.device == "cpu":
        return memory_cpu(args, raw)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device here")
    if not args.memory_only:
        print(machine_line(), flush=True)
    torch.manual_seed(0)
    model = HookedFixedIdLM(ModelConfig.preset(args.shape, interface="canonical")).to(device).eval()
    T = min(model.cfg.context, 512)
    if args.memory_only:
        return memory(model, args, model.cfg.d_model, args.expansion * model.cfg.d_model, T, device)
    windows = torch.randint(0, model.cfg.vocab_size, (max(1, args.tokens // T), T))
    acts = torch.cat([model_activations(model, windows[i:i + 4], [args.hook])[0] for i in range(0, len(windows), 4)])
    d = acts.shape[1]
    d_sae = args.expansion * d
    print(f"{args.shape} {args.hook}: {acts.shape[0]:,} activations of width {d}; {d_sae} latents, k {args.k}, "
          f"{args.batch} tokens a step, {device}", flush=True)
    flops = 6 * acts.shape[0] * d * d_sae
    warm = acts[:4 * args.batch]  # first-call costs (allocator, kernels) are nobody's throughput
    bare_sparsify(warm, d_sae, args.k, args.batch, 0)
    for arch in ("topk", "batchtopk", "jumprelu"):
        toolkit(warm, DictionaryConfig(kind="sae", arch=arch, d_in=d, d_sae=d_sae, k=args.k, hook_name=args.hook),
                args.batch, 0)
    times = {"toolkit topk": [], "bare sparsify topk": [], "toolkit batchtopk": [], "toolkit jumprelu": []}
    for r in range(args.rounds):
        for name in times:
            arch = name.split()[-1]
            if name.startswith("bare"):
                times[name].append(bare_sparsify(acts, d_sae, args.k, args.batch, r))
            else:
                cfg = DictionaryConfig(kind="sae", arch=arch, d_in=d, d_sae=d_sae, k=args.k, hook_name=args.hook)
                times[name].append(toolkit(acts, cfg, args.batch, r))
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, s in med.items():
        print(f"  {name:>20s}: {acts.shape[0] / s:>12,.0f} tok/s  ({flops / s / 1e9:,.1f} GFLOP/s of the dense "
              f"encoder bound; rounds {', '.join(f'{acts.shape[0] / v:,.0f}' for v in times[name])})")
    ratios = [b / a for a, b in zip(times["toolkit topk"], times["bare sparsify topk"])]
    print(f"toolkit / bare eai-sparsify (TopK, same activations): {statistics.median(ratios):.3f} "
          f"(rounds {', '.join(f'{x:.3f}' for x in ratios)}; target >= 1.0)")
    if device.type == "cuda":
        memory(model, args, d, d_sae, T, device)

if __name__ == "__main__":
    main()

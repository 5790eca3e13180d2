"""The GPU path, measured in one command: training throughput and MFU, and analyses as multiples of a forward.

For each model shape (default ``small`` and ``gpt2-small``, the canonical interface, random tokens of the shape's
vocabulary: throughput does not depend on the words):

* **trainer**: :func:`fixedid.train.loop.train_variant`, the trainer itself (its data sampling, learning-rate
  schedule, clipping, logging; bf16 autocast and ``torch.compile`` by default), ``--warmup + --steps`` steps; its
  steady-state tokens/s over the last ``--steps`` (from its own ``timing.jsonl``, measured between logged steps,
  where it reads the losses back) and, beside it, over the whole call (compilation, the final evaluation and the
  checkpoint included);
* **bare**: a bare torch loop of the same model, batch, fused AdamW, clipping, autocast and compilation, batches
  sampled beforehand and already on the device, timed over the same last ``--steps`` between two synchronisations;
* **MFU**: tokens/s x the model's training FLOPs per token (6 N for the matmul parameters plus the attention terms,
  nanoGPT's count; :func:`fixedid.train.loop.flops_per_token`) over the device's dense bf16 peak (H100/H200:
  989 TFLOP/s). Our targets: MFU >= 40% on the gpt2-small shape, trainer/bare >= 0.97.

Then, on the last shape (default gpt2-small, random-init canonical, float32, eval mode): a resid_pre patching sweep
(``--pairs`` x ``--tokens``), edge attribution (EAP), and collecting the middle layer over ``--probe-tokens`` tokens
plus fitting the canonical-bit probes, each as a multiple of one plain no-grad forward of the same tokens
(``experiments/benchmarks/scale.py``'s analyses, the device synchronised around every timing).

Usage (on a GPU machine, about 3-6 minutes): python experiments/benchmarks/gpu.py
      a CPU smoke run:                       python experiments/benchmarks/gpu.py --device cpu --shapes toy --steps 4
                                               --warmup 2 --dtype fp32 --no-compile --probe-tokens 512
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from scale import _analysis, _forward_seconds, _random_pairs  # noqa: E402

from fixedid import FixedIdLM  # noqa: E402
from fixedid.atomic import write_text_atomic  # noqa: E402
from fixedid.clitools import ArgumentParser  # noqa: E402
from fixedid.config import PRESETS  # noqa: E402
from fixedid.errors import FixedIdWarning  # noqa: E402
from fixedid.data import batch_at  # noqa: E402
from fixedid.data.shards import TokenShards, build_shards  # noqa: E402
from fixedid.train.config import TrainConfig  # noqa: E402
from fixedid.train.distributed import Dist  # noqa: E402
from fixedid.train.loop import PEAK_BF16_FLOPS, autocast_ctx, flops_per_token, train_variant  # noqa: E402
from fixedid.train.optim import make_optimizer  # noqa: E402
from fixedid.train.prepare import PreparedData  # noqa: E402

#: sequences per step for each shape (one micro-batch: no accumulation), as the packaged configs and nanoGPT use
BATCH = {"tiny": 16, "small": 64, "gpt2-small": 32, "prior-1024": 16, "paper-1.7b": 4}
#: (paper-1.7b: 4 x 2048 tokens a step keeps the weights, fp32 AdamW state and activations inside an 80 GB H100
#: without activation checkpointing; its matrix products are already large enough to saturate the GPU)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_data(vocab: int, n_tokens: int, work: Path) -> PreparedData:
    """Uniformly random tokens of a ``vocab``-word word-level tokenizer, as the trainer's prepared data."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    words = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, vocab)}}
    tok = Tokenizer(WordLevel(words, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = WhitespaceSplit()
    rng = np.random.default_rng(0)
    out = work / "data"
    for split, n in (("train", n_tokens), ("validation", max(4096, n_tokens // 20))):
        docs = (" ".join(f"w{i}" for i in rng.integers(1, vocab, 4096)) for _ in range(n // 4096 + 2))
        build_shards(docs, tok, out, source="random", split=split, max_tokens=n)
    return PreparedData(tok, TokenShards(out, "train"), TokenShards(out, "validation"), unigram_loss=float(np.log(vocab)))


def config(shape: str, args) -> TrainConfig:
    total = args.warmup + args.steps
    batch = args.batch or BATCH.get(shape, 16)
    return TrainConfig.from_dict({
        "model": {"preset": shape},
        "data": {"source": "synthetic"},  # not read: the data are built by random_data
        "train": {"steps": total, "batch_size": batch, "micro_batch_size": batch,
                  "lr": 1e-3, "warmup_steps": 0, "dtype": args.dtype, "compile": args.compile,
                  "log_every": args.log_every, "eval_every": total, "eval_batches": 2, "save_every": total}})


def trainer_rates(cfg: TrainConfig, data: PreparedData, work: Path, device: torch.device, warmup: int) -> dict:
    """The trainer's steady-state tokens/s over the steps after ``warmup`` (its timing log) and over the whole
    call."""
    out = Path(tempfile.mkdtemp(dir=work))
    t0 = time.perf_counter()
    summary = train_variant(cfg, "canonical", out, data, Dist(device=device), resume=False, quiet=True)
    whole = cfg.train.steps * cfg.train.batch_size * cfg.model_config("canonical", 2).context
    whole /= time.perf_counter() - t0
    rows = [json.loads(line) for line in (out / "canonical" / "timing.jsonl").read_text().splitlines()]
    tokens_per_log = cfg.train.batch_size * cfg.model_config("canonical", 2).context * cfg.train.log_every
    steady = [r["tok_per_s"] for r in rows if r["step"] > warmup]
    seconds = sum(tokens_per_log / r for r in steady)  # each entry covers log_every steps
    return {"steady": len(steady) * tokens_per_log / seconds, "whole": whole, "loss": summary["loss"]}


def bare_rate(cfg: TrainConfig, data: PreparedData, device: torch.device, warmup: int) -> float:
    """Tokens/s of a bare loop of the same model and recipe over the steps after ``warmup``."""
    t = cfg.train
    vocab = data.tokenizer.get_vocab_size(with_added_tokens=True)
    raw = FixedIdLM(cfg.model_config("canonical", vocab)).to(device).train()
    opt = make_optimizer(raw, t)
    model = torch.compile(raw) if t.compile else raw
    ctx = raw.cfg.context
    batches = [tuple(b.to(device) for b in batch_at(data.train, s, t.batch_size, ctx, seed=t.seed))
               for s in range(t.steps)]
    for i, (x, y) in enumerate(batches):
        if i == warmup:
            sync(device)
            t0 = time.perf_counter()
        with autocast_ctx(t.dtype, device):
            loss = model(x, return_type="loss", targets=y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(raw.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync(device)
    return (t.steps - warmup) * t.batch_size * ctx / (time.perf_counter() - t0)


def peak_flops(device: torch.device) -> tuple[str, float | None]:
    if device.type != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name(device)
    return name, next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def training(shapes: list[str], args, device: torch.device, work: Path) -> list[dict]:
    name, peak = peak_flops(device)
    rows = []
    for shape in shapes:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        cfg = config(shape, args)
        vocab = PRESETS[shape]["vocab_size"]
        per_step = cfg.train.batch_size * PRESETS[shape]["context"]
        data = random_data(vocab, max(1 << 20, 4 * per_step), work / shape)
        try:
            tr = trainer_rates(cfg, data, work / shape, device, args.warmup)
            gc.collect()
            bare = bare_rate(cfg, data, device, args.warmup)
        except torch.OutOfMemoryError:
            print(f"{shape:>11s}: out of device memory at batch {cfg.train.batch_size}; skipped", flush=True)
            continue
        fpt = flops_per_token(FixedIdLM(cfg.model_config("canonical", vocab), init=False))
        row = dict(shape=shape, batch=f"{cfg.train.batch_size}x{PRESETS[shape]['context']}", trainer_tok_s=tr["steady"],
                   bare_tok_s=bare, trainer_over_bare=tr["steady"] / bare, trainer_whole_call_tok_s=tr["whole"],
                   gflop_per_token=fpt / 1e9, loss=tr["loss"],
                   peak_memory_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None)
        if peak:
            row.update(mfu_trainer=tr["steady"] * fpt / peak, mfu_bare=bare * fpt / peak)
        rows.append(row)
        mfu = (f"MFU trainer {row['mfu_trainer']:.1%}, bare {row['mfu_bare']:.1%} of {peak / 1e12:.0f} TFLOP/s"
               if peak else "MFU n/a (no known peak for this device)")
        print(f"{shape:>11s} {row['batch']:>8s}: trainer {tr['steady']:>11,.0f} tok/s, bare {bare:>11,.0f} tok/s, "
              f"trainer/bare {row['trainer_over_bare']:.3f}; {mfu}; whole trainer call (compile, eval, save) "
              f"{tr['whole']:,.0f} tok/s" + (f"; peak memory {row['peak_memory_gib']:.1f} GiB" if row["peak_memory_gib"]
                                               else ""), flush=True)
    return rows


def analyses(shape: str, args, device: torch.device) -> list[dict]:
    from analysis.model import HookedFixedIdLM
    from analysis.pairs import PairBatch
    from fixedid import ModelConfig

    torch.manual_seed(0)
    model = HookedFixedIdLM(ModelConfig.preset(shape, interface="canonical")).to(device).eval()
    batch = _random_pairs(model.cfg, args.pairs, args.tokens).to(device)
    per_token = _forward_seconds(model, batch.clean) / batch.clean.numel()
    small = PairBatch(batch.clean[:4], batch.corrupt[:4], batch.answer[:4], batch.wrong[:4])
    rows = []
    for op in ("patching", "edges", "probes"):
        _analysis(op, model, small, 4, 1)  # warm-up: first-call costs are not the analysis's
        sync(device)
        t = time.perf_counter()
        n = _analysis(op, model, batch, max(1, args.probe_tokens // args.tokens), 1)
        sync(device)
        seconds = time.perf_counter() - t
        rows.append(dict(shape=shape, analysis=op, seconds=seconds, tokens=n, x_forward=seconds / (per_token * n)))
        print(f"{shape:>11s} {op:>9s}: {seconds:8.3f} s over {n:,} tokens, {rows[-1]['x_forward']:6.1f} x a plain "
              "forward", flush=True)
    return rows


def main(argv=None) -> None:
    p = ArgumentParser(prog="gpu.py", description=__doc__.split("\n\n")[0])  # bad input: one line, exit 2
    p.add_argument("--shapes", default="small,gpt2-small")
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=40, help="steps timed (after --warmup)")
    p.add_argument("--warmup", type=int, default=20, help="steps first (compilation, allocator warm-up)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--batch", type=int, help="sequences per step for every shape (default: each shape's own, BATCH)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--probe-tokens", type=int, default=16_384)
    p.add_argument("--json", help="also write every row to this JSON file")
    args = p.parse_args(argv)
    shapes = args.shapes.split(",")
    unknown = [s for s in shapes if s not in PRESETS]
    if unknown:
        p.error(f"unknown shape(s) {unknown}; use presets from {', '.join(PRESETS)}")
    if args.batch is not None and args.batch < 1:
        p.error(f"--batch must be positive, got {args.batch}")
    if args.log_every < 1:
        p.error(f"--log-every must be positive, got {args.log_every}")
    if args.steps < 1 or args.steps % args.log_every or args.warmup % args.log_every:
        p.error(f"--steps ({args.steps}, positive) and --warmup ({args.warmup}) must be multiples of --log-every "
                f"({args.log_every})")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device here; pass --device cpu for a smoke run")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    warnings.simplefilter("ignore", FixedIdWarning)  # small vocabularies leave code bits constant: not timed here
    name, peak = peak_flops(device)
    print(f"torch {torch.__version__}, device {name}, {args.dtype}, compile {args.compile}; {args.warmup} warm-up + "
          f"{args.steps} timed steps per loop", flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        train_rows = training(shapes, args, device, Path(work))
    analysis_rows = analyses(shapes[-1], args, device)
    print(f"total {time.perf_counter() - t0:.0f} s", flush=True)
    if args.json:
        write_text_atomic(Path(args.json), json.dumps({"device": name, "training": train_rows,
                                                        "analyses": analysis_rows}, indent=1))
    med = statistics.median(r["trainer_over_bare"] for r in train_rows)
    print(f"trainer/bare (median over shapes): {med:.3f}  (target >= 0.97)")


if __name__ == "__main__":
    main()

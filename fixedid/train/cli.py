"""``fixedid-train`` (also ``torchrun -m fixedid.train``): arguments, the parameter accounting of ``--dry-run``,
and one line per variant at the end."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from ..clitools import ArgumentParser, run_main
from ..config import PRESETS, VARIANTS, trainable_params
from ..errors import ConfigError, DataError
from ..model import FixedIdLM
from .config import TrainConfig, preset_of
from .loop import train
from .prepare import vocab_size_of
from ..version import __version__

EXAMPLES = """
  fixedid-train --config tiny --out runs/tiny --dry-run      # the parameter accounting and token budget
  fixedid-train --config tiny --out runs/tiny                # learned, canonical and gf2, ~2-3 min each on 2 cores
  fixedid-train --config tiny --out runs/tiny --variants permuted,canonical-matched --seed 1
  torchrun --standalone --nproc_per_node=8 -m fixedid.train --config small --out runs/small
"""


def format_summary(s: dict) -> str:
    """One line of the run summary for a variant (steps, parameters, losses against the unigram baseline, speed)."""
    if not s["trained_steps"]:
        return f"{s['variant']}: already trained to step {s['steps']}"
    mfu = f", MFU {100 * s['mfu']:.1f}%" if "mfu" in s else ""
    return (f"{s['variant']}: {s['steps']} steps, {s['params']:,} trainable params, train loss {s['loss']:.3f}, "
            f"val loss {s['val_loss']:.3f} (unigram baseline {s['unigram_loss']:.3f}), "
            f"{s['tok_per_s']:,.0f} tok/s{mfu}")


def parse_args(argv=None) -> argparse.Namespace:
    """The parsed command line (usage errors exit 2 with one line)."""
    p = build_parser()
    return p.parse_args(argv)


def build_parser() -> ArgumentParser:
    """``fixedid-train``'s arguments (the CLI reference is generated from them)."""
    p = ArgumentParser(prog="fixedid-train", description="Train backbone-matched fixed-code LM variants.",
                       epilog="examples:\n" + EXAMPLES.strip("\n"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--config", required=True, help="TOML training config (see experiments/configs/), a packaged "
                   "config's name, or a run directory's run.json")
    p.add_argument("--variants", default="learned,canonical,gf2", help="comma-separated subset of " +
                   ",".join(VARIANTS) + " (-matched: the learned input table's parameters given to the backbone)")
    p.add_argument("--out", required=True, help="run directory; each variant lands in OUT/<variant>/")
    p.add_argument("--steps", type=int, help="override [train] steps")
    p.add_argument("--save-every", type=int, help="override [train] save_every")
    p.add_argument("--seed", type=int, help="override [train] seed")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint of each variant")
    p.add_argument("--dry-run", action="store_true", help="print the parameter accounting and token budget, exit")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N (under torchrun "
                   "each rank takes the GPU of its LOCAL_RANK)")
    p.add_argument("--jobs", default="1", help="train up to N variants at once on the CPU, each in a process of its "
                   "own with an equal share of the cores (the same weights; on 2 cores no faster for the tiny "
                   "recipe, see the training guide); 'auto': all of them on a CPU with >= 2 cores, else 1 "
                   "(default 1: one after another)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def parse_jobs(value: str, n_variants: int, device: str) -> int:
    """The number of variants trained at once from ``--jobs`` (an integer or ``auto``), checked against the device."""
    from .parallel import default_jobs

    if value == "auto":
        return default_jobs(n_variants, device)
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise ConfigError(f"--jobs {value!r} must be a positive integer or 'auto'")
    return jobs


def load_run_config(args) -> tuple[TrainConfig, list[str]]:
    """The training config of ``--config`` with the command line's overrides, and the variants of ``--variants``."""
    cfg = TrainConfig.load(args.config)
    overrides = {k: v for k, v in (("steps", args.steps), ("save_every", args.save_every), ("seed", args.seed))
                 if v is not None}
    if overrides:
        cfg = cfg.replace_train(**overrides)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants or len(set(variants)) != len(variants):
        raise ConfigError(f"--variants {args.variants!r} must list distinct names from {list(VARIANTS)}")
    return cfg, variants


def dry_run(cfg: TrainConfig, variants: list[str]) -> None:
    """Print the parameter accounting of each variant and the token budget, without training."""
    try:
        vocab = vocab_size_of(cfg.data)
    except DataError as e:
        preset = preset_of(cfg.model)
        vocab = PRESETS[preset]["vocab_size"]
        print(f"(the tokenizer cannot be loaded here, so the {preset} preset's vocab_size {vocab:,} is used: {e})")
    t = cfg.train
    learned = trainable_params(cfg.model_config("learned", vocab))
    for v in variants:
        with torch.device("meta"):
            m = FixedIdLM(cfg.model_config(v, vocab))
        c = m.param_counts()
        print(f"{v:>9}: " + ", ".join(f"{k} {n:,}" for k, n in c.items()))
        if m.cfg.matched_from is not None and m.cfg.is_fixed:
            what = ("d_ff {d_ff} -> " + str(m.cfg.d_ff) if m.cfg.match_params == "width" else
                    "n_layers {n_layers} -> " + str(m.cfg.n_layers)).format(**m.cfg.matched_from)
            print(f"{'':>9}  matched by {m.cfg.match_params} ({what}): trainable {c['trainable']:,} against the "
                  f"learned variant's {learned:,} ({(c['trainable'] - learned) / learned:+.3%})")
    tokens = t.steps * t.batch_size * m.cfg.context
    print(f"token budget: {t.steps:,} steps x {t.batch_size} sequences x {m.cfg.context} tokens = {tokens:,} "
          f"tokens per variant ({tokens / c['trainable']:.2f} tokens per trainable parameter of {v})")
    constant = f", constant to step {t.decay_begin:,}" if t.decay_start else ""
    print(f"schedule: warm-up {t.warmup:,} steps{constant}, cosine to {t.lr * t.min_lr_ratio:g} at step "
          f"{t.decay_end:,}; snapshots at {t.snapshot_steps or 'none'}")


def run(args) -> int:
    """Train (or with ``--dry-run`` account for) the variants; returns the exit status."""
    cfg, variants = load_run_config(args)
    jobs = parse_jobs(args.jobs, len(variants), args.device)
    if args.dry_run:
        dry_run(cfg, variants)
        return 0
    summaries = train(cfg, args.out, variants, resume=args.resume, quiet=args.quiet, device=args.device,
                      jobs=jobs)
    if not dist.is_initialized() or dist.get_rank() == 0:
        for s in summaries:
            print(format_summary(s))
    return 0


def main(argv=None) -> None:
    """The ``fixedid-train`` entry point (also ``torchrun -m fixedid.train``)."""
    args = parse_args(argv)
    run_main("fixedid-train", lambda: run(args),
             cleanup=lambda: dist.destroy_process_group() if dist.is_initialized() else None)

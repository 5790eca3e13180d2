"""``fixedid-analyze probes``: linear probes across depth with their controls, for one or several checkpoints.

    fixedid-analyze probes --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2 --targets canonical_bits,xor,token

Writes ``probes.csv`` (one row per variant x hook point x target: score, majority baseline, control task,
selectivity, shuffled labels, random-init model), ``probes.png``/``.pdf`` (score against depth per target group,
variants side by side on the same axes, with the control-task and random-init curves),
``probes_selectivity.png``/``.pdf`` (selectivity against depth per target group) and, with XOR targets,
``probes_xor.png``/``.pdf`` (the XOR probes by GF(2) weight).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .cli_interventions import checkpoint_dirs, stacked
from .errors import AnalysisError

DEFAULT_TARGETS = "canonical_bits,xor,token,prev_token,position"
LABELS = "pos_tag,number,depth,ioi_role,fact_entity"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat to compare variants")
    p.add_argument("--targets", help=f"comma-separated target families (default {DEFAULT_TARGETS}, plus the latent "
                   f"labels {LABELS} without --data; also code_bits, freq_bucket)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens to probe on (default 16384)")
    p.add_argument("--top-k", type=int, default=32, help="token-identity probes: the K most frequent tokens")
    p.add_argument("--xor-pairs", type=int, default=8, help="random pairs of canonical bits to XOR (default 8)")
    p.add_argument("--C", type=float, default=1.0, help="inverse L2 strength of the logistic probes (default 1)")
    p.add_argument("--no-random-init", action="store_true", help="skip the random-init baseline")
    p.add_argument("--seed", type=int, default=0, help="seed of the split, the controls and the XOR pairs")
    p.add_argument("--out", help="output directory (default: analysis-out/probes)")


def run(args) -> int:
    import torch

    from .activations import collect
    from .figures import save_figure, write_csv
    from .model import load
    from .figures_probes import probe_figure, selectivity_figure, target_group, xor_figure
    from .probes import TARGET_FAMILIES, probe_table
    from .similarity import random_init_twin

    text = args.targets or (DEFAULT_TARGETS + ("," + LABELS if args.data is None else ""))
    families = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in families if f not in TARGET_FAMILIES]
    if unknown or not families:
        raise AnalysisError(f"unknown probe target(s) {unknown or '(none)'}; use {', '.join(TARGET_FAMILIES)}")
    if args.top_k < 2 or args.xor_pairs < 0 or not args.C > 0:
        raise AnalysisError("--top-k must be >= 2, --xor-pairs >= 0 and --C > 0")
    paths = checkpoint_dirs(args.ckpt)
    models = {p.name: load(p) for p in paths}
    if "code_bits" in families and any(not m.cfg.has_code for m in models.values()):
        raise AnalysisError("code_bits targets need models that read an n-bit code; drop the learned (or "
                            "frozen_random) checkpoint or the target")
    frames = []
    for name, model in models.items():
        acts = collect(model, args.data, tokens=args.tokens, progress=True)  # the latent labels without --data
        x = torch.tensor(acts.tokens["id"].to_numpy()).view(acts.meta["n_sequences"], acts.meta["seq_len"])
        base = None if args.no_random_init else collect(random_init_twin(model), x)
        df = probe_table(acts, families, baseline=base, top_k=args.top_k, xor_pairs=args.xor_pairs, C=args.C,
                         seed=args.seed, progress=True)
        frames.append(df.assign(variant=name))
    df = stacked(frames)
    out = Path(args.out) if args.out else Path("analysis-out") / "probes"
    write_csv(df, out / "probes.csv")
    save_figure(probe_figure(df), out, "probes")
    save_figure(selectivity_figure(df), out, "probes_selectivity")
    if df.target.str.startswith("xor:").any():
        save_figure(xor_figure(df), out, "probes_xor")
    print(f"linear probes over {frames[0].attrs['n_tokens']:,} tokens (test: {frames[0].attrs['n_test']:,}, whole "
          "sequences); mean test score per target group, first / last hook point (control task in brackets):")
    for (variant, group), g in df.assign(group=df.target.map(target_group)).groupby(["variant", "group"],
                                                                                      sort=False):
        g = g[g.status == "fitted"]
        if g.empty:
            continue
        first, last = g[g.depth == g.depth.min()], g[g.depth == g.depth.max()]
        print(f"  {variant} {group}: {first.score.mean():.2f} ({first.control.mean():.2f}) -> "
              f"{last.score.mean():.2f} ({last.control.mean():.2f})")
    print(f"wrote {out / 'probes.csv'}, {out / 'probes.png'} and {out / 'probes_selectivity.png'} (+ .pdf)")
    return 0


def add_erasure_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat to compare variants")
    p.add_argument("--concept", required=True, help="what to erase: canonical_bit:I, code_bit:J, xor:I,K, token, "
                   "prev_token or freq_bucket")
    p.add_argument("--hook", default="blocks.1.hook_resid_pre", help="the hook point erased (default "
                   "blocks.1.hook_resid_pre)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="tokens to fit and measure on (default 16384)")
    p.add_argument("--draws", type=int, default=3, help="placebo draws (default 3)")
    p.add_argument("--tasks", default="ioi,agreement", help="built-in tasks measured under erasure ('none' to skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="output directory (default: analysis-out/erasure)")


def run_erasure(args) -> int:
    from .erasure import erasure
    from .figures import save_figure, write_csv
    from .figures_probes import erasure_figure
    from .model import load

    paths = checkpoint_dirs(args.ckpt)
    tasks = () if args.tasks.strip().lower() == "none" else tuple(t for t in args.tasks.split(",") if t)
    frames = [erasure(load(p), args.concept, args.hook, args.data, tokens=args.tokens, placebo_draws=args.draws,
                      tasks=tasks, seed=args.seed).assign(variant=p.name) for p in paths]
    df = stacked(frames)
    out = Path(args.out) if args.out else Path("analysis-out") / "erasure"
    write_csv(df, out / "erasure.csv")
    save_figure(erasure_figure(df), out, "erasure")
    print(f"LEACE erasure of {args.concept} at {args.hook} ({frames[0].attrs['n_tokens']:,} tokens); placebo: the "
          f"same number of random directions, {args.draws} draws")
    for v, g in df.groupby("variant", sort=False):
        le, pl = g[g.condition == "leace"].iloc[0], g[g.condition == "placebo"]
        none = g[g.condition == "none"].iloc[0]
        print(f"  {v}: probe {none.probe:.2f} -> {le.probe:.2f} (majority {le.majority:.2f}); loss change "
              f"{le.delta_loss:+.3f} [{le.delta_loss_lo:+.3f}, {le.delta_loss_hi:+.3f}] against placebo "
              f"{pl.delta_loss.mean():+.3f} (range {pl.delta_loss.min():+.3f} to {pl.delta_loss.max():+.3f})")
    print(f"wrote {out / 'erasure.csv'} and {out / 'erasure.png'} (+ .pdf)")
    return 0

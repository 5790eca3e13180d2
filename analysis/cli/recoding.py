"""``fixedid-analyze recoding``: fixed-code models fed their code through GF(2) maps, with no retraining.

    fixedid-analyze recoding --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2 --family transvection --draws 4

Writes ``recoding.csv`` (one row per map and variant, the map as JSON, with its frequency-weighted ``hamming``
distance from the own code and ``on_support`` share), ``recoding.png``/``.pdf`` (loss change against ``k``) and,
for the fixed-code variants, ``recoding_hamming.png``/``.pdf`` (loss change and code support against the Hamming
distance: variants compared at matched disturbance, not at equal ``k``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.cli.args import checkpoint_dirs, int_list

HELP = "feed fixed-code models their code through GF(2) maps (no retraining)"
FAMILIES = ("transvection", "uniform", "permutation", "offset", "other-variant", "token-permutation")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, action="append",
                   help="checkpoint directory; repeat to compare variants in one table and figure")
    p.add_argument("--family", default="transvection", choices=FAMILIES)
    p.add_argument("--draws", type=int, default=4, help="random draws per k (default 4)")
    p.add_argument("--ks", help="comma-separated k values (transvection count, token count, or code column)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=32_768, help="tokens of --data to evaluate (default 32768)")
    p.add_argument("--tasks", default="ioi,agreement,facts,induction",
                   help="built-in tasks whose accuracy is measured under each map ('none' to skip)")
    p.add_argument("--n-pairs", type=int, default=64, help="pairs per task (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random draws")
    p.add_argument("--out", help="output directory (default: analysis-out/recoding-<family>)")


def run(args) -> int:
    import pandas as pd

    from analysis.figures.recoding import disturbance_plot, recoding_plot
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.loading import load
    from analysis.causal.recoding import recoding_sweep

    ks = int_list(args.ks, "--ks")
    tasks = () if args.tasks.strip().lower() == "none" else tuple(t for t in args.tasks.split(",") if t)
    frames = []
    for path in checkpoint_dirs(args.ckpt):
        model = load(path)
        df = recoding_sweep(model, args.family, ks, draws=args.draws, seed=args.seed, data=args.data,
                            tokens=args.tokens, tasks=tasks, n_pairs=args.n_pairs, progress=True)
        frames.append(df.assign(variant=path.name, base_loss=df.attrs["base_loss"]))
    df = pd.concat(frames, ignore_index=True)
    df = df[["variant"] + [c for c in df.columns if c != "variant"]]
    out = Path(args.out) if args.out else Path("analysis-out") / f"recoding-{args.family}"
    write_csv(df, out / "recoding.csv")
    n_tok = frames[0].attrs["n_tokens"]
    save_figure(recoding_plot(df, title=f"{args.family} recodings, loss over {n_tok:,} tokens"), out, "recoding")
    figures = [out / "recoding.png"]
    if df.hamming.notna().any():
        save_figure(disturbance_plot(df, title=f"{args.family} recodings against the Hamming distance, loss over "
                                     f"{n_tok:,} tokens"), out, "recoding_hamming")
        figures.append(out / "recoding_hamming.png")
    acc = [c for c in df.columns if c.startswith("acc_")]
    print(f"recoding family {args.family}: loss change from each model's own code (mean [min, max] over draws), "
          "mean Hamming distance from the own code and share of token rows on a token's code (frequency-weighted)"
          + (", task accuracy mean" if acc else ""))
    for (variant, k), g in df.groupby(["variant", "k"], sort=False):
        line = (f"  {variant} k={k}: own {g.base_loss.iloc[0]:.3f} nats, delta {g.delta_loss.mean():+.3f} "
                f"[{g.delta_loss.min():+.3f}, {g.delta_loss.max():+.3f}]")
        if g.hamming.notna().any():
            line += f", hamming {g.hamming.mean():.2f}, on support {g.on_support.mean():.0%}"
        if "bit_constant" in g and g.bit_constant.notna().any() and bool(g.bit_constant.iloc[0]):
            line += " (a column constant over the vocabulary)"
        line += "".join(f", {c[4:]} {g[c].mean():.0%}" for c in acc)
        print(line)
    print(f"wrote {out / 'recoding.csv'} and " + " and ".join(str(f) for f in figures) + " (+ .pdf)")
    return 0

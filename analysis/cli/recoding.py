"""``fixedid-analyze recoding``: fixed-code models fed their code through GF(2) maps, with no retraining.

    fixedid-analyze recoding --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --family transvection --draws 4

Writes ``recoding.csv`` (one row per map and variant, the map as JSON, with its frequency-weighted ``hamming``
distance from the own code and ``on_support`` share), ``recoding.png``/``.pdf`` (loss change against ``k``) and,
for the fixed-code variants, ``recoding_hamming.png``/``.pdf`` (loss change and code support against the Hamming
distance: variants compared at matched disturbance, not at equal ``k``). With ``--split`` the table also has each
GF(2) map's landing and off-code parts (``delta_on``, ``delta_off``, ``share_on``, ``share_off``) and the variants are
printed at a matched landing share as well.
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, int_list, output_dir, parse_checkpoints

HELP = "feed fixed-code models their code through GF(2) maps (no retraining)"
EXAMPLES = """
  fixedid-analyze recoding --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 \\
      --family transvection --draws 2
"""
FAMILIES = ("transvection", "uniform", "permutation", "offset", "other-variant", "token-permutation")


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--family", default="transvection", choices=FAMILIES, help="the maps: walks of k transvections "
                   "from the own code, uniform draws from GL(n,2), bit permutations, one bit offset, the other "
                   "variant's code, or k token ids' rows cycled (default transvection)")
    p.add_argument("--draws", type=int, default=4, help="random draws per k (default 4)")
    p.add_argument("--ks", help="comma-separated k values (transvection count, token count, or code column)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=32_768, help="tokens of --data to evaluate (default 32768)")
    p.add_argument("--tasks", default="ioi,agreement,facts,induction",
                   help="built-in tasks whose accuracy is measured under each map ('none' to skip)")
    p.add_argument("--n-pairs", type=int, default=64, help="pairs per task (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random draws")
    p.add_argument("--split", action="store_true", help="also measure each GF(2) map applied only to the token ids "
                   "that land on another token's code and only to the others (two more passes per map), and print "
                   "the variants at a matched landing share (analysis.causal.landing)")
    add_out(p)


def run(args) -> int:
    import pandas as pd

    from analysis.figures.recoding import disturbance_plot, recoding_plot
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.loading import load
    from analysis.causal.recoding import recoding_sweep

    ks = int_list(args.ks, "--ks")
    tasks = () if args.tasks.strip().lower() == "none" else tuple(t for t in args.tasks.split(",") if t)
    named = parse_checkpoints(args.ckpt)
    out = output_dir(args, "recoding", named)
    frames = []
    for name, path in named.items():
        model = load(path)
        df = recoding_sweep(model, args.family, ks, draws=args.draws, seed=args.seed, data=args.data,
                            tokens=args.tokens, tasks=tasks, n_pairs=args.n_pairs, split=args.split,
                            progress=True)
        frames.append(df.assign(variant=name, base_loss=df.attrs["base_loss"]))
    df = pd.concat(frames, ignore_index=True)
    df = df[["variant"] + [c for c in df.columns if c != "variant"]]
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
    if args.split and df.share_on.notna().any():
        print(landing_summary(df))
    print(f"wrote {out / 'recoding.csv'} and " + " and ".join(str(f) for f in figures) + " (+ .pdf)")
    return 0


def landing_summary(df) -> str:
    """Per k, the variants at one landing share (the mean of their own): the split's matched comparison."""
    from analysis.causal.landing import matched_landing

    lines = ["at a matched landing share (each variant's landing and off-code parts scaled to a common share of "
             "moved rows landing on another token's code; assumes each part scales with the share it moves):"]
    for k, g in df[df.share_on.notna()].groupby("k", sort=True):
        if not (g.share_on + g.share_off > 0).any():
            continue
        m = matched_landing(g)
        lines.append(f"  k={k}, landing {m.landing_at.iloc[0]:.0%}: " + ", ".join(
            f"{r.variant} {r.delta_loss:+.3f} (own {r.landing_own:.0%}: {r.measure_own:+.3f}, moving "
            f"{r.moved:.0%} of the tokens)" for r in m.itertuples()))
    return "\n".join(lines)

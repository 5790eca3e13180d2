"""``fixedid-analyze interventions``: input-code edits, component ablations and bit x layer maps from the shell.

    fixedid-analyze interventions --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --kind bitflip
    fixedid-analyze interventions --ckpt DIR --kind swap --task ioi
    fixedid-analyze interventions --ckpt DIR --kind ablate --component head --ablation resample
    fixedid-analyze interventions --ckpt DIR --kind bit-layer --task ioi
    fixedid-analyze interventions --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --kind flip-split

Writes ``interventions.csv`` (one row per edit and variant: mean and 95% interval of each measure, with how far the
edit moves the input: ``edited``, ``on_support``, ``hamming``, and ``decode_acc`` for noise),
``interventions_items.csv`` (per sequence or pair) and ``interventions.png``/``.pdf``; ``noise`` also writes
``interventions_decode.png``/``.pdf`` (the effect against the nearest-row decoding accuracy, for comparing variants
at matched decodability); ``flip-split`` (:mod:`analysis.causal.flipsplit`: each bit flip's on- and off-support
parts beside swaps to the landing and to random tokens) also writes ``flip_split.csv`` (one row per bit);
``bit-layer`` writes ``bit_layer.csv`` and ``bit_layer.png``/``.pdf``. Per-bit summaries leave the code columns
that are constant over the vocabulary out of the "largest" lists and means, and count them apart. Nothing is
written until every checkpoint has been measured.
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, float_list, int_list, output_dir, parse_checkpoints
from analysis.errors import AnalysisError

KIND_CHOICES = ("bitflip", "midpoint", "swap", "noise", "ablate", "bit-layer", "flip-split")


HELP = ("edit the input code, ablate components, split bit flips by where they land, or map where a code bit's "
        "information goes (bit x layer)")
EXAMPLES = """
  fixedid-analyze interventions --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2 --kind bitflip
  fixedid-analyze interventions --ckpt fixedid-demo/checkpoints/learned --kind ablate --component head \\
      --ablation resample --task ioi
  fixedid-analyze interventions --ckpt fixedid-demo/checkpoints/gf2 --kind bit-layer --task ioi
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--kind", default="bitflip", choices=KIND_CHOICES, help="bitflip, midpoint, swap or noise: an "
                   "edit of the input code; ablate: a component; bit-layer: where a flipped bit's information goes, "
                   "layer by layer; flip-split: each flip split into its on- and off-support parts (default bitflip)")
    p.add_argument("--task", help="measure on this built-in task's prompts (default: corpus windows)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=16_384, help="corpus tokens to evaluate (default 16384)")
    p.add_argument("--n-pairs", type=int, default=64, help="prompts of --task (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts and of random draws")
    p.add_argument("--bits", help="comma-separated code columns (default: every bit)")
    p.add_argument("--pos", type=int, help="edit this position only (negative: from the end; default: all; "
                                           "bit-layer: the position flipped)")
    p.add_argument("--positions", help="swap: comma-separated positions (default: each)")
    p.add_argument("--token", type=int, help="swap: this token id's row (default: a random other token)")
    p.add_argument("--scales", help="noise: s.d. relative to the input rows' RMS (default 0.1,0.25,0.5,1)")
    p.add_argument("--draws", type=int, help="noise: draws per scale (default 2)")
    p.add_argument("--component", choices=("head", "attn", "mlp", "block"), help="ablate: what (default head)")
    p.add_argument("--ablation", choices=("zero", "mean", "resample"), help="ablate: how (default mean)")
    p.add_argument("--layers", help="ablate: comma-separated layers (default all)")
    p.add_argument("--heads", help="ablate: comma-separated heads (default all)")
    p.add_argument("--site", help="bit-layer: the site patched (default resid_pre)")
    p.add_argument("--metric", choices=("kl", "logit_diff"), help="bit-layer: the metric (default kl)")
    add_out(p)


#: The options each kind reads, with their defaults; giving one that the kind ignores is an error.
USES = {"bitflip": {"bits": None, "pos": None}, "midpoint": {"bits": None, "pos": None},
        "swap": {"positions": None, "token": None},
        "noise": {"scales": "0.1,0.25,0.5,1", "draws": 2, "pos": None},
        "ablate": {"component": "head", "ablation": "mean", "layers": None, "heads": None, "pos": None},
        "bit-layer": {"bits": None, "pos": None, "site": "resid_pre", "metric": "kl"},
        "flip-split": {"bits": None, "pos": None}}
OPTIONS = sorted({o for uses in USES.values() for o in uses})


def _check_options(args) -> None:
    uses = USES[args.kind]
    for opt in OPTIONS:
        if getattr(args, opt) is not None and opt not in uses:
            wanted = ", ".join(f"--{o}" for o in uses) or "none"
            raise AnalysisError(f"--{opt} does not apply to --kind {args.kind} (its options: {wanted})")
    for opt, default in uses.items():
        if getattr(args, opt) is None:
            setattr(args, opt, default)


def run(args) -> int:
    from analysis.loading import load

    _check_options(args)

    named = parse_checkpoints(args.ckpt)
    out = output_dir(args, "interventions", named)
    if args.n_pairs < 1:
        raise AnalysisError(f"--n-pairs must be positive, got {args.n_pairs}")
    models = {name: load(path) for name, path in named.items()}
    if args.kind == "bit-layer":
        return _run_bit_layer(args, models, out)
    return _run_edits(args, models, out)


def _run_edits(args, models, out) -> int:
    import pandas as pd

    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.figures.interventions import effect_measure, effect_plot, flip_split_plot, noise_decode_plot
    from analysis.causal.ablation import ablation
    from analysis.causal.flipsplit import flip_split, split_table
    from analysis.causal.interventions import input_intervention

    data = None if args.task else args.data
    if args.task and args.data:
        raise AnalysisError("give --task (prompts) or --data (corpus), not both")
    common = dict(data=data, task=args.task, tokens=args.tokens, n_pairs=args.n_pairs, seed=args.seed,
                  progress=True)
    results = {}
    for name, model in models.items():
        if args.kind == "ablate":
            r = ablation(model, component=args.component, how=args.ablation, layers=int_list(args.layers, "--layers"),
                         heads=int_list(args.heads, "--heads"), pos=args.pos, **common)
        elif args.kind == "noise":
            r = input_intervention(model, "noise", pos=args.pos, scales=float_list(args.scales, "--scales"),
                                   draws=args.draws, **common)
        elif args.kind == "swap":
            r = input_intervention(model, "swap", positions=int_list(args.positions, "--positions"), token=args.token,
                                   **common)
        elif args.kind == "flip-split":
            r = flip_split(model, bits=int_list(args.bits, "--bits"), pos=args.pos, **common)
        else:
            r = input_intervention(model, args.kind, bits=int_list(args.bits, "--bits"), pos=args.pos, **common)
        results[name] = r
    summary = pd.concat([r.summary.assign(variant=v) for v, r in results.items()], ignore_index=True)
    items = pd.concat([r.items.assign(variant=v) for v, r in results.items()], ignore_index=True)
    summary = summary[["variant"] + [c for c in summary.columns if c != "variant"]].dropna(axis=1, how="all")
    items = items[["variant"] + [c for c in items.columns if c != "variant"]].dropna(axis=1, how="all")
    first = next(iter(results.values()))
    measure = effect_measure(first.summary)
    where = (f"{first.attrs['n_items']} {args.task} prompts" if args.task
             else f"{first.attrs['n_tokens']:,} corpus tokens")
    what = f"{args.ablation} ablation of each {args.component}" if args.kind == "ablate" else f"{args.kind} edits"
    if args.kind != "swap" and args.pos is not None:
        what += f" at position {args.pos}"
    if args.kind == "flip-split":
        split = pd.concat([split_table(r.summary, measure).assign(variant=v) for v, r in results.items()],
                          ignore_index=True)
        split = split[["variant"] + [c for c in split.columns if c != "variant"]]
        fig = flip_split_plot(split, title=f"{what}, {where}", measure_label=measure)
    else:
        fig = effect_plot({v: r.summary for v, r in results.items()}, title=f"{what}, {where}",
                          str_tokens=_str_tokens(next(iter(models.values())), args) if args.kind == "swap" else None)
    write_csv(summary, out / "interventions.csv")
    write_csv(items, out / "interventions_items.csv")
    save_figure(fig, out, "interventions")
    wrote = [out / "interventions.csv", out / "interventions_items.csv", out / "interventions.png"]
    if args.kind == "noise":
        save_figure(noise_decode_plot({v: r.summary for v, r in results.items()}, title=f"{what}, {where}"), out,
                    "interventions_decode")
        wrote.append(out / "interventions_decode.png")
    if args.kind == "flip-split":
        write_csv(split, out / "flip_split.csv")
        wrote.append(out / "flip_split.csv")
        _print_split(split, measure, what, where)
    elif args.kind == "noise":
        print(f"{what} over {where}: {measure} (mean over draws) and decode_acc (share of noised rows still nearest "
              "their own input row) per scale")
        for v, r in results.items():
            g = r.summary.groupby("scale")[[measure, "decode_acc"]].mean()
            print(f"  {v}: " + "; ".join(f"scale {sc:g} {row[measure]:+.3f} (decode {row.decode_acc:.0%})"
                                         for sc, row in g.iterrows()))
    else:
        _print_largest(results, measure, what, where)
    print("wrote " + ", ".join(str(p) for p in wrote[:-1]) + f" and {wrote[-1]} (+ .pdf)")
    return 0


def _print_largest(results, measure, what, where) -> None:
    import pandas as pd

    print(f"{what} over {where}: {measure} (mean [95% interval]), largest per variant")
    for v, r in results.items():
        s = r.summary
        const = s["bit_constant"].fillna(False).astype(bool) if "bit_constant" in s else None
        if const is not None:  # a column no token differs in is another kind of edit: counted apart
            s = s[~const]
        s = s.reindex(s[measure].abs().sort_values(ascending=False).index)[:5]
        parts = [f"{_label(row)} {row[measure]:+.3f} [{row[f'{measure}_lo']:+.3f}, {row[f'{measure}_hi']:+.3f}]"
                 + (f" (on support {row.on_support:.0%})" if "bit" in row and pd.notna(row.get("on_support"))
                    and pd.notna(row.get("bit")) else "")
                 for _, row in s.iterrows()]
        line = f"  {v}: " + "; ".join(parts)
        if const is not None and const.any():
            line += (f"  [{int(const.sum())} columns constant over the vocabulary left out: mean "
                     f"{r.summary[const][measure].mean():+.3f}]")
        print(line)


def _print_split(split, measure, what, where) -> None:
    print(f"{what} over {where}: {measure} of each varying bit's flip = on-support part (a swap to the token it "
          "lands on) + off-support part; a random swap at the on-support positions beside it")
    for v, g in split.groupby("variant", sort=False):
        vary = g[~g.bit_constant.astype(bool)]
        cells = [f"bit {int(r.bit)} {r.flip:+.3f} (every row off support)" if r.on_support == 0 else
                 f"bit {int(r.bit)} {r.flip:+.3f} (every row on support; random {r.random:+.3f})" if r.on_support == 1
                 else f"bit {int(r.bit)} {r.flip:+.3f} = on {r.on:+.3f} ({r.on_support:.0%}) + off {r.off:+.3f}, "
                 f"random {r.random:+.3f}" for r in vary.itertuples()]
        print(f"  {v}: " + "; ".join(cells) + (f"  [{len(g) - len(vary)} constant columns left out]"
                                               if len(g) > len(vary) else ""))


def _str_tokens(model, args):
    from analysis.tasks import task_pairs

    if not args.task:
        return None
    b = task_pairs(model, args.task, args.n_pairs, seed=args.seed)
    return [model.tokenizer.decode([int(i)]) for i in b.clean[0]]


def _label(row) -> str:
    import pandas as pd

    parts = []
    for c in ("layer", "head", "bit", "pos", "scale"):
        v = row.get(c)
        if v is not None and not pd.isna(v):
            parts.append(f"{c} {v:g}" if c == "scale" else f"{c} {int(v)}")
    return ", ".join(parts) or "all"


def _run_bit_layer(args, models, out) -> int:
    import pandas as pd

    from analysis.causal.bitmap import bit_layer_map
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.figures.interventions import bit_layer_figure

    if not args.task and args.data is None:
        raise AnalysisError("bit-layer maps need prompts of one length: give --task NAME (or --data FILE.npy of "
                            "token ids with --pos)")
    if args.task and args.data:
        raise AnalysisError("give --task (prompts) or --data (token ids), not both")
    if args.data is not None:
        from analysis.corpus import corpus_tokens
        source = {v: corpus_tokens(m, args.data, tokens=args.tokens) for v, m in models.items()}
    else:
        source = {v: args.task for v in models}
    maps = {v: bit_layer_map(m, source[v], pos=args.pos, bits=int_list(args.bits, "--bits"), site=args.site,
                             metric=args.metric, n_pairs=args.n_pairs, seed=args.seed, progress=True)
            for v, m in models.items()}
    df = pd.concat([d.assign(variant=v) for v, d in maps.items()], ignore_index=True)
    df = df[["variant"] + [c for c in df.columns if c != "variant"]]
    write_csv(df, out / "bit_layer.csv")
    save_figure(bit_layer_figure(maps), out, "bit_layer")
    first = next(iter(maps.values())).attrs
    print(f"bit x layer maps: bit flipped at position {first['flip_pos']} {first['str_tokens'][first['flip_pos']]!r}, "
          f"clean {args.site} patched in, metric {args.metric}; fraction of the flip's effect restored "
          "(mean over the bits that vary over the vocabulary)")
    for v, d in maps.items():
        last = d.attrs["n_pos"] - 1
        d = d[~d.bit_constant]
        at_p = d[d.pos == d.attrs["flip_pos"]].groupby("layer").restored.mean()
        at_last = d[d.pos == last].groupby("layer").restored.mean()
        cells = ", ".join(f"L{layer}: {at_p[layer]:.2f} / {at_last[layer]:.2f}" for layer in at_p.index)
        print(f"  {v} (at the flipped / final position): {cells}")
    print(f"wrote {out / 'bit_layer.csv'} and {out / 'bit_layer.png'} (+ .pdf)")
    return 0

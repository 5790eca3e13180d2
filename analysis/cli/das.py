"""``fixedid-analyze das``: distributed alignment search of one causal variable, per layer and subspace rank, with its
controls (arbitrary labels, the model's own untrained initialisation, a norm-matched random subspace).

    fixedid-analyze das --ckpt fixedid-demo/checkpoints/canonical --variable ioi [--position last] [--ranks 1,4,16]
    fixedid-analyze das --ckpt DIR --variable bit --bit 8 [--layers 0,1] [--epochs 40]

Writes ``das.csv`` (one row per layer, rank, method and split) and ``das.png``/``.pdf``, and prints where the
fitted subspace beats its controls.
"""

from __future__ import annotations

import argparse
from analysis.cli.args import add_checkpoints, add_out, int_list, one_checkpoint, output_dir
from analysis.errors import AnalysisError

HELP = "distributed alignment search (DAS) of a causal variable, with its controls"
EXAMPLES = """
  fixedid-analyze das --ckpt fixedid-demo/checkpoints/canonical --variable ioi --ranks 1,4
  fixedid-analyze das --ckpt fixedid-demo/checkpoints/gf2 --variable bit --bit 8 --layers 0,1
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p, one=True)
    p.add_argument("--variable", default="ioi", help="ioi (the indirect object's name), agreement (the subject's "
                   "number) or bit (one input-code bit of a copied token; give --bit)")
    p.add_argument("--bit", type=int, help="the code bit of --variable bit (a column of the model's code)")
    p.add_argument("--any-twin", action="store_true", help="bit variable: let the bit-flipped twin be any token, "
                   "not only a list word")
    p.add_argument("--position", default="diff", choices=["diff", "last"],
                   help="where to intervene: diff (the token where base and source differ, default) or last")
    p.add_argument("--layers", help="comma-separated layers whose entering stream is intervened on; n_layers is the "
                   "stream after the last block (default: all)")
    p.add_argument("--ranks", default="1,4,16", help="comma-separated subspace ranks (default 1,4,16)")
    p.add_argument("--n-pairs", type=int, default=64, help="prompt pairs drawn (default 64; half are held out)")
    p.add_argument("--epochs", type=int, default=20, help="passes over the fitted pairs (default 20)")
    p.add_argument("--batch-size", type=int, default=128, help="examples per optimisation step (default 128, as "
                   "das_sweep and TransformerLens's fit_das)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=0, help="seed of the pairs, the split, the bases and the controls")
    p.add_argument("--all-pairs", action="store_true", help="keep pairs the model gets wrong (default: only pairs "
                   "whose two prompts it answers right)")
    p.add_argument("--no-controls", action="store_true", help="fit only the DAS subspace (no controls)")
    add_out(p)


def summarize(df) -> str:
    a = df.attrs
    test = df[df.split == "test"]
    lines = [f"DAS of {df.variable.iloc[0]} at the {df.position.iloc[0]} position: {a['n_pairs']} pairs "
             f"({a['n_pairs_solved']} of {a['n_pairs_drawn']} drawn solved), {a['n_train']} fitted / "
             f"{a['n_test']} held-out examples. Held-out interchange accuracy:"]
    for (layer, rank), g in test[test.method == "das"].groupby(["layer", "rank"]):
        row = g.iloc[0]
        extra = ""
        ctl = df[(df.layer == layer) & (df["rank"] == rank)]
        pick = {m: ctl[(ctl.method == m) & (ctl.split == s)].iia for m, s in
                (("random_init", "test"), ("placebo", "test"), ("arbitrary_labels", "train"))}
        if all(len(v) for v in pick.values()):
            extra = (f"  (init {float(pick['random_init'].iloc[0]):.2f}, placebo {float(pick['placebo'].iloc[0]):.2f}, "
                     f"arbitrary labels fitted {float(pick['arbitrary_labels'].iloc[0]):.2f})")
        lines.append(f"  {row.hook:>24s} rank {rank:>3d}: {row.iia:.2f} [{row.iia_lo:.2f}, {row.iia_hi:.2f}]{extra}")
    return "\n".join(lines)


def run(args) -> int:
    from analysis.causal.das import das_sweep
    from analysis.causal.das_data import das_data
    from analysis.figures.das import das_figure
    from analysis.figures.style import save_figure
    from analysis.loading import load
    from analysis.outputs import write_csv

    name, ckpt = one_checkpoint(args, "das")
    out = output_dir(args, "das", {name: ckpt})
    if args.n_pairs < 4:
        raise AnalysisError(f"--n-pairs must be at least 4 (2 fitted, 2 held out), got {args.n_pairs}")
    ranks = int_list(args.ranks, "--ranks")
    layers = int_list(args.layers, "--layers")
    model = load(ckpt).eval()
    data = das_data(model, args.variable, args.n_pairs, bit=args.bit, seed=args.seed, solved_only=not args.all_pairs,
                    twins="any" if args.any_twin else "list")
    df = das_sweep(model, data=data, layers=layers, ranks=ranks, position=args.position, epochs=args.epochs,
                   batch_size=args.batch_size, lr=args.lr, seed=args.seed, controls=not args.no_controls,
                   progress=True)
    write_csv(df, out / "das.csv")
    save_figure(das_figure(df, model.cfg.n_layers, title=name), out, "das")
    print(summarize(df))
    print(f"wrote {out / 'das.csv'} and {out / 'das.png'} (+ .pdf)")
    return 0

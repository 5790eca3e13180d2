"""``fixedid-analyze features``: sparse dictionaries across depth read against the code, token features, and latents
matched across seeds and variants (:mod:`analysis.features.survey`).

    fixedid-analyze features --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
        --ckpt fixedid-demo/checkpoints/gf2

Trains a TopK SAE at every site of every checkpoint and of its random-initialisation twin, then writes
``features_code.csv`` (the best latent's AUROC per bit: code, canonical id and ``perm`` bits),
``features_tokens.csv`` (the share of token features), ``features_matching.csv`` (latents matched by activation
correlation and decoder cosine, per pair of dictionaries, with nulls), ``features_dictionaries.csv`` (each
dictionary's metrics on the held-out tokens) and the figures ``features_code``, ``features_tokens`` and
``features_matching`` (PNG and PDF).
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints
from analysis.errors import AnalysisError

HELP = "sparse-dictionary latents read against the code across depth, token features, matching across seeds/variants"
EXAMPLES = """
  fixedid-analyze features --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2
  fixedid-analyze features --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/gf2 --dictionary-seeds 2
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--site", action="append", help="hook point read (repeatable; default: blocks.0.hook_resid_pre "
                   "and every block's hook_resid_post)")
    p.add_argument("--expansion", type=int, default=8, help="latents per input dimension (default 8)")
    p.add_argument("--k", type=int, default=8, help="active latents per token of the TopK SAEs (default 8)")
    p.add_argument("--tokens", type=int, default=262_144, help="training tokens per dictionary (default 262144)")
    p.add_argument("--eval-tokens", type=int, default=16_384, help="held-out tokens every reading is measured on "
                   "(default 16384; never trained on)")
    p.add_argument("--dictionary-seeds", type=int, default=1, choices=(1, 2), help="2: a second dictionary per "
                   "trained checkpoint, matched with the first (how reproducible a dictionary is; default 1)")
    p.add_argument("--no-twins", action="store_true", help="skip the random-initialisation twins (the reference)")
    p.add_argument("--purity", type=float, default=0.9, help="a token feature has at least this share of its "
                   "firings on one token type (default 0.9)")
    p.add_argument("--min-fires", type=int, default=10, help="latents firing fewer times are not scored as token "
                   "features or not (default 10)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the first checkpoint's validation data)")
    p.add_argument("--seed", type=int, default=0, help="first dictionary seed and the perm bits' seed (default 0)")
    add_out(p)


def run(args) -> int:
    from analysis.features.survey import feature_survey
    from analysis.figures.features import code_figure, matching_figure, token_feature_figure
    from analysis.figures.style import save_figure
    from analysis.loading import load
    from analysis.outputs import write_csv

    named = parse_checkpoints(args.ckpt)
    for name, value in (("--expansion", args.expansion), ("--k", args.k), ("--tokens", args.tokens),
                        ("--eval-tokens", args.eval_tokens), ("--min-fires", args.min_fires)):
        if value < 1:
            raise AnalysisError(f"{name} must be a positive integer, got {value}")
    if not 0 < args.purity <= 1:
        raise AnalysisError(f"--purity must be in (0, 1], got {args.purity}")
    out = output_dir(args, "features", named)
    models = {name: load(path) for name, path in named.items()}
    tables = feature_survey(models, args.data, sites=args.site, train_tokens=args.tokens,
                            eval_tokens=args.eval_tokens, expansion=args.expansion, k=args.k,
                            twins=not args.no_twins, dictionary_seeds=args.dictionary_seeds, seed=args.seed,
                            purity=args.purity, min_fires=args.min_fires)
    for key in ("code", "tokens", "matching", "dictionaries"):
        write_csv(tables[key], out / f"features_{key}.csv")
    save_figure(code_figure(tables["code"]), out, "features_code")
    save_figure(token_feature_figure(tables["tokens"]), out, "features_tokens")
    if len(tables["matching"]):
        save_figure(matching_figure(tables["matching"]), out, "features_matching")
    code = tables["code"][(tables["code"].init == "trained") & ~tables["code"].constant]
    summary = code.groupby(["model", "family"]).auroc.max().unstack()
    for model, row in summary.iterrows():
        print(f"  {model}: best latent's AUROC for a bit, highest over sites: "
              + ", ".join(f"{f} {v:.3f}" for f, v in row.dropna().items()))
    n_dict = len(tables["dictionaries"].drop_duplicates(["model", "init", "dict_seed", "hook"]))
    print(f"{n_dict} dictionaries, readings on {tables['code'].n_tokens.iloc[0]:,} "
          f"held-out tokens; wrote {out / 'features_code.csv'} and the other tables and figures beside it")
    return 0

"""Crosscoders over the demo recipe's three variants, three training seeds, at every depth of the residual stream: the
tables and figures behind the docs' model-diffing page. For each seed (0, 1, 2: trained, or reused from the cache as
``fixedid-analyze demo`` caches them) and each residual site (the stream entering block 0 - the input rows - and
leaving every block), it trains a crosscoder over each pair of variants and one over all three; and the references
with the same recipe: each variant against itself at another seed (every pair of seeds), and, for seed 0, each
variant beside its orthogonally turned copy and beside its random-initialisation twin; and, for the three-model
crosscoders, three seeds of one variant in one crosscoder. It writes ``pairs.csv`` (one row per two-model
crosscoder: its kind, models, seeds, site, shared and exclusive fractions of the live latents, the share's spread,
each model's FVU), ``triples.csv`` (the three-model crosscoders' class fractions), ``readings.csv`` (what the live
latents of each class of the three-model crosscoders read: mean best AUROC for the id's bits, the relabelled ids'
bits, each code's bits, and the token-feature share), ``triple_nulls.csv`` (the three-seed references' class
fractions), ``ternary_shares.csv`` (every live latent's decoder-norm shares of the seed-0 three-variant crosscoders
and of the references) and the figures ``fractions_by_depth`` and ``ternary`` (PNG and PDF) under ``--out``.

Usage: python experiments/crosscoders/survey.py            (about 70 minutes on 2 CPU cores, the variants
                                                         cached; computes only the tables --out lacks)
       python experiments/crosscoders/survey.py --figures-only   (redraw from the committed tables)
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import pandas as pd
import torch

from analysis.features.crosscoder_models import code_readings
from analysis.features.crosscoder_read import latent_table
from analysis.features.crosscoder_survey import Recipe
from analysis.features.run import split_windows
from analysis.features.survey import residual_sites
from analysis.figures.crosscoders import fractions_by_depth, ternaries
from analysis.figures.style import save_figure, short_hook
from analysis.loading import load, random_init_twin
from analysis.outputs import write_csv
from analysis.study.pipeline import training_runs
from analysis.variants import VARIANTS, cache_root, ensure_variants
from fixedid.train.config import TrainConfig

HERE = Path(__file__).parent


def variants_of(seeds) -> dict:
    """``{(variant, seed): model}``, trained where the cache lacks them."""
    base, models = TrainConfig.load("tiny"), {}
    for s in seeds:
        (_, _, cfg, _, _), = training_runs(base, [s], [0], VARIANTS)
        run = ensure_variants(cfg, cache_root(None))
        models |= {(v, s): load(run / v) for v in VARIANTS}
    return models


def pair_row(recipe: Recipe, models: dict, hook: str, depth: int, turned: bool = False, **tags) -> dict:
    """One two-model crosscoder's row of ``pairs.csv`` (``turned``: the first model beside its turned copy)."""
    found = recipe.turned(*next(iter(models.items()))[::-1], hook) if turned else recipe.pair(models, hook)
    return {**tags, **found, "depth": depth, "hook": hook}


def pairs_table(recipe: Recipe, models: dict, seeds, sites) -> pd.DataFrame:
    """Every two-model crosscoder of the survey: variant pairs per seed, and the references."""
    rows = []
    for depth, hook in enumerate(sites):
        for s in seeds:
            for a, b in itertools.combinations(VARIANTS, 2):
                rows.append(pair_row(recipe, {a: models[(a, s)], b: models[(b, s)]}, hook, depth,
                                     kind="variants", pair=f"{a} vs {b}", seed=s, seed_b=s))
        for v in VARIANTS:
            for s, t in itertools.combinations(seeds, 2):
                rows.append(pair_row(recipe, {f"{v} s{s}": models[(v, s)], f"{v} s{t}": models[(v, t)]}, hook, depth,
                                     kind="two seeds", pair=f"{v} seeds", seed=s, seed_b=t))
            m, s = models[(v, seeds[0])], seeds[0]
            rows.append(pair_row(recipe, {v: m}, hook, depth, turned=True, kind="turned copy", pair=f"{v} turned",
                                 seed=s, seed_b=s))
            rows.append(pair_row(recipe, {v: m, f"{v} init": random_init_twin(m)}, hook, depth, kind="random init",
                                 pair=f"{v} init", seed=s, seed_b=s))
            print(f"depth {depth} {v}: done", flush=True)
    return pd.DataFrame(rows)


def triples_tables(recipe: Recipe, models: dict, seeds, sites) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The three-model crosscoders: class fractions and what each class reads."""
    fractions, readings = [], []
    for depth, hook in enumerate(sites):
        for s in seeds:
            named = {v: models[(v, s)] for v in VARIANTS}
            cc, x = recipe.fit(named, hook)
            table = latent_table(cc, x).merge(code_readings(cc, named, x, recipe.held.flatten().numpy()), on="latent")
            live = table[table.live]
            for cls, g in live.groupby("class"):
                tags = {"seed": s, "depth": depth, "hook": hook, "class": cls}
                fractions.append({**tags, "n": len(g), "fraction": len(g) / len(live), "n_live": len(live),
                                  "elsewhere": int(g.elsewhere.sum())})
                readings.append({**tags, "n": len(g), **g[["auroc_id", "auroc_perm", "auroc_code_canonical",
                                                          "auroc_code_gf2", "top_share"]].mean().to_dict()})
    return pd.DataFrame(fractions), pd.DataFrame(readings)


def shares_rows(table: pd.DataFrame, names, **tags) -> list[dict]:
    """The live latents of a three-model crosscoder as rows ``share_1..3, class`` (models in ``names``' order)."""
    live = table[table.live]
    return [{**tags, "latent": int(r.latent), "class": r["class"],
             **{f"share_{i + 1}": float(r[f"share_{m}"]) for i, m in enumerate(names)}} for _, r in live.iterrows()]


def seed_triples(recipe: Recipe, models: dict, seeds, sites) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The three-model crosscoders' reference, three seeds of one variant, beside the variants at the first seed:
    class fractions of the references (``triple_nulls.csv``) and every live latent's shares, the variants' and the
    references' (``ternary_shares.csv``: ``set`` is ``variants`` or ``<variant> seeds``; ``share_1..3`` are the
    variants in order, or the seeds in order)."""
    fractions, shares = [], []
    for depth, hook in enumerate(sites):
        named = {v: models[(v, seeds[0])] for v in VARIANTS}
        cc, x = recipe.fit(named, hook)
        shares += shares_rows(latent_table(cc, x), list(named), set="variants", depth=depth, hook=hook)
        for v in VARIANTS:
            named = {f"{v} s{s}": models[(v, s)] for s in seeds}
            cc, x = recipe.fit(named, hook)
            table = latent_table(cc, x)
            shares += shares_rows(table, list(named), set=f"{v} seeds", depth=depth, hook=hook)
            live = table[table.live]
            for cls, g in live.groupby("class"):
                fractions.append({"variant": v, "depth": depth, "hook": hook, "class": cls, "n": len(g),
                                  "fraction": len(g) / len(live), "n_live": len(live)})
        print(f"depth {depth}: three seeds done", flush=True)
    return pd.DataFrame(fractions), pd.DataFrame(shares)


def draw(out: Path, pairs: pd.DataFrame, shares: pd.DataFrame | None) -> None:
    """The figures, from the tables (``shares``: ``ternary_shares.csv``)."""
    save_figure(fractions_by_depth(pairs[pairs.kind.isin(["variants", "two seeds"])]), out, "fractions_by_depth")
    if shares is None:
        return
    panels, nulls = {}, {}
    for (depth, hook), g in shares.groupby(["depth", "hook"]):
        name = short_hook(hook)
        own = g[g.set == "variants"]
        panels[name] = pd.DataFrame({"live": True, "class": own["class"],
                                     **{f"share_{v}": own[f"share_{i + 1}"] for i, v in enumerate(VARIANTS)}})
        ref = g[g.set != "variants"]
        nulls[name] = {"three seeds of one variant": ref[["share_1", "share_2", "share_3"]].to_numpy()}
    fig = ternaries(panels, list(VARIANTS), nulls, title="Three variants (seed 0) in one crosscoder per site; light "
                    "blue: three seeds of one variant in one\ncrosscoder (a corner is then one seed), each variant's, "
                    "drawn together")
    save_figure(fig, out, "ternary")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tokens", type=int, default=131_072, help="training tokens per crosscoder")
    p.add_argument("--eval-tokens", type=int, default=16_384)
    p.add_argument("--k", type=int, default=8, help="active latents per token (the features survey's sparsity)")
    p.add_argument("--expansion", type=int, default=8)
    p.add_argument("--seed", type=int, default=0, help="the crosscoders' seed (initialisation and shuffling)")
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--figures-only", action="store_true", help="redraw the figures from the tables in --out")
    p.add_argument("--redo", action="store_true", help="recompute every table (otherwise only those --out lacks)")
    args = p.parse_args()
    out = Path(args.out)
    if args.figures_only:
        return draw(out, pd.read_csv(out / "pairs.csv"), pd.read_csv(out / "ternary_shares.csv"))
    torch.manual_seed(0)
    models = variants_of(args.seeds)
    first = models[(VARIANTS[0], args.seeds[0])]
    windows, held = split_windows(first, train_tokens=args.tokens, eval_tokens=args.eval_tokens)
    recipe = Recipe(windows, held, expansion=args.expansion, k=args.k, seed=args.seed)
    sites = residual_sites(first)
    out.mkdir(parents=True, exist_ok=True)
    steps = {("triples", "readings"): lambda: triples_tables(recipe, models, args.seeds, sites),
             ("triple_nulls", "ternary_shares"): lambda: seed_triples(recipe, models, args.seeds, sites),
             ("pairs",): lambda: (pairs_table(recipe, models, args.seeds, sites),)}
    for names, step in steps.items():
        if args.redo or not all((out / f"{n}.csv").exists() for n in names):
            for name, df in zip(names, step()):
                write_csv(df, out / f"{name}.csv")
    draw(out, pd.read_csv(out / "pairs.csv"), pd.read_csv(out / "ternary_shares.csv"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

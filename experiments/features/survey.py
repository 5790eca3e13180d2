"""Features read against the code on the demo recipe's three variants, two training seeds each: the tables and
figures behind the docs' features page.

Trains (or reuses from the cache, as ``fixedid-analyze demo`` caches them) the tiny recipe's learned, canonical and
gf2 variants at ``--seeds`` (default 0 and 1), then runs :func:`analysis.features.survey.feature_survey` on all six
with their random-initialisation twins and a second dictionary per trained model (``dictionary_seeds=2``), and writes
``features_{code,tokens,matching,dictionaries}.csv``, the three figures and ``summary.txt`` (the table printed)
under ``--out``.

Usage: python experiments/features/survey.py                 (~15 minutes on 2 CPU cores with the variants cached)
       python experiments/features/survey.py --seeds 0 1 2 --tokens 262144 --out /tmp/features
       python experiments/features/survey.py --summary-only     (the summary of the committed tables)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from analysis.features.code_reading import bit_groups
from analysis.features.survey import feature_survey
from analysis.figures.features import code_figure, matching_figure, token_feature_figure
from analysis.figures.style import save_figure, short_hook
from analysis.loading import load
from analysis.outputs import write_csv
from analysis.variants import VARIANTS, cache_root, ensure_variants
from fixedid.train.config import TrainConfig

HERE = Path(__file__).parent


def summary(tables: dict) -> str:
    """Per interface and site, means over seeds: the best latent's AUROC (mean over bits) for the code's bits, the
    id's bits but the top one, the id's top bit, perm bits, and the same in the twin; the token-feature share trained and twin; and the activation-correlation matching by pair kind."""
    code = tables["code"][~tables["code"].constant].assign(group=lambda d: bit_groups(d))
    per = code.groupby(["interface", "init", "group", "hook", "depth"], as_index=False).auroc.mean()
    wide = per.pivot_table(index=["interface", "depth", "hook"], columns=["init", "group"], values="auroc")
    wide.columns = [f"auroc {g}" + ("" if i == "trained" else " (init)") for i, g in wide.columns]
    tok = tables["tokens"].pivot_table(index=["interface", "depth", "hook"], columns="init", values="share")
    wide["token share"], wide["token share (init)"] = tok["trained"], tok.get("random_init")
    wide = wide.reset_index().assign(site=lambda d: d.hook.map(short_hook))
    order = ["auroc code", "auroc id", "auroc top", "auroc perm", "auroc code (init)", "auroc id (init)",
             "auroc top (init)", "token share", "token share (init)"]
    wide = wide[["interface", "site"] + [c for c in order if c in wide.columns]]
    m = tables["matching"]
    m = m[(m.stat == "max_mean")].pivot_table(index=["measure", "depth", "hook"], columns="pair", values="value")
    null = tables["matching"][tables["matching"].stat == "max_mean"].groupby(["measure", "depth", "hook"]).null.mean()
    m["null"] = null
    m = m.reset_index().assign(site=lambda d: d.hook.map(short_hook))
    kinds = ["dictionary seed", "seed", "variant", "random init", "null"]
    m = m[["measure", "site"] + [c for c in kinds if c in m.columns]]
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 3):
        return (f"best latent's AUROC per bit (mean over bits and seeds) and token-feature share\n{wide}\n\n"
                f"latent matching, best match averaged over latents (mean over the pairs of a kind)\n{m}\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--tokens", type=int, default=524_288, help="training tokens per dictionary")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--expansion", type=int, default=8)
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--summary-only", action="store_true", help="only print (and write) the summary of the tables "
                   "already in --out")
    args = p.parse_args()
    out = Path(args.out)
    if args.summary_only:
        text = summary({k: pd.read_csv(out / f"features_{k}.csv") for k in ("code", "tokens", "matching")})
        (out / "summary.txt").write_text(text)
        return print(text)
    models = {}
    for s in args.seeds:
        run = ensure_variants(TrainConfig.load("tiny").replace_train(seed=s), cache_root(None))
        models.update({f"{v}-s{s}": load(run / v) for v in VARIANTS})
    tables = feature_survey(models, train_tokens=args.tokens, expansion=args.expansion, k=args.k,
                            dictionary_seeds=2)
    for key, df in tables.items():
        write_csv(df, out / f"features_{key}.csv")
    save_figure(code_figure(tables["code"]), out, "features_code")
    save_figure(token_feature_figure(tables["tokens"]), out, "features_tokens")
    save_figure(matching_figure(tables["matching"]), out, "features_matching")
    text = summary(tables)
    (out / "summary.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

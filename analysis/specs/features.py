"""``features``: sparse dictionaries across depth read against the code, token features, and latents matched across
seeds and variants (:mod:`analysis.features.survey`)."""

from __future__ import annotations

from analysis.specs import shared, types
from analysis.specs.base import Param, Result, Spec


def survey(models, *, site, expansion, k, tokens, eval_tokens, dictionary_seeds, no_twins, purity, min_fires, data,
           seed, progress=False) -> Result:
    """The survey's four tables over every checkpoint (and its random-initialisation twin)."""
    from analysis.features.survey import feature_survey

    tables = feature_survey(dict(models.items()), data, sites=site, train_tokens=tokens, eval_tokens=eval_tokens,
                            expansion=expansion, k=k, twins=not no_twins, dictionary_seeds=dictionary_seeds,
                            seed=seed, purity=purity, min_fires=min_fires)
    return Result(tables={f"features_{key}": tables[key] for key in ("code", "tokens", "matching", "dictionaries")})


def _figure(key, name):
    def draw(result: Result):
        import analysis.figures.features as figures

        df = result.tables[f"features_{key}"]
        return getattr(figures, name)(df) if len(df) else None

    return draw


def summarize(result: Result) -> str:
    code = result.tables["features_code"]
    trained = code[(code.init == "trained") & ~code.constant]
    best = trained.groupby(["model", "family"]).auroc.max().unstack()
    lines = [f"  {model}: best latent's AUROC for a bit, highest over sites: "
             + ", ".join(f"{f} {v:.3f}" for f, v in row.dropna().items()) for model, row in best.iterrows()]
    n_dict = len(result.tables["features_dictionaries"].drop_duplicates(["model", "init", "dict_seed", "hook"]))
    lines.append(f"{n_dict} dictionaries, readings on {code.n_tokens.iloc[0]:,} held-out tokens")
    return "\n".join(lines)


SPEC = Spec(
    name="features", group="readouts", joint=True,
    help="sparse-dictionary latents read against the code across depth, token features, matching across "
         "seeds/variants",
    examples="""
  fixedid-analyze features --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2
  fixedid-analyze features --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/gf2 --dictionary-seeds 2
""",
    params=(
        Param("site", None, "hook point read (repeatable; default: blocks.0.hook_resid_pre and every block's "
              "hook_resid_post)", repeat=True),
        Param("expansion", 8, "latents per input dimension", type=types.positive_int),
        Param("k", 8, "active latents per token of the TopK SAEs", type=types.positive_int),
        shared.tokens(262_144, "training tokens per dictionary"),
        Param("eval_tokens", 16_384, "held-out tokens every reading is measured on (never trained on)",
              type=types.positive_int),
        Param("dictionary_seeds", 1, "2: a second dictionary per trained checkpoint, matched with the first (how "
              "reproducible a dictionary is)", type=int, choices=(1, 2)),
        Param("no_twins", False, "skip the random-initialisation twins (the reference)", switch=True),
        Param("purity", 0.9, "a token feature has at least this share of its firings on one token type",
              type=types.share),
        Param("min_fires", 10, "latents firing fewer times are not scored as token features or not",
              type=types.positive_int),
        shared.data("a .txt, .jsonl or .npy file (default: the first checkpoint's validation data)"),
        shared.seed("first dictionary seed and the perm bits' seed")),
    compute=survey,
    figures={"features_code": _figure("code", "code_figure"), "features_tokens": _figure("tokens",
                                                                                        "token_feature_figure"),
             "features_matching": _figure("matching", "matching_figure")},
    summary=summarize,
    library=("analysis.features.survey:feature_survey",),
)


__all__ = ["SPEC", "survey"]

"""``dla``: direct logit attribution of one checkpoint's logit difference, answer - wrong
(:mod:`analysis.causal.dla`)."""

from __future__ import annotations

from analysis.errors import AnalysisError
from analysis.specs import shared
from analysis.specs.base import Param, Result, Spec

GROUP = "prompts (one of)"


def check(params: dict) -> None:
    given = [params["task"] is not None, params["pairs_file"] is not None, params["text"] is not None]
    if sum(given) != 1:
        raise AnalysisError("give exactly one source of prompts: --task NAME, --pairs FILE, or --prompt TEXT with "
                            "--answer and --wrong")
    if given[2] and (params["answer"] is None or params["wrong"] is None):
        raise AnalysisError("--prompt needs --answer and --wrong")


def prepare(model, params: dict) -> dict:
    """``params`` with the prompt source replaced by ``pairs`` (one prompt: its own corrupted twin)."""
    from analysis.pairs import make_pairs

    rest = {k: v for k, v in params.items() if k not in ("task", "pairs_file", "text", "answer", "wrong", "n_pairs",
                                                        "seed")}
    if params["text"] is None:
        return rest | {"pairs": shared.pairs_of(model, params | {"clean": None, "corrupt": None})}
    one = dict(clean=params["text"], corrupt=params["text"], answer=params["answer"], wrong=params["wrong"])
    return rest | {"pairs": make_pairs(model, one)}


def attribute(model, *, pairs, corrupt_prompts, by_position, per_pair) -> Result:
    """The attribution table (and with ``per_pair`` one row per pair too)."""
    from analysis.causal.dla import direct_logit_attribution

    kw = dict(prompt="corrupt" if corrupt_prompts else "clean", by_position=by_position)
    tables = {"dla": direct_logit_attribution(model, pairs, **kw)}
    if per_pair:
        tables["dla_per_pair"] = direct_logit_attribution(model, pairs, per_pair=True, **kw)
    return Result(tables=tables)


def dla_figure(result: Result):
    from analysis.figures.circuits import dla_figure as draw

    df = result.tables["dla"]
    return draw(df, title=f"{result.names[0]}: direct logit attribution ({df.attrs['n_pairs']} prompts, final norm "
                          "scale frozen)")


def positions_figure(result: Result):
    from analysis.figures.circuits import dla_positions_figure

    return dla_positions_figure(result.tables["dla"]) if result.params["by_position"] else None


def summarize(df, k: int = 6) -> str:
    a = df.attrs
    rows = df[df["pos"].isna() & df.component.isin(["head", "mlp", "embed", "attn_bias", "ln_final_bias"])]
    top = rows.loc[rows.value.abs().sort_values(ascending=False).index[:k]]
    lines = [f"direct logit attribution over {a['n_pairs']} {a['prompt']} prompt(s): logit difference "
             f"{a['logit_diff']:+.3f} (final norm scale frozen; components sum to it within "
             f"{a['max_sum_error']:.1e})", "Largest direct writes:"]
    for _, r in top.iterrows():
        lines.append(f"  {r.label:>10s}: {r.value:+.3f} [{r.value_lo:+.3f}, {r.value_hi:+.3f}]")
    return "\n".join(lines)


SPEC = Spec(
    name="dla", group="circuits", models="one",
    help="direct logit attribution (per head, attention layer, MLP, input) of one checkpoint",
    examples="""
  fixedid-analyze dla --ckpt fixedid-demo/checkpoints/canonical --task ioi --by-position
  fixedid-analyze dla --ckpt fixedid-demo/checkpoints/learned \\
      --prompt "When Mary and John went to the park, John gave a ball to" \\
      --answer Mary --wrong John
""",
    params=(
        Param("task", None, shared.TASK_HELP, group=GROUP),
        Param("pairs_file", None, "JSONL file of {clean, corrupt, answer, wrong}", option="--pairs", metavar="FILE",
              group=GROUP),
        Param("text", None, "one prompt (with --answer and --wrong)", option="--prompt", metavar="TEXT", group=GROUP),
        Param("answer", None, "the word that continues the prompt (leading space is added)", group=GROUP),
        Param("wrong", None, "the competing word", group=GROUP),
        shared.n_pairs(16), shared.seed("seed of the --task pairs"),
        Param("corrupt_prompts", False, "attribute the corrupted prompt of each pair", switch=True),
        Param("by_position", False, "also split each head by the source position it reads", switch=True),
        Param("per_pair", False, "also write one row per pair (dla_per_pair.csv)", switch=True)),
    compute=attribute, prepare=prepare, check=check,
    figures={"dla": dla_figure, "dla_positions": positions_figure},
    summary=lambda r: summarize(r.tables["dla"]),
    library=("analysis.causal.dla:direct_logit_attribution",),
)


__all__ = ["SPEC", "prepare", "attribute"]

"""``recoding``: fixed-code models fed their code through GF(2) maps, with no retraining
(:mod:`analysis.causal.recoding`); the study's ``recoding`` measurement."""

from __future__ import annotations

from analysis.causal.recoding import FAMILIES
from analysis.evaluation.behaviours import TASKS
from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec


def recode(model, *, family, draws, ks, data, tokens, tasks, n_pairs, seed, split, progress=False) -> Result:
    """One model's loss and task accuracy under every map of the family."""
    from analysis.causal.recoding import recoding_sweep

    df = recoding_sweep(model, family, ks, draws=draws, seed=seed, data=data, tokens=tokens, tasks=tasks,
                        n_pairs=n_pairs, split=split, progress=progress)
    return Result(tables={"recoding": df.assign(base_loss=df.attrs["base_loss"])}, attrs={"n_tokens": df.attrs[
        "n_tokens"]})


def _n_tokens(result: Result) -> int:
    return next(iter((result.parts or {"": result}).values())).attrs["n_tokens"]


def loss_figure(result: Result):
    from analysis.figures.recoding import recoding_plot

    return recoding_plot(result.tables["recoding"], title=f"{result.params['family']} recodings, loss over "
                                                          f"{_n_tokens(result):,} tokens")


def hamming_figure(result: Result):
    from analysis.figures.recoding import disturbance_plot

    df = result.tables["recoding"]
    if not df.hamming.notna().any():
        return None
    return disturbance_plot(df, title=f"{result.params['family']} recodings against the Hamming distance, loss over "
                                      f"{_n_tokens(result):,} tokens")


def summarize(result: Result) -> str:
    df = result.tables["recoding"]
    acc = [c for c in df.columns if c.startswith("acc_")]
    lines = [f"recoding family {result.params['family']}: loss change from each model's own code (mean [min, max] "
             "over draws), mean Hamming distance from the own code and share of token rows on a token's code "
             "(frequency-weighted)" + (", task accuracy mean" if acc else "")]
    for (variant, k), g in df.groupby(["variant", "k"], sort=False):
        line = (f"  {variant} k={k}: own {g.base_loss.iloc[0]:.3f} nats, delta {g.delta_loss.mean():+.3f} "
                f"[{g.delta_loss.min():+.3f}, {g.delta_loss.max():+.3f}]")
        if g.hamming.notna().any():
            line += f", hamming {g.hamming.mean():.2f}, on support {g.on_support.mean():.0%}"
        if "bit_constant" in g and g.bit_constant.notna().any() and bool(g.bit_constant.iloc[0]):
            line += " (a column constant over the vocabulary)"
        line += "".join(f", {c[4:]} {g[c].mean():.0%}" for c in acc)
        lines.append(line)
    if result.params["split"] and df.share_on.notna().any():
        lines.append(landing_summary(df))
    return "\n".join(lines)


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


def measure(model, reference, sizes):
    """Token-row cycles (every variant) and, for the fixed codes, transvection walks, each with the bits it moves
    (``hamming``) and the share of rows it keeps on the code table (``on_support``); the comparison between codes is
    at matched Hamming distance (a walk of k transvections moves canonical and gf2 codes by different amounts)."""
    from analysis.causal.landing import STUDY_SHARES, matched_landing
    from analysis.causal.recoding import WALK, matched_hamming, recoding_sweep
    from analysis.corpus import corpus_tokens
    from analysis.specs.rows import rows

    x = corpus_tokens(model, tokens=sizes.tokens)
    items = []
    runs = [("token-permutation", [32])] + ([("transvection", list(WALK))] if model.cfg.has_code else [])
    for family, ks in runs:
        df = recoding_sweep(model, family, ks, draws=2, data=x, tasks=("ioi",), n_pairs=sizes.n_pairs,
                            split=family == "transvection")
        for k, g in df[df.k > 0].groupby("k"):
            items += [(m, f"{family} k={k}", g[c].mean()) for m, c in (("delta_loss", "delta_loss"),
                                                                       ("hamming", "hamming"),
                                                                       ("on_support", "on_support"))]
        if family == "transvection":
            for r in matched_hamming(df, (0.5, 1.0, 2.0)).itertuples():
                items.append(("delta_loss_at_hamming", f"transvection {r.hamming:g} bits", r.delta_loss))
            for r in matched_landing(df[df.k.isin([1, 2, 4])], STUDY_SHARES, by="k").itertuples():
                items.append(("delta_loss_at_landing", f"transvection k={r.k} landing {100 * r.landing_at:.0f}%",
                              r.delta_loss))
    return rows("recoding", items)


SPEC = Spec(
    name="recoding", group="causal methods",
    help="feed fixed-code models their code through GF(2) maps (no retraining)",
    examples="""
  fixedid-analyze recoding --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 \\
      --family transvection --draws 2
""",
    params=(
        Param("family", "transvection", "the maps: walks of k transvections from the own code, uniform draws from "
              "GL(n,2), bit permutations, one bit offset, the other variant's code, or k token ids' rows cycled",
              choices=tuple(sorted(FAMILIES, key=lambda f: f != "transvection"))),
        Param("draws", 4, "random draws per k", type=types.positive_int),
        Param("ks", None, "comma-separated k values (transvection count, token count, or code column; default: the "
              "family's own)", type=types.int_list),
        shared.data(), shared.tokens(32_768, "tokens of --data to evaluate"),
        Param("tasks", TASKS, "built-in tasks whose accuracy is measured under each map ('none' to skip)",
              type=types.names_or_none),
        shared.n_pairs(64, "pairs per task"), shared.seed("seed of the random draws"),
        Param("split", False, "also measure each GF(2) map applied only to the token ids that land on another "
              "token's code and only to the others (two more passes per map), and print the variants at a matched "
              "landing share (analysis.causal.landing)", switch=True)),
    compute=recode,
    figures={"recoding": loss_figure, "recoding_hamming": hamming_figure},
    summary=summarize,
    library=("analysis.causal.recoding:recoding_sweep",),
    measures=(Measure("recoding", measure),),
)


__all__ = ["SPEC", "recode", "landing_summary", "measure"]

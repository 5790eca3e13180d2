"""``erasure``: LEACE erasure of a concept at hook points against a placebo of matched control concepts
(:mod:`analysis.causal.erasure`); the study's ``erasure`` measurement."""

from __future__ import annotations

from analysis.corpus import MEASURE_TOKENS
from analysis.errors import AnalysisError
from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec


def check(params: dict) -> None:
    if params["by_depth"] and params["hook"]:
        raise AnalysisError("give either --hook or --by-depth, not both")


def erase(model, *, concept, hook, by_depth, data, tokens, test_fraction, placebo_draws, tasks, seed,
          progress=False) -> Result:
    """The erasure table and the per-sequence losses behind its intervals."""
    from analysis.causal.erasure import erasure_tables, resid_hooks

    where = {"hook": resid_hooks(model)} if by_depth else ({"hook": hook} if hook else {})
    df, per_seq = erasure_tables(model, concept, data=data, tokens=tokens, placebo_draws=placebo_draws, tasks=tasks,
                                 seed=seed, test_fraction=test_fraction, progress=progress, **where)
    return Result(tables={"erasure": df, "erasure_sequences": per_seq}, attrs={"n_tokens": df.attrs["n_tokens"]})


def depth_figure(result: Result):
    from analysis.figures.erasure import erasure_depth_figure

    return erasure_depth_figure(result.tables["erasure"])


def summarize(result: Result) -> str:
    df, p = result.tables["erasure"], result.params
    first = df.iloc[0]
    n_tokens = next(iter(result.parts.values())).attrs["n_tokens"]
    lines = [f"LEACE erasure of {', '.join(p['concept'])}: fitted on {first.n_fit_sequences} sequences, measured on "
             f"{first.n_test_sequences} others ({n_tokens:,} tokens); placebo: LEACE of a random type-level concept "
             f"with the same label distribution, {p['placebo_draws']} draws"]
    for (v, concept, hook), g in df.groupby(["variant", "concept", "hook"], sort=False):
        le, pl = g[g.condition == "leace"].iloc[0], g[g.condition == "placebo"]
        none = g[g.condition == "none"].iloc[0]
        lines.append(f"  {v} {concept} at {hook}: probe {none.probe:.2f} -> {le.probe:.2f} (majority "
                     f"{le.majority:.2f}); rank {le['rank']}, edit {le.edit_norm:.3g} against placebo "
                     f"{pl.edit_norm.mean():.3g}; loss change {le.delta_loss:+.3f} against placebo "
                     f"{pl.delta_loss.mean():+.3f}; LEACE minus placebo {le.minus_placebo:+.3f} "
                     f"[{le.minus_placebo_lo:+.3f}, {le.minus_placebo_hi:+.3f}]")
    return "\n".join(lines)


def measure(model, reference, sizes):
    """LEACE of canonical bit 2 (every variant has it) and, for the fixed codes, of the model's own code column at
    the same LSB index, at every depth of the residual stream; the estimand is erasure minus the placebo (LEACE of
    matched random control concepts) per held-out sequence."""
    from analysis.specs.rows import rows

    if model.cfg.n_layers < 2:
        return rows("erasure", [])
    from analysis.causal.erasure import erasure_by_depth

    concepts = {"canonical_bit:2": "canonical_bit"}
    if model.cfg.has_code:
        own = model.cfg.n_bits - 3 if model.cfg.bit_order == "msb" else 2
        concepts[f"code_bit:{own}"] = "own_code_bit"
    df = erasure_by_depth(model, list(concepts), tokens=2 * sizes.tokens, placebo_draws=3, tasks=("ioi",),
                          n_pairs=sizes.n_pairs)
    items = []
    for (concept, hook), g in df.groupby(["concept", "hook"], sort=False):
        key = f"{concepts[concept]}@{hook}"
        le, pl, none = (g[g.condition == c] for c in ("leace", "placebo", "none"))
        items += [("minus_placebo", key, le.minus_placebo.mean()), ("edit_norm_leace", key, le.edit_norm.mean()),
                  ("edit_norm_placebo", key, pl.edit_norm.mean()), ("delta_loss_leace", key, le.delta_loss.mean()),
                  ("delta_loss_placebo", key, pl.delta_loss.mean()), ("probe_after", key, le.probe.mean()),
                  ("rank", key, le["rank"].mean())]
        if len(none):
            items.append(("probe_before", key, none.probe.mean()))
    return rows("erasure", items)


SPEC = Spec(
    name="erasure", group="causal methods",
    help="erase a concept at hook points with LEACE, against a placebo of matched control concepts",
    examples="""
  fixedid-analyze erasure --ckpt fixedid-demo/checkpoints/gf2 --concept canonical_bit:3 \\
      --hook blocks.1.hook_resid_pre
  fixedid-analyze erasure --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/gf2 \\
      --concept canonical_bit:2 --by-depth
""",
    params=(
        Param("concept", None, "what to erase: canonical_bit:I (every variant), code_bit:J (the model's own code), "
              "xor:I,K, token, prev_token or freq_bucket; repeat for several", repeat=True, required=True),
        Param("hook", None, "a hook point erased; repeat for several (default blocks.1.hook_resid_pre)", repeat=True),
        Param("by_depth", False, "erase at every hook point of the residual stream (instead of --hook)",
              switch=True),
        shared.data(), shared.tokens(MEASURE_TOKENS, "tokens to fit and measure on"),
        Param("test_fraction", 0.5, "share of the sequences held out for measurement; the eraser is fitted on the "
              "rest", type=types.open_share),
        Param("placebo_draws", 3, "placebo draws", type=types.positive_int, option="--draws"),
        Param("tasks", ("ioi", "agreement"), "built-in tasks measured under erasure ('none' to skip)",
              type=types.names_or_none),
        shared.seed("seed of the split and of the placebo draws")),
    compute=erase, check=check,
    figures={"erasure": depth_figure},
    summary=summarize,
    library=("analysis.causal.erasure:erasure_tables",),
    measures=(Measure("erasure", measure),),
)


__all__ = ["SPEC", "erase", "measure"]

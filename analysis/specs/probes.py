"""``probes``: linear probes across depth with their controls (:mod:`analysis.readouts.probes`); the study's
``probes`` measurement."""

from __future__ import annotations

import argparse

from analysis.errors import AnalysisError
from analysis.readouts.probes import TARGET_FAMILIES
from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec

DEFAULT_TARGETS = "canonical_bits,xor,perm_bits,token,prev_token,position"
LABELS = "pos_tag,number,depth,ioi_role,fact_entity"


def c_value(text):
    """``cv`` (chosen per target by cross-validation) or a positive inverse L2 strength."""
    if str(text).strip().lower() == "cv":
        return "cv"
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be cv or a positive number, got {text!r}")
    return value


def families_of(params: dict) -> list[str]:
    """The target families probed: ``--targets``, else the defaults (with the latent labels without ``--data``)."""
    text = params["targets"] or (DEFAULT_TARGETS + ("," + LABELS if params["data"] is None else ""))
    return [f.strip() for f in text.split(",") if f.strip()]


def check(params: dict) -> None:
    families = families_of(params)
    unknown = [f for f in families if f not in TARGET_FAMILIES]
    if unknown or not families:
        raise AnalysisError(f"unknown probe target(s) {unknown or '(none)'}; use {', '.join(TARGET_FAMILIES)}")


def probe(model, *, targets, data, tokens, top_k, xor_pairs, C, no_type_split, no_random_init, seed,
          progress=False) -> Result:
    """One model's probe table across depth."""
    from analysis.readouts.activations import collect
    from analysis.readouts.probes import baseline_activations, probe_table

    families = families_of({"targets": targets, "data": data})
    if "code_bits" in families and not model.cfg.has_code:
        raise AnalysisError("code_bits targets need models that read an n-bit code; drop the learned (or "
                            "frozen_random) checkpoint or the target")
    acts = collect(model, data, tokens=tokens, progress=progress)  # the latent labels without --data
    base = None if no_random_init else baseline_activations(model, acts)
    df = probe_table(acts, families, baseline=base, top_k=top_k, xor_pairs=xor_pairs, C=C,
                     splits=("sequence",) if no_type_split else ("sequence", "type"), seed=seed, progress=progress)
    return Result(tables={"probes": df}, attrs=dict(df.attrs))


def _figure(name):
    def draw(result: Result):
        import analysis.figures.probes as figures

        df = result.tables["probes"]
        if name == "probes_types" and not (df.split == "type").any():
            return None
        if name == "probes_xor" and not df.target.str.startswith("xor:").any():
            return None
        fn = {"probes": figures.probe_figure, "probes_selectivity": figures.selectivity_figure,
              "probes_types": figures.type_split_figure, "probes_xor": figures.xor_figure}[name]
        return fn(df)

    return draw


def summarize(result: Result) -> str:
    from analysis.figures.probes import target_group

    df, first = result.tables["probes"], next(iter(result.parts.values())).attrs
    lines = [f"linear probes over {first['n_tokens']:,} tokens (test: {first['n_test']:,}, whole sequences); mean "
             "test score per target group, first / last hook point (in brackets: the control task for type-level "
             "targets, the lexical baseline for contextual labels; 'types': on held-out token types):"]
    for (variant, group, split), g in df.assign(group=df.target.map(target_group)).groupby(
            ["variant", "group", "split"], sort=False):
        g = g[g.status == "fitted"]
        if g.empty:
            continue
        lo, hi = g[g.depth == g.depth.min()], g[g.depth == g.depth.max()]
        ref = "lexical" if (g.level == "context").all() else ("control" if split == "sequence" else "majority")
        lines.append(f"  {variant} {group}{' (types)' if split == 'type' else ''}: {lo.score.mean():.2f} "
                     f"({lo[ref].mean():.2f}) -> {hi.score.mean():.2f} ({hi[ref].mean():.2f})")
    missed = int((df.converged == False).sum())  # noqa: E712 (NA stays out)
    if missed:
        lines.append(f"  {missed} row(s) rest on a fit that did not converge (column 'converged')")
    return "\n".join(lines)


def measure(model, reference, sizes):
    """Probes of the id's canonical bits, the bits of a random relabelling of the ids (frequency-free), grammatical
    number and the IOI role of names, by depth: on held-out sequences (``score``) with the majority baseline, the
    model's own random initialisation (``random_init``) and the reference that fits the target - the control task
    for the type-level bits, each type's majority label (``lexical``) for the contextual labels - and, for the bits,
    on held-out token types (``score_types``: a type-level target memorised per type fails there)."""
    import numpy as np

    from analysis.readouts.activations import collect
    from analysis.readouts.probes import baseline_activations, probe_table
    from analysis.specs.rows import rows

    acts = collect(model, tokens=sizes.tokens)
    df = probe_table(acts, ("canonical_bits", "perm_bits", "number", "ioi_role"),
                     baseline=baseline_activations(model, acts), splits=("sequence", "type"), shuffled=False,
                     C=sizes.probe_c)
    df = df[(df.status == "fitted") & np.isfinite(df.score.astype(float))]  # a mean over the same targets throughout
    df = df.assign(group=df.target.str.split(":").str[0])
    items = []
    for split, suffix in (("sequence", ""), ("type", "_types")):
        d = df[df.split == split]
        for (group, hook), g in d.groupby(["group", "hook"], sort=False):
            reference = "lexical" if (g.level == "context").all() else "control"
            for m in ("score", "majority", "random_init") + ((reference,) if split == "sequence" else ()):
                items.append((m + suffix, f"{group}@{hook}", g[m].mean()))
            items.append(("not_converged" + suffix, f"{group}@{hook}",
                          float((g.converged == False).sum())))  # noqa: E712 (NA: no fit, not a failed one)
    return rows("probes", items)


SPEC = Spec(
    name="probes", group="readouts",
    help="linear probes across depth with control task, lexical, shuffled-label and random-init baselines",
    examples="""
  fixedid-analyze probes --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 \\
      --targets canonical_bits,xor,token
""",
    params=(
        Param("targets", None, f"comma-separated target families (default {DEFAULT_TARGETS}, plus the latent labels "
              f"{LABELS} without --data; also code_bits, freq_bucket)"),
        shared.data(), shared.tokens(16_384, "tokens to probe on"),
        Param("top_k", 32, "token-identity probes: the K most frequent tokens", type=types.at_least(2)),
        Param("xor_pairs", 8, "random pairs of canonical bits to XOR", type=types.nonnegative_int),
        Param("C", "cv", "the inverse L2 strength of the probes: cv (chosen per target by 3-fold cross-validation "
              "over the training sequences on 0.01, 0.1, 1, 10, 100) or a number", type=c_value),
        Param("no_type_split", False, "skip the held-out-token-types split", switch=True),
        Param("no_random_init", False, "skip the random-init baseline", switch=True),
        shared.seed("seed of the splits, the controls and the XOR pairs")),
    compute=probe, check=check,
    figures={name: _figure(name) for name in ("probes", "probes_selectivity", "probes_types", "probes_xor")},
    summary=summarize,
    library=("analysis.readouts.probes:probe_table",),
    measures=(Measure("probes", measure, when="all"),),
)


__all__ = ["SPEC", "DEFAULT_TARGETS", "LABELS", "c_value", "families_of", "probe", "measure"]

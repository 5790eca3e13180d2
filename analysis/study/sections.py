"""The study report's text: its tables, its comparison lines and its sections, written from the tables alone."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.study.comparisons import ORDER, POOLED, variant_order

#: Metrics that live in [0, 1]: their intervals are clipped to it in the figures and the report (the CSVs keep
#: the unclipped Student-t bounds).
BOUNDED = {"accuracy", "acc", "acc_norm", "score", "control", "majority", "probe", "cka"}  # not debiased CKA: it
# can be negative (its null is centred on 0)


def _clip(metric: str, lo, hi):
    return (max(lo, 0.0), min(hi, 1.0)) if metric in BOUNDED and np.isfinite(lo) else (lo, hi)


def _fmt(m, lo, hi, pct=False, n=1) -> str:
    f = (lambda x: f"{100 * x:.0f}%") if pct else (lambda x: f"{x:.3g}")
    if not np.isfinite(m):
        return "-"
    return f"{f(m)} [{f(lo)}, {f(hi)}]" if np.isfinite(lo) else f"{f(m)} ({'one seed' if n <= 1 else 'no interval'})"


def study_pairs(comp: pd.DataFrame) -> pd.DataFrame:
    """The comparisons a study reports: between the three variants (gf2 also pooled over its trained recodings), and
    each further GF(2) recoding against gf2."""
    base = set(ORDER) | {POOLED}
    return comp[comp.b.isin(base) & (comp.a.isin(base) | ((comp.b == "gf2") & comp.a.str.startswith("gf2-r")))]


def table_lines(summary: pd.DataFrame, analysis: str, metric: str, step, pct=False) -> list[str]:
    """A Markdown table of one analysis and metric at ``step``: one row per key, one column per variant, each cell the
    mean [95% interval] over seeds (``pct``: as percentages)."""
    d = summary[(summary.analysis == analysis) & (summary.metric == metric) & (summary.step == step)]
    if d.empty:
        return []
    variants = variant_order(d.variant)
    keys = list(dict.fromkeys(d.key))
    lines = ["| " + metric + " | " + " | ".join(variants) + " |", "|---|" + "---:|" * len(variants)]
    for k in keys:
        cells = []
        for v in variants:
            r = d[(d.key == k) & (d.variant == v)]
            cells.append(_fmt(r["mean"].iloc[0], *_clip(metric, r.lo.iloc[0], r.hi.iloc[0]), pct, r.n.iloc[0])
                         if len(r) else "-")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return lines + [""]


def comparison_lines(comp: pd.DataFrame, analysis: str, metric: str, step) -> list[str]:
    """One Markdown bullet per paired comparison of one analysis and metric at ``step``: the difference, its interval
    and p values, or why there is none."""
    d = study_pairs(comp[(comp.analysis == analysis) & (comp.metric == metric) & (comp.step == step)])
    out = []
    for r in d.itertuples():
        if r.n < 2:
            out.append(f"- {r.key}: {r.a} - {r.b} = {r.diff:+.3g} (one shared seed: no interval)")
            continue
        pooled = POOLED in (r.a, r.b)
        if r.identical:
            verdict = "identical on every seed (no variance: no test)"
        elif pooled and not np.isfinite(r.lo):
            verdict = "no interval (fewer than two seeds with every recoding measured)"
        elif pooled:
            verdict = ("95% interval excludes 0" if r.excludes_zero else "95% interval includes 0") + \
                f"; p = {r.p:.2g} (recodings and seeds random, unadjusted)"
        else:
            verdict = ("95% interval excludes 0" if r.excludes_zero else "95% interval includes 0") + \
                f"; p = {r.p:.2g} (t, unadjusted), {r.p_sign:.2g} (sign-flip)"
        boot = f"; bootstrap over {r.boot}: [{r.boot_lo:+.3g}, {r.boot_hi:+.3g}]" if r.boot else ""
        over = f"{r.n} seeds x the trained recodings" if pooled else f"{r.n} seeds"
        interval = f" [{r.lo:+.3g}, {r.hi:+.3g}]" if np.isfinite(r.lo) else ""
        out.append(f"- {r.key}: {r.a} - {r.b} = {r.diff:+.3g}{interval} over {over}, {verdict}{boot}")
    return out + ([""] if out else [])


#: The report's sections, in order: (title, analysis, metric, whether the values are shares, what is measured).
SECTIONS = [
    ("Behaviours on the built-in tasks", "behaviours", "accuracy", True,
     "Held-out prompts (64 per task); a prompt is correct when the answer's logit beats the wrong answer's."),
    ("lm-eval on the built-in tasks", "eval", "acc", True, "lm-eval's accuracy, 100 documents per task."),
    ("Validation loss", "loss", "val_loss", False, "Next-token loss on 4,096 validation tokens (nats/token)."),
    ("Bit flips", "interventions", "bitflip_delta_loss", False,
     "Loss change when one code column is flipped for every token: mean and largest over the columns that vary over "
     "the vocabulary (constant columns apart). bitflip_on_support: the share of flipped rows that land on another "
     "token's code."),
    ("Bit flips: another token or no token", "interventions", "flip_split_delta_loss", False,
     "A flip's loss change split into its on-support part (the flipped code is another token's: the model sees "
     "that token) and its off-support part (a code no token has), and, for the columns that land on tokens, the "
     "on-support part beside a swap to the landing token (equal by construction) and to a random token."),
    ("Input noise", "interventions", "noise_delta_loss", False,
     "Loss change under Gaussian noise on the input rows at half their RMS, and at the noise level where 90% and 50% "
     "of noised rows still decode to their own token (nearest row): the matched comparison, since the learned "
     "table's rows are not spaced like the code's."),
    ("Recoding without retraining", "recoding", "delta_loss", False,
     "Loss change when the model reads its code through k random transvections, or input rows cycled between k "
     "token ids (token-permutation, every variant); recoding hamming/on_support in measurements.csv say how far "
     "each walk moved the code."),
    ("Recoding at matched disturbance", "recoding", "delta_loss_at_hamming", False,
     "The transvection curve interpolated at common Hamming distances (bits moved per token, frequency-weighted): "
     "a walk of k transvections moves canonical and gf2 codes by different amounts, so equal k is not equal "
     "disturbance."),
    ("Bit flips at a matched landing share", "interventions", "flip_at_landing", False,
     "The mean flip over the varying columns with its on- and off-support parts scaled to a share of the flipped "
     "rows landing on another token's code fixed in advance (analysis.causal.landing; assumes each part scales "
     "with the share of rows it moves): the comparison of the variants matched on landing share rather than on "
     "distance."),
    ("Recoding at a matched landing share", "recoding", "delta_loss_at_landing", False,
     "Transvection walks of k = 1, 2, 4 with their landing and off-code parts scaled to a common share of moved "
     "rows landing on another token's code (analysis.causal.landing): matched on landing share, beside the matched "
     "Hamming distance above; neither is what a claim of the frozen files tests."),
    ("Erasure", "erasure", "minus_placebo", False,
     "Loss change on held-out sequences when LEACE erases canonical bit 2 (and, for the fixed codes, the model's own "
     "code column at the same index) at each depth of the residual stream, minus the change from LEACE of random "
     "type-level control concepts with the same label distribution (the placebo), per sequence (nats)."),
    ("Erasure: the size of the edits", "erasure", "edit_norm_leace", False,
     "Mean squared norm of the LEACE edit per token (the placebo's is edit_norm_placebo in measurements.csv): a "
     "difference in the loss can be a difference in the edit's size."),
    ("IOI patching: information at the final position", "patching", "final", False,
     "Share of the clean IOI behaviour restored by patching the final position's residual stream entering each "
     "layer."),
    ("The IOI circuit: how few edges carry it", "circuits", "recovered", False,
     "Share of the clean-minus-corrupted IOI logit difference recovered when only the top k edges by EAP score are "
     "kept and every other edge carries the corrupted prompt's write (1: the clean behaviour, 0: the corrupted one); "
     "faithfulness_area (the curve's area over the fraction of edges kept) and the complement (the other edges "
     "alone) are in measurements.csv."),
    ("Probes at the final hook points", "probes", "score", False,
     "Held-out probe accuracy (held-out sequences, C chosen by cross-validation on the training sequences), mean "
     "over a group's targets: the id's canonical bits, the bits of a random relabelling of the ids (perm_bit: "
     "frequency-free, since ids are frequency ranks), grammatical number and the IOI role of names. The references "
     "are in measurements.csv and the figure: the control task for the bits, each token type's majority label "
     "(lexical) for the contextual labels, and the model's own random initialisation (random_init)."),
    ("Probes on unseen token types", "probes", "score_types", False,
     "The bit probes tested on token types never seen in training: a target that a probe can only memorise type by "
     "type falls to the majority baseline (majority_types) here."),
    ("Logit lens", "lens", "accuracy", False,
     "Next-token accuracy when the final norm and head read each depth's residual stream (the last row is the model)."),
    ("The output head", "head", "bits_r2", False,
     "Held-out R^2 (5 disjoint folds, bootstrap over tokens) of the head rows from the token id's bits (canonical) "
     "and from the model's own code bits."),
    ("The output head beyond frequency", "head", "bits_partial_r2", False,
     "Partial R^2 of the bits beyond a polynomial in log-frequency (1 - SSE(bits + log-freq) / SSE(log-freq)): ids "
     "are frequency ranks, so bits also spell frequency; logfreq_r2 is frequency alone."),
    ("The output head and a learned input table", "head", "nn_overlap_excess", False,
     "Share of each token's 10 nearest neighbours (cosine) that the head rows and the learned input table of "
     "another seed agree on, minus a null that permutes rows within frequency bins (raw overlap and null in "
     "measurements.csv; biased CKA reads ~0.16 by chance at this size, so the figure shows debiased CKA)."),
    ("Context use", "context", "loss", False,
     "Next-token loss at the same positions (the last 32 of each window, or its second half when shorter) when the model sees only the last k tokens: "
     "`window` masks every attention read to its last k positions at their true positions (the reach grows with "
     "depth), `crop` runs the last k tokens alone (what every training window's start looks like)."),
    ("Attention and MLP", "context", "ablation_delta_loss", False,
     "Loss increase (nats) when a layer's attention or MLP output is replaced by its output at the same position of "
     "another window (resample ablation), each alone, jointly, and the interaction terms (joint minus the sum of "
     "its parts: the effects are not additive)."),
    ("Shares of the joint effect", "context", "ablation_share", False,
     "Each effect as a share of its joint ablation (unclipped; NaN where the joint effect's interval includes 0)."),
    ("Similarity of canonical and gf2 (a study without references)", "similarity", "debiased", False,
     "Debiased linear CKA between the two fixed-code variants of a seed, same hook point."),
]


#: The variants whose similarity the report reads (the study's own; further recodings stay in the CSVs).
SIMILARITY_VARIANTS = ("learned", "canonical", "gf2")


def _study_references(table: pd.DataFrame) -> pd.DataFrame:
    keep = table.variant_a.isin(SIMILARITY_VARIANTS) & table.variant_b.isin(SIMILARITY_VARIANTS)
    return table[keep]


def similarity_lines(reading: pd.DataFrame | None) -> list[str]:
    """The report's similarity section: each pair of the study's variants against its ceiling and null."""
    from analysis.readouts.references import reading_lines

    if reading is None or reading.empty:
        return []
    r = reading[reading.variant_a.isin(SIMILARITY_VARIANTS) & reading.variant_b.isin(SIMILARITY_VARIANTS)]
    lines = reading_lines(r, verdicts=False)
    if not lines:
        return []
    return ["## Similarity with its references", "",
            "Debiased linear CKA at the same hook point (position 0 left out), each cross-variant value beside the "
            "ceiling (the same interface across seeds), the level within one seed (canonical and gf2 of one seed "
            "start from bit-identical backbones, so the same-seed value is inflated by what they share) and a "
            "permutation null; intervals resample seeds (every pair of models leaving and returning with its seeds); "
            "the interval over windows within a seed is in reading.csv. references.csv and reading.csv under "
            "similarity/ hold every measure, Procrustes included, and every pair.", ""] + [f"- {x}" for x in lines] \
        + [""]


def circuit_lines(reading: pd.DataFrame | None) -> list[str]:
    """The report's section on circuits across seeds and variants
    (:func:`analysis.causal.circuit_overlap.overlap_reading`): each pair of variants' top-edge overlap beside each
    variant's own across seeds and chance."""
    if reading is None or reading.empty:
        return []
    from analysis.specs.circuit import CIRCUIT_K

    lines = []
    for (va, vb), g in reading.groupby(["variant_a", "variant_b"], sort=False):
        q = g.set_index("quantity")

        def got(name, q=q):
            value = q.loc[name, "jaccard"] if name in q.index else np.nan
            if not np.isfinite(value):
                return "n/a (one seed)"
            lo, hi = (q.loc[name, "seed_lo"], q.loc[name, "seed_hi"]) if "seed_lo" in q.columns else (np.nan, np.nan)
            return f"{value:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) else "")

        parts = [f"across seeds {got('cross_seed')}" if "cross_seed" in q.index else None,
                 f"within a seed {got('same_seed')}" if "same_seed" in q.index else None]
        lines.append(f"- {vb} vs {va}: {', '.join(p for p in parts if p)}; {va} across its own seeds "
                     f"{got('within_a')}, {vb} {got('within_b')}; chance {q.loc['chance', 'jaccard']:.3f}")
    return ["## Circuits across seeds and variants", "",
            f"The IOI circuit of each final checkpoint is its top {CIRCUIT_K} edges by EAP score on the same prompt "
            "pairs; two checkpoints' circuits are compared by the Jaccard overlap of those edge sets, each mean over "
            "pairs with its 95% interval over seeds (the seeds resampled with every pair they are in). Chance is the "
            "expected overlap of two random edge sets of that size. Shared edges need not do the same thing "
            "(similarity/circuits.csv holds every pair, with the rank correlation of all edge scores).",
            ""] + lines + [""]


#: The comparisons whose unmatched estimand was replaced: (what, the unmatched estimand, the matched one), each
#: (analysis, metric, key).
MATCHED = (
    ("recoding: 4 transvections -> at 1 bit moved", ("recoding", "delta_loss", "transvection k=4"),
     ("recoding", "delta_loss_at_hamming", "transvection 1 bits")),
    ("input noise: half the rows' RMS -> where 50% of rows still decode", ("interventions", "noise_delta_loss",
                                                                           "scale 0.5"),
     ("interventions", "noise_delta_loss", "decode 50%")),
    ("erasure entering block 1: LEACE alone -> LEACE minus its placebo",
     ("erasure", "delta_loss_leace", "canonical_bit@blocks.1.hook_resid_pre"),
     ("erasure", "minus_placebo", "canonical_bit@blocks.1.hook_resid_pre")),
    ("head vs a learned table: neighbour overlap -> its excess over a frequency-binned null",
     ("head", "nn_overlap", "W_U vs learned W_E, k=10"), ("head", "nn_overlap_excess", "W_U vs learned W_E, k=10")),
    ("context of 4 tokens: the last 4 alone (crop) -> every read masked to 4 (window)", ("context", "loss", "crop k=4"),
     ("context", "loss", "window k=4")),
)


def _conclusion(r) -> str:
    if r is None:
        return "not measured"
    if r.n < 2:
        return "one seed"
    if r.identical:
        return "identical on every seed"
    return ("> 0" if r.lo > 0 else "< 0") if r.excludes_zero else "interval includes 0"


def _verdict(r) -> str:
    if r is None:
        return "not measured"
    c = _conclusion(r)
    return f"{r['diff']:+.3g} [{r.lo:+.3g}, {r.hi:+.3g}]: {c}" if np.isfinite(r.lo) else f"{r['diff']:+.3g} ({c})"


def matched_lines(comp: pd.DataFrame, step) -> list[str]:
    """What changed when an unmatched comparison became a matched one: per replaced estimand and pair of the study's
    variants, the paired difference before and after, and whether its conclusion changed."""
    d = study_pairs(comp[comp.step == step])
    rows = []
    for what, old, new in MATCHED:
        for a, b in (("canonical", "learned"), ("gf2", "canonical"), (POOLED, "canonical")):
            got = []
            for an, metric, key in (old, new):
                r = d[(d.analysis == an) & (d.metric == metric) & (d.key == key) & (d.a == a) & (d.b == b)]
                got.append(r.iloc[0] if len(r) else None)
            if got[0] is None and got[1] is None:
                continue
            c = [_conclusion(r) for r in got]
            tested = all(x in ("> 0", "< 0", "interval includes 0") for x in c)
            changed = ("yes" if c[0] != c[1] else "no") if tested else "-"
            rows.append(f"| {what} | {a} - {b} | {_verdict(got[0])} | {_verdict(got[1])} | {changed} |")
    if not rows:
        return []
    return ["## What the matched comparisons changed", "",
            "Each row: a comparison the study used to make (left) and the matched one that replaces it (right), as "
            "paired differences over seeds [95% t interval; gf2 (pooled): seeds and recodings random]; 'changed' "
            "says whether the conclusion (sign, or an interval that includes 0) is different. Units: nats, or "
            "overlap for the head.", "",
            "| estimand | pair | unmatched | matched | changed |", "|---|---|---|---|---|"] + rows + [""]


__all__ = ["BOUNDED", "SECTIONS", "MATCHED", "SIMILARITY_VARIANTS", "study_pairs", "table_lines", "comparison_lines",
           "similarity_lines", "matched_lines"]

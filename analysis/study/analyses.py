"""The study's measurements: one registered function per analysis, each measuring one checkpoint as long-format rows.

To add an analysis, write one function ``fn(model, reference=None)`` that returns its rows (``_rows(name, items)``
with ``items`` ``(metric, key, value)`` triples) and register it with its name and when it runs::

    @register("my_analysis", when="final")  # "all": every kept snapshot and the final checkpoint
    def _my_analysis(model, reference=None) -> pd.DataFrame:
        ...

That one entry in :data:`~analysis.study.analyses.ANALYSES` is all: :func:`~analysis.study.analyses.measure` looks it up
and :func:`analysis.study.pipeline.measure_all` runs it. ``register(..., reference=True)`` passes the learned variant of
another seed as ``reference``. Keep heavy imports inside the function. The sample sizes
(:data:`~analysis.study.analyses.TOKENS`, :data:`~analysis.study.analyses.N_PAIRS`, ...) are module attributes, read at
call time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch

from analysis.errors import AnalysisError

#: Validation tokens per corpus-level measurement.
TOKENS = 4096
#: Task pairs per pair-level measurement.
N_PAIRS = 32
#: The landing shares (of moved rows landing on another token's code) at which bit flips and transvection walks are
#: compared across variants (analysis.causal.landing), fixed in advance so every model is measured at the same ones.
LANDING = (0.75, 0.9)
#: lm-eval documents per built-in task.
EVAL_LIMIT = 100
#: Bootstrap draws over windows of the similarity references.
BOOT = 500
#: The probes' regularisation: chosen per target by cross-validation on the training sequences.
PROBE_C = "cv"


# ------------------------------------------------------------------------------------------------ measurements
@dataclass(frozen=True)
class Analysis:
    """One entry of :data:`~analysis.study.analyses.ANALYSES`: ``fn(model, reference)`` measures one checkpoint as
    long-format rows; ``when``: "all" (every kept snapshot and the final checkpoint) or "final"; ``reference``: whether
    ``fn`` is given the learned variant of another seed (otherwise ``reference`` is None); ``controls``: whether it also
    runs on the control variants (the report's control checks read behaviours and loss)."""

    name: str
    when: str
    fn: Callable[..., pd.DataFrame]
    reference: bool = False
    controls: bool = True


#: The study's analyses by name, in the order they run; filled by :func:`~analysis.study.analyses.register`.
ANALYSES: dict[str, Analysis] = {}


def register(name: str, when: str, *, reference: bool = False, controls: bool = True):
    """Decorator: ``@register("loss", when="all")`` adds ``fn(model, reference) -> rows`` to
    :data:`~analysis.study.analyses.ANALYSES`."""
    if when not in ("all", "final"):
        raise AnalysisError(f"analysis {name!r}: when={when!r} must be 'all' or 'final'")
    if name in ANALYSES:
        raise AnalysisError(f"analysis {name!r} is registered twice")

    def add(fn):
        ANALYSES[name] = Analysis(name, when, fn, reference, controls)
        return fn

    return add


#: The name that selects the similarity of the study's variants (and the overlap of their circuits) in a study's
#: ``analyses``, beside the names of :data:`~analysis.study.analyses.ANALYSES`.
SIMILARITY = "similarity"


def check_analyses(names) -> list[str] | None:
    """``names`` (a list, or a comma-separated string) as a list of the study's analyses (the names of
    :data:`~analysis.study.analyses.ANALYSES` and ``similarity``), or None for all of them; an unknown name raises
    :class:`~analysis.errors.AnalysisError`."""
    if names is None:
        return None
    names = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    known = list(ANALYSES) + [SIMILARITY]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise AnalysisError(f"--analyses {','.join(names)!r}: {'unknown ' + ', '.join(bad) if bad else 'none given'}; "
                            f"choose from {','.join(known)}")
    return list(dict.fromkeys(names))


def _rows(analysis: str, items) -> pd.DataFrame:
    return pd.DataFrame([{"analysis": analysis, "metric": m, "key": str(k), "value": float(v)} for m, k, v in items],
                        columns=["analysis", "metric", "key", "value"])


def measure(analysis: str, model, reference=None) -> pd.DataFrame:
    """One analysis of one checkpoint as long-format rows (see the module docstring); ``reference``: the learned
    variant of another seed, for the analyses registered with ``reference=True`` (the head's comparison with a
    learned input table)."""
    entry = ANALYSES.get(analysis)
    if entry is None:
        raise AnalysisError(f"unknown analysis {analysis!r}; use {list(ANALYSES)}")
    return entry.fn(model, reference)


# The analyses, in the order they run. ``model.cfg.has_code``: a fixed-code variant, for the bit-level analyses
# (flips, transvections, erasure of a code bit).
@register("behaviours", when="all")
def _behaviours(model, reference=None) -> pd.DataFrame:
    from analysis.evaluation.behaviours import pair_scores, summarize

    scores = pair_scores(model, n=64)
    t = summarize(scores)
    df = _rows("behaviours", [(m, r.task, getattr(r, m)) for r in t.itertuples() for m in ("accuracy",
                                                                                            "logit_diff")])
    # per prompt (the same prompts for every seed and variant): the report's bootstrap over seeds and prompts
    df.attrs["items"] = pd.concat([pd.DataFrame({"analysis": "behaviours", "metric": m, "key": scores.task,
                                                 "item": scores.pair, "value": scores[c].astype(float)})
                                   for m, c in (("accuracy", "correct"), ("logit_diff", "logit_diff"))],
                                  ignore_index=True)
    return df


@register("loss", when="all")
def _loss(model, reference=None) -> pd.DataFrame:
    import torch

    from analysis.corpus import corpus_tokens

    x = corpus_tokens(model, tokens=TOKENS)
    with torch.no_grad():
        losses = [float(model(x[i:i + 32], return_type="loss")) * len(x[i:i + 32]) for i in range(0, len(x), 32)]
    return _rows("loss", [("val_loss", "validation", sum(losses) / len(x))])


@register("probes", when="all")
def _probes(model, reference=None) -> pd.DataFrame:
    """Probes of the id's canonical bits, the bits of a random relabelling of the ids (frequency-free), grammatical
    number and the IOI role of names, by depth: on held-out sequences (``score``) with the majority baseline, the
    model's own random initialisation (``random_init``) and the reference that fits the target - the control task
    for the type-level bits, each type's majority label (``lexical``) for the contextual labels - and, for the bits,
    on held-out token types (``score_types``: a type-level target memorised per type fails there)."""
    from analysis.readouts.activations import collect
    from analysis.readouts.probes import baseline_activations, probe_table

    acts = collect(model, tokens=TOKENS)
    df = probe_table(acts, ("canonical_bits", "perm_bits", "number", "ioi_role"),
                     baseline=baseline_activations(model, acts), splits=("sequence", "type"), shuffled=False,
                     C=PROBE_C)
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
    return _rows("probes", items)


@register("lens", when="all")
def _lens(model, reference=None) -> pd.DataFrame:
    from analysis.readouts.lens import logit_lens

    df = logit_lens(model, tokens=TOKENS)
    return _rows("lens", [(m, f"lens@{r.hook}", getattr(r, m)) for r in df.itertuples() for m in ("accuracy", "kl")])


@register("eval", when="final", controls=False)  # the control checks read behaviours and loss
def _eval(model, reference=None) -> pd.DataFrame:
    from analysis.evaluation.lmeval import evaluate_table

    t = evaluate_table(model, limit=EVAL_LIMIT, bootstrap_iters=0)  # the study reads values, not lm-eval's stderr
    return _rows("eval", [(r.metric, r.task, r.value) for r in t.itertuples()])


@register("patching", when="final")
def _patching(model, reference=None) -> pd.DataFrame:
    import warnings

    from analysis.errors import AnalysisWarning
    from analysis.causal.flow import information_flow
    from analysis.causal.patching import MIN_GAP, activation_patching
    from analysis.tasks import task_pairs

    with warnings.catch_warnings():  # a small gap is recorded below and its flow left out
        warnings.simplefilter("ignore", AnalysisWarning)
        df = activation_patching(model, task_pairs(model, "ioi", 16), metric="normalized_logit_diff")
    gap = df.attrs["raw_clean"] - df.attrs["raw_corrupt"]
    items = [("clean_corrupt_gap", "ioi", gap)]
    if abs(gap) >= MIN_GAP:
        f = information_flow(df).to_frame()
        items += [(m, f"layer {int(r.layer)}", getattr(r, m)) for r in f.itertuples() for m in ("source", "final")]
    return _rows("patching", items)


@register("interventions", when="final")
def _interventions(model, reference=None) -> pd.DataFrame:
    """Bit flips over the code columns that vary (constant ones apart), split into the part that lands on another
    token's code and the part that lands on none, each beside a swap to the landing token and to a random one; input
    noise at several scales, compared at matched nearest-row decoding accuracy."""
    from analysis.corpus import corpus_tokens
    from analysis.causal.flipsplit import flip_split, split_table
    from analysis.causal.interventions import bit_groups, input_intervention, matched_decoding
    from analysis.causal.landing import matched_landing, split_parts

    x = corpus_tokens(model, tokens=TOKENS)
    items = []
    if model.cfg.has_code:
        s = input_intervention(model, "bitflip", x).summary
        groups = bit_groups(s).set_index("group")
        for group in groups.index:
            g = groups.loc[group]
            items += [("bitflip_delta_loss", f"mean over {group} bits", g.mean_delta_loss),
                      ("bitflip_delta_loss", f"largest {group} bit", g.max_delta_loss),
                      ("bitflip_on_support", f"mean over {group} bits", g.mean_on_support)]
        varying = s[~s.bit_constant.astype(bool)].bit.astype(int).tolist()
        if varying:
            sp = split_table(flip_split(model, x, bits=varying).summary)
            on = sp[sp.on_support > 0]
            items += [("flip_split_delta_loss", part, sp[part].mean()) for part in ("flip", "on", "off")]
            parts = split_parts(sp).assign(delta_loss=sp.flip, bits="varying")  # one group: the varying bits
            for r in matched_landing(parts, LANDING, by="bits").itertuples():
                items.append(("flip_at_landing", f"landing {100 * r.landing_at:.0f}%", r.delta_loss))
            if len(on):  # over the bits that land on tokens: the on-support part (a swap to the landing token)
                # beside a swap to a random token at the same positions, so both average the same bits
                items += [("flip_split_delta_loss", f"{label} (bits landing on tokens)", on[part].mean())
                          for part, label in (("on", "on"), ("random", "random swap"))]
    n = input_intervention(model, "noise", x, scales=(0.25, 0.5, 1.0, 2.0, 4.0)).summary
    items += [("noise_delta_loss", "scale 0.5", n[n.scale == 0.5].delta_loss.mean()),
              ("noise_decode_acc", "scale 0.5", n[n.scale == 0.5].decode_acc.mean())]
    for r in matched_decoding(n, (0.9, 0.5)).itertuples():
        items.append(("noise_delta_loss", f"decode {100 * r.decode_acc:.0f}%", r.delta_loss))
    return _rows("interventions", items)


@register("recoding", when="final")
def _recoding(model, reference=None) -> pd.DataFrame:
    """Token-row cycles (every variant) and, for the fixed codes, transvection walks, each with the bits it moves
    (``hamming``) and the share of rows it keeps on the code table (``on_support``); the comparison between codes is
    at matched Hamming distance (a walk of k transvections moves canonical and gf2 codes by different amounts)."""
    from analysis.corpus import corpus_tokens
    from analysis.causal.landing import matched_landing
    from analysis.causal.recoding import matched_hamming, recoding_sweep

    x = corpus_tokens(model, tokens=TOKENS)
    items = []
    # k = 0 (the own code: 0 bits, 0 nats) anchors the matched curve, so a code whose first transvection already moves
    # it more than 0.5 bits (gf2) still has a value at 0.5 bits
    runs = [("token-permutation", [32])] + ([("transvection", [0, 1, 2, 4, 8, 16])] if model.cfg.has_code else [])
    for family, ks in runs:
        df = recoding_sweep(model, family, ks, draws=2, data=x, tasks=("ioi",), n_pairs=N_PAIRS,
                            split=family == "transvection")
        for k, g in df[df.k > 0].groupby("k"):
            items += [("delta_loss", f"{family} k={k}", g.delta_loss.mean()),
                      ("hamming", f"{family} k={k}", g.hamming.mean()),
                      ("on_support", f"{family} k={k}", g.on_support.mean())]
        if family == "transvection":
            for r in matched_hamming(df, (0.5, 1.0, 2.0)).itertuples():
                items.append(("delta_loss_at_hamming", f"transvection {r.hamming:g} bits", r.delta_loss))
            for r in matched_landing(df[df.k.isin([1, 2, 4])], LANDING, by="k").itertuples():
                items.append(("delta_loss_at_landing", f"transvection k={r.k} landing {100 * r.landing_at:.0f}%",
                              r.delta_loss))
    return _rows("recoding", items)


@register("erasure", when="final")
def _erasure(model, reference=None) -> pd.DataFrame:
    """LEACE of canonical bit 2 (every variant has it) and, for the fixed codes, of the model's own code column at
    the same LSB index, at every depth of the residual stream; the estimand is erasure minus the placebo (LEACE of
    matched random control concepts) per held-out sequence."""
    if model.cfg.n_layers < 2:
        return _rows("erasure", [])
    from analysis.causal.erasure import erasure_by_depth

    concepts = {"canonical_bit:2": "canonical_bit"}
    if model.cfg.has_code:
        own = model.cfg.n_bits - 3 if model.cfg.bit_order == "msb" else 2
        concepts[f"code_bit:{own}"] = "own_code_bit"
    df = erasure_by_depth(model, list(concepts), tokens=2 * TOKENS, placebo_draws=3, tasks=("ioi",),
                          n_pairs=N_PAIRS)
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
    return _rows("erasure", items)


@register("head", when="final", reference=True)
def _head(model, reference=None) -> pd.DataFrame:
    """The output head's geometry; ``reference``: the learned variant of another seed (never the same run)."""
    from analysis.readouts.head import head_geometry

    df = head_geometry(model, reference, progress=False)
    items = [(r.measure, r.basis, r.value) for r in df.itertuples()]
    for r in df.itertuples():
        if r.null_mean == r.null_mean:
            items += [(f"{r.measure}_null", r.basis, r.null_mean), (f"{r.measure}_excess", r.basis,
                                                                     r.value - r.null_mean)]
    return _rows("head", items)


@register("context", when="final")
def _context(model, reference=None) -> pd.DataFrame:
    from analysis.corpus import corpus_tokens
    from analysis.causal.context import component_effects, context_curve

    x = corpus_tokens(model, tokens=TOKENS)
    curve = context_curve(model, x, ks=(1, 4, 16), positions=min(32, x.shape[1] // 2), mask=("window", "crop"))
    eff = component_effects(model, x, how="resample", seed=0)
    rows = [("loss", "whole window" if r.mask == "none" else f"{r.mask} k={int(r.k)}", r.loss)
            for r in curve.itertuples()]
    rows += [("ablation_delta_loss", r.effect, r.delta_loss) for r in eff.itertuples()]
    rows += [("ablation_share", r.effect, r.share) for r in eff.itertuples() if r.share == r.share]
    return _rows("context", rows)


#: The circuits' size: the top CIRCUIT_K edges by EAP score are the circuit that is checked and compared.
CIRCUIT_K = 32


@register("circuits", when="final", controls=False)
def _circuits(model, reference=None) -> pd.DataFrame:
    """The IOI circuit: EAP edge scores on the study's IOI pairs, the faithfulness curve (corrupt ablation of the
    rest) at a few k and its area, and the top CIRCUIT_K edges' recovered share and complement."""
    from analysis.causal.circuits import circuit_checks, faithfulness_curve
    from analysis.causal.edges import edge_attribution
    from analysis.tasks import task_pairs

    pairs = task_pairs(model, "ioi", N_PAIRS)
    scores = edge_attribution(model, pairs)
    ks = sorted({0, CIRCUIT_K // 2, CIRCUIT_K, 2 * CIRCUIT_K, len(scores)} & set(range(len(scores) + 1)))
    curve = faithfulness_curve(model, pairs, scores, ks=ks)
    kept = scores.loc[scores.score.abs().sort_values(ascending=False, kind="stable").index[:CIRCUIT_K]]
    checks = circuit_checks(model, pairs, kept, minimality=False)
    items = [("recovered", f"top {int(r.k)} edges", r.recovered) for r in curve.itertuples()]
    items += [("faithfulness_area", "edges", curve.attrs["area"]),
              ("complement", f"top {CIRCUIT_K} edges", checks.attrs["complement"]),
              ("clean_corrupt_gap", "ioi", curve.attrs["clean"] - curve.attrs["corrupt"])]
    return _rows("circuits", items)


def circuit_overlap_of(models: dict) -> pd.DataFrame:
    """The overlap of the top CIRCUIT_K EAP edges of ``{(variant, seed): model or checkpoint directory}`` on the
    study's IOI pairs (:func:`analysis.causal.circuit_overlap.circuit_overlap`)."""
    from analysis.causal.circuit_overlap import circuit_overlap_of_models
    from analysis.loading import load
    from analysis.tasks import task_pairs

    loaded = {k: load(m) if not isinstance(m, torch.nn.Module) else m for k, m in models.items()}
    return circuit_overlap_of_models(loaded, lambda m: task_pairs(m, "ioi", N_PAIRS), CIRCUIT_K)


__all__ = ["ANALYSES", "SIMILARITY", "Analysis", "register", "check_analyses", "measure", "TOKENS", "N_PAIRS", "EVAL_LIMIT", "BOOT", "PROBE_C", "CIRCUIT_K",
           "circuit_overlap_of"]

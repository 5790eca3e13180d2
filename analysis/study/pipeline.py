"""The study pipeline: train every variant for every seed, measure every checkpoint, report over seeds.

    python -m experiments.study --config tiny --seeds 0-4 --gf2-seeds 0,1,2 --out study/

For each seed (``[train] seed``: initialisation and data order) the three variants and their controls
(:data:`DEFAULT_VARIANTS`; :mod:`analysis.study.controls` says what each removes) are trained into
``OUT/runs/seed<S>``, and for each further GF(2) recoding of ``--gf2-seeds`` (``[model] gf2_seed``; the first listed
is the ``gf2`` variant itself) a ``gf2-r<R>`` variant into ``OUT/runs/seed<S>-gf2r<R>``: several *trained*
recodings, since "not tied to one binary assignment" is a claim about training. Every checkpoint - the final one and
the snapshots ``[train] keep`` asks for - is measured (:data:`ANALYSES`: behaviours, loss, probes and the logit
lens at every kept step; lm-eval, IOI patching flow, bit flips and noise, recoding, erasure, head geometry and context
use at the end), one CSV per (seed, variant, step, analysis) under ``OUT/measurements``, each written whole or not at
all. A run is restartable at any point: a finished training or measurement is never redone, an interrupted training
resumes from its last checkpoint. Then :mod:`analysis.study.report` aggregates over seeds (Student-t 95% intervals;
paired per-seed differences between variants), draws the figures and writes ``OUT/report.md``.

Measurements are long-format rows ``analysis, metric, key, value`` (``key``: a task, a target group at a hook point,
a layer...); the behaviours' per-prompt scores are kept beside them under ``OUT/items``. The similarity of the
study's own variants is measured once over every seed, with its references (the ceiling of one interface across
seeds, cross-interface levels across and within seeds, the initialisation, a null), under ``OUT/similarity``.

To add an analysis, write one function ``fn(model, reference=None)`` that returns its rows (``_rows(name, items)``
with ``items`` ``(metric, key, value)`` triples) and register it with its name and when it runs::

    @register("my_analysis", when="final")  # "all": every kept snapshot and the final checkpoint
    def _my_analysis(model, reference=None) -> pd.DataFrame:
        ...

That one entry in :data:`ANALYSES` is all: :func:`measure` looks it up and :func:`measure_all` runs it and writes
``OUT/measurements/seed<S>/<variant>/step<N>/my_analysis.csv``. ``register(..., reference=True)`` passes the learned
variant of another seed (the next one, cyclically) as ``reference``: never the same run, whose variants share an
initialisation and a data order. Keep heavy imports inside the function.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from fixedid.atomic import write_text_atomic
from fixedid.train.config import TrainConfig

from analysis.errors import AnalysisError

BASE_VARIANTS = ("learned", "canonical", "gf2")
#: What the study trains by default: the three variants and their controls (analysis.study.controls says which
#: difference each control tests).
DEFAULT_VARIANTS = BASE_VARIANTS + ("permuted", "frozen_random", "canonical-matched", "learned-randomhead",
                                    "canonical-randomhead")
TOKENS = 4096  # validation tokens per corpus-level measurement
N_PAIRS = 32  # task pairs per pair-level measurement
EVAL_LIMIT = 100  # lm-eval documents per built-in task
BOOT = 500  # bootstrap draws over windows of the similarity references
PROBE_C = "cv"  # the probes' regularisation: chosen per target by cross-validation on the training sequences


def parse_seeds(text: str, what: str = "--seeds") -> list[int]:
    """``"0,1,2"`` or ``"0-2"`` (or a mix, ``"0-2,5"``) -> distinct non-negative integers in the order given (the
    first of ``--gf2-seeds`` is the gf2 variant's recoding, so ``3,0`` is not ``0,3``)."""
    seeds = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise AnalysisError(f"{what} {text!r} does not parse: give integers like 0,1,2 or a range like 0-2")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        seeds += range(lo, hi + 1)
    return list(dict.fromkeys(seeds))


# --------------------------------------------------------------------------------------------------- training
def training_runs(cfg: TrainConfig, seeds, gf2_seeds, variants=BASE_VARIANTS) -> list[tuple[int, str, TrainConfig, Path,
                                                                                  list[str]]]:
    """``(seed, run name, config, run dir relative to OUT/runs, variants)`` for every training run."""
    base_gf2 = gf2_seeds[0]
    model = dict(cfg.model)
    out = []
    for s in seeds:
        c = TrainConfig(model={**model, "gf2_seed": base_gf2} if base_gf2 else model, data=cfg.data,
                        train=cfg.replace_train(seed=s).train)
        out.append((s, f"seed{s}", c, Path(f"seed{s}"), list(variants)))
        for r in gf2_seeds[1:]:
            c = TrainConfig(model={**model, "gf2_seed": r}, data=cfg.data, train=cfg.replace_train(seed=s).train)
            out.append((s, f"seed{s}-gf2r{r}", c, Path(f"seed{s}-gf2r{r}"), ["gf2"]))
    return out



def train_all(cfg: TrainConfig, out: Path, seeds, gf2_seeds, *, variants=BASE_VARIANTS, quiet: bool = False) -> dict:
    """Train what is not trained yet; returns ``{(seed, variant name): run dir of that variant}``."""
    from fixedid import train

    ckpts = {}
    for s, name, c, rel, variants in training_runs(cfg, seeds, gf2_seeds, variants):
        run_dir = out / "runs" / rel
        if not train.run_complete(run_dir, c, variants):
            if not quiet:
                print(f"training {', '.join(variants)} of {name} into {run_dir}")
            train.train(c, run_dir, variants, resume=(run_dir / "run.json").exists(), quiet=quiet)
        for v in variants:
            label = v if name == f"seed{s}" else f"gf2-r{name.split('gf2r')[1]}"
            ckpts[(s, label)] = run_dir / v
    return ckpts


def checkpoints_of(variant_dir: Path, cfg: TrainConfig) -> dict[int, Path]:
    """``{step: checkpoint dir}``: the kept snapshots and the final checkpoint."""
    from fixedid import train

    out = {k: train.kept_dir(variant_dir, k) for k in cfg.train.snapshot_steps}
    out[cfg.train.steps] = variant_dir
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------------ measurements
@dataclass(frozen=True)
class Analysis:
    """One entry of :data:`ANALYSES`: ``fn(model, reference)`` measures one checkpoint as long-format rows;
    ``when``: "all" (every kept snapshot and the final checkpoint) or "final"; ``reference``: whether ``fn`` is
    given the learned variant of another seed (otherwise ``reference`` is None); ``controls``: whether it also runs
    on the control variants (the report's control checks read behaviours and loss)."""

    name: str
    when: str
    fn: Callable[..., pd.DataFrame]
    reference: bool = False
    controls: bool = True


#: The study's analyses by name, in the order they run; filled by :func:`register`.
ANALYSES: dict[str, Analysis] = {}


def register(name: str, when: str, *, reference: bool = False, controls: bool = True):
    """Decorator: ``@register("loss", when="all")`` adds ``fn(model, reference) -> rows`` to :data:`ANALYSES`."""
    if when not in ("all", "final"):
        raise AnalysisError(f"analysis {name!r}: when={when!r} must be 'all' or 'final'")
    if name in ANALYSES:
        raise AnalysisError(f"analysis {name!r} is registered twice")

    def add(fn):
        ANALYSES[name] = Analysis(name, when, fn, reference, controls)
        return fn

    return add


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
    df = df[df.status == "fitted"].assign(group=df.target.str.split(":").str[0])
    items = []
    for split, suffix in (("sequence", ""), ("type", "_types")):
        d = df[df.split == split]
        for (group, hook), g in d.groupby(["group", "hook"], sort=False):
            reference = "lexical" if (g.level == "context").all() else "control"
            for m in ("score", "majority", "random_init") + ((reference,) if split == "sequence" else ()):
                items.append((m + suffix, f"{group}@{hook}", g[m].mean()))
            items.append(("not_converged" + suffix, f"{group}@{hook}", float((~g.converged.astype(bool)).sum())))
    return _rows("probes", items)


@register("lens", when="all")
def _lens(model, reference=None) -> pd.DataFrame:
    from analysis.readouts.lens import logit_lens

    df = logit_lens(model, tokens=TOKENS)
    return _rows("lens", [(m, f"lens@{r.hook}", getattr(r, m)) for r in df.itertuples() for m in ("accuracy", "kl")])


@register("eval", when="final", controls=False)  # lm-eval takes ~30 s per tiny checkpoint
def _eval(model, reference=None) -> pd.DataFrame:
    from analysis.evaluation.lmeval import evaluate_table

    t = evaluate_table(model, limit=EVAL_LIMIT)
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
            if len(on):  # the on-support part is a swap to the landing token; beside it, a swap to a random one
                items.append(("flip_split_delta_loss", "random swap (bits landing on tokens)", on["random"].mean()))
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
    from analysis.causal.recoding import matched_hamming, recoding_sweep

    x = corpus_tokens(model, tokens=TOKENS)
    items = []
    runs = [("token-permutation", [32])] + ([("transvection", [1, 2, 4, 8, 16])] if model.cfg.has_code else [])
    for family, ks in runs:
        df = recoding_sweep(model, family, ks, draws=2, data=x, tasks=("ioi",), n_pairs=N_PAIRS)
        for k, g in df[df.k > 0].groupby("k"):
            items += [("delta_loss", f"{family} k={k}", g.delta_loss.mean()),
                      ("hamming", f"{family} k={k}", g.hamming.mean()),
                      ("on_support", f"{family} k={k}", g.on_support.mean())]
        if family == "transvection":
            for r in matched_hamming(df, (0.5, 1.0, 2.0)).itertuples():
                items.append(("delta_loss_at_hamming", f"transvection {r.hamming:g} bits", r.delta_loss))
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


def _write(df: pd.DataFrame, path: Path) -> None:
    from analysis.outputs import write_csv

    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(df, path)


def _is_base(variant: str) -> bool:
    """The study's own variants (learned, canonical, gf2 and its further recodings gf2-r<R>), not a control."""
    return variant in BASE_VARIANTS or variant.startswith("gf2-r")


def _other_seed(seed: int, ckpts: dict) -> int | None:
    """The seed whose learned variant is ``seed``'s reference: the next seed with one, cyclically (never ``seed``
    itself: one seed's variants share an initialisation and a data order)."""
    others = sorted(s for s, v in ckpts if v == "learned" and s != seed)
    return next((s for s in others if s > seed), others[0] if others else None)


def measure_all(cfg: TrainConfig, out: Path, ckpts: dict, *, quiet: bool = False) -> None:
    """Every analysis of every checkpoint that has no measurement file yet, and the similarity of the study's
    variants with its references (:func:`measure_similarity`)."""
    from tqdm.auto import tqdm

    from analysis.loading import load

    todo = []
    for (seed, variant), vdir in ckpts.items():
        for step, cdir in checkpoints_of(vdir, cfg).items():
            for analysis, entry in ANALYSES.items():
                if not entry.controls and not _is_base(variant):
                    continue
                if entry.when == "all" or step == cfg.train.steps:
                    path = out / "measurements" / f"seed{seed}" / variant / f"step{step}" / f"{analysis}.csv"
                    if not path.exists():
                        todo.append((seed, variant, step, cdir, analysis, path))
    loaded: dict = {}
    for seed, variant, step, cdir, analysis, path in tqdm(todo, desc="measurements", unit="run", disable=quiet):
        if cdir not in loaded:
            loaded.clear()
            loaded[cdir] = load(cdir)
        reference = None
        other = _other_seed(seed, ckpts)
        if ANALYSES[analysis].reference and other is not None:
            reference = load(ckpts[(other, "learned")])
        rows = measure(analysis, loaded[cdir], reference)
        if "items" in rows.attrs:  # per-item values beside the measurement, written first (the measurement marks done)
            _write(rows.attrs["items"], out / "items" / path.relative_to(out / "measurements"))
        _write(rows, path)
    measure_similarity(cfg, out, ckpts, quiet=quiet)


def measure_similarity(cfg: TrainConfig, out: Path, ckpts: dict, *, quiet: bool = False) -> Path | None:
    """CKA and Procrustes similarity of the study's own variants' final checkpoints with their references (the
    same interface across seeds, across interfaces across seeds and within a seed, each model against its
    initialisation, a permutation null; :func:`analysis.readouts.references.similarity_references`), into
    ``OUT/similarity/step<N>/references.csv`` and ``reading.csv``; redone only when the set of models changed
    (``models.json``). Returns the directory, or None with fewer than two models."""
    from analysis.readouts.references import similarity_references

    models = {(v, s): d for (s, v), d in sorted(ckpts.items()) if _is_base(v)}
    if len(models) < 2:
        return None
    where = out / "similarity" / f"step{cfg.train.steps}"
    names = sorted(f"{v}@seed{s}" for v, s in models)
    record = where / "models.json"
    if (where / "reading.csv").exists() and record.exists() and json.loads(record.read_text()) == names:
        return where
    refs = similarity_references(models, tokens=TOKENS, boot=BOOT, null_draws=10, seed=0, progress=not quiet)
    _write(refs.table, where / "references.csv")
    _write(refs.reading(), where / "reading.csv")
    write_text_atomic(record, json.dumps(names))
    return where


def collect_measurements(out: Path) -> pd.DataFrame:
    """Every measurement file under ``OUT/measurements`` as one table with ``seed, variant, step`` columns."""
    frames = []
    for path in sorted((out / "measurements").glob("seed*/*/step*/*.csv")):
        df = pd.read_csv(path, dtype={"key": str})
        if df.empty:
            continue
        seed, variant, step = path.parts[-4], path.parts[-3], path.parts[-2]
        frames.append(df.assign(seed=int(seed[4:]), variant=variant, step=int(step[4:])))
    if not frames:
        raise AnalysisError(f"{out} holds no measurements (OUT/measurements/seed*/<variant>/step*/*.csv)")
    df = pd.concat(frames, ignore_index=True)
    return df[["analysis", "metric", "key", "variant", "seed", "step", "value"]]


def collect_items(out: Path) -> pd.DataFrame | None:
    """Every per-item file under ``OUT/items`` (the behaviours' per-prompt scores) with ``seed, variant, step``
    columns, or None when there are none."""
    frames = []
    for path in sorted((out / "items").glob("seed*/*/step*/*.csv")):
        df = pd.read_csv(path, dtype={"key": str})
        seed, variant, step = path.parts[-4], path.parts[-3], path.parts[-2]
        frames.append(df.assign(seed=int(seed[4:]), variant=variant, step=int(step[4:])))
    return pd.concat(frames, ignore_index=True) if frames else None


# ------------------------------------------------------------------------------------------------------- main
def run_study(config, out, seeds, gf2_seeds=(0,), *, variants=DEFAULT_VARIANTS, quiet: bool = False) -> Path:
    """Train, measure, aggregate and report (see the module docstring); returns the report's path. ``variants``:
    the trainer's variant names (default: the three and their controls, :data:`DEFAULT_VARIANTS`)."""
    from fixedid.config import VARIANTS

    from analysis.study.report import load_similarity, write_results

    cfg = config if isinstance(config, TrainConfig) else TrainConfig.load(config)
    out = Path(out)
    seeds, gf2_seeds = list(seeds), list(dict.fromkeys(gf2_seeds))
    if not seeds or not gf2_seeds:
        raise AnalysisError("give at least one seed and one GF(2) seed")
    variants = list(dict.fromkeys(variants))
    if not variants or any(v not in VARIANTS for v in variants):
        raise AnalysisError(f"variants {variants} must be names from {list(VARIANTS)}")
    record = out / "study.json"
    if record.exists():
        old = json.loads(record.read_text())
        if old.get("config") != cfg.to_dict():
            raise AnalysisError(f"{out} holds a study of another config; use another --out or the same config")
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(record, json.dumps({"config": cfg.to_dict(), "seeds": seeds, "gf2_seeds": gf2_seeds},
                                         indent=1))
    ckpts = train_all(cfg, out, seeds, gf2_seeds, variants=variants, quiet=quiet)
    measure_all(cfg, out, ckpts, quiet=quiet)
    df = collect_measurements(out)
    df = df[df.seed.isin(seeds)]
    items = collect_items(out)
    items = items[items.seed.isin(seeds)] if items is not None else None
    return write_results(df, out, meta={"seeds": seeds, "gf2_seeds": gf2_seeds, "steps": cfg.train.steps,
                                        "keep": cfg.train.snapshot_steps}, items=items,
                         similarity=load_similarity(out))


def main(argv=None) -> None:
    from fixedid.clitools import ArgumentParser, run_main

    p = ArgumentParser(prog="python -m experiments.study", description=__doc__.split("\n")[0])
    p.add_argument("--config", default="tiny", help="training config: a TOML file or a packaged name (default tiny)")
    p.add_argument("--seeds", default="0,1,2", help="training seeds, e.g. 0,1,2 or 0-4 (default 0,1,2)")
    p.add_argument("--gf2-seeds", default="0", help="GF(2) recodings to train, e.g. 0,1,2: the first is the gf2 "
                   "variant, each further one a gf2-r<R> variant (default 0)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="trainer variants (default: "
                   f"{','.join(DEFAULT_VARIANTS)}, the three and their controls; learned,canonical,gf2 for the three "
                   "alone)")
    p.add_argument("--out", required=True, help="study directory (restartable: finished work is kept)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    def go():
        path = run_study(args.config, args.out, parse_seeds(args.seeds), parse_seeds(args.gf2_seeds, "--gf2-seeds"),
                         variants=[v.strip() for v in args.variants.split(",") if v.strip()], quiet=args.quiet)
        print(f"wrote {path} with its figures and CSVs in {Path(args.out)}")
        return 0

    run_main("study", go)


__all__ = ["ANALYSES", "Analysis", "register", "parse_seeds", "training_runs", "train_all", "measure", "measure_all",
           "collect_measurements", "collect_items", "measure_similarity", "run_study", "main"]

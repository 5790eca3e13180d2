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

That one entry in :data:`ANALYSES` (:mod:`analysis.study.analyses`) is all: :func:`measure` looks it up and
:func:`measure_all` runs it and writes
``OUT/measurements/seed<S>/<variant>/step<N>/my_analysis.csv``. ``register(..., reference=True)`` passes the learned
variant of another seed (the next one, cyclically) as ``reference``: never the same run, whose variants share an
initialisation and a data order. Keep heavy imports inside the function.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from fixedid.atomic import write_text_atomic
from fixedid.train.config import TrainConfig

from analysis.errors import AnalysisError
from analysis.study import analyses
from analysis.study.analyses import ANALYSES, Analysis, measure, register  # noqa: F401 (the registry's home)

BASE_VARIANTS = ("learned", "canonical", "gf2")
#: What the study trains by default: the three variants and their controls (analysis.study.controls says which
#: difference each control tests).
DEFAULT_VARIANTS = BASE_VARIANTS + ("permuted", "frozen_random", "canonical-matched", "learned-randomhead",
                                    "canonical-randomhead")

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
        c = TrainConfig(model={**model, "gf2_seed": base_gf2}, data=cfg.data,
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
    refs = similarity_references(models, tokens=analyses.TOKENS, boot=analyses.BOOT, null_draws=10, seed=0,
                                 progress=not quiet)
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

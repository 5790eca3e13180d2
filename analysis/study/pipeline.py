"""The study pipeline: train every variant for every seed, measure every checkpoint, report over seeds."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fixedid.atomic import write_text_atomic
from fixedid.train.config import TrainConfig

from analysis.errors import AnalysisError
from analysis.outputs import read_csv
from analysis.study import analyses
from analysis.study.analyses import ANALYSES, SIMILARITY, Analysis, check_analyses, measure, register  # noqa: F401
from analysis.study.crosscoders import CROSSCODERS, crosscoders_done, measure_crosscoders
from analysis.study.claims import DEFAULT_CLAIMS, load_claims

#: The study's three variants, what the training helpers train by default. Every analysis measures them and the further
#: gf2 recodings; the controls, every analysis not registered with ``controls=False``.
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
    out = []
    for s in seeds:
        train = cfg.replace_train(seed=s).train
        c = TrainConfig(model={**cfg.model, "gf2_seed": gf2_seeds[0]}, data=cfg.data, train=train)
        out.append((s, f"seed{s}", c, Path(f"seed{s}"), list(variants)))
        for r in gf2_seeds[1:]:
            c = TrainConfig(model={**cfg.model, "gf2_seed": r}, data=cfg.data, train=train)
            out.append((s, f"seed{s}-gf2r{r}", c, Path(f"seed{s}-gf2r{r}"), ["gf2"]))
    return out


def train_all(cfg: TrainConfig, out: Path, seeds, gf2_seeds, *, variants=BASE_VARIANTS, quiet: bool = False) -> dict:
    """Train what is not trained yet; returns ``{(seed, variant name): run dir of that variant}``."""
    from fixedid import train

    for s, name, c, rel, run_variants in training_runs(cfg, seeds, gf2_seeds, variants):
        run_dir = out / "runs" / rel
        if not train.run_complete(run_dir, c, run_variants):
            if not quiet:
                print(f"training {', '.join(run_variants)} of {name} into {run_dir}")
            train.train(c, run_dir, run_variants, resume=(run_dir / "run.json").exists(), quiet=quiet)
    return checkpoint_dirs(cfg, out, seeds, gf2_seeds, variants)


def variant_label(seed: int, run_name: str, variant: str) -> str:
    """The study's name of a trainer variant: itself in the seed's own run, ``gf2-r<R>`` in a recoding's run."""
    return variant if run_name == f"seed{seed}" else f"gf2-r{run_name.split('gf2r')[1]}"


def checkpoint_dirs(cfg: TrainConfig, out: Path, seeds, gf2_seeds, variants=BASE_VARIANTS) -> dict:
    """``{(seed, variant name): its directory under OUT/runs}`` for every variant the study trains (trained or
    not)."""
    return {(s, variant_label(s, name, v)): Path(out) / "runs" / rel / v
            for s, name, _, rel, run_variants in training_runs(cfg, seeds, gf2_seeds, variants) for v in run_variants}


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


def measure_all(cfg: TrainConfig, out: Path, ckpts: dict, *, analyses_only=None, quiet: bool = False) -> None:
    """Every analysis (or those of ``analyses_only``, :func:`check_analyses`) of every checkpoint that has no
    measurement file yet, and the similarity of the study's variants with its references
    (:func:`~analysis.study.pipeline.measure_similarity`; unless ``analyses_only`` leaves out ``similarity``)."""
    from tqdm.auto import tqdm

    todo = [m for m in measurement_tasks(cfg, out, ckpts, analyses_only) if not m.path.exists()]
    loaded: dict = {}
    for m in tqdm(todo, desc="measurements", unit="run", disable=quiet):
        measure_one(m, out, ckpts, loaded)
    if analyses_only is None or SIMILARITY in analyses_only:
        measure_similarity(cfg, out, ckpts, quiet=quiet)
    if analyses_only is not None and CROSSCODERS in analyses_only:
        measure_crosscoders(out, cfg.train.steps, _base(ckpts), tokens=analyses.TOKENS, quiet=quiet)


@dataclass(frozen=True)
class Measurement:
    """One measurement of the study: ``analysis`` of the checkpoint ``cdir`` (``variant`` of ``seed`` at ``step``),
    written to ``path``; ``reference``: the (seed, "learned") key of its reference checkpoint, or None."""
    seed: int
    variant: str
    step: int
    cdir: Path
    analysis: str
    path: Path
    reference: tuple | None


def measurement_tasks(cfg: TrainConfig, out: Path, ckpts: dict, analyses_only=None) -> list[Measurement]:
    """Every measurement the study makes of the checkpoints ``ckpts`` (done or not), in the order they run;
    ``analyses_only``: the analyses to make (default every one)."""
    todo = []
    for (seed, variant), vdir in ckpts.items():
        other = _other_seed(seed, ckpts)
        for step, cdir in checkpoints_of(vdir, cfg).items():
            for analysis, entry in analyses.ANALYSES.items():
                if analyses_only is not None and analysis not in analyses_only:
                    continue
                if not entry.controls and not _is_base(variant):
                    continue
                if entry.when == "all" or step == cfg.train.steps:
                    path = out / "measurements" / f"seed{seed}" / variant / f"step{step}" / f"{analysis}.csv"
                    ref = (other, "learned") if entry.reference and other is not None else None
                    todo.append(Measurement(seed, variant, step, cdir, analysis, path, ref))
    return todo


#: The checkpoint this process keeps loaded between measurements (a study worker measures one checkpoint after another).
_LOADED: dict = {}


def loaded_models() -> dict:
    """This process's ``{checkpoint dir: model}`` cache of :func:`measure_one` (one kept at a time). A function, not
    the dict itself, in the tasks: a task pickled to a worker refers to the function by name and so reads that
    worker's cache, where a dict would travel as a copy."""
    return _LOADED


def measure_one(m: Measurement, out: Path, ckpts: dict, loaded: dict) -> None:
    """Make one measurement and write it (its per-item values first: the measurement file marks it done);
    ``loaded``: ``{checkpoint dir: model}``, the one checkpoint kept loaded between calls."""
    from analysis.loading import load

    if m.cdir not in loaded:
        loaded.clear()
        loaded[m.cdir] = load(m.cdir)
    reference = load(ckpts[m.reference]) if m.reference is not None else None
    rows = measure(m.analysis, loaded[m.cdir], reference)
    if "items" in rows.attrs:  # per-item values beside the measurement, written first (the measurement marks done)
        _write(rows.attrs["items"], out / "items" / m.path.relative_to(out / "measurements"))
    _write(rows, m.path)


def _base(ckpts: dict) -> dict:
    """The study's own variants of ``ckpts`` (``{(seed, variant): final checkpoint dir}``)."""
    return {k: d for k, d in ckpts.items() if _is_base(k[1])}


def measure_similarity(cfg: TrainConfig, out: Path, ckpts: dict, *, quiet: bool = False) -> Path | None:
    """CKA and Procrustes similarity of the study's own variants' final checkpoints with their references (the
    same interface across seeds, across interfaces across seeds and within a seed, each model against its
    initialisation, a permutation null; :func:`analysis.readouts.references.similarity_references`), into
    ``OUT/similarity/step<N>/references.csv`` and ``reading.csv``; redone only when the set of models changed
    (``models.json``). Beside it, the overlap of their IOI circuits (the top edges by EAP; ``circuits.csv`` and
    ``circuits_reading.csv``, :mod:`analysis.causal.circuit_overlap`). Returns the directory, or None with fewer
    than two models."""
    from analysis.causal.circuit_overlap import overlap_reading
    from analysis.readouts.references import similarity_references

    models = {(v, s): d for (s, v), d in sorted(ckpts.items()) if _is_base(v)}
    if len(models) < 2:
        return None
    where, names, record = _similarity_record(cfg, out, ckpts)
    if similarity_done(cfg, out, ckpts):
        return where
    refs = similarity_references(models, tokens=analyses.TOKENS, boot=analyses.BOOT, null_draws=10, seed=0,
                                 progress=not quiet)
    _write(refs.table, where / "references.csv")
    _write(refs.reading(), where / "reading.csv")
    overlap = analyses.circuit_overlap_of(models)
    _write(overlap, where / "circuits.csv")
    _write(overlap_reading(overlap), where / "circuits_reading.csv")
    write_text_atomic(record, json.dumps(names))
    return where


def _similarity_record(cfg: TrainConfig, out: Path, ckpts: dict) -> tuple[Path, list[str], Path]:
    where = out / "similarity" / f"step{cfg.train.steps}"
    return where, sorted(f"{v}@seed{s}" for (s, v) in ckpts if _is_base(v)), where / "models.json"


def similarity_done(cfg: TrainConfig, out: Path, ckpts: dict) -> bool:
    """Whether :func:`~analysis.study.pipeline.measure_similarity` of ``ckpts`` has nothing to do: its tables are
    written for this set of models (or there are fewer than two)."""
    where, names, record = _similarity_record(cfg, out, ckpts)
    if len(names) < 2:
        return True
    try:
        return ((where / "reading.csv").exists() and (where / "circuits_reading.csv").exists()
                and json.loads(record.read_text()) == names)
    except (OSError, ValueError):
        return False


def collect_measurements(out: Path) -> pd.DataFrame:
    """Every measurement file under ``OUT/measurements`` as one table with ``seed, variant, step`` columns."""
    frames = []
    for path in sorted((out / "measurements").glob("seed*/*/step*/*.csv")):
        df = read_csv(path, dtype={"key": str})
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
        df = read_csv(path, dtype={"key": str})
        seed, variant, step = path.parts[-4], path.parts[-3], path.parts[-2]
        frames.append(df.assign(seed=int(seed[4:]), variant=variant, step=int(step[4:])))
    return pd.concat(frames, ignore_index=True) if frames else None


# ------------------------------------------------------------------------------------------------------- main
def run_study(config, out, seeds, gf2_seeds=(0,), *, variants=DEFAULT_VARIANTS, claims=None, analyses_only=None,
              quiet: bool = False) -> Path:
    """Train, measure, aggregate and report (see the module docstring); returns the report's path. ``variants``:
    the trainer's variant names (default: the three and their controls, ``DEFAULT_VARIANTS``); ``claims``: the
    claims file the report tests (default :data:`analysis.study.claims.DEFAULT_CLAIMS`); ``analyses_only``: the
    analyses to make (:func:`check_analyses`; default all). One process, one task after another;
    :func:`~analysis.study.pipeline.run_study_dask` runs the same study on a Dask cluster."""
    analyses_only = _check_inputs(claims, analyses_only)
    cfg, out, seeds, gf2_seeds, variants = start_study(config, out, seeds, gf2_seeds, variants)
    ckpts = train_all(cfg, out, seeds, gf2_seeds, variants=variants, quiet=quiet)
    measure_all(cfg, out, ckpts, analyses_only=analyses_only, quiet=quiet)
    return write_report(cfg, out, seeds, gf2_seeds, claims=claims)


def study_tasks(cfg: TrainConfig, out: Path, seeds, gf2_seeds, variants=DEFAULT_VARIANTS, *,
                train_cmd: str | None = None, claims=None, analyses_only=None) -> list:
    """The study as :class:`analysis.study.graph.Task` s, every task after what it needs:

    - ``prepare.<run>``: a training run's data and ``run.json`` (:func:`fixedid.train.loop.prepare_run`);
    - ``train.<run>.<variant>``: one variant of a run, resumed from its last checkpoint if it has one (needs the
      run's ``prepare``); done when it is trained to the last step with its snapshots; with ``train_cmd``, run as
      that command (:func:`analysis.study.train_cmd.train_outside`);
    - ``similarity.step<N>``: :func:`~analysis.study.pipeline.measure_similarity` (needs the trainings of the study's
      own variants; left out when ``analyses_only`` leaves out ``similarity``);
    - ``measure.seed<S>.<variant>.step<N>.<analysis>``: one measurement (needs the variant's training, and its
      reference's for the analyses that take one); done when its CSV exists; only the analyses of ``analyses_only``
      when it is given;
    - ``report.<hash>``: :func:`~analysis.study.pipeline.write_report` with the claims file ``claims``, once everything
      else is done (``<hash>`` names the set of tasks and the claims: a study grown by more seeds, or tested on other
      claims, gets a new report).

    A measurement keeps its checkpoint loaded in the worker process for the next (:func:`loaded_models`); a training
    empties that first."""
    from fixedid.train.loop import prepare_run, run_complete, train

    from analysis.study.graph import Task
    from analysis.study.train_cmd import train_outside

    out = Path(out)
    tasks, trains = [], {}
    for s, name, c, rel, run_variants in training_runs(cfg, seeds, gf2_seeds, variants):
        run_dir = out / "runs" / rel
        prep = f"prepare.{name}"
        tasks.append(Task(prep, (), lambda d=run_dir: (d / "run.json").exists(),
                          lambda c=c, d=run_dir, vs=run_variants: prepare_run(c, d, vs, quiet=True), 0))
        for v in run_variants:
            def run(c=c, d=run_dir, v=v):
                loaded_models().clear()  # no model of a measurement kept in memory beside a training
                if train_cmd is None:
                    train(c, d, [v], resume=True, quiet=True)
                else:
                    train_outside(train_cmd, c, d, v)
            trains[(s, variant_label(s, name, v))] = f"train.{name}.{v}"
            tasks.append(Task(f"train.{name}.{v}", (prep,), lambda c=c, d=run_dir, v=v: run_complete(d, c, [v]),
                              run, 1, device=True))
    ckpts = checkpoint_dirs(cfg, out, seeds, gf2_seeds, variants)
    base = tuple(trains[k] for k in ckpts if _is_base(k[1]))
    if analyses_only is None or SIMILARITY in analyses_only:
        tasks.append(Task(f"similarity.step{cfg.train.steps}", base, lambda: similarity_done(cfg, out, ckpts),
                          lambda: measure_similarity(cfg, out, ckpts, quiet=True), 2, device=True))
    if analyses_only is not None and CROSSCODERS in analyses_only:
        steps, own = cfg.train.steps, _base(ckpts)
        tasks.append(Task(f"crosscoders.step{steps}", base, lambda: crosscoders_done(out, steps, own),
                          lambda: measure_crosscoders(out, steps, own, tokens=analyses.TOKENS), 2, device=True))
    for m in measurement_tasks(cfg, out, ckpts, analyses_only):
        needs = (trains[(m.seed, m.variant)],) + ((trains[m.reference],) if m.reference is not None else ())
        tasks.append(Task(f"measure.seed{m.seed}.{m.variant}.step{m.step}.{m.analysis}", tuple(dict.fromkeys(needs)),
                          m.path.exists, lambda m=m: measure_one(m, out, ckpts, loaded_models()), 3, device=True))
    tasks.append(_report_task(cfg, out, seeds, gf2_seeds, claims, tasks))
    return tasks


def _report_task(cfg: TrainConfig, out: Path, seeds, gf2_seeds, claims, tasks: list):
    """The report, after every task of ``tasks``; its name hashes those tasks and the claims file's text."""
    import hashlib

    from analysis.study.graph import Task

    claims_text = Path(DEFAULT_CLAIMS if claims is None else claims).read_text()
    key = hashlib.sha256(json.dumps([sorted(t.name for t in tasks), seeds, gf2_seeds, claims_text]).encode()
                         ).hexdigest()[:12]
    marker = out / "tasks" / f"report.{key}.written"

    def report():
        write_report(cfg, out, seeds, gf2_seeds, claims=claims)
        write_text_atomic(marker, json.dumps({"seeds": seeds, "gf2_seeds": gf2_seeds}))

    return Task(f"report.{key}", tuple(t.name for t in tasks),
                lambda: marker.exists() and (out / "report.md").exists(), report, 4)


def run_study_dask(config, out, seeds, gf2_seeds=(0,), *, variants=DEFAULT_VARIANTS, client=None,
                   workers: int | None = None, scheduler: str | None = None, slurm=None,
                   train_cmd: str | None = None, retries: int = 0, claims=None, analyses_only=None,
                   quiet: bool = False) -> Path:
    """The study (:func:`study_tasks`) run on Dask distributed; returns the report's path. ``client``: a
    ``distributed.Client`` to run on; else a cluster is started (:func:`analysis.study.clusters.study_client`):
    ``workers`` processes here (default one per core, or per GPU), the scheduler at ``scheduler``, or Slurm jobs
    with ``slurm`` (:class:`~analysis.study.clusters.SlurmOptions`). ``train_cmd``: each training as this command
    (:mod:`analysis.study.train_cmd`); ``retries``: how often a task that raises is tried again; ``claims``: the
    claims file the report tests; ``analyses_only``: the analyses to make (default all). The event log is
    ``OUT/tasks/log.jsonl``; failed tasks raise :class:`analysis.study.graph.TasksFailed` once every other task has
    run, their tracebacks in ``OUT/tasks/failed_tasks.txt``."""
    import contextlib

    from analysis.study.clusters import has_gpus, study_client
    from analysis.study.graph import run_graph

    if train_cmd is not None:
        from analysis.study.train_cmd import check_train_cmd

        check_train_cmd(train_cmd)
    if not isinstance(retries, int) or retries < 0:
        raise AnalysisError(f"--retries {retries!r} must be a non-negative integer")
    analyses_only = _check_inputs(claims, analyses_only)
    cfg, out, seeds, gf2_seeds, variants = start_study(config, out, seeds, gf2_seeds, variants)
    tasks = study_tasks(cfg, out, seeds, gf2_seeds, variants, train_cmd=train_cmd, claims=claims,
                        analyses_only=analyses_only)
    where = (contextlib.nullcontext((client, has_gpus(client))) if client is not None
             else study_client(workers=workers, scheduler=scheduler, slurm=slurm, quiet=quiet))
    with where as (c, gpu):
        run_graph(tasks, c, log=out / "tasks" / "log.jsonl", gpu=gpu, retries=retries, quiet=quiet)
    return out / "report.md"


def _check_inputs(claims, analyses_only) -> list[str] | None:
    """Refuse a bad claims file or analysis name before anything is written; returns the analyses to make."""
    load_claims(claims)
    return check_analyses(analyses_only)


def start_study(config, out, seeds, gf2_seeds, variants) -> tuple[TrainConfig, Path, list, list, list]:
    """Check a study's arguments and ``OUT`` (a study of another config there is refused) and record them in
    ``OUT/study.json``; returns ``(config, OUT, seeds, GF(2) seeds, variants)``, normalised."""
    from fixedid.config import VARIANTS

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
    return cfg, out, seeds, gf2_seeds, variants


def write_report(cfg: TrainConfig, out: Path, seeds, gf2_seeds, claims=None) -> Path:
    """Aggregate the measurements of ``seeds`` over seeds and write the report with its figures and CSVs, its claims
    those of the claims file ``claims`` (default :data:`analysis.study.claims.DEFAULT_CLAIMS`)."""
    from analysis.study.report import load_circuits, load_similarity, write_results

    df = collect_measurements(out)
    df = df[df.seed.isin(seeds)]
    items = collect_items(out)
    items = items[items.seed.isin(seeds)] if items is not None else None
    return write_results(df, out, meta={"seeds": seeds, "gf2_seeds": gf2_seeds, "steps": cfg.train.steps,
                                        "keep": cfg.train.snapshot_steps, "claims_source": _source(claims)},
                         items=items, similarity=load_similarity(out), circuits=load_circuits(out), claims=claims)


def _source(claims) -> str:
    return "the study's default claims (`analysis/study/claims.toml`)" if claims is None else f"`{claims}`"


def rewrite_report(out, claims=None, note: str | None = None) -> Path:
    """Rewrite a study directory's CSVs, figures and report from the measurements it holds (``OUT/measurements`` as
    the study wrote them, or else its ``measurements.csv``), with the per-prompt scores, similarity and circuits
    where it has them, its claims those of ``claims`` (default :data:`analysis.study.claims.DEFAULT_CLAIMS`): after
    a change of the claims or of the report, without measuring again. ``note``: a paragraph printed above the claims
    (which seeds chose them, for instance)."""
    from analysis.study.report import load_circuits, load_similarity, read_measurements, write_results

    out = Path(out)
    load_claims(claims)  # a bad claims file is refused before anything is written
    if (out / "measurements").is_dir():
        df, items = collect_measurements(out), collect_items(out)
    else:
        df, items = read_measurements(out), None
    record = json.loads((out / "study.json").read_text()) if (out / "study.json").is_file() else {}
    recodings = sorted(int(v[5:]) for v in set(df.variant) if re.fullmatch(r"gf2-r\d+", v))
    steps = sorted(int(s) for s in df.step.unique())
    meta = {"seeds": sorted(int(s) for s in df.seed.unique()),
            "gf2_seeds": record.get("gf2_seeds", [0] + recodings), "steps": steps[-1], "keep": steps[:-1],
            "claims_source": _source(claims), "claims_note": note}
    return write_results(df, out, meta=meta, items=items, similarity=load_similarity(out),
                         circuits=load_circuits(out), claims=claims)


__all__ = ["ANALYSES", "Analysis", "register", "parse_seeds", "training_runs", "train_all", "measure", "measure_all",
           "check_analyses", "SIMILARITY",
           "collect_measurements", "collect_items", "measure_similarity", "run_study", "start_study",
           "write_report", "rewrite_report", "checkpoint_dirs", "variant_label", "Measurement", "measurement_tasks",
           "measure_one",
           "similarity_done", "study_tasks", "run_study_dask", "loaded_models"]

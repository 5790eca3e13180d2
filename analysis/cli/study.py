"""``fixedid-study``: the study pipeline over seeds (:mod:`analysis.study.pipeline`) as a command: train the three
variants and their controls for every seed (and further GF(2) recodings), measure every checkpoint with every
analysis, and write a report in which every number has a mean and a 95% interval over seeds. ``fixedid-study run``
runs it on Dask distributed (:mod:`analysis.study.graph`): worker processes on this machine by default, an existing
cluster with ``--scheduler``, Slurm jobs with ``--slurm`` (:mod:`analysis.study.clusters`). Restartable: finished work
is kept and not redone."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedid.clitools import ArgumentParser, run_main
from fixedid.version import __version__

from analysis.errors import AnalysisError
from analysis.study.pipeline import DEFAULT_VARIANTS, parse_seeds, run_study, run_study_dask

EXAMPLES = """
  fixedid-study run tiny --seeds 0-2 --variants learned,canonical,gf2 --out study-quick   # no controls
  fixedid-study run tiny --seeds 0-4 --gf2-seeds 0,1,2 --out study --workers 2            # the documented run
  fixedid-study run small --seeds 0-4 --out /shared/study --scheduler tcp://10.0.0.5:8786  # an existing cluster
  fixedid-study run small --out /shared/study --slurm --partition gpu --account myproj --max-jobs 8  # Slurm jobs
  fixedid-study run small --out /shared/study --slurm --partition gpu --gpus-per-job 1 --print-job-script
  fixedid-study run tiny --seeds 5-9 --gf2-seeds 0,1 --out confirm --claims frozen.toml  # test declared claims
  fixedid-study report study --claims frozen.toml      # rewrite the report and claims.csv from the measurements
  fixedid-analyze figures --results study                                   # redraw its figures from the CSVs
"""


def build_parser() -> ArgumentParser:
    """``fixedid-study``'s arguments (the CLI reference is generated from them)."""
    p = ArgumentParser(prog="fixedid-study", description="Train every variant for every seed, measure every "
                       "checkpoint with every analysis, and report every number with a 95% interval over seeds.",
                       epilog="examples:\n" + EXAMPLES.strip("\n"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    r = sub.add_parser("run", help="run the study (train, measure, report) on Dask", description="Run the study "
                       "on Dask distributed: worker processes here (default), an existing cluster, or Slurm jobs.",
                       epilog="examples:\n" + EXAMPLES.strip("\n"), formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("config", metavar="CONFIG", help="training config: a TOML file or a packaged name (tiny, small...)")
    r.add_argument("--seeds", default="0,1,2", help="training seeds, e.g. 0,1,2 or 0-4 (default 0,1,2)")
    r.add_argument("--gf2-seeds", default="0", help="GF(2) recodings to train, e.g. 0,1,2: the first is the gf2 "
                   "variant, each further one a gf2-r<R> variant (default 0)")
    r.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="trainer variants (default: "
                   f"{','.join(DEFAULT_VARIANTS)}, the three and their controls; learned,canonical,gf2 for the three "
                   "alone)")
    r.add_argument("--out", required=True, help="study directory (restartable: finished work is kept)")
    r.add_argument("--analyses", metavar="NAMES", help="measure only these analyses, comma-separated (the names "
                   "of analysis.study.analyses.ANALYSES and 'similarity'; default all), e.g. "
                   "behaviours,loss,eval,interventions for what the default claims read")
    r.add_argument("--claims", metavar="FILE", help="the claims the report tests (a TOML file of [[claim]] tables, "
                   "see analysis.study.claims; default: the study's default claims)")
    r.add_argument("--quiet", action="store_true", help="no progress bar and no dashboard address")
    r.add_argument("--retries", type=int, default=0, metavar="N", help="tries again a task that raised, N times "
                   "(default 0; a task whose worker died is rerun anyway, up to 3 times)")
    r.add_argument("--train-cmd", metavar="TEMPLATE", help="run each training as this command, with {python}, "
                   "{config}, {out} and {variant} filled in, e.g. 'torchrun --standalone --nproc_per_node=8 -m "
                   "fixedid.train --config {config} --out {out} --variants {variant} --resume --quiet'")
    _add_where(r)
    _add_report(sub)
    return p

def _add_where(r) -> None:
    """``run``'s options for where the study runs: this machine, an existing cluster, Slurm jobs."""
    where = r.add_argument_group("where it runs (default: a Dask cluster of worker processes on this machine)")
    where.add_argument("--workers", type=int, metavar="N", help="worker processes on this machine (default: one per "
                       "GPU, else one per core); 0 runs the study in this process without Dask, one task after "
                       "another")
    where.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask cluster's scheduler, e.g. "
                       "tcp://host:8786 (its workers need fixedid installed and --out on a shared file system)")
    where.add_argument("--slurm", action="store_true", help="start Slurm jobs as workers (dask-jobqueue), between 0 "
                       "and --max-jobs as the work needs them")
    slurm = r.add_argument_group("Slurm jobs (with --slurm; each job is one worker running one task at a time)")
    slurm.add_argument("--partition", help="the partition (#SBATCH -p)")
    slurm.add_argument("--account", help="the account charged (#SBATCH -A)")
    slurm.add_argument("--gpus-per-job", type=int, default=0, metavar="N", help="GPUs per job (--gres=gpu:N; "
                       "default 0); a training uses them all through a torchrun --train-cmd")
    slurm.add_argument("--walltime", default="24:00:00", help="each job's time limit, HH:MM:SS (default 24:00:00)")
    slurm.add_argument("--cores", type=int, default=8, help="CPU cores per job (default 8)")
    slurm.add_argument("--memory", default="64GB", help="memory per job (default 64GB)")
    slurm.add_argument("--max-jobs", type=int, default=4, metavar="N", help="jobs at once at most (default 4)")
    slurm.add_argument("--sbatch", action="append", default=[], metavar="OPTION", help="a further #SBATCH option, "
                       "e.g. --sbatch=--qos=high (repeatable)")
    slurm.add_argument("--print-job-script", action="store_true", help="print the job script each Slurm job runs "
                       "and exit (nothing is submitted)")


def _add_report(sub) -> None:
    """The ``report`` command: rewrite a study's report and claims from its measurements."""
    rep = sub.add_parser("report", help="rewrite a study's report, claims.csv, CSVs and figures from its measurements",
                         description="Rewrite a study directory's report.md, claims.csv, summary, comparisons and "
                         "figures from the measurements it holds, without measuring again (after a change of the "
                         "claims, or of the report).", epilog="examples:\n" + EXAMPLES.strip("\n"),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    rep.add_argument("results", metavar="DIR", help="a study directory written by fixedid-study run (its "
                     "measurements/ or measurements.csv)")
    rep.add_argument("--claims", metavar="FILE", help="the claims to test (default: the study's default claims)")
    rep.add_argument("--note", metavar="TEXT", help="a paragraph printed above the claims, e.g. which seeds chose "
                     "them")


def _slurm_options(args):
    from analysis.study.clusters import SlurmOptions

    return SlurmOptions(partition=args.partition, account=args.account, gpus=args.gpus_per_job,
                        walltime=args.walltime, cores=args.cores, memory=args.memory, max_jobs=args.max_jobs,
                        extra=list(args.sbatch))


def _check(args) -> None:
    given = [f for f, on in (("--scheduler", args.scheduler is not None), ("--slurm", args.slurm)) if on]
    if args.workers is not None:
        given.insert(0, "--workers")
    if len(given) > 1:
        raise AnalysisError(f"give one of --workers, --scheduler and --slurm, not {' and '.join(given)}")
    slurm_only = [f"--{a.replace('_', '-')}" for a, default in (("partition", None), ("account", None),
                                                                ("gpus_per_job", 0), ("walltime", "24:00:00"),
                                                                ("cores", 8), ("memory", "64GB"), ("max_jobs", 4),
                                                                ("sbatch", []), ("print_job_script", False))
                  if getattr(args, a) != default]
    if slurm_only and not args.slurm:
        raise AnalysisError(f"{', '.join(slurm_only)} {'is' if len(slurm_only) == 1 else 'are'} for Slurm jobs: "
                            "add --slurm")
    if args.workers is not None and args.workers < 0:
        raise AnalysisError(f"--workers {args.workers} must be 0 (this process) or more")
    if args.workers == 0 and args.train_cmd is not None:
        raise AnalysisError("--train-cmd runs trainings from Dask workers: leave out --workers 0")
    if args.retries < 0:
        raise AnalysisError(f"--retries {args.retries} must be 0 or more")


def main(argv=None) -> None:
    """The ``fixedid-study`` entry point."""
    import sys

    given = list(sys.argv[1:] if argv is None else argv)
    if "--config" in given and "run" not in given:  # the form before `run` (fixedid 0.1.0)
        i = given.index("--config")
        name = given[i + 1] if i + 1 < len(given) else "CONFIG"
        build_parser().error(f"the study's command is now `fixedid-study run {name} --out DIR ...` (the config is "
                             "its first argument, not --config)")
    args = build_parser().parse_args(argv)

    def go():
        if args.command == "report":
            from analysis.study.pipeline import rewrite_report

            path = rewrite_report(args.results, claims=args.claims, note=args.note)
            print(f"wrote {path} with claims.csv, its CSVs and figures in {Path(args.results)}")
            return 0
        _check(args)
        if args.print_job_script:
            from analysis.study.clusters import slurm_job_script

            print(slurm_job_script(_slurm_options(args)))
            return 0
        seeds, gf2 = parse_seeds(args.seeds), parse_seeds(args.gf2_seeds, "--gf2-seeds")
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        if args.train_cmd is not None:
            from analysis.study.train_cmd import check_train_cmd

            check_train_cmd(args.train_cmd)
        if args.workers == 0:
            path = run_study(args.config, args.out, seeds, gf2, variants=variants, claims=args.claims,
                             analyses_only=args.analyses, quiet=args.quiet)
        else:
            path = run_study_dask(args.config, args.out, seeds, gf2, variants=variants, workers=args.workers,
                                  scheduler=args.scheduler, slurm=_slurm_options(args) if args.slurm else None,
                                  train_cmd=args.train_cmd, retries=args.retries, claims=args.claims,
                                  analyses_only=args.analyses, quiet=args.quiet)
        print(f"wrote {path} with its figures and CSVs in {Path(args.out)}")
        return 0

    run_main("fixedid-study", go)

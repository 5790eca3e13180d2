"""``fixedid-study``: the study pipeline over seeds (:mod:`analysis.study.pipeline`) as a command: train the three
variants and their controls for every seed (and further GF(2) recodings), measure every checkpoint with every
analysis, and write a report in which every number has a mean and a 95% interval over seeds. Restartable; shared
among worker processes with ``--worker`` / ``--workers N`` (:mod:`analysis.study.workers`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedid.clitools import ArgumentParser, run_main
from fixedid.version import __version__

from analysis.errors import AnalysisError
from analysis.study.pipeline import (DEFAULT_VARIANTS, parse_seeds, run_study, run_study_worker, start_study,
                                     study_tasks)

EXAMPLES = """
  fixedid-study --config tiny --seeds 0-2 --variants learned,canonical,gf2 --out study-quick   # no controls
  fixedid-study --config tiny --seeds 0-4 --gf2-seeds 0,1,2 --out study --workers 2            # the documented run
  fixedid-study --config small --seeds 0-4 --out /shared/study --worker     # one of N workers (a Slurm array task)
  fixedid-analyze figures --results study                                   # redraw its figures from the CSVs
"""


def build_parser() -> ArgumentParser:
    """``fixedid-study``'s arguments (the CLI reference is generated from them)."""
    p = ArgumentParser(prog="fixedid-study", description="Train every variant for every seed, measure every "
                       "checkpoint with every analysis, and report every number with a 95% interval over seeds.",
                       epilog="examples:\n" + EXAMPLES.strip("\n"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--config", default="tiny", help="training config: a TOML file or a packaged name (default tiny)")
    p.add_argument("--seeds", default="0,1,2", help="training seeds, e.g. 0,1,2 or 0-4 (default 0,1,2)")
    p.add_argument("--gf2-seeds", default="0", help="GF(2) recodings to train, e.g. 0,1,2: the first is the gf2 "
                   "variant, each further one a gf2-r<R> variant (default 0)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="trainer variants (default: "
                   f"{','.join(DEFAULT_VARIANTS)}, the three and their controls; learned,canonical,gf2 for the three "
                   "alone)")
    p.add_argument("--out", required=True, help="study directory (restartable: finished work is kept)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    share = p.add_argument_group("sharing the study among processes (analysis.study.workers)")
    share.add_argument("--worker", action="store_true", help="be one of several workers that share --out (each "
                       "runs the same command: GPUs of a node, Slurm array tasks on a shared file system): claim "
                       "trainings and measurements one at a time, until all are done")
    share.add_argument("--workers", type=int, metavar="N", help="start N --worker processes on this machine (one GPU "
                       "each where there are GPUs, else a share of the cores) and wait for them")
    share.add_argument("--worker-id", help="this worker's name in OUT/tasks (default <host>-<pid>)")
    share.add_argument("--stale-after", type=float, default=600.0, metavar="S", help="seconds without a heartbeat "
                       "after which another host's claim is taken over (default 600; a dead worker on this host is "
                       "noticed at once)")
    share.add_argument("--train-cmd", metavar="TEMPLATE", help="run each training as this command, with {python}, "
                       "{config}, {out} and {variant} filled in, e.g. 'torchrun --standalone --nproc_per_node=8 -m "
                       "fixedid.train --config {config} --out {out} --variants {variant} --resume --quiet'")
    return p


def main(argv=None) -> None:
    """The ``fixedid-study`` entry point."""
    args = build_parser().parse_args(argv)

    def go():
        from analysis.study import workers

        seeds, gf2 = parse_seeds(args.seeds), parse_seeds(args.gf2_seeds, "--gf2-seeds")
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        if args.worker and args.workers is not None:
            raise AnalysisError("give --worker (be one worker) or --workers N (start N), not both")
        if args.train_cmd is not None:
            if not (args.worker or args.workers is not None):
                raise AnalysisError("--train-cmd is for study workers: add --worker or --workers N")
            workers.check_train_cmd(args.train_cmd)
        if args.stale_after <= 0:
            raise AnalysisError(f"--stale-after {args.stale_after:g} must be positive (seconds)")
        if args.worker:
            path = run_study_worker(args.config, args.out, seeds, gf2, variants=variants, worker=args.worker_id,
                                    stale_after=args.stale_after, train_cmd=args.train_cmd, quiet=args.quiet)
        elif args.workers is not None:
            if args.workers < 1:
                raise AnalysisError(f"--workers {args.workers} must be at least 1")
            cfg, out, seeds, gf2, variants = start_study(args.config, args.out, seeds, gf2, variants)
            tasks = study_tasks(cfg, out, seeds, gf2, variants)
            forwarded = ["--config", args.config, "--seeds", args.seeds, "--gf2-seeds", args.gf2_seeds,
                         "--variants", ",".join(variants), "--out", str(args.out),
                         "--stale-after", str(args.stale_after)]
            if args.train_cmd is not None:
                forwarded += ["--train-cmd", args.train_cmd]
            path = workers.launch_workers(args.workers, forwarded, out=out, tasks=tasks, quiet=args.quiet)
        else:
            path = run_study(args.config, args.out, seeds, gf2, variants=variants, quiet=args.quiet)
        if args.worker:  # one of the workers wrote it
            print(f"the study in {Path(args.out)} is done: {path} with its figures and CSVs")
        else:
            print(f"wrote {path} with its figures and CSVs in {Path(args.out)}")
        return 0

    run_main("fixedid-study", go)

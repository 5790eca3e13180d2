"""Where the study's tasks run: a Dask cluster of worker processes on this machine, an existing Dask scheduler, or
Slurm jobs started and stopped as the work needs them (``dask-jobqueue``)."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field

from analysis.errors import AnalysisError
from analysis.study.graph import ALLOWED_FAILURES


def visible_gpus() -> list[str]:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES``, else every CUDA device), as device ids."""
    import torch

    if not torch.cuda.is_available():
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def _engine_config():
    import dask

    return dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES})


def worker_specs(n_workers: int | None = None, gpus: list[str] | None = None, *, processes: bool = True) -> dict:
    """The local cluster's workers, ``{name: {"cls", "options"}}`` (see the module docstring); ``gpus``: the device
    ids to share out (default: :func:`visible_gpus`); ``processes=False``: threads of this process (no GPUs, no
    thread shares: for tasks that need no isolation)."""
    from distributed import Nanny, Worker

    gpus = visible_gpus() if gpus is None else gpus
    cores = os.cpu_count() or 1
    n = n_workers if n_workers is not None else (len(gpus) or cores)
    if n < 1:
        raise AnalysisError(f"--workers {n} must be at least 1")
    if not processes:
        return {f"worker-{i}": {"cls": Worker, "options": {"nthreads": 1, "memory_limit": 0}} for i in range(n)}
    threads = str(max(1, cores // n))
    workers = {}
    for i in range(n):
        env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", threads),
               "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", threads)}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
        workers[f"worker-{i}"] = {"cls": Nanny, "options": {"nthreads": 1, "memory_limit": 0, "env": env,
                                                             "silence_logs": logging.ERROR,
                                                             "resources": {"GPU": 1} if gpus else {}}}
    return workers


def local_cluster(n_workers: int | None = None, *, gpus: list[str] | None = None, processes: bool = True,
                  dashboard: str = ":0"):
    """A cluster of the workers :func:`worker_specs` describes, started; ``dashboard``: the dashboard's address
    (``:0``: any free port)."""
    from distributed import Scheduler, SpecCluster

    workers = worker_specs(n_workers, gpus, processes=processes)
    with _engine_config():
        return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": dashboard}},
                           silence_logs=logging.ERROR, name="fixedid-study")


@dataclass
class SlurmOptions:
    """What a Slurm job of the study asks for: ``partition`` (``-p``), ``account`` (``-A``), ``gpus`` per job
    (``--gres=gpu:N``; the job's one worker gets them all, for a ``--train-cmd`` torchrun), ``walltime``
    (``HH:MM:SS``), ``cores`` and ``memory`` per job, ``max_jobs`` at once (adaptive between 0 and it), and
    ``extra``: further ``#SBATCH`` options, e.g. ``--qos=high``."""
    partition: str | None = None
    account: str | None = None
    gpus: int = 0
    walltime: str = "24:00:00"
    cores: int = 8
    memory: str = "64GB"
    max_jobs: int = 4
    extra: list[str] = field(default_factory=list)

    def check(self) -> None:
        """Refuse options Slurm would refuse (:class:`~analysis.errors.AnalysisError`, one line)."""
        import re

        if self.gpus < 0 or self.cores < 1 or self.max_jobs < 1:
            raise AnalysisError(f"Slurm jobs need --gpus-per-job >= 0, --cores >= 1 and --max-jobs >= 1 (got "
                                f"{self.gpus}, {self.cores}, {self.max_jobs})")
        if not re.fullmatch(r"(\d+-)?\d+(:\d{2}){0,2}", self.walltime):
            raise AnalysisError(f"--walltime {self.walltime!r} is not a Slurm time: write HH:MM:SS or D-HH:MM:SS")


def slurm_cluster(options: SlurmOptions, *, dashboard: str = ":0"):
    """A ``dask_jobqueue.SLURMCluster`` whose jobs are study workers with ``options`` (nothing is submitted until
    it scales; :func:`run_on` scales it adaptively)."""
    from dask_jobqueue import SLURMCluster

    options.check()
    directives = [f"--gres=gpu:{options.gpus}"] if options.gpus else []
    directives += list(options.extra)
    worker_args = ["--nthreads", "1"] + (["--resources", f"GPU={options.gpus}"] if options.gpus else [])
    with _engine_config():
        return SLURMCluster(queue=options.partition, account=options.account, cores=options.cores, processes=1,
                            memory=options.memory, walltime=options.walltime, job_extra_directives=directives,
                            worker_extra_args=worker_args, job_name="fixedid-study",
                            job_script_prologue=[f"export OMP_NUM_THREADS={options.cores}"],
                            scheduler_options={"dashboard_address": dashboard}, silence_logs="error")


def slurm_job_script(options: SlurmOptions) -> str:
    """The job script each Slurm job of the study runs (what ``--print-job-script`` shows)."""
    cluster = slurm_cluster(options, dashboard=":0")
    try:
        return cluster.job_script()
    finally:
        cluster.close()


def has_gpus(client) -> bool:
    """Whether any worker of ``client``'s cluster holds a ``GPU`` resource (then the study's model tasks ask for
    one)."""
    return any("GPU" in w.get("resources", {}) for w in client.scheduler_info()["workers"].values())


@contextlib.contextmanager
def study_client(*, workers: int | None = None, scheduler: str | None = None, slurm: SlurmOptions | None = None,
                 quiet: bool = False, connect_timeout: float = 30.0):
    """A ``distributed.Client`` on the cluster the arguments choose (at most one of ``scheduler`` and ``slurm``;
    ``workers`` is the local cluster's size), and whether its tasks should ask for GPUs: ``(client, gpu)``. Prints
    the dashboard's address once (unless ``quiet``); closes what it started. ``connect_timeout``: seconds to wait
    for the scheduler at ``scheduler``."""
    from distributed import Client

    if scheduler is not None and slurm is not None:
        raise AnalysisError("give --scheduler (an existing cluster) or --slurm (jobs started here), not both")
    if workers is not None and (scheduler is not None or slurm is not None):
        raise AnalysisError("--workers sizes the local cluster; with --scheduler or --slurm leave it out (use "
                            "--max-jobs for Slurm)")
    cluster = None
    try:
        with _engine_config():
            if scheduler is not None:
                try:
                    client = Client(scheduler, timeout=f"{connect_timeout}s")
                except OSError as e:
                    raise AnalysisError(f"no Dask scheduler answers at {scheduler} ({e}); start one (dask scheduler) "
                                        "or check the address") from None
                gpu = has_gpus(client)
            elif slurm is not None:
                cluster = slurm_cluster(slurm)
                cluster.adapt(minimum_jobs=0, maximum_jobs=slurm.max_jobs)
                client, gpu = Client(cluster), slurm.gpus > 0
            else:
                cluster = local_cluster(workers)
                client = Client(cluster)
                gpu = has_gpus(client)
        if not quiet:
            print(f"Dask dashboard: {client.dashboard_link}")
        try:
            yield client, gpu
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


__all__ = ["worker_specs", "local_cluster", "slurm_cluster", "slurm_job_script", "study_client", "has_gpus",
           "SlurmOptions", "visible_gpus"]

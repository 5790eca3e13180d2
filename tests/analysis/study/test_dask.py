"""The study on Dask distributed: two workers make the measurements of one, a worker killed mid-training has its task
rerun elsewhere (resumed exactly, every output written once), a finished study is not redone, a task that raises is
reported with its traceback while the others finish, and the Slurm options reach the job script."""

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from distributed import Client

from analysis import AnalysisError
from analysis.cli.study import main as study_main
from analysis.study import analyses, train_cmd
from analysis.study.clusters import (SlurmOptions, local_cluster, slurm_job_script, study_client, visible_gpus,
                                     worker_specs)
from analysis.study.graph import Task, TasksFailed, run_graph
from analysis.study.pipeline import run_study_dask
from analysis.study.pipeline import study_tasks as tasks_of

from tests.analysis.study import _worker_setup
from tests._fixtures import STUDY_CONFIG

pytestmark = pytest.mark.filterwarnings("ignore::fixedid.errors.FixedIdWarning")  # the tiny vocabulary

SEEDS, VARIANTS = [0, 1], ["learned", "canonical"]


def outputs(out: Path) -> dict:
    """Every measurement, per-item and similarity file of a study, by path: its bytes."""
    return {p.relative_to(out): p.read_bytes() for d in ("measurements", "items", "similarity")
            for p in sorted((out / d).rglob("*")) if p.is_file()}


def assert_same_outputs(got: dict, want: dict) -> None:
    """The same files; the same bytes, except that a table may differ in the last digits of its floats."""
    assert sorted(got) == sorted(want)
    for path, data in want.items():
        if got[path] == data:
            continue
        assert path.suffix == ".csv", f"{path} differs"
        a, b = (pd.read_csv(io.BytesIO(x)) for x in (got[path], data))
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-9, atol=1e-12, obj=str(path))


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "tasks" / "log.jsonl").read_text().splitlines()]


def study(cfg, out, client, **kw):
    return run_study_dask(str(cfg), out, SEEDS, [0], variants=VARIANTS, client=client, quiet=True, **kw)


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """The study on one worker process, then on two, where the first training to reach its checkpoint at step 8 of
    16 kills its worker process there; yields the two-worker client for the tests that follow."""
    tmp = tmp_path_factory.mktemp("dask")
    cfg = tmp / "study.toml"
    cfg.write_text(STUDY_CONFIG)
    mp = pytest.MonkeyPatch()
    _worker_setup.configure(mp.setattr)  # this process enumerates the same tasks as the workers
    try:
        with contextlib.ExitStack() as stack:  # the clusters the command line starts (study_client)
            client, gpu = stack.enter_context(study_client(workers=1, quiet=True))
            assert gpu == bool(visible_gpus()) and len(client.scheduler_info()["workers"]) == 1
            client.register_plugin(_worker_setup.Setup())
            study(cfg, tmp / "one", client)
        with contextlib.ExitStack() as stack:
            client, _ = stack.enter_context(study_client(workers=2, quiet=True))
            assert len(client.scheduler_info()["workers"]) == 2
            client.register_plugin(_worker_setup.Setup(kill_at_step=8, mark=str(tmp / "killed")))
            report = study(cfg, tmp / "two", client)
            yield tmp, report, client
    finally:
        mp.undo()


def test_two_workers_make_the_measurements_of_one(studies):
    tmp, report, _ = studies
    one = outputs(tmp / "one")
    assert len([p for p in one if p.parts[0] == "measurements"]) == 4 * (2 + 1)  # 4 models: loss at 2 steps, head
    assert_same_outputs(outputs(tmp / "two"), one)
    assert report.read_text() == (tmp / "one" / "report.md").read_text()
    # the training rerun after the kill resumed from its checkpoint and logged exactly the uninterrupted run's losses
    for run in ("seed0", "seed1"):
        for v in VARIANTS:
            assert (tmp / "two" / "runs" / run / v / "metrics.jsonl").read_bytes() == \
                (tmp / "one" / "runs" / run / v / "metrics.jsonl").read_bytes()


def test_the_killed_workers_task_is_rerun_and_every_task_is_done_once(studies):
    tmp, _, _ = studies
    vdir, step, pid = (tmp / "killed").read_text().split()
    victim = f"train.{Path(vdir).parent.name}.{Path(vdir).name}"
    log = pd.DataFrame(events(tmp / "two"))
    tasks = tasks_of(*_study(tmp, tmp / "two"))
    assert len(tasks) == 2 + 4 + 1 + 12 + 1  # prepare, train, similarity, measurements, report
    done = log[log.event == "done"].task
    assert sorted(done) == sorted(t.name for t in tasks)  # every task finished, once
    starts = log[log.event == "start"].task.value_counts()
    assert starts[victim] == 2 and (starts.drop(victim) == 1).all()  # only the killed one ran twice
    for name in log[log.event == "skipped"].task:  # what Dask recomputed for the dead worker only read its files
        assert log[(log.task == name) & (log.event == "done")].time.max() <= \
            log[(log.task == name) & (log.event == "skipped")].time.min()
    first, second = log[(log.task == victim) & (log.event == "start")].pid
    assert first == int(pid) and second != int(pid)  # started by the killed process, finished by another
    assert log[log.event == "done"].pid.nunique() >= 2  # the work was shared
    when = log[log.event == "done"].set_index("task").time
    began = log[log.event == "start"].groupby("task").time.max()
    for t in tasks:  # each task started after what it needs had finished
        assert all(began[t.name] >= when[n] for n in t.needs), t.name


def _study(tmp, out):
    from fixedid.train.config import TrainConfig

    return TrainConfig.load(str(tmp / "study.toml")), out, SEEDS, [0], VARIANTS


def test_a_finished_study_is_not_redone(studies):
    tmp, _, client = studies
    out = tmp / "two"
    stamps = {p: p.stat().st_mtime_ns for p in (out / "measurements").rglob("*.csv")}
    before = (out / "tasks" / "log.jsonl").read_text()
    study(tmp / "study.toml", out, client)
    assert (out / "tasks" / "log.jsonl").read_text() == before  # no task ran
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())


def test_each_training_can_be_a_torchrun_job(studies, tmp_path):
    """--train-cmd with torchrun and two gloo ranks: a worker trains through it and measures the result, which
    matches the one-process training of the same seed to DDP's rounding."""
    tmp, _, client = studies
    torchrun = ("{python} -m torch.distributed.run --standalone --nproc_per_node=2 -m fixedid.train --config {config} "
                "--out {out} --variants {variant} --resume --quiet")
    client.register_plugin(_worker_setup.Setup(analyses=("loss",)))
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(analyses, "ANALYSES", {"loss": analyses.ANALYSES["loss"]})
            run_study_dask(str(tmp / "study.toml"), tmp_path / "ddp", [0], [0], variants=["learned"], client=client,
                           train_cmd=torchrun, quiet=True)
    finally:
        client.register_plugin(_worker_setup.Setup())
    a, b = ([json.loads(line) for line in (d / "runs" / "seed0" / "learned" / "metrics.jsonl").read_text()
             .splitlines() if "loss" in line] for d in (tmp / "one", tmp_path / "ddp"))
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert rb.get("loss", rb.get("val_loss")) == pytest.approx(ra.get("loss", ra.get("val_loss")), rel=1e-4)
    loss = [pd.read_csv(d / "measurements" / "seed0" / "learned" / f"step{s}" / "loss.csv").value[0]
            for d in (tmp / "one", tmp_path / "ddp") for s in (8, 16)]
    assert loss[2:] == pytest.approx(loss[:2], rel=1e-4)


def test_a_task_that_raises_is_reported_with_its_traceback_and_the_others_finish(tmp_path):
    """Thirty toy tasks in three layers on two worker threads: b3 raises; everything that does not need it runs once,
    after what it needs; what needs it is named as not run; the traceback is in the error and in its file."""
    def task(name, needs=(), fail=False):
        def run():
            if fail:
                raise ValueError(f"{name} cannot be done")
            (tmp_path / name).write_text("done")
        return Task(name, tuple(needs), (tmp_path / name).exists, run)

    tasks = [task(f"a{i}") for i in range(10)]
    tasks += [task(f"b{i}", [f"a{i}", f"a{(i + 1) % 10}"], fail=i == 3) for i in range(10)]
    tasks += [task(f"c{i}", [f"b{2 * i % 10}", f"b{(2 * i + 1) % 10}"]) for i in range(5)]
    with local_cluster(1, gpus=[], processes=False) as cluster, Client(cluster) as client:
        with pytest.raises(TasksFailed) as e:
            run_graph(tasks, client, log=tmp_path / "tasks" / "log.jsonl", quiet=True)
    assert list(e.value.failed) == ["b3"] and "ValueError: b3 cannot be done" in e.value.failed["b3"]
    assert "in run" in e.value.failed["b3"]  # the traceback reaches into the task's own code
    assert e.value.blocked == ["c1"] and "\n" not in str(e.value)  # c1 needs b2 and b3
    text = (tmp_path / "tasks" / "failed_tasks.txt").read_text()
    assert "== b3" in text and "ValueError: b3 cannot be done" in text and "c1" in text
    written = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert written == sorted(t.name for t in tasks if t.name not in ("b3", "c1"))
    log = pd.DataFrame([json.loads(line) for line in (tmp_path / "tasks" / "log.jsonl").read_text().splitlines()])
    assert (log[log.event == "done"].task.value_counts() == 1).all()
    when = log[log.event == "done"].set_index("task").time
    for t in tasks:
        if t.name in when:
            assert all(when[n] <= log[(log.task == t.name) & (log.event == "start")].time.iloc[0] for n in t.needs)


def test_bad_graphs_are_refused():
    ok = Task("a", (), lambda: False, lambda: None)
    with pytest.raises(AnalysisError, match="not a file name"):
        run_graph([Task("../x", (), lambda: False, lambda: None)], client=None)
    with pytest.raises(AnalysisError, match="two tasks are named 'a'"):
        run_graph([ok, ok], client=None)
    with pytest.raises(AnalysisError, match=r"needs \['z'\]"):
        run_graph([Task("b", ("z",), lambda: False, lambda: None)], client=None)
    with pytest.raises(AnalysisError, match="cycle"):
        run_graph([Task("a", ("b",), lambda: False, lambda: None), Task("b", ("a",), lambda: False, lambda: None)],
                  client=None)


def test_the_slurm_options_reach_the_job_script(capsys):
    script = slurm_job_script(SlurmOptions(partition="gpu-long", account="proj42", gpus=2, walltime="12:30:00",
                                           cores=16, memory="120GB", max_jobs=8, extra=["--qos=high"]))
    for line in ("#SBATCH -p gpu-long", "#SBATCH -A proj42", "#SBATCH -t 12:30:00", "#SBATCH --gres=gpu:2",
                 "#SBATCH --qos=high", "#SBATCH --cpus-per-task=16"):
        assert line in script, line
    assert "--resources GPU=2" in script and "--nthreads 1" in script
    with pytest.raises(SystemExit) as e:
        study_main(["run", "tiny", "--out", "unused", "--slurm", "--partition", "gpu-long", "--account", "proj42",
                    "--gpus-per-job", "1", "--walltime", "02:00:00", "--print-job-script"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "#SBATCH -p gpu-long" in out and "#SBATCH --gres=gpu:1" in out
    assert "#SBATCH -t 02:00:00" in out and not Path("unused").exists()


@pytest.mark.parametrize("args, message", [
    (["--workers", "2", "--slurm"], "one of --workers, --scheduler and --slurm"),
    (["--partition", "gpu"], "--partition is for Slurm jobs: add --slurm"),
    (["--workers", "-1"], "must be 0 (this process) or more"),
    (["--workers", "0", "--train-cmd", "{python} -m fixedid.train --config {config} --out {out} --variants "
      "{variant}"], "leave out --workers 0"),
    (["--train-cmd", "{python} -m fixedid.train --out {out} --variants {variant}"], "needs ['{config}']"),
    (["--train-cmd", "torchrun {script} {config} {out} {variant}"], "unknown placeholder(s) ['script']"),
    (["--retries", "-1"], "must be 0 or more"),
    (["--slurm", "--walltime", "two hours"], "is not a Slurm time"),
])
def test_bad_run_arguments_are_one_line(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        study_main(["run", "tiny", "--out", str(tmp_path / "s"), *args, "--print-job-script"
                    if "--slurm" in args and "--walltime" in args else "--quiet"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and "\n" not in err and not (tmp_path / "s").exists()


def test_train_command_fills_its_placeholders_quoted(tmp_path):
    run = tmp_path / "a run" / "seed0"
    cmd = train_cmd.train_command(train_cmd.PLAIN_TRAIN_CMD, run, "canonical")
    assert cmd == [sys.executable, "-m", "fixedid.train", "--config", str(run / "run.json"), "--out", str(run),
                   "--variants", "canonical", "--resume", "--quiet"]


def test_a_training_command_ends_with_its_worker():
    """The worker's child is told to stop when the worker dies, even by SIGKILL (no training outlives its task)."""
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time, os\n"
                               "child = subprocess.Popen([sys.executable, '-c', sys.argv[1], str(os.getpid()), "
                               "sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                               "print(child.pid, flush=True)\ntime.sleep(60)\n", train_cmd.TIED],
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.3)  # the child has asked for its signal and run the command
    assert _alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid):
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def test_the_local_cluster_shares_out_gpus_and_cores():
    """One worker per GPU, each seeing only its own and holding one GPU resource; on CPUs an equal share of the
    cores each (read from the specs: no process is started)."""
    specs = [w["options"] for w in worker_specs(3, gpus=["0", "1"]).values()]
    assert [s["env"]["CUDA_VISIBLE_DEVICES"] for s in specs] == ["0", "1", "0"]
    assert all(s["resources"] == {"GPU": 1} and s["nthreads"] == 1 for s in specs)
    cpu = [w["options"] for w in worker_specs(2, gpus=[]).values()]
    cores = os.cpu_count() or 1
    assert all(s["resources"] == {} and s["env"]["OMP_NUM_THREADS"] == os.environ.get(
        "OMP_NUM_THREADS", str(max(1, cores // 2))) for s in cpu)


def test_a_study_can_run_on_an_existing_cluster(studies, capsys):
    """--scheduler: the client joins the cluster at that address (its workers run the tasks) and prints its
    dashboard once; an address where no scheduler answers is one line."""
    _, _, running = studies
    with study_client(scheduler=running.scheduler.address) as (client, gpu):
        ran_on = client.submit(lambda: __import__("os").getpid(), pure=False).result()
        workers = client.scheduler_info()["workers"]
    assert gpu is False and len(workers) == 2
    assert ran_on in running.run(lambda: __import__("os").getpid()).values()
    assert capsys.readouterr().out.count("Dask dashboard: http") == 1
    with pytest.raises(AnalysisError, match="no Dask scheduler answers at tcp://127.0.0.1:9") as e:
        with study_client(scheduler="tcp://127.0.0.1:9", connect_timeout=1):
            pass
    assert "\n" not in str(e.value)


def test_a_tasks_package_warning_is_one_line(tmp_path, capsys):
    """A FixedIdWarning raised in a task (the tiny vocabulary's constant bits, say) is written as the CLI writes
    it: ``fixedid-study: warning: ...``, not Python's file, line and source."""
    import warnings

    from fixedid.errors import FixedIdWarning

    def run():
        warnings.warn("7 of the 16 code bits are the same for all tokens", FixedIdWarning)
        (tmp_path / "t").write_text("done")

    before = warnings.formatwarning  # the worker threads share this process: put its format back afterwards
    with local_cluster(1, gpus=[], processes=False) as cluster, Client(cluster) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("always", FixedIdWarning)
            warnings.showwarning = lambda m, c, f, n, file=None, line=None: sys.stderr.write(  # Python's own, not
                warnings.formatwarning(m, c, f, n, line))  # pytest's recorder
            run_graph([Task("t", (), (tmp_path / "t").exists, run)], client, quiet=True)
    warnings.formatwarning = before
    err = capsys.readouterr().err
    assert "fixedid-study: warning: 7 of the 16 code bits are the same for all tokens\n" in err
    assert "warnings.warn(" not in err


def test_task_keys_share_a_prefix_per_kind_so_dask_learns_durations():
    """Dask learns task durations by key prefix and steals queued work for an idle worker only when it expects the
    work to take long: every training must share the prefix "train" (a prefix per task left a worker idle for a
    whole training while the other had trainings queued)."""
    from distributed.utils import key_split

    from analysis.study.graph import task_key

    assert {key_split(task_key(n, "0a1b2c3d")) for n in ("train.seed5.learned", "train.seed5-gf2r1.gf2")} == {"train"}
    assert key_split(task_key("measure.seed5.gf2-r1.step1200.loss", "0a1b2c3d")) == "measure"
    assert task_key("train.seed5.learned", "x") != task_key("train.seed6.learned", "x")

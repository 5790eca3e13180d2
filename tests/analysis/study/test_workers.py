"""The study shared among worker processes: two workers make the same measurements as one process, every task is
claimed once, and the task of a worker killed mid-training is taken over and resumed exactly."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from analysis import AnalysisError
from analysis.study import analyses, workers
from analysis.study.claims import claim_records
from analysis.cli.study import main as study_main
from analysis.study.pipeline import checkpoint_dirs, measurement_tasks, run_study, run_study_worker, training_runs
from analysis.study.pipeline import study_tasks as tasks_of

from tests.analysis.study import _worker_setup
from tests.test_notebooks import CONFIG

pytestmark = pytest.mark.filterwarnings("ignore::fixedid.errors.FixedIdWarning")  # the tiny vocabulary

ROOT = Path(__file__).resolve().parents[3]
SEEDS, VARIANTS = "0,1", "learned,canonical"
PROGRAM = ("-m", "tests.analysis.study._worker_setup")


def study_args(cfg, out):
    return ["--config", str(cfg), "--seeds", SEEDS, "--gf2-seeds", "0", "--variants", VARIANTS, "--out", str(out)]


def outputs(out: Path) -> dict:
    """Every measurement, per-item and similarity file of a study, by path: its bytes."""
    return {p.relative_to(out): p.read_bytes() for d in ("measurements", "items", "similarity")
            for p in sorted((out / d).rglob("*")) if p.is_file()}


def assert_same_outputs(got: dict, want: dict) -> None:
    """The same files; the same bytes, except that a table may differ in the last digits of its floats (each
    worker process runs with its share of the threads, so BLAS and torch sum in a different order)."""
    assert sorted(got) == sorted(want)
    for path, data in want.items():
        if got[path] == data:
            continue
        assert path.suffix == ".csv", f"{path} differs"
        a, b = (pd.read_csv(io.BytesIO(x)) for x in (got[path], data))
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-9, atol=1e-12, obj=str(path))


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """One process (the study as it runs without --worker), and a worker killed in the middle of its first
    training followed by two workers started with --workers' launcher. (The killed worker starts first and
    trains beside the one process, which has a directory of its own.)"""
    tmp = tmp_path_factory.mktemp("workers")
    cfg = tmp / "study.toml"
    cfg.write_text(CONFIG)
    out = tmp / "shared"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STALL_AT_STEP": "8", "STALL_MARK": str(tmp / "stalled")}
    doomed = subprocess.Popen([sys.executable, *PROGRAM, *study_args(cfg, out), "--worker", "--worker-id", "doomed",
                               "--quiet"], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    with pytest.MonkeyPatch.context() as mp:
        _worker_setup.configure(mp.setattr)
        run_study(str(cfg), tmp / "one", [0, 1], [0], variants=VARIANTS.split(","), quiet=True)
    deadline = time.monotonic() + 120
    while not (tmp / "stalled").exists() and doomed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp / "stalled").exists(), doomed.communicate()[1][-2000:]
    doomed.send_signal(signal.SIGKILL)  # mid-training: after its checkpoint at step 8 of 16
    doomed.wait()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))
        mp.chdir(ROOT)
        start = time.perf_counter()
        report = workers.launch_workers(2, study_args(cfg, out), out=out, program=PROGRAM, quiet=True)
        wall = time.perf_counter() - start
    return tmp, out, report, wall


def test_two_workers_make_the_measurements_of_one_process(studies):
    tmp, out, report, _ = studies
    one = outputs(tmp / "one")
    assert len([p for p in one if p.parts[0] == "measurements"]) == 4 * (2 + 1)  # 4 models: loss at 2 steps, head
    assert_same_outputs(outputs(out), one)
    assert report.read_text() == (tmp / "one" / "report.md").read_text()
    # the training resumed by the other worker after the kill logged exactly the uninterrupted run's losses
    for run in ("seed0", "seed1"):
        for v in VARIANTS.split(","):
            assert (out / "runs" / run / v / "metrics.jsonl").read_bytes() == \
                (tmp / "one" / "runs" / run / v / "metrics.jsonl").read_bytes()


def test_every_task_is_claimed_once_and_the_killed_workers_task_is_taken_over(studies):
    tmp, out, _, _ = studies
    tasks = study_tasks(tmp, out)
    assert len(tasks) == 2 + 4 + 1 + 12 + 1  # prepare, train, similarity, measurements, report
    rec = claim_records(out / "tasks")
    live = rec[rec.state != "dead"]
    assert sorted(live.task) == sorted(t.name for t in tasks) and (live.state == "done").all()  # once each
    dead = rec[rec.state == "dead"]
    assert len(dead) == 1 and dead.iloc[0].worker == "doomed"  # the training it was killed in
    victim = dead.iloc[0].task
    vdir = Path((tmp / "stalled").read_text().split()[0])  # where the killed worker was training
    assert victim == f"train.{vdir.parent.name}.{vdir.name}"
    heir = live.set_index("task").loc[victim]
    assert heir.took_over == dead.iloc[0].token and heir.worker.endswith(("-w0", "-w1"))
    assert all(w == "doomed" or w.endswith(("-w0", "-w1")) for w in live.worker)
    # the logs agree: each task claimed once by a live worker (the victim twice: by the killed one and its heir)
    events = [json.loads(line) for f in sorted((out / "tasks" / "log").glob("*.jsonl"))
              for line in f.read_text().splitlines()]
    claimed = pd.Series([e["task"] for e in events if e["event"] == "claimed"]).value_counts()
    assert claimed[victim] == 2 and (claimed.drop(victim) == 1).all() and len(claimed) == len(tasks)
    done_by = pd.Series({e["task"]: e["worker"] for e in events if e["event"] == "done"})
    assert done_by.str.endswith("-w0").sum() > 0 and done_by.str.endswith("-w1").sum() > 0  # the work was shared


def _study(tmp, out):
    from fixedid.train.config import TrainConfig

    return TrainConfig.load(str(tmp / "study.toml")), out, [0, 1], [0], VARIANTS.split(",")


def study_tasks(tmp, out) -> list:
    with pytest.MonkeyPatch.context() as mp:
        _worker_setup.configure(mp.setattr)
        return tasks_of(*_study(tmp, out))


def written_at(cfg, out: Path, seeds, gf2_seeds, variants) -> dict[str, float]:
    """``{task: when its output was written}``, from the output's own files (their newest mtime): what a worker's
    readiness test reads. (Not the log's ``done``: it is written just after the output, so another worker may
    already have claimed the next task on the output's word.) Not the preparations: each training rewrites its
    run's ``run.json``, so their output has no date of its own."""
    newest = lambda paths: max(p.stat().st_mtime for p in paths)  # noqa: E731
    at = {}
    for _, name, _, rel, run_variants in training_runs(cfg, seeds, gf2_seeds, variants):
        for v in run_variants:
            at[f"train.{name}.{v}"] = newest([out / "runs" / rel / v / "meta.json"])
    at[f"similarity.step{cfg.train.steps}"] = newest((out / "similarity").rglob("*.*"))
    ckpts = checkpoint_dirs(cfg, out, seeds, gf2_seeds, variants)
    for m in measurement_tasks(cfg, out, ckpts):
        at[f"measure.seed{m.seed}.{m.variant}.step{m.step}.{m.analysis}"] = newest([m.path])
    return at


def test_tasks_wait_for_what_they_need(studies):
    """Each measurement needs its variant's training (and the head's, the other seed's learned one); the similarity
    needs every training; the report needs everything: the claims' times say each ran after its needs."""
    tmp, out, _, _ = studies
    tasks = {t.name: t for t in study_tasks(tmp, out)}
    assert tasks["measure.seed0.canonical.step16.head"].needs == ("train.seed0.canonical", "train.seed1.learned")
    assert set(tasks["similarity.step16"].needs) == {f"train.seed{s}.{v}" for s in (0, 1) for v in ("learned",
                                                                                                 "canonical")}
    live = claim_records(out / "tasks").query("state == 'done'").set_index("task")
    with pytest.MonkeyPatch.context() as mp:
        _worker_setup.configure(mp.setattr)
        written = written_at(*_study(tmp, out))
    for name, t in tasks.items():
        assert all(live.loc[name, "claimed"] >= written[n] for n in t.needs if n in written), name
        assert all(live.loc[name, "claimed"] >= live.loc[n, "claimed"] for n in t.needs), name
    report = next(n for n in tasks if n.startswith("report."))
    assert len(tasks[report].needs) == len(tasks) - 1


def test_a_finished_study_is_not_redone_by_workers(studies, capsys):
    tmp, out, _, _ = studies
    stamps = {p: p.stat().st_mtime_ns for p in (out / "measurements").rglob("*.csv")}
    before = len(claim_records(out / "tasks"))
    with pytest.MonkeyPatch.context() as mp:
        _worker_setup.configure(mp.setattr)
        run_study_worker(*_study(tmp, out)[:4], variants=VARIANTS.split(","), worker="late", quiet=True)
    assert len(claim_records(out / "tasks")) == before
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())


@pytest.mark.parametrize("args, message", [
    (["--worker", "--workers", "2"], "not both"),
    (["--train-cmd", "{python} -m fixedid.train --out {out}"], "add --worker"),
    (["--worker", "--train-cmd", "{python} -m fixedid.train --out {out} --variants {variant}"], "needs ['{config}']"),
    (["--worker", "--train-cmd", "torchrun {script} {config} {out} {variant}"], "unknown placeholder(s) ['script']"),
    (["--workers", "0"], "at least 1"),
    (["--worker", "--stale-after", "0"], "must be positive"),
])
def test_bad_sharing_arguments_are_one_line(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        study_main(["--out", str(tmp_path / "s"), *args])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and "\n" not in err and not (tmp_path / "s").exists()


def test_train_command_fills_its_placeholders_quoted(tmp_path):
    run = tmp_path / "a run" / "seed0"
    cmd = workers.train_command(workers.PLAIN_TRAIN_CMD, run, "canonical")
    assert cmd == [sys.executable, "-m", "fixedid.train", "--config", str(run / "run.json"), "--out", str(run),
                   "--variants", "canonical", "--resume", "--quiet"]


def test_each_training_can_be_a_torchrun_job(studies, tmp_path):
    """--train-cmd with torchrun and two gloo ranks: the worker trains through it and measures the result, which
    matches the one-process training of the same seed to DDP's rounding."""
    tmp, _, _, _ = studies
    torchrun = ("{python} -m torch.distributed.run --standalone --nproc_per_node=2 -m fixedid.train --config {config} "
                "--out {out} --variants {variant} --resume --quiet")
    with pytest.MonkeyPatch.context() as mp:
        _worker_setup.configure(mp.setattr)
        mp.setattr(analyses, "ANALYSES", {"loss": analyses.ANALYSES["loss"]})
        run_study_worker(str(tmp / "study.toml"), tmp_path / "ddp", [0], [0], variants=["learned"], worker="ddp",
                         train_cmd=torchrun, quiet=True)
    a = [json.loads(line) for line in (tmp / "one" / "runs" / "seed0" / "learned" / "metrics.jsonl").read_text()
         .splitlines() if "loss" in line]
    b = [json.loads(line) for line in (tmp_path / "ddp" / "runs" / "seed0" / "learned" / "metrics.jsonl").read_text()
         .splitlines() if "loss" in line]
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert rb.get("loss", rb.get("val_loss")) == pytest.approx(ra.get("loss", ra.get("val_loss")), rel=1e-4)
    loss = [pd.read_csv(d / "measurements" / "seed0" / "learned" / f"step{s}" / "loss.csv").value[0]
            for d in (tmp / "one", tmp_path / "ddp") for s in (8, 16)]
    assert loss[2:] == pytest.approx(loss[:2], rel=1e-4)


def test_a_training_command_ends_with_its_worker():
    """The worker's child is told to stop when the worker dies, even by SIGKILL (no training outlives its claim)."""
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time, os\n"
                               "child = subprocess.Popen([sys.executable, '-c', sys.argv[1], str(os.getpid()), "
                               "sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                               "print(child.pid, flush=True)\ntime.sleep(60)\n", workers.TIED],
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


def test_workers_share_a_task_list_each_task_once_after_its_needs(tmp_path):
    """Two worker threads on 30 toy tasks in a chain of three layers: each runs once, after what it needs; a task
    that fails is given back, its worker stops with the error, and the next worker runs it."""
    import threading

    ran, lock = [], threading.Lock()

    def task(name, needs=(), fail=None):
        def run():
            if fail is not None and not fail.is_set():
                fail.set()
                raise ValueError(f"{name} failed once")
            time.sleep(0.01)
            with lock:
                ran.append((name, time.monotonic()))
            (tmp_path / name).write_text("done")
        return workers.Task(name, tuple(needs), (tmp_path / name).exists, run, order=0)

    once = threading.Event()
    tasks = [task(f"a{i}") for i in range(10)]
    tasks += [task(f"b{i}", [f"a{i}", f"a{(i + 1) % 10}"], fail=once if i == 3 else None) for i in range(10)]
    tasks += [task(f"c{i}", [f"b{j}" for j in range(10)]) for i in range(10)]
    errors = []

    def worker(name):
        try:
            workers.run_worker(tasks, tmp_path / "tasks", worker=name, quiet=True, poll=0.05)
        except ValueError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == ["b3 failed once"]  # the worker that hit it stopped; the other finished everything
    when = dict(ran)
    assert sorted(when) == sorted(t.name for t in tasks)  # every task ran, and only once
    for t in tasks:
        assert all(when[n] < when[t.name] for n in t.needs), t.name
    rec = claim_records(tmp_path / "tasks")
    assert list(rec[rec.state == "dead"].released) == ["ValueError: b3 failed once"]
    with pytest.raises(AnalysisError, match="not a file name"):
        workers.run_worker([task("../x")], tmp_path / "tasks")

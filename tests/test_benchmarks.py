"""The GPU benchmark script runs end to end (here on the CPU, on the toy shape): its training loops, ratios and
analyses, so that the one command meant for a GPU machine is known to work before it gets one. The suite and demo
benchmarks' parsing and bad input."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "experiments" / "benchmarks"


def bench_module(name):
    """The benchmark script ``experiments/benchmarks/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_benchmark_smoke_run_on_cpu(tmp_path, capsys):
    gpu = bench_module("gpu")
    out = tmp_path / "gpu.json"
    gpu.main(["--device", "cpu", "--shapes", "toy", "--steps", "2", "--warmup", "2", "--log-every", "2",
              "--dtype", "fp32", "--no-compile", "--pairs", "4", "--tokens", "8", "--probe-tokens", "256",
              "--json", str(out)])
    rows = json.loads(out.read_text())
    (train,) = rows["training"]
    assert train["shape"] == "toy" and train["batch"] == "16x128" and "mfu_trainer" not in train  # no CPU peak
    assert all(math.isfinite(train[k]) and train[k] > 0 for k in ("trainer_tok_s", "bare_tok_s", "trainer_over_bare",
                                                                  "trainer_whole_call_tok_s", "gflop_per_token"))
    assert [r["analysis"] for r in rows["analyses"]] == ["patching", "edges", "probes"]
    assert all(r["x_forward"] > 0 and r["tokens"] > 0 for r in rows["analyses"])
    printed = capsys.readouterr().out
    assert "trainer/bare (median over shapes)" in printed and "MFU n/a" in printed


@pytest.mark.parametrize("argv, match", [(["--shapes", "nope"], "unknown shape"),
                                         (["--device", "cpu", "--steps", "5"], "multiples of --log-every"),
                                         (["--device", "cpu", "--log-every", "0"], "--log-every must be positive")])
def test_gpu_benchmark_refuses_bad_input_in_one_line(argv, match, tmp_path, capsys):
    out = tmp_path / "gpu.json"
    with pytest.raises(SystemExit) as e:
        bench_module("gpu").main([*argv, "--json", str(out)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and match in err and "\n" not in err and not out.exists()


def test_suite_benchmark_sums_durations_per_file():
    text = ("============ slowest durations ============\n"
            "12.50s call     tests/test_docs.py::test_the_site_builds_in_strict_mode\n"
            "2.00s setup    tests/analysis/test_x.py::test_a[canonical]\n"
            "0.50s teardown tests/analysis/test_x.py::test_a[canonical]\n"
            "1.25s call     tests/analysis/test_x.py::test_b\n"
            "(3 durations < 0.005s hidden.)\n")
    assert bench_module("suite").file_seconds(text) == {"tests/test_docs.py": 12.5, "tests/analysis/test_x.py": 3.75}


@pytest.mark.parametrize("name, argv, match", [("suite", ["--budget", "0"], "--budget must be positive"),
                                               ("demo", ["--target", "-1"], "--target must be positive"),
                                               ("crosscoder", ["--models", "1"], "give --models >= 2"),
                                               ("edges", ["--threads", "0"], "argument --threads: give thread counts"),
                                               ("edges", ["--recipes", "nosuch"], "argument --recipes: give packaged"),
                                               ("probes", ["--threads", "1,x"], "argument --threads: give thread"),
                                               ("step_bound", ["--steps", "0"], "--steps must be at least 1")])
def test_suite_and_demo_benchmarks_refuse_bad_input_in_one_line(name, argv, match, capsys):
    with pytest.raises(SystemExit) as e:
        bench_module(name).main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and match in err[0]


def test_side_by_side_rounds_alternate_their_order():
    # what one callable leaves behind (caches, freed memory the next must fault in) falls on each alike
    timing = bench_module("_timing")
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    ratio, medians = timing.median_ratio(fns, "a", "b", rounds=4, warmup=1)
    assert calls == list("abc") + list("abc") + list("cba") + list("abc") + list("cba")
    assert ratio > 0 and set(medians) == set("abc")
    calls.clear()
    timing.compare(fns, rounds=2, warmup=0)
    assert calls == list("abc") + list("cba")

"""A third-party analysis, end to end: ``examples/plugin`` is installed (into a folder of its own, so the rest of the
suite never sees it) and, through its entry point alone, becomes a ``fixedid-analyze`` verb with its options,
examples, shared options and one-line refusals, runs on a test checkpoint, and is one of the study's analyses."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[3]

#: Run in a fresh interpreter that sees the installed plugin: every check the test makes, reported as JSON.
PROBE = r"""
import contextlib, io, json, sys
from analysis.cli.main import build_parser, main
from analysis.study.analyses import ANALYSES, check_analyses, measure
from analysis import load

ckpt, out = sys.argv[1], sys.argv[2]
report = {"help": build_parser().format_help()}

def run(argv):
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        try:
            main(argv)
        except SystemExit as e:
            return e.code, std.getvalue(), err.getvalue()
    return None, std.getvalue(), err.getvalue()

report["verb_help"] = run(["norms", "--help"])
report["run"] = run(["norms", "--ckpt", f"mine={ckpt}", "--tokens", "256", "--device", "cpu", "--out", out])
report["bad"] = run(["norms", "--ckpt", ckpt, "--tokens", "0", "--out", out + "-bad"])
report["study_selects"] = check_analyses("norms,loss")
report["study_when"] = ANALYSES["norms"].when
rows = measure("norms", load(ckpt))
report["study_rows"] = rows.to_dict("records")
from analysis.cli.study import main as study
report["study_bad"] = None
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        study(["run", "tiny", "--analyses", "nonsense", "--out", out + "-study"])
    except SystemExit as e:
        report["study_bad"] = [e.code, err.getvalue()]
print("PROBE" + json.dumps(report))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    site = tmp_path_factory.mktemp("plugin-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(ROOT / "examples" / "plugin")], check=True, capture_output=True)
    return site


def test_an_installed_plugin_is_a_verb_and_a_study_analysis(installed, learned, tmp_path):
    out = tmp_path / "norms"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(installed), str(ROOT)]))
    done = subprocess.run([sys.executable, "-c", PROBE, str(learned.ckpt_dir), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.split("PROBE", 1)[1])
    # listed under its family, with its own help line
    assert "  norms " in report["help"] and "an example plugin" in report["help"]
    code, text, _ = report["verb_help"]
    assert code == 0 and "--tokens" in text and "(default 4096)" in text and "examples:" in text
    for shared in ("--ckpt", "--device", "--dtype", "--out", "--overwrite"):
        assert shared in text
    # the verb ran: its table and figure written where --out says, the checkpoint named as --ckpt named it
    code, printed, _ = report["run"]
    assert code == 0 and "mine: norm" in printed
    table = pd.read_csv(out / "norms.csv")
    assert list(table.variant.unique()) == ["mine"] and len(table) == learned.cfg.n_layers + 1
    assert (table.norm_lo <= table.norm).all() and (table.norm <= table.norm_hi).all()
    assert (out / "norms.png").stat().st_size > 0 and (out / "norms.pdf").stat().st_size > 0
    # a bad value of its own option: one line, exit 2, nothing written
    code, _, err = report["bad"]
    assert code == 2 and err.count("\n") == 1 and "argument --tokens: must be a positive integer" in err
    assert not Path(str(out) + "-bad").exists()
    # the study selects it by name and measures it as long-format rows
    assert report["study_selects"] == ["norms", "loss"] and report["study_when"] == "final"
    rows = pd.DataFrame(report["study_rows"])
    assert set(rows.analysis) == {"norms"} and "norms:norm" in set(rows.metric)
    assert len(rows[rows.metric == "norms:norm"]) == learned.cfg.n_layers + 1
    code, err = report["study_bad"]
    assert code == 2 and "norms" in err and err.count("\n") == 1


def test_the_suite_itself_never_sees_the_plugin():
    from analysis.specs.registry import plugin_specs

    assert "norms" not in plugin_specs()

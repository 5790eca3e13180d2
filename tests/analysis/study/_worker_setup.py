"""The test-sized study for the tests of :mod:`analysis.study.workers`: a few analyses at small sample sizes and a
cheap report (those tests check how the work is shared, not the measurements or the report, which
tests/analysis/study/test_study.py checks).

    python -m tests.analysis.study._worker_setup <arguments of python -m experiments.study>

runs the study's command line with that setup. With ``STALL_AT_STEP=N`` and ``STALL_MARK=<file>`` in the
environment, a training stops after its checkpoint at step ``N``: it creates the file and sleeps, to be killed.
"""

import os
import sys
import time

ANALYSES = ("loss", "head")  # one at every kept step, one at the final step with another seed's model
SIZES = (("TOKENS", 1024), ("N_PAIRS", 16), ("EVAL_LIMIT", 25), ("BOOT", 50), ("PROBE_C", 1.0))


def small_report(cfg, out, seeds, gf2_seeds):
    """The measurements of ``seeds`` in one CSV and a one-line report.md (instead of the figures and tables)."""
    from analysis.outputs import write_csv
    from analysis.study.pipeline import collect_measurements

    df = collect_measurements(out)
    write_csv(df[df.seed.isin(seeds)], out / "measurements.csv")
    (out / "report.md").write_text(f"{len(df)} measurements of seeds {seeds}\n")
    return out / "report.md"


def configure(set_attr=setattr) -> None:
    """Apply the setup (``set_attr``: ``setattr``, or a pytest monkeypatch's ``setattr`` in-process)."""
    from analysis.study import analyses, pipeline

    set_attr(analyses, "ANALYSES", {k: v for k, v in analyses.ANALYSES.items() if k in ANALYSES})
    for name, value in SIZES:
        set_attr(analyses, name, value)
    set_attr(pipeline, "write_report", small_report)


def stall(step: int, mark: str) -> None:
    import fixedid.train.loop as loop

    original = loop.save_state

    def save_then_stall(raw, opt, vdir, data, cfg, done, *a, **k):
        original(raw, opt, vdir, data, cfg, done, *a, **k)
        if done == step:
            open(mark, "w").write(f"{vdir} {done}\n")
            time.sleep(3600)

    loop.save_state = save_then_stall


if __name__ == "__main__":
    configure()
    if os.environ.get("STALL_AT_STEP"):
        stall(int(os.environ["STALL_AT_STEP"]), os.environ["STALL_MARK"])
    from analysis.cli.study import main

    main(sys.argv[1:])

"""The test-sized study for the tests of the study on Dask (tests/analysis/study/test_dask.py): a few analyses at
small sample sizes and a cheap report (those tests check how the work is run, not the measurements or the report,
which tests/analysis/study/test_study.py checks). :class:`Setup` applies it in every Dask worker process (and in
workers that replace a dead one); with ``kill_at_step`` the first training to save its checkpoint at that step
kills its own worker process there.
"""

import os
import signal

from distributed.diagnostics.plugin import WorkerPlugin

ANALYSES = ("loss", "head")  # one at every kept step, one at the final step with another seed's model
SIZES = (("TOKENS", 1024), ("N_PAIRS", 16), ("EVAL_LIMIT", 25), ("BOOT", 50), ("PROBE_C", 1.0))


def small_report(cfg, out, seeds, gf2_seeds, claims=None):
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


def kill_after_checkpoint(step: int, mark: str) -> None:
    """The first training (over all processes: ``mark`` is created once) to save its checkpoint at ``step`` writes
    where it was into ``mark`` and kills its own process (SIGKILL: no clean-up, as a lost node)."""
    import fixedid.train.loop as loop

    original = loop.save_state

    def save_then_die(raw, opt, vdir, data, cfg, done, *a, **k):
        original(raw, opt, vdir, data, cfg, done, *a, **k)
        if done == step:
            try:
                fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(fd, f"{vdir} {done} {os.getpid()}\n".encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)

    loop.save_state = save_then_die


class Setup(WorkerPlugin):
    """The test-sized study in a Dask worker (``analyses``: the analyses kept), and optionally the kill of
    :func:`kill_after_checkpoint`."""

    name = "fixedid-test-study"

    def __init__(self, analyses=ANALYSES, kill_at_step: int | None = None, mark: str | None = None):
        self.analyses, self.kill_at_step, self.mark = tuple(analyses), kill_at_step, mark

    def setup(self, worker):
        from analysis.study import analyses

        configure()
        analyses.ANALYSES = {k: v for k, v in analyses.ANALYSES.items() if k in self.analyses}
        if self.kill_at_step is not None:
            kill_after_checkpoint(self.kill_at_step, self.mark)

"""The ``fixedid-analyze`` command line: one router (:mod:`.main`), one module per verb, shared argument helpers
(:mod:`.args`); ``python -m analysis.cli.lm_eval`` is lm-eval's own command with the ``fixedid`` model."""

from analysis.cli.main import main

__all__ = ["main"]

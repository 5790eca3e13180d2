"""The study's measurements, read from the analyses' specs: each :class:`~analysis.specs.base.Measure` a spec declares
(built-in or a plugin's), and for a plugin's spec without one its tables at their defaults, as long-format rows
``analysis, metric, key, value``. The sample sizes below are module attributes, read when a measurement runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd
import torch

from analysis.errors import AnalysisError
from analysis.specs.base import Measure, Sizes

_SIZES = Sizes()
#: Validation tokens per corpus-level measurement.
TOKENS = _SIZES.tokens
#: Task pairs per pair-level measurement.
N_PAIRS = _SIZES.n_pairs
#: lm-eval documents per built-in task.
EVAL_LIMIT = _SIZES.eval_limit
#: Bootstrap draws over windows of the similarity references.
BOOT = _SIZES.boot
#: The probes' regularisation: chosen per target by cross-validation on the training sequences.
PROBE_C = _SIZES.probe_c


def sizes() -> Sizes:
    """The sample sizes as this module holds them now (a test may set smaller ones)."""
    return Sizes(tokens=TOKENS, n_pairs=N_PAIRS, eval_limit=EVAL_LIMIT, boot=BOOT, probe_c=PROBE_C)


@dataclass(frozen=True)
class Analysis:
    """One entry of :data:`ANALYSES`: ``fn(model, reference)`` measures one checkpoint as long-format rows;
    ``when``: "all" (every kept snapshot and the final checkpoint) or "final"; ``reference``: whether ``fn`` is
    given the learned variant of another seed; ``controls``: whether it also runs on the control variants."""

    name: str
    when: str
    fn: Callable[..., pd.DataFrame]
    reference: bool = False
    controls: bool = True


def _entry(m: Measure) -> Analysis:
    return Analysis(m.name, m.when, lambda model, reference=None: m.rows(model, reference, sizes()), m.reference,
                    m.controls)


def default_measure(spec) -> Measure:
    """A spec without a measurement of its own, measured at its defaults on the final checkpoint: every number of
    its tables (:func:`analysis.specs.rows.table_rows`); an analysis of prompt pairs reads the study's IOI pairs."""
    from analysis.specs.execute import run_spec
    from analysis.specs.rows import table_rows

    def rows(model, reference, sizes):
        params = {"task": "ioi", "n_pairs": sizes.n_pairs} if "task" in {p.name for p in spec.params} else {}
        result = run_spec(spec, {"model": model}, **params)
        for fig in result.figures.values():
            import matplotlib.pyplot as plt

            plt.close(fig)
        return table_rows(spec.name, {k: t.drop(columns="variant", errors="ignore") for k, t in result.tables.items()})

    return Measure(spec.name, rows)


#: The built-in measurements in the order they run (cheap and every-snapshot ones first).
ORDER = ("behaviours", "loss", "probes", "lens", "eval", "patching", "interventions", "recoding", "erasure", "head",
         "context", "circuits")


def _from_specs() -> dict[str, Analysis]:
    from analysis.specs.registry import builtin_specs, plugin_specs

    builtin = {m.name: _entry(m) for spec in builtin_specs().values() for m in spec.measures}
    out = {name: builtin.pop(name) for name in ORDER if name in builtin} | builtin
    for spec in plugin_specs().values():
        for m in spec.measures or (default_measure(spec),):
            if m.name not in out:
                out[m.name] = _entry(m)
    return out


#: The study's analyses by name, in the order they run (the specs' order); :func:`register` adds more.
ANALYSES: dict[str, Analysis] = _from_specs()


def register(name: str, when: str, *, reference: bool = False, controls: bool = True):
    """Decorator: ``@register("my_analysis", when="final")`` adds ``fn(model, reference) -> rows`` to
    :data:`ANALYSES` (for a measurement defined in a notebook or script; a package declares a spec instead)."""
    if when not in ("all", "final"):
        raise AnalysisError(f"analysis {name!r}: when={when!r} must be 'all' or 'final'")
    if name in ANALYSES:
        raise AnalysisError(f"analysis {name!r} is registered twice")

    def add(fn):
        ANALYSES[name] = Analysis(name, when, fn, reference, controls)
        return fn

    return add


#: The name that selects the similarity of the study's variants (and the overlap of their circuits) in a study's
#: ``analyses``, beside the names of :data:`ANALYSES`.
SIMILARITY = "similarity"


#: Study-wide measurements made only when named (they are heavy): the crosscoders over pairs of variants.
OPTIONAL = ("crosscoders",)


def check_analyses(names) -> list[str] | None:
    """``names`` (a list, or a comma-separated string) as a list of the study's analyses (the names of
    :data:`ANALYSES`, ``similarity`` and the :data:`OPTIONAL` ones), or None for all but the optional ones; an
    unknown name raises :class:`~analysis.errors.AnalysisError`."""
    if names is None:
        return None
    names = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    known = list(ANALYSES) + [SIMILARITY, *OPTIONAL]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise AnalysisError(f"--analyses {','.join(names)!r}: {'unknown ' + ', '.join(bad) if bad else 'none given'}; "
                            f"choose from {','.join(known)}")
    return list(dict.fromkeys(names))


def measure(analysis: str, model, reference=None) -> pd.DataFrame:
    """One analysis of one checkpoint as long-format rows; ``reference``: the learned variant of another seed, for
    the analyses registered with ``reference=True`` (the head's comparison with a learned input table)."""
    entry = ANALYSES.get(analysis)
    if entry is None:
        raise AnalysisError(f"unknown analysis {analysis!r}; use {list(ANALYSES)}")
    return entry.fn(model, reference)


def circuit_overlap_of(models: dict) -> pd.DataFrame:
    """The overlap of the top CIRCUIT_K EAP edges of ``{(variant, seed): model or checkpoint directory}`` on the
    study's IOI pairs (:func:`analysis.causal.circuit_overlap.circuit_overlap`)."""
    from analysis.causal.circuit_overlap import circuit_overlap_of_models
    from analysis.loading import load
    from analysis.specs.circuit import CIRCUIT_K
    from analysis.tasks import task_pairs

    loaded = {k: load(m) if not isinstance(m, torch.nn.Module) else m for k, m in models.items()}
    return circuit_overlap_of_models(loaded, lambda m: task_pairs(m, "ioi", N_PAIRS), CIRCUIT_K)


__all__ = ["ANALYSES", "OPTIONAL", "SIMILARITY", "Analysis", "register", "check_analyses", "measure", "sizes", "TOKENS",
           "N_PAIRS", "EVAL_LIMIT", "BOOT", "PROBE_C", "circuit_overlap_of", "default_measure"]

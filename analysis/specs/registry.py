"""Every analysis by name: the built-in specs, in the order ``fixedid-analyze --help`` lists them, and those other
installed packages register in the entry-point group ``fixedid.analyses`` (an entry point names a :class:`Spec`)."""

from __future__ import annotations

import importlib
import warnings
from importlib.metadata import entry_points

from analysis.errors import AnalysisError, AnalysisWarning
from analysis.specs.base import Spec

#: The entry-point group a package registers its analyses in: ``NAME = "package.module:SPEC"``.
ENTRY_POINTS = "fixedid.analyses"

#: The families in the order ``--help`` lists them; a plugin may add its own after these.
GROUPS = ("training", "causal methods", "circuits", "readouts", "evaluation", "interop", "study")

#: The built-in analyses' modules (``analysis.specs.<module>.SPEC``), in their families' order. (The command line
#: adds two verbs of its own that drive the layers above: ``demo`` and ``figures``, :mod:`analysis.cli.tools`.)
BUILTIN = ("behaviours", "patching", "interventions", "recoding", "erasure", "context", "dla", "paths",
           "edges", "circuit", "das", "graph", "probes", "similarity", "lens", "unembed", "attention", "sae",
           "features", "crosscoder", "evaluation", "export_hf", "import_hf")


#: Names the command line keeps for its own verbs (:mod:`analysis.cli.tools`).
RESERVED = ("demo", "figures")


def builtin_specs() -> dict[str, Spec]:
    """The built-in analyses by name."""
    specs = {}
    for module in BUILTIN:
        spec = importlib.import_module(f"analysis.specs.{module}").SPEC
        specs[spec.name] = spec
    return specs


def plugin_specs() -> dict[str, Spec]:
    """The analyses other installed packages register (entry-point group ``fixedid.analyses``), by name. One that
    cannot be loaded, is not a :class:`Spec` or takes a built-in name is left out with a one-line warning."""
    found = {}
    for ep in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        where = f"the analysis plugin {ep.name!r} ({ep.value})"
        try:
            spec = ep.load()
        except Exception as e:  # a broken plugin must not take the built-in verbs down with it
            warnings.warn(f"{where} could not be loaded and is left out: {type(e).__name__}: {e}", AnalysisWarning)
            continue
        if not isinstance(spec, Spec):
            warnings.warn(f"{where} names a {type(spec).__name__} object, not an analysis.specs.Spec; left out",
                          AnalysisWarning)
        elif spec.name in builtin_specs() or spec.name in found or spec.name in RESERVED:
            warnings.warn(f"{where} takes the name {spec.name!r}, which is already an analysis; left out",
                          AnalysisWarning)
        else:
            found[spec.name] = spec
    return found


def all_specs() -> dict[str, Spec]:
    """The built-in analyses, then the plugins'."""
    return builtin_specs() | plugin_specs()


def get_spec(name: str) -> Spec:
    """The analysis ``name`` (built-in or a plugin's)."""
    specs = all_specs()
    if name not in specs:
        raise AnalysisError(f"unknown analysis {name!r}; choose from {', '.join(specs)}")
    return specs[name]


def groups(specs: dict[str, Spec]) -> dict[str, dict[str, Spec]]:
    """``specs`` by family: the built-in families in their order, then any a plugin adds."""
    out: dict[str, dict[str, Spec]] = {g: {} for g in GROUPS}
    for name, spec in specs.items():
        out.setdefault(spec.group, {})[name] = spec
    return {g: v for g, v in out.items() if v}


__all__ = ["BUILTIN", "ENTRY_POINTS", "GROUPS", "all_specs", "builtin_specs", "get_spec", "groups", "plugin_specs"]

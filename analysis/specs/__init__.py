"""One description per analysis (:class:`Spec`) and the drivers' shared parts: the registry, typed parameters, runs."""

from analysis.specs import types
from analysis.specs.base import MODELS, Measure, Param, Result, Sizes, Spec
from analysis.specs.execute import run_spec, write_result
from analysis.specs.registry import ENTRY_POINTS, all_specs, builtin_specs, get_spec, plugin_specs

__all__ = ["ENTRY_POINTS", "MODELS", "Measure", "Param", "Result", "Sizes", "Spec", "all_specs", "builtin_specs",
           "get_spec", "plugin_specs", "run_spec", "types", "write_result"]

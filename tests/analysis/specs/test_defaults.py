"""The command line and ``import analysis`` agree: every parameter a spec shares (by name) with a library function it
names in ``library`` has that function's default, and the parser built from the spec offers that default too."""

import argparse
import importlib
import inspect

import pytest

from analysis.cli.main import build_parser, command_specs
from analysis.specs.registry import builtin_specs

SPECS = command_specs()


def _function(ref: str):
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _same(a, b) -> bool:
    norm = lambda v: tuple(v) if isinstance(v, (list, tuple)) else v  # noqa: E731 (a tuple parameter, a list default)
    return norm(a) == norm(b)


def test_every_builtin_analysis_names_the_library_functions_it_calls():
    for name, spec in builtin_specs().items():
        assert spec.library, f"{name} names no library function whose defaults it shares"
        for ref in spec.library:
            assert callable(_function(ref)), ref


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_cli_and_the_library_defaults_agree(name):
    spec = SPECS[name]
    shared = 0
    for ref in spec.library:
        sig = inspect.signature(_function(ref)).parameters
        for p in spec.params:
            lib = sig.get(p.name)
            if p.default is None or lib is None or lib.default is inspect.Parameter.empty:
                continue  # None: the verb defers to the library's own default
            shared += 1
            assert _same(p.default, lib.default), f"{name} --{p.name}: CLI {p.default!r}, {ref} {lib.default!r}"
    if spec.library and name not in ("export-hf", "import-hf", "graph", "sae", "attention", "eval", "unembed"):
        assert shared, f"{name} shares no parameter with its library functions: is library right?"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_parser_offers_the_spec_defaults(name):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    actions = {a.dest: a for a in sub._actions}
    for p in SPECS[name].params:
        assert _same(actions[p.name].default, False if p.switch else p.default), (name, p.name)
        assert actions[p.name].help and str(p.default) in actions[p.name].help.replace(" ", "") or p.default in (
            None, False) or isinstance(p.default, (tuple, list)), (name, p.name, actions[p.name].help)


def test_a_disagreement_would_be_caught(monkeypatch):
    """The check reads the library's signature: a spec whose default drifts from it fails."""
    from dataclasses import replace

    spec = SPECS["patching"]
    drifted = spec.with_params(replace(spec.param("metric"), default="logit_diff"))
    monkeypatch.setitem(SPECS, "patching", drifted)
    with pytest.raises(AssertionError, match="--metric"):
        test_the_cli_and_the_library_defaults_agree("patching")

"""The converters that read one command-line value, and the registry's refusal of plugins that cannot serve."""

from argparse import ArgumentTypeError
from importlib.metadata import EntryPoint

import pytest

from analysis.errors import AnalysisWarning
from analysis.specs import registry, types


@pytest.mark.parametrize("convert, text, value", [
    (types.positive_int, "3", 3), (types.nonnegative_int, "0", 0), (types.at_least(4), "4", 4),
    (types.positive_float, "1e-3", 1e-3), (types.unit_interval, "0", 0.0), (types.share, "1", 1.0),
    (types.open_share, "0.5", 0.5), (types.int_list, "1, 2,3", (1, 2, 3)), (types.float_list, "0.5,1", (0.5, 1.0)),
    (types.positive_int_list, "1,16", (1, 16)), (types.names, "a,b", ("a", "b")), (types.names_or_none, "none", ()),
    (types.subset_of(("x", "y")), "y,x,y", ("y", "x"))])
def test_a_good_value_is_read(convert, text, value):
    assert convert(text) == value


@pytest.mark.parametrize("convert, text, message", [
    (types.positive_int, "0", "must be a positive integer, got 0"), (types.positive_int, "two", "got 'two'"),
    (types.nonnegative_int, "-1", "must be >= 0"), (types.at_least(4), "3", "must be at least 4, got 3"),
    (types.positive_float, "0", "must be positive"), (types.unit_interval, "1.5", "must be in [0, 1]"),
    (types.share, "0", "must be in (0, 1]"), (types.open_share, "1", "must be in (0, 1)"),
    (types.int_list, "1,x", "comma-separated integers"), (types.int_list, ",", "comma-separated integers"),
    (types.float_list, "a", "comma-separated numbers"), (types.positive_int_list, "0,1", "positive integers"),
    (types.names, " , ", "must name at least one"), (types.subset_of(("x",)), "x,z", "one or more of x")])
def test_a_bad_value_says_what_was_wrong(convert, text, message):
    with pytest.raises(ArgumentTypeError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        convert(text)


def test_a_plugin_that_cannot_serve_is_left_out_with_a_warning(monkeypatch):
    from analysis.specs.patching import SPEC

    module = type("M", (), {})
    monkeypatch.setitem(__import__("sys").modules, "fake_plugin", module)
    module.BROKEN = property(lambda self: 1 / 0)
    module.NOT_A_SPEC = 42
    module.TAKES_A_BUILTIN_NAME = SPEC
    points = [EntryPoint(n, f"fake_plugin:{attr}", registry.ENTRY_POINTS)
              for n, attr in (("a", "MISSING"), ("b", "NOT_A_SPEC"), ("c", "TAKES_A_BUILTIN_NAME"))]
    monkeypatch.setattr(registry, "entry_points", lambda group: points)
    with pytest.warns(AnalysisWarning) as caught:
        assert registry.plugin_specs() == {}
    said = " ".join(str(w.message) for w in caught)
    assert "could not be loaded" in said and "names a int object, not an analysis.specs.Spec" in said
    assert "takes the name 'patching'" in said
    with pytest.warns(AnalysisWarning):
        assert "patching" in registry.all_specs()  # the built-in verbs stay

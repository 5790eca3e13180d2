"""What one analysis is, stated once: :class:`Spec` (its name, help, typed parameters, what it reads, the function
that computes its tables, its figures and its study measurements), :class:`Param`, :class:`Result` and
:class:`Measure`. The command line, the study and third-party plugins are drivers over these (docs: "Write your own
analysis")."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from analysis.errors import AnalysisError

#: What a spec reads: one checkpoint per run, one or more, none (it converts, redraws or trains), or any number
#: (``any``: zero or more, for an analysis that can also read something else, such as activation files).
MODELS = ("one", "many", "none", "any")


@dataclass(frozen=True)
class Param:
    """One parameter of an analysis: ``name`` is the keyword of the compute function (and of the library function
    it calls); ``default`` its default (the help text says it); ``type`` converts and checks one command-line value
    (an ``argparse`` ``type=``; raise :class:`argparse.ArgumentTypeError` with what was wrong); ``switch``: a flag,
    off unless given; ``repeat``: the option may be given several times (a list); ``group``: a titled group of
    options in ``--help``; ``option``: the command-line spelling (default ``--name-with-dashes``)."""

    name: str
    default: Any = None
    help: str = ""
    type: Callable[[str], Any] | None = None
    choices: tuple | None = None
    switch: bool = False
    repeat: bool = False
    required: bool = False
    metavar: str | None = None
    group: str | None = None
    option: str | None = None

    @property
    def flag(self) -> str:
        """The command-line option, e.g. ``--n-pairs``."""
        return self.option or "--" + self.name.replace("_", "-")

    def help_text(self) -> str:
        """The help line with its default, as ``--help`` shows it."""
        if self.switch or self.default is None or self.required:
            return self.help
        shown = ",".join(map(str, self.default)) if isinstance(self.default, (tuple, list)) else self.default
        return f"{self.help} (default {shown})" if self.help else f"default {shown}"


@dataclass
class Result:
    """What an analysis returns: ``tables`` (file stem -> tidy DataFrame, written as CSV), ``records`` (stem ->
    JSON-able object), ``files`` (relative path -> ``writer(path)`` for anything else: a dictionary's folder, an HTML
    page), ``summary`` (printed), ``attrs`` (anything a figure or summary reads). The drivers add ``names`` (the
    checkpoints' names, in order), ``params`` (every parameter's value), ``parts`` (a spec over several checkpoints:
    each one's own Result, by name) and ``figures`` (stem -> matplotlib figure)."""

    tables: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    summary: str = ""
    attrs: dict = field(default_factory=dict)
    names: list = field(default_factory=list)
    params: dict = field(default_factory=dict)
    parts: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)

    @property
    def table(self):
        """The one table of a result that has one."""
        if len(self.tables) != 1:
            raise AnalysisError(f"this result has {len(self.tables)} tables: {list(self.tables)}; pick one by name")
        return next(iter(self.tables.values()))


@dataclass(frozen=True)
class Sizes:
    """The study's sample sizes, handed to every :class:`Measure`: validation tokens per corpus-level measurement,
    task pairs per pair-level measurement, lm-eval documents per task, bootstrap draws of the similarity references,
    and the probes' regularisation (``"cv"``: chosen per target by cross-validation)."""

    tokens: int = 4096
    n_pairs: int = 32
    eval_limit: int = 100
    boot: int = 500
    probe_c: Any = "cv"


@dataclass(frozen=True)
class Measure:
    """One measurement the study makes with an analysis: ``rows(model, reference, sizes)`` returns long-format rows
    ``analysis, metric, key, value`` (``attrs["items"]``: per-item values for the report's bootstrap); ``when``:
    ``"all"`` (every kept snapshot and the final checkpoint) or ``"final"``; ``reference``: ``rows`` is given the
    learned variant of another seed; ``controls``: it also runs on the control variants."""

    name: str
    rows: Callable
    when: str = "final"
    reference: bool = False
    controls: bool = True

    def __post_init__(self):
        if self.when not in ("all", "final"):
            raise AnalysisError(f"measure {self.name!r}: when={self.when!r} must be 'all' or 'final'")


@dataclass(frozen=True)
class Spec:
    """One analysis. ``compute(model, **params)`` (``models="one"`` or ``"many"``: called once per checkpoint; with
    ``joint`` once with ``{name: model}`` for all of them; ``models="none"``: ``compute(**params)``) returns a
    :class:`Result`, a dict of tables or one DataFrame (named after the spec). ``prepare(model, params)`` turns
    parameters into inputs per model (e.g. prompt pairs from ``--task``); ``check(params)`` refuses combinations of
    values before any model is loaded; ``figures``: stem -> ``fn(result)`` returning a figure or None; ``summary``:
    ``fn(result)`` -> the lines printed; ``library``: the functions whose defaults the parameters of the same name
    share (a test holds them equal); ``measures``: what the study measures with it; ``outputs``: whether the driver
    adds ``--out``/``--overwrite``; ``placement``: whether it adds ``--device``/``--dtype``; ``repeat_names``: a
    joint spec whose checkpoints may share a name (one variant of several seeds; the ``labels`` of
    :class:`~analysis.specs.execute.Models`)."""

    name: str
    group: str
    help: str
    examples: str
    compute: Callable
    params: tuple = ()
    models: str = "many"
    joint: bool = False
    prepare: Callable | None = None
    check: Callable | None = None
    figures: dict = field(default_factory=dict)
    summary: Callable | None = None
    library: tuple = ()
    measures: tuple = ()
    outputs: bool = True
    placement: bool = True
    repeat_names: bool = False

    def __post_init__(self):
        if self.models not in MODELS:
            raise AnalysisError(f"spec {self.name!r}: models={self.models!r} must be one of {MODELS}")
        if self.models == "any" and not self.joint:
            raise AnalysisError(f"spec {self.name!r}: models='any' is for a joint spec (it may get no model at all)")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise AnalysisError(f"spec {self.name!r} declares a parameter twice: {names}")

    def param(self, name: str) -> Param:
        """The parameter ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        raise AnalysisError(f"{self.name} has no parameter {name!r}; it has {[p.name for p in self.params]}")

    def defaults(self, **overrides) -> dict:
        """Every parameter's value: its default unless ``overrides`` names it (an unknown name is refused)."""
        unknown = sorted(set(overrides) - {p.name for p in self.params})
        if unknown:
            raise AnalysisError(f"{self.name} has no parameter(s) {unknown}; it has {[p.name for p in self.params]}")
        return {p.name: overrides.get(p.name, p.default) for p in self.params}

    def with_params(self, *params: Param) -> "Spec":
        """This spec with ``params`` added or replacing those of the same name."""
        by_name = {p.name: p for p in self.params} | {p.name: p for p in params}
        return replace(self, params=tuple(by_name.values()))


__all__ = ["MODELS", "Measure", "Param", "Result", "Sizes", "Spec"]

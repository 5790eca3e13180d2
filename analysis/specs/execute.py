"""Run an analysis from its spec, as every driver does: parameters checked, each checkpoint loaded where the caller
places it, the compute function called, the per-checkpoint tables stacked, the figures drawn; and a result written
to a directory (CSV, JSON, PNG + PDF, its other files), whole or not at all."""

from __future__ import annotations

import inspect
from pathlib import Path

import pandas as pd

from analysis.errors import AnalysisError
from analysis.specs.base import Result, Spec

#: Keywords a compute function receives when its signature names them: the checkpoint's name, its directory (None
#: for a model passed in memory), and whether to show progress bars.
CONTEXT = ("name", "ckpt", "progress")


def call(fn, *args, context: dict, **kwargs):
    """``fn(*args, **kwargs)`` plus those of ``context`` that ``fn``'s signature takes."""
    sig = inspect.signature(fn).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in sig.values())
    extra = {k: v for k, v in context.items() if takes_all or k in sig}
    return fn(*args, **kwargs, **extra)


def as_result(value, spec: Spec) -> Result:
    """A compute function's return value as a :class:`Result` (a DataFrame is the table named after the spec)."""
    if isinstance(value, Result):
        return value
    if isinstance(value, pd.DataFrame):
        return Result(tables={spec.name: value})
    if isinstance(value, dict) and all(isinstance(v, pd.DataFrame) for v in value.values()):
        return Result(tables=dict(value))
    raise AnalysisError(f"{spec.name}'s compute returned a {type(value).__name__}; return a Result, a DataFrame or "
                        "a dict of DataFrames")


def stacked(frames: list[pd.DataFrame], names: list[str], column: str = "variant") -> pd.DataFrame:
    """Per-checkpoint tables as one, ``column`` first naming each row's checkpoint."""
    df = pd.concat([f.assign(**{column: n}) for f, n in zip(frames, names)], ignore_index=True)
    return df[[column] + [c for c in df.columns if c != column]]


def merge(parts: dict[str, Result], spec: Spec) -> Result:
    """One result of the per-checkpoint ``parts``: a spec over one checkpoint keeps its part; over several, each
    table is stacked with a ``variant`` column (a table some parts lack is stacked over those that have it) and each
    record becomes ``{checkpoint name: record}``."""
    if spec.models == "one" or spec.joint:
        (name, part), = parts.items()
        return part
    names = list(parts)
    stems = list(dict.fromkeys(s for p in parts.values() for s in p.tables))
    tables = {}
    for stem in stems:
        have = [n for n in names if stem in parts[n].tables]
        tables[stem] = stacked([parts[n].tables[stem] for n in have], have)
    records = {s: {n: p.records[s] for n, p in parts.items() if s in p.records}
               for s in dict.fromkeys(s for p in parts.values() for s in p.records)}
    return Result(tables=tables, records=records, files={s: v for p in parts.values() for s, v in p.files.items()},
                  summary="\n".join(p.summary for p in parts.values() if p.summary), parts=parts)


class Models(dict):
    """``{name: model}`` of a joint spec's checkpoints, each loaded (on the caller's device and dtype) when first
    read; ``paths``: ``{name: directory}`` (None for a model given in memory); ``labels``: ``{name: label}`` (the
    names the user gave, which may repeat where a spec allows it: one variant of several seeds)."""

    def __init__(self, checkpoints: dict, device=None, dtype=None, labels: dict | None = None):
        super().__init__()
        self.paths = {n: (None if _is_model(c) else Path(c)) for n, c in checkpoints.items()}
        self.labels = {n: (labels or {}).get(n, n) for n in checkpoints}
        self.device, self.dtype = device, dtype
        self._sources, self._placement = dict(checkpoints), (device, dtype)
        for n in checkpoints:
            dict.__setitem__(self, n, None)

    def __getitem__(self, name):
        if dict.__getitem__(self, name) is None:
            dict.__setitem__(self, name, _loaded(self._sources[name], *self._placement))
        return dict.__getitem__(self, name)

    def values(self):
        """Every model, each loaded if it was not yet."""
        return [self[n] for n in self]

    def items(self):
        """``(name, model)`` of every checkpoint, each loaded if it was not yet."""
        return [(n, self[n]) for n in self]


def _is_model(value) -> bool:
    import torch

    return isinstance(value, torch.nn.Module)


def _loaded(source, device, dtype):
    if _is_model(source):
        return source
    from analysis.loading import load

    return load(source, device=device, dtype=dtype)


def checked_params(spec: Spec, params: dict) -> dict:
    """Every parameter's value (defaults for those not given), after ``spec.check``."""
    values = spec.defaults(**params)
    if spec.check is not None:
        spec.check(values)
    return values


def run_spec(spec: Spec, checkpoints: dict | None = None, *, device=None, dtype=None, progress: bool = False,
             labels: dict | None = None, draw: bool = True, **params) -> Result:
    """Run ``spec`` on ``checkpoints`` (``{name: directory or loaded model}``; none for ``models="none"``) with
    ``params`` (defaults for the rest), loading each checkpoint on ``device`` in ``dtype``; the figures are drawn.
    ``labels``: a joint spec's ``{name: label}`` (:class:`Models`); ``draw``: whether to draw the figures."""
    values = checked_params(spec, params)
    checkpoints = dict(checkpoints or {})
    if spec.models == "none":
        parts = {"": as_result(call(spec.compute, context={"progress": progress}, **values), spec)}
    elif not checkpoints and spec.models != "any":
        raise AnalysisError(f"{spec.name} needs at least one checkpoint")
    elif spec.models == "one" and len(checkpoints) != 1:
        raise AnalysisError(f"{spec.name} analyses one checkpoint per run; got {len(checkpoints)} (run it once for "
                            "each)")
    elif spec.joint:
        models = Models(checkpoints, device, dtype, labels)
        parts = {"": as_result(call(spec.compute, models, context={"progress": progress}, **values), spec)}
    else:
        parts = {}
        for name, source in checkpoints.items():
            model = _loaded(source, device, dtype)
            inputs = spec.prepare(model, values) if spec.prepare is not None else values
            context = {"name": name, "ckpt": None if _is_model(source) else Path(source), "progress": progress}
            parts[name] = as_result(call(spec.compute, model, context=context, **inputs), spec)
            del model
    result = merge(parts, spec)
    result.names, result.params = list(checkpoints), values
    for stem, figure in (spec.figures.items() if draw else ()):
        fig = figure(result)  # a figure, None (not drawn for these parameters), or {stem: figure} for several
        if isinstance(fig, dict):
            result.figures.update(fig)
        elif fig is not None:
            result.figures[stem] = fig
    if spec.summary is not None:
        result.summary = spec.summary(result)
    return result


def write_result(result: Result, out: Path) -> list[Path]:
    """Write ``result`` into ``out`` (created): tables as CSV, records as JSON, its other files, figures as PNG and
    PDF. Each file is written whole (temp file, then rename). Returns the paths written, figures as their PNG."""
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv, write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [write_csv(df, out / f"{stem}.csv") for stem, df in result.tables.items()]
    written += [write_json(obj, out / f"{stem}.json", default=str) for stem, obj in result.records.items()]
    for rel, writer in result.files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        writer(out / rel)
        written.append(out / rel)
    for stem, fig in result.figures.items():
        save_figure(fig, out, stem)
        written.append(out / f"{stem}.png")
    return written


__all__ = ["CONTEXT", "Models", "as_result", "call", "checked_params", "merge", "run_spec", "stacked",
           "write_result"]

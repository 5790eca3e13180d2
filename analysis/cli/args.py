"""Argument helpers every ``fixedid-analyze`` verb shares: ``--ckpt`` (one spelling everywhere), the output
directory (a default that names the checkpoint's variant and run, never overwriting another run), the default
metric, lists of numbers, and one table per variant stacked into one."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.outputs import check_out

#: The metric every causal verb (``patching``, ``paths``, ``edges``, ``circuit``) uses unless ``--metric`` names
#: another: the logit difference rescaled so that the corrupted run reads 0 and the clean run 1, so effects are
#: fractions of the behaviour's own gap and compare across variants and tasks whose raw logit gaps differ. Edge and
#: path scores under it are the raw logit-difference scores divided by that gap: the same ranking.
DEFAULT_METRIC = "normalized_logit_diff"

#: Where the outputs of a verb go when ``--out`` is not given: ``analysis-out/<verb>-<variant>-<run id>``.
OUT_ROOT = Path("analysis-out")

CKPT_HELP = ("checkpoint: a fixedid checkpoint or Hugging Face Llama directory, as DIR or NAME=DIR (NAME labels it "
             "in tables and figures; default: the directory's name)")


def add_checkpoints(p: argparse.ArgumentParser, *, one: bool = False, required: bool = True) -> None:
    """``--ckpt [NAME=]DIR``, repeatable in every verb (``one``: the verb analyses one checkpoint and says so)."""
    more = ("; this verb analyses one checkpoint per run" if one else "; repeat it to compare variants")
    p.add_argument("--ckpt", action="append", required=required, metavar="[NAME=]DIR", help=CKPT_HELP + more)


def checkpoint_list(values) -> list[tuple[str | None, Path]]:
    """``(name or None, directory)`` of each ``--ckpt`` value, in order: ``NAME=DIR`` or ``DIR`` (a value that is
    itself an existing directory is always a ``DIR``; its name is None). Missing directories are refused in one
    line; names may repeat (see :func:`parse_checkpoints`)."""
    items = []
    for value in values or ():
        value = str(value)
        name, sep, path = value.partition("=")
        if sep and not Path(value).is_dir():
            if not name.strip() or not path.strip():
                raise AnalysisError(f"--ckpt {value!r}: give DIR or NAME=DIR")
            items.append((name.strip(), Path(path.strip()).expanduser()))
        else:
            items.append((None, Path(value).expanduser()))
    if not items:
        raise AnalysisError("give at least one --ckpt DIR (the demo's are in fixedid-demo/checkpoints/)")
    for _, path in items:
        if not path.is_dir():
            raise AnalysisError(f"no checkpoint directory at {path}; run fixedid-analyze demo (it links its "
                                "checkpoints in fixedid-demo/checkpoints/) or train one with fixedid-train")
    return items


def parse_checkpoints(values) -> dict[str, Path]:
    """``{name: directory}`` of the ``--ckpt`` values (:func:`checkpoint_list`), in order: a ``DIR``'s name is its
    directory name, or its whole path where two directory names collide; two values of one name are refused in one
    line."""
    items = checkpoint_list(values)
    bare = [p.name for n, p in items if n is None]
    names = [n if n is not None else (p.name if bare.count(p.name) == 1 else str(p)) for n, p in items]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise AnalysisError(f"two --ckpt share the name {repeated[0]!r}; label them apart with NAME=DIR")
    return dict(zip(names, (p for _, p in items)))


def one_checkpoint(args, verb: str) -> tuple[str, Path]:
    """``(name, directory)`` of the one ``--ckpt`` of a verb that analyses one checkpoint per run."""
    named = parse_checkpoints(args.ckpt)
    if len(named) != 1:
        raise AnalysisError(f"{verb} analyses one checkpoint per run; got {len(named)} --ckpt (run it once for each)")
    return next(iter(named.items()))


def run_id(path: Path) -> str:
    """A short id of the trained weights in ``path``: the first 8 hex digits of the weights' sha256 as the
    checkpoint records it (a Hugging Face directory: of its resolved path)."""
    try:
        meta = json.loads((Path(path) / "meta.json").read_text())
        digest = meta["files"]["model.safetensors"]
    except (OSError, ValueError, KeyError, TypeError):
        digest = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()
    return digest[:8]


def add_out(p: argparse.ArgumentParser) -> None:
    """``--out DIR`` and ``--overwrite``, the same in every verb that writes results."""
    p.add_argument("--out", metavar="DIR", help="output directory (default: analysis-out/<verb>-<variant>-<run id>, "
                   "the run id being the first 8 hex digits of the weights' sha256); an existing non-empty one is "
                   "refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="write into an existing non-empty --out, replacing "
                   "the files of the same names")


def output_dir(args, verb: str, checkpoints: dict[str, Path] | None = None) -> Path:
    """The verb's output directory: ``--out``, else ``analysis-out/<verb>-<name>-<run id>`` for one checkpoint and
    ``analysis-out/<verb>-<name>+<name>...-<id>`` for several (the id hashes their run ids). A directory that holds
    files is refused unless ``--overwrite``: a run never silently replaces another's results."""
    if getattr(args, "out", None):
        out = Path(args.out)
    else:
        named = checkpoints or {}
        ids = [run_id(p) for p in named.values()]
        tag = ids[0] if len(ids) == 1 else hashlib.sha256(" ".join(ids).encode()).hexdigest()[:8]
        label = "+".join(Path(n).name for n in named) or "all"
        out = OUT_ROOT / f"{verb}-{label}-{tag}"
    check_out(out, overwrite=getattr(args, "overwrite", False))
    return out


def int_list(text, what):
    """Comma-separated integers (None passes through); one clear error otherwise."""
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise AnalysisError(f"{what} must be comma-separated integers, got {text!r}") from None


def float_list(text, what):
    """Comma-separated numbers; one clear error otherwise."""
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise AnalysisError(f"{what} must be comma-separated numbers, got {text!r}") from None


def stacked(frames):
    """Per-variant tables (each with a ``variant`` column) as one table with ``variant`` first."""
    import pandas as pd

    df = pd.concat(frames, ignore_index=True)
    return df[["variant"] + [c for c in df.columns if c != "variant"]]

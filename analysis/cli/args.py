"""The options every ``fixedid-analyze`` verb shares, as validating ``type=`` functions: ``--ckpt [NAME=]DIR``,
``--device``, ``--dtype``, ``--out`` (a default that names the verb, the checkpoints and their run, never another
run's directory) and ``--overwrite``; and the parameters of a spec as argparse options."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.outputs import check_out
from analysis.specs.base import Param, Spec

#: Where the outputs of a verb go when ``--out`` is not given: ``analysis-out/<verb>-<variant>-<run id>``.
OUT_ROOT = Path("analysis-out")

CKPT_HELP = ("checkpoint: a fixedid checkpoint or Hugging Face Llama directory, as DIR or NAME=DIR (NAME labels it "
             "in tables and figures; default: the directory's name)")


def checkpoint_value(value) -> tuple[str | None, Path]:
    """``(name or None, directory)`` of one ``--ckpt`` value: ``NAME=DIR`` or ``DIR`` (a value that is itself an
    existing directory is always a ``DIR``). Whether it exists is checked when the verb runs
    (:func:`checkpoint_list`), so that a command line parses without its checkpoints."""
    value = str(value)
    name, sep, path = value.partition("=")
    if sep and not Path(value).is_dir():
        if not name.strip() or not path.strip():
            raise argparse.ArgumentTypeError(f"{value!r}: give DIR or NAME=DIR")
        item = (name.strip(), Path(path.strip()).expanduser())
    else:
        item = (None, Path(value).expanduser())
    return item


def checkpoint_list(values) -> list[tuple[str | None, Path]]:
    """``(name or None, directory)`` of each ``--ckpt`` value (already parsed, or text), in order; names may
    repeat (see :func:`parse_checkpoints`). One clear error for a bad or missing one."""
    items = []
    for value in values or ():
        try:
            items.append(value if isinstance(value, tuple) else checkpoint_value(value))
        except argparse.ArgumentTypeError as e:
            raise AnalysisError(f"--ckpt {e}") from None
    if not items:
        raise AnalysisError("give at least one --ckpt DIR (the demo's are in fixedid-demo/checkpoints/)")
    for _, path in items:
        if not path.is_dir():
            raise AnalysisError(f"no checkpoint directory at {path}; run fixedid-analyze demo (it links its "
                                "checkpoints in fixedid-demo/checkpoints/) or train one with fixedid-train")
    return items


def parse_checkpoints(values) -> dict[str, Path]:
    """``{name: directory}`` of the ``--ckpt`` values (:func:`checkpoint_list`), in order: a ``DIR``'s name is its
    directory name, or its whole path where two directory names collide; two values of one name are refused."""
    items = checkpoint_list(values)
    bare = [p.name for n, p in items if n is None]
    names = [n if n is not None else (p.name if bare.count(p.name) == 1 else str(p)) for n, p in items]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise AnalysisError(f"two --ckpt share the name {repeated[0]!r}; label them apart with NAME=DIR")
    return dict(zip(names, (p for _, p in items)))


def device_value(text: str) -> str:
    """A device this machine has: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    from fixedid.device import resolve_device
    from fixedid.errors import FixedIdError

    try:
        resolve_device(text)
    except FixedIdError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_checkpoints(p: argparse.ArgumentParser, *, one: bool = False, required: bool = True) -> None:
    """``--ckpt [NAME=]DIR``, repeatable in every verb (``one``: the verb analyses one checkpoint per run)."""
    more = "; this verb analyses one checkpoint per run" if one else "; repeat it to compare variants"
    p.add_argument("--ckpt", action="append", required=required, metavar="[NAME=]DIR", type=checkpoint_value,
                   help=CKPT_HELP + more)


def add_placement(p: argparse.ArgumentParser) -> None:
    """``--device`` and ``--dtype``: where and in which precision every checkpoint of the run is loaded."""
    group = p.add_argument_group("model placement")
    group.add_argument("--device", default="auto", type=device_value, help="device for the model(s): auto (default: "
                       "CUDA where present, else the CPU), cpu, cuda, cuda:N or mps")
    group.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="load the model(s) in this "
                       "precision (default float32, as stored; bfloat16 halves the memory, and metrics, log-softmax "
                       "and probe fits still run in float32)")


def add_out(p: argparse.ArgumentParser) -> None:
    """``--out DIR`` and ``--overwrite``, the same in every verb that writes results."""
    p.add_argument("--out", metavar="DIR", type=Path, help="output directory (default: analysis-out/<verb>-<variant>-"
                   "<run id>, the run id being the first 8 hex digits of the weights' sha256); an existing non-empty "
                   "one is refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="write into an existing non-empty --out, replacing "
                   "the files of the same names")


def add_param(p: argparse.ArgumentParser, param: Param, groups: dict) -> None:
    """One spec parameter as an option (in its titled group, made once per parser in ``groups``)."""
    where = p if param.group is None else groups.setdefault(param.group, p.add_argument_group(param.group))
    kw = {"dest": param.name, "help": param.help_text() or argparse.SUPPRESS}
    if param.switch:
        where.add_argument(param.flag, action="store_true", **kw)
        return
    kw |= {"default": param.default, "required": param.required, "metavar": param.metavar}
    if param.type is not None:
        kw["type"] = param.type
    if param.choices is not None:
        kw["choices"] = param.choices
    where.add_argument(param.flag, action="append" if param.repeat else "store", **kw)


def add_spec_args(p: argparse.ArgumentParser, spec: Spec) -> None:
    """Every option of ``spec``'s verb: ``--ckpt`` (unless it reads no model), its parameters, ``--out`` and
    ``--overwrite`` (when the driver writes its results), ``--device`` and ``--dtype``."""
    if spec.models != "none":
        add_checkpoints(p, one=spec.models == "one", required=spec.models != "any")
    groups: dict = {}
    for param in spec.params:
        add_param(p, param, groups)
    if spec.outputs:
        add_out(p)
    if spec.placement and spec.models != "none":
        add_placement(p)


def run_id(path: Path) -> str:
    """A short id of the trained weights in ``path``: the first 8 hex digits of the weights' sha256 as the
    checkpoint records it (a Hugging Face directory: of its resolved path)."""
    try:
        meta = json.loads((Path(path) / "meta.json").read_text())
        digest = meta["files"]["model.safetensors"]
    except (OSError, ValueError, KeyError, TypeError):
        digest = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()
    return digest[:8]


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


__all__ = ["CKPT_HELP", "OUT_ROOT", "add_checkpoints", "add_out", "add_param", "add_placement", "add_spec_args",
           "checkpoint_list", "checkpoint_value", "device_value", "output_dir", "parse_checkpoints", "run_id"]

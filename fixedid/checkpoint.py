"""Verified checkpoints: a directory of JSON and safetensors, written atomically, checked on every load."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .atomic import atomic_path, fsync_dir, temp_name, write_bytes_atomic, write_text_atomic
from .codes import table_sha256
from .config import ModelConfig
from .device import resolve_device, resolve_dtype
from .errors import CheckpointError, ConfigError
from .model import FixedIdLM

FORMAT = "fixedid-checkpoint/1"
CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json", "meta.json")
RESERVED_META = ("format", "code_table_sha256", "files", "versions", "param_counts")


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 4 MiB chunks (the digests ``meta.json`` records under ``files``)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def code_table_hash(model: FixedIdLM) -> str | None:
    """sha256 of the model's fixed code table, or None for a learned interface. For a model cast to another dtype
    (``model.to(torch.bfloat16)``) it is the hash of the float32 table its config defines, after checking that the
    model's table is that one in its dtype."""
    if not model.cfg.is_fixed:
        return None
    table = model.embed.code.detach().cpu()
    if table.dtype != torch.float32:
        with torch.device("cpu"):
            reference = type(model.embed)(model.cfg).code
        if not torch.equal(reference.to(table.dtype), table):
            raise CheckpointError(f"the model's {table.dtype} code table is not its config's table in that dtype "
                                  "(was the buffer edited?); restore it before saving")
        table = reference
    return table_sha256(table.numpy())


def package_versions() -> dict[str, str]:
    """The versions ``meta.json`` records under ``versions``: ``{"fixedid", "torch", "safetensors"}``."""
    import safetensors

    from .version import __version__

    return {"fixedid": __version__, "torch": torch.__version__, "safetensors": safetensors.__version__}


def _json_safe(meta: dict) -> dict:
    try:
        return json.loads(json.dumps(meta))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint metadata must be JSON-serialisable: {e}") from None


def save_checkpoint(model: FixedIdLM, path, tokenizer=None, *, extra_files: dict[str, bytes] | None = None,
                    adopt_dir: bool = False, **meta) -> Path:
    """Write ``model`` (and an optional ``tokenizers.Tokenizer``) to the directory ``path`` atomically.

    ``extra_files`` maps plain file names to bytes written (and hashed) alongside; extra keyword arguments
    (``step=...``) are recorded in ``meta.json``. An existing non-empty ``path`` that is not a checkpoint is
    refused unless ``adopt_dir`` (its files are then kept beside the checkpoint). Returns the path.
    """
    extra_files = dict(extra_files or {})
    for name in extra_files:
        if name in CHECKPOINT_FILES or Path(name).name != name or name.startswith("."):
            raise CheckpointError(f"extra checkpoint file name {name!r} must be a plain name other than "
                                  f"{CHECKPOINT_FILES}")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path} exists and is not a directory; choose another checkpoint path")
    if not adopt_dir and path.is_dir() and any(path.iterdir()) and not (path / "meta.json").exists():
        raise CheckpointError(f"{path} is a non-empty directory that is not a fixedid checkpoint; refusing to "
                              "overwrite it, choose another path")
    reserved = set(RESERVED_META) & set(meta)
    if reserved:
        raise CheckpointError(f"metadata keys {sorted(reserved)} are reserved by the checkpoint format")
    extra = _json_safe(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not any(path.parent.glob(f".{path.name}.old-*")):  # not a fallback save stopped between its renames:
        for stale in path.parent.glob(f".{path.name}.tmp-*"):  # what an earlier, killed save left is expendable
            shutil.rmtree(stale, ignore_errors=True)
    tmp = temp_name(path)
    tmp.mkdir()
    try:
        write_text_atomic(tmp / "config.json", model.cfg.resolved().to_json())
        # float32 on disk whatever the model was cast to (bfloat16 and float16 values are exact in it)
        state = {k: (v.float() if v.is_floating_point() else v).detach().to("cpu").contiguous()
                 for k, v in model.state_dict().items()}
        with atomic_path(tmp / "model.safetensors") as st_tmp:
            save_file(state, str(st_tmp), metadata={"format": FORMAT})
        if tokenizer is not None:
            write_text_atomic(tmp / "tokenizer.json", tokenizer.to_str())
        for name, data in extra_files.items():
            write_bytes_atomic(tmp / name, data)
        files = {p.name: file_sha256(p) for p in sorted(tmp.iterdir())}
        full_meta = {"format": FORMAT, "code_table_sha256": code_table_hash(model), "files": files,
                     "versions": package_versions(), "param_counts": model.param_counts(), **extra}
        write_text_atomic(tmp / "meta.json", json.dumps(full_meta, indent=1, sort_keys=True))
        _swap_into_place(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


#: Called with the name of each step of a save (``"written"``, ``"carried"``, ``"swapped"``, ``"moved-aside"``,
#: ``"done"``): the tests' fault injection, which kills the process there. None otherwise.
_fault_hook = None


def _step(name: str) -> None:
    if _fault_hook is not None:
        _fault_hook(name)


def _swap_into_place(tmp: Path, path: Path) -> None:
    _step("written")
    if not path.exists():
        os.rename(tmp, path)
        fsync_dir(path.parent)
        _step("done")
        return
    try:
        recorded = set(json.loads((path / "meta.json").read_text()).get("files", {}))
    except (OSError, ValueError, AttributeError):
        recorded = set()
    recorded |= set(CHECKPOINT_FILES)
    for entry in sorted(path.iterdir()):
        if entry.name not in recorded:
            _link_tree(entry, tmp / entry.name)
    fsync_dir(tmp)
    _step("carried")
    if exchange_paths(tmp, path):  # tmp now holds the old checkpoint
        fsync_dir(path.parent)
        _step("swapped")
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(path, old)
        _step("moved-aside")
        os.rename(tmp, path)
        fsync_dir(path.parent)
        shutil.rmtree(old, ignore_errors=True)
    _step("done")


def _link_tree(src: Path, dst: Path) -> None:
    """``dst`` as a copy of ``src`` whose files are hard links to ``src``'s (copies where the file system refuses)."""
    if src.is_dir() and not src.is_symlink():
        dst.mkdir()
        for entry in src.iterdir():
            _link_tree(entry, dst / entry.name)
        return
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; False where this system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no C library to call (Windows)
        return False
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        at_fdcwd, rename_exchange = -100, 2
        rc = libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):  # pragma: no cover - not run on Linux CI
        rc = libc.renamex_np(os.fsencode(a), os.fsencode(b), 2)  # RENAME_SWAP
    else:  # pragma: no cover
        return False
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # the kernel or the file system has no exchange
    raise OSError(err, os.strerror(err), str(b))


def _read_json(path: Path, what: str) -> dict:
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{what} {path} cannot be read as JSON ({e}); the checkpoint is corrupted") from None
    if not isinstance(d, dict):
        raise CheckpointError(f"{what} {path} must hold a JSON object; the checkpoint is corrupted")
    return d


def read_meta(path) -> dict:
    """The verified ``meta.json`` of a checkpoint directory (format and file hashes checked)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint directory at {path}")
    for name in ("meta.json", "config.json", "model.safetensors"):
        if not (path / name).is_file():
            raise CheckpointError(f"{path} is missing {name}; not a complete fixedid checkpoint")
    meta = _read_json(path / "meta.json", "checkpoint metadata")
    fmt = meta.get("format")
    if fmt != FORMAT:
        raise CheckpointError(f"{path}: unknown checkpoint format {fmt!r}; this fixedid reads {FORMAT!r}")
    files = meta.get("files")
    if not isinstance(files, dict) or "config.json" not in files or "model.safetensors" not in files:
        raise CheckpointError(f"{path}/meta.json lacks the file hashes; the checkpoint is corrupted")
    for name, digest in files.items():
        if not isinstance(name, str) or Path(name).name != name or name.startswith("."):
            raise CheckpointError(f"{path}/meta.json lists an invalid file name {name!r}")
        if not (path / name).is_file():
            raise CheckpointError(f"{path} is missing {name}, which meta.json records")
        if file_sha256(path / name) != digest:
            raise CheckpointError(f"{path}/{name} does not match its recorded sha256: the file is truncated or "
                                  "corrupted; restore it or re-save the checkpoint")
    if (path / "tokenizer.json").exists() and "tokenizer.json" not in files:
        raise CheckpointError(f"{path}/tokenizer.json is not recorded in meta.json; the checkpoint is inconsistent")
    return meta


def load_config(path) -> ModelConfig:
    """The :class:`~fixedid.config.ModelConfig` of a checkpoint directory, from its ``config.json`` alone: no
    weights are read and no file is verified (:func:`fixedid.checkpoint.load_checkpoint` does that). An invalid config
    raises :class:`~fixedid.errors.CheckpointError` naming the file."""
    path = Path(path)
    try:
        return ModelConfig.from_dict(_read_json(path / "config.json", "model config"))
    except ConfigError as e:
        raise CheckpointError(f"{path}/config.json: {e}") from None


def load_checkpoint(path, *, device: str | torch.device = "cpu",
                    model_class: type[FixedIdLM] = FixedIdLM, dtype: str | torch.dtype | None = None) -> FixedIdLM:
    """Load and verify a checkpoint directory. Returns the model in eval mode, cast to ``dtype`` (``"bfloat16"``,
    ``"float16"``; default: float32, as stored) after the verification.

    The model carries ``.tokenizer`` (a ``tokenizers.Tokenizer`` or None), ``.meta`` (meta.json) and
    ``.checkpoint_path``. ``model_class`` may be a subclass of :class:`~fixedid.model.FixedIdLM` that adds methods,
    never parameters (the analysis package's notebook conveniences).
    """
    if not (isinstance(model_class, type) and issubclass(model_class, FixedIdLM)):
        raise TypeError(f"model_class must be FixedIdLM or a subclass, got {model_class!r}")
    path = Path(path)
    device = resolve_device(device)
    dtype = resolve_dtype(dtype)
    meta = read_meta(path)
    cfg = load_config(path)
    try:
        state = load_file(str(path / "model.safetensors"))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}/model.safetensors cannot be read ({e}); the file is corrupted") from None
    with torch.device("meta"):
        expected = FixedIdLM(cfg, init=False).state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{path}/model.safetensors does not fit config.json: missing tensors {missing[:5]}, "
                              f"unexpected tensors {unexpected[:5]}")
    for name, ref in expected.items():
        t = state[name]
        if t.shape != ref.shape or t.dtype != ref.dtype:
            raise CheckpointError(f"{path}: tensor {name} is {t.dtype} {tuple(t.shape)} but config.json implies "
                                  f"{ref.dtype} {tuple(ref.shape)}")
    with torch.device(device):
        model = model_class(cfg, init=False)
    model.load_state_dict(state, strict=True)
    recorded, actual = meta.get("code_table_sha256"), code_table_hash(model)
    if recorded != actual:
        raise CheckpointError(f"{path}: the code table recomputed from config.json (sha256 {str(actual)[:12]}) "
                              f"differs from the recorded one ({str(recorded)[:12]}); the interface changed since "
                              "the model was trained")
    if dtype is not None:
        model.to(dtype)
    model.tokenizer = _load_tokenizer(path / "tokenizer.json", cfg) if (path / "tokenizer.json").exists() else None
    model.meta = meta
    model.checkpoint_path = path
    return model.eval()


def _load_tokenizer(path: Path, cfg: ModelConfig):
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_str(path.read_text())
    except Exception as e:  # tokenizers raises a bare Exception on malformed JSON
        raise CheckpointError(f"{path} is not a valid tokenizer ({e})") from None
    if tok.get_vocab_size(with_added_tokens=True) > cfg.vocab_size:
        raise CheckpointError(f"{path} has {tok.get_vocab_size(with_added_tokens=True)} tokens but the model's "
                              f"vocabulary is {cfg.vocab_size}")
    return tok

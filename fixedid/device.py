"""Devices by name, refused in one line where this machine does not have them."""

from __future__ import annotations

import torch

from .errors import ConfigError


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` (CUDA when available, else the CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"`` or a
    ``torch.device``; a device this machine lacks raises :class:`~fixedid.errors.ConfigError`."""
    if spec is None or spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError):
        raise ConfigError(f"unknown device {spec!r}; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is a CPU build" if torch.version.cuda is None else "no GPU is visible"
            raise ConfigError(f"device {str(spec)!r} is not available here ({why}); use --device cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device {str(spec)!r} is not available here ({torch.cuda.device_count()} GPU(s): "
                              f"cuda:0..cuda:{torch.cuda.device_count() - 1})")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {str(spec)!r} is not available here; use --device cpu or auto")
    return dev


#: The floating-point types a model can be loaded in (``--dtype``).
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(spec: str | torch.dtype | None) -> torch.dtype | None:
    """``"float32"``, ``"bfloat16"``, ``"float16"`` (or that ``torch.dtype``) as a dtype; None passes through; anything
    else raises :class:`~fixedid.errors.ConfigError`."""
    if spec is None or (isinstance(spec, torch.dtype) and spec in DTYPES.values()):
        return spec
    if isinstance(spec, str) and spec in DTYPES:
        return DTYPES[spec]
    raise ConfigError(f"unknown dtype {spec!r}; use one of {', '.join(DTYPES)}")


__all__ = ["resolve_device", "resolve_dtype", "DTYPES"]

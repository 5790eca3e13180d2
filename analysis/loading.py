"""``analysis.load``: a fixedid checkpoint or a Hugging Face Llama directory as a
:class:`~analysis.model.HookedFixedIdLM`, on a device and in a dtype; :func:`~analysis.loading.load_options` sets both
for every load in a block (the CLI's ``--device`` and ``--dtype``); :func:`~analysis.loading.random_init_twin` is a
loaded model's architecture with fresh weights, the random-initialisation reference of probes, CKA and dictionaries."""

from __future__ import annotations

import contextlib

import torch

from fixedid import load_checkpoint
from fixedid.device import resolve_device, resolve_dtype

from analysis.interop.hf import import_hf, is_hf_dir
from analysis.model import HookedFixedIdLM

_OPTIONS: dict = {}


@contextlib.contextmanager
def load_options(*, device=None, dtype=None):
    """Within the block, :func:`~analysis.loading.load` puts models on ``device`` and casts them to ``dtype`` unless it
    is told otherwise (None: its own defaults, the CPU and float32). Both are checked on entry."""
    new = {k: v for k, v in dict(device=device, dtype=dtype).items() if v is not None}
    if "device" in new:
        resolve_device(new["device"])
    if "dtype" in new:
        resolve_dtype(new["dtype"])
    old = dict(_OPTIONS)
    _OPTIONS.update(new)
    try:
        yield
    finally:
        _OPTIONS.clear()
        _OPTIONS.update(old)


def load(path, *, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> HookedFixedIdLM:
    """Load and verify a checkpoint for analysis (eval mode, tokenizer attached), on ``device`` (default the CPU) in
    ``dtype`` (``"float32"``, the default and the stored precision, ``"bfloat16"`` or ``"float16"``: half the memory;
    metrics, log-softmax and probe fits still run in float32). A Hugging Face Llama directory (:func:`analysis.interop.hf.export_hf` writes them)
    is imported: as the fixed-code model it came from when its config carries the fixedid record, else as a
    learned-interface model."""
    device = device if device is not None else _OPTIONS.get("device", "cpu")
    dtype = resolve_dtype(dtype if dtype is not None else _OPTIONS.get("dtype"))
    if is_hf_dir(path):
        model = import_hf(path, device=device, model_class=HookedFixedIdLM)
        return model.to(dtype) if dtype is not None else model
    return load_checkpoint(path, device=device, model_class=HookedFixedIdLM, dtype=dtype)


def random_init_twin(model, seed: int | None = None):
    """The same architecture and interface with freshly drawn weights (by default the checkpoint's own
    initialisation: the seed its training started from), in eval mode with the same tokenizer."""
    cfg = model.cfg if seed is None else model.cfg.replace(seed=seed)
    twin = type(model)(cfg).to(model.unembed.weight.device).eval()
    twin.tokenizer = getattr(model, "tokenizer", None)
    return twin

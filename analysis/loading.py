""":func:`analysis.load`: a fixedid checkpoint or a Hugging Face Llama directory as a
:class:`~analysis.model.HookedFixedIdLM`, on the device and in the dtype the caller passes (the CLI passes its
``--device`` and ``--dtype``); :func:`~analysis.loading.random_init_twin` is a loaded model's architecture with fresh
weights, the random-initialisation reference of probes, CKA and dictionaries."""

from __future__ import annotations

import torch

from fixedid import load_checkpoint
from fixedid.device import resolve_dtype

from analysis.interop.hf import import_hf, is_hf_dir
from analysis.model import HookedFixedIdLM

def load(path, *, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> HookedFixedIdLM:
    """Load and verify a checkpoint for analysis (eval mode, tokenizer attached), on ``device`` (default the CPU) in
    ``dtype`` (``"float32"``, the default and the stored precision, ``"bfloat16"`` or ``"float16"``: half the memory;
    metrics, log-softmax and probe fits still run in float32). A Hugging Face Llama directory (:func:`analysis.interop.hf.export_hf` writes them)
    is imported: as the fixed-code model it came from when its config carries the fixedid record, else as a
    learned-interface model."""
    device = device if device is not None else "cpu"
    dtype = resolve_dtype(dtype)
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

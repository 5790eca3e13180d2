"""``analysis.load``: a fixedid checkpoint or a Hugging Face Llama directory as a :class:`HookedFixedIdLM`."""

from __future__ import annotations

import torch

from fixedid import load_checkpoint

from analysis.interop.hf import import_hf, is_hf_dir
from analysis.model import HookedFixedIdLM


def load(path, *, device: str | torch.device = "cpu") -> HookedFixedIdLM:
    """Load and verify a checkpoint for analysis (eval mode, tokenizer attached). A Hugging Face Llama directory
    (:func:`analysis.interop.hf.export_hf` writes them) is imported: as the fixed-code model it came from when its config
    carries the fixedid record, else as a learned-interface model."""
    if is_hf_dir(path):
        return import_hf(path, device=device, model_class=HookedFixedIdLM)
    return load_checkpoint(path, device=device, model_class=HookedFixedIdLM)


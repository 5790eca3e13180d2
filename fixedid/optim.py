"""AdamW with the usual LLM recipe, its learning-rate schedule, and an exact, unpickled save/restore of its state.

Parameter groups: weight decay on matrices (``dim >= 2``: projections, the head, a learned input table), none on
norm gains and biases. The schedule is a pure function of the step (linear warmup, cosine decay to a floor), so
resuming needs no scheduler state. Optimizer state round-trips through safetensors (tensors) and JSON (the
hyper-parameters of each group) - never through pickle.
"""

from __future__ import annotations

import json
import math

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .errors import CheckpointError
from .trainconfig import OptimConfig


def make_optimizer(model: torch.nn.Module, t: OptimConfig) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=t.lr, betas=(t.beta1, t.beta2), eps=1e-8)
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):  # fused kernels missing for this device/dtype
        return torch.optim.AdamW(groups, **kwargs)


def lr_at(step: int, t: OptimConfig) -> float:
    """Learning rate of the update with 0-based index ``step``."""
    decay_steps = t.decay_steps or t.steps
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    floor = t.lr * t.min_lr_ratio
    if step >= decay_steps:
        return floor
    progress = (step - t.warmup_steps) / max(1, decay_steps - t.warmup_steps)
    return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t.lr - floor)


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> tuple[bytes, dict]:
    """(safetensors bytes of every state tensor, JSON-able hyper-parameters of the groups)."""
    sd = opt.state_dict()
    tensors = {}
    for idx, state in sd["state"].items():
        for k, v in state.items():
            tensors[f"{idx}.{k}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().cpu().contiguous()
    return st_save(tensors), {"param_groups": sd["param_groups"]}


def restore_optimizer(opt: torch.optim.Optimizer, tensor_bytes: bytes, groups: dict) -> None:
    try:
        tensors = st_load(tensor_bytes)
        state: dict[int, dict] = {}
        for key, v in tensors.items():
            idx, name = key.split(".", 1)
            state.setdefault(int(idx), {})[name] = v
        param_groups = json.loads(json.dumps(groups["param_groups"]))
        for g in param_groups:
            if "betas" in g:
                g["betas"] = tuple(g["betas"])
        opt.load_state_dict({"state": state, "param_groups": param_groups})
    except (KeyError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"the optimizer state cannot be restored ({e}); the resume state is corrupted") from None

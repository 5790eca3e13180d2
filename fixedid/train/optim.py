"""AdamW with the usual LLM recipe (or Muon on the blocks' matrices, :mod:`fixedid.train.muon`), its learning-rate
schedule, and an exact, unpickled save/restore of its state."""

from __future__ import annotations

import json
import math

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ..errors import CheckpointError
from .config import OptimConfig
from .muon import MuonAdamW, is_muon_param


def make_optimizer(model: torch.nn.Module, t: OptimConfig) -> torch.optim.Optimizer:
    """AdamW (``t.optimizer = "adamw"``) with weight decay ``t.weight_decay`` on matrices, none on norm gains and
    biases, and ``t.embed_weight_decay`` (default: the same) on a learned input table; with ``"muon"``, the blocks'
    matrices follow Muon instead, with the same weight decay (:class:`fixedid.train.muon.MuonAdamW`)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    # the learned table gets a group of its own only when asked for
    own = {n for n, _ in named if t.embed_weight_decay is not None and n.endswith("embed.W_E")}
    muon = {n for n, p in named if t.optimizer == "muon" and is_muon_param(n, p)}
    table = [p for n, p in named if n in own]
    decay = [p for n, p in named if p.dim() >= 2 and n not in own and n not in muon]
    no_decay = [p for _, p in named if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if table:
        groups.append({"params": table, "weight_decay": t.embed_weight_decay})
    kwargs = dict(lr=t.lr, betas=(t.beta1, t.beta2), eps=1e-8)
    if t.optimizer == "muon":
        groups.append({"params": [p for n, p in named if n in muon], "weight_decay": t.weight_decay, "muon": True})
        return MuonAdamW(groups, momentum=t.muon_momentum, muon_lr_ratio=t.muon_lr_ratio, **kwargs)
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):  # fused kernels missing for this device/dtype
        return torch.optim.AdamW(groups, **kwargs)


def lr_at(step: int, t: OptimConfig) -> float:
    """Learning rate of the update with 0-based index ``step``."""
    decay_steps, warmup = t.decay_end, t.warmup
    if step < warmup:
        return t.lr * (step + 1) / warmup
    floor = t.lr * t.min_lr_ratio
    if step >= decay_steps:
        return floor
    start = max(warmup, t.decay_begin)
    if step < start:
        return t.lr
    progress = (step - start) / max(1, decay_steps - start)
    return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t.lr - floor)


def _index_names(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[str]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [names[id(p)] for g in opt.param_groups for p in g["params"]]


def named_optimizer_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    """``opt.state_dict()`` with parameter names in place of indices (single process or DDP)."""
    sd = opt.state_dict()
    names = _index_names(model, opt)
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in sd["param_groups"]]
    return {"state": {names[i]: s for i, s in sd["state"].items()}, "param_groups": groups}


def load_named_optimizer_state(model: torch.nn.Module, opt: torch.optim.Optimizer, named: dict) -> None:
    """Load a state dict keyed by parameter name (:func:`fixedid.train.optim.named_optimizer_state`,
    :func:`fixedid.train.optim.deserialize_optimizer_state`) into ``opt``, mapping each name back to this optimizer's
    parameter index (single process or DDP; FSDP loads through ``torch.distributed.checkpoint``). The groups must list
    the same parameters as ``opt``'s."""
    index = {n: i for i, n in enumerate(_index_names(model, opt))}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in named["param_groups"]]
    opt.load_state_dict({"state": {index[n]: s for n, s in named["state"].items()}, "param_groups": groups})


def serialize_optimizer_state(named: dict) -> tuple[bytes, dict]:
    """(safetensors bytes of every state tensor, JSON-able group hyper-parameters) of a named state dict."""
    tensors = {}
    for name, state in named["state"].items():
        for k, v in state.items():
            tensors[f"{name}:{k}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().cpu().contiguous()
    return st_save(tensors), {"param_groups": json.loads(json.dumps(named["param_groups"]))}


def deserialize_optimizer_state(tensor_bytes: bytes, groups: dict) -> dict:
    """Inverse of :func:`fixedid.train.optim.serialize_optimizer_state`: the named state dict of the safetensors
    bytes and the JSON group hyper-parameters (``betas`` back to tuples). Unreadable input raises
    :class:`~fixedid.errors.CheckpointError`."""
    try:
        state: dict[str, dict] = {}
        for key, v in st_load(tensor_bytes).items():
            name, k = key.rsplit(":", 1)
            state.setdefault(name, {})[k] = v
        param_groups = json.loads(json.dumps(groups["param_groups"]))
        for g in param_groups:
            if "betas" in g:
                g["betas"] = tuple(g["betas"])
        return {"state": state, "param_groups": param_groups}
    except (KeyError, ValueError, TypeError, RuntimeError) as e:
        raise CheckpointError(f"the optimizer state cannot be read ({e}); the resume state is corrupted") from None

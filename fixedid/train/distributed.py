"""Distribution for the trainer, by torch's own engines: DDP, or FSDP2 (``fully_shard``) for models that do not fit."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..device import resolve_device
from .optim import load_named_optimizer_state, named_optimizer_state


@dataclass
class Dist:
    """This process's place in a run (:func:`fixedid.train.distributed.setup_dist`): its ``rank`` among ``world``
    processes, its ``device``, and how the model is distributed (``parallel``: ``"ddp"`` or ``"fsdp"``, as
    ``[train] parallel``). One process is ``Dist()``: rank 0 of 1, on the CPU."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    parallel: str = "ddp"

    @property
    def main(self) -> bool:
        """Whether this is rank 0, the process that logs and writes checkpoints."""
        return self.rank == 0

    @property
    def fsdp(self) -> bool:
        """Whether the model is sharded with FSDP2 (``parallel = "fsdp"`` and more than one process)."""
        return self.world > 1 and self.parallel == "fsdp"

    def barrier(self):
        """Wait for every rank (``torch.distributed.barrier``); a no-op with one process."""
        if self.world > 1:
            dist.barrier()

    def mean(self, value: float) -> float:
        """The mean of ``value`` over ranks (a float64 all-reduce); ``value`` itself with one process. Every rank
        must call it."""
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.item() / self.world


def setup_dist(device_arg: str, parallel: str = "ddp") -> Dist:
    """Read torchrun's environment (none: one process) and start the process group (nccl on CUDA, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = resolve_device(device_arg)
    want_cuda = device.type == "cuda"
    if world == 1:
        return Dist(device=device, parallel=parallel)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if want_cuda:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if want_cuda else "gloo")
    return Dist(rank, world, device, parallel)


def wrap(model: torch.nn.Module, d: Dist) -> torch.nn.Module:
    """DDP, or FSDP2 sharding each block and then the root (in place); the unwrapped model with one process."""
    if d.world == 1:
        return model
    if d.fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[d.device.index]
                                                     if d.device.type == "cuda" else None)


@contextlib.contextmanager
def grad_sync(model: torch.nn.Module, d: Dist, enabled: bool):
    """Skip the gradient all-reduce on accumulation micro-steps (``enabled=False``)."""
    if d.world == 1 or enabled:
        if d.fsdp:
            model.set_requires_gradient_sync(True)
        yield
    elif d.fsdp:
        model.set_requires_gradient_sync(False)
        yield
    else:
        with model.no_sync():
            yield


def full_state(raw: torch.nn.Module, opt: torch.optim.Optimizer, d: Dist) -> tuple[dict, dict]:
    """(model state dict, named optimizer state) as full CPU tensors; meaningful on rank 0, collective under FSDP."""
    if not d.fsdp:
        return raw.state_dict(), named_optimizer_state(raw, opt)
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(raw, options=opts), get_optimizer_state_dict(raw, opt, options=opts)


def load_optimizer(raw: torch.nn.Module, opt: torch.optim.Optimizer, named: dict, d: Dist) -> None:
    """Load a named, full optimizer state (every rank passes the same one) into a plain, DDP or FSDP2 model."""
    if not d.fsdp:
        load_named_optimizer_state(raw, opt, named)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(raw, opt, named, options=StateDictOptions(full_state_dict=True))

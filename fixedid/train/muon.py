"""Muon on the blocks' weight matrices, AdamW on everything else, as one optimizer (``[train] optimizer = "muon"``)."""

from __future__ import annotations

import math

import torch

#: the quintic Newton-Schulz coefficients of Muon's reference implementation
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def orthogonalize(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """An approximately semi-orthogonal matrix with ``g``'s singular vectors (``U V^T`` of ``g = U S V^T``, its
    singular values brought near 1, within ~[0.7, 1.2]) by ``steps`` quintic Newton-Schulz iterations."""
    a, b, c = NS_COEFFICIENTS
    x = g / (g.norm() + 1e-7)
    wide = x.size(0) <= x.size(1)
    if not wide:
        x = x.T
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * (s @ s)) @ x
    return x if wide else x.T


class MuonAdamW(torch.optim.Optimizer):
    """Muon on the groups with ``muon=True`` (2-D matrices), AdamW on the others. The learning rate of a group is
    ``lr * lr_ratio`` (``muon_lr_ratio`` for the Muon groups, 1 for the others), so a schedule sets ``lr`` alone."""

    def __init__(self, groups, *, lr: float, betas: tuple[float, float], eps: float = 1e-8, momentum: float = 0.95,
                 muon_lr_ratio: float = 1.0):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=0.0, muon=False, momentum=momentum, lr_ratio=1.0)
        super().__init__(groups, defaults)
        for g in self.param_groups:
            if g["muon"]:
                g["lr_ratio"] = muon_lr_ratio
                bad = [tuple(p.shape) for p in g["params"] if p.dim() != 2]
                if bad:
                    raise ValueError(f"Muon updates 2-D matrices only, got shapes {bad}")

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient: decoupled weight decay by the group's ``lr`` (without its
        ratio), then the Muon step (Nesterov momentum, orthogonalised, scaled by ``0.2 * sqrt(max(rows, cols))``) on the
        ``muon`` groups and bias-corrected AdamW on the others, at ``lr * lr_ratio``. ``closure`` (optional) recomputes
        the loss, which is returned."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for g in self.param_groups:
            lr, wd = g["lr"] * g["lr_ratio"], g["weight_decay"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                p.mul_(1 - g["lr"] * wd)  # the schedule's rate, not lr_ratio's: the decay per step AdamW has
                if g["muon"]:
                    if not state:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    buf, m = state["momentum_buffer"], g["momentum"]
                    buf.lerp_(p.grad, 1 - m)
                    update = orthogonalize(p.grad.lerp(buf, m))  # Nesterov momentum
                    p.add_(update, alpha=-lr * 0.2 * math.sqrt(max(p.shape)))
                    continue
                b1, b2 = g["betas"]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                k = float(state["step"])
                state["exp_avg"].lerp_(p.grad, 1 - b1)
                state["exp_avg_sq"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = (state["exp_avg_sq"] / (1 - b2 ** k)).sqrt_().add_(g["eps"])
                p.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - b1 ** k))
        return loss


def is_muon_param(name: str, p: torch.Tensor) -> bool:
    """Whether Muon updates this parameter: a weight matrix inside a transformer block."""
    return p.dim() == 2 and ".blocks." in f".{name}"


__all__ = ["NS_COEFFICIENTS", "orthogonalize", "MuonAdamW", "is_muon_param"]

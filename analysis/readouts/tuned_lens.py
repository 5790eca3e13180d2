"""The tuned lens: the logit lens with a learned affine translator per depth (Belrose et al., 2023)."""

from __future__ import annotations

import torch
from torch import nn
from tqdm.auto import tqdm

from analysis.engine.staged import cache_run
from analysis.errors import AnalysisError
from analysis.readouts.lens import head_log_probs, lens_hooks


class TunedLens(nn.Module):
    """One affine translator per depth but the last (``translators[l]``: ``h -> h + A_l h + b_l``, initialised at
    zero, so an unfitted lens is the logit lens); ``hooks``: the depths' hook points
    (:func:`analysis.readouts.lens.lens_hooks`)."""

    def __init__(self, d_model: int, hooks: list[str]):
        super().__init__()
        self.hooks = list(hooks)
        self.translators = nn.ModuleList(nn.Linear(d_model, d_model) for _ in self.hooks[:-1])
        for t in self.translators:
            nn.init.zeros_(t.weight)
            nn.init.zeros_(t.bias)

    def forward(self, h: torch.Tensor, depth: int) -> torch.Tensor:
        """The residual ``h`` ``[..., d_model]`` at ``depth`` in the final layer's basis."""
        if depth == len(self.hooks) - 1:
            return h
        t = self.translators[depth]
        return h + t(h.to(t.weight.dtype)).to(h.dtype)


def _kl_sum(model, lens: TunedLens, cache: dict, final_lp: torch.Tensor) -> torch.Tensor:
    """Sum over the translated depths of the mean KL(final || lens) per token."""
    total = final_lp.new_zeros(())
    for depth, h in enumerate(lens.hooks[:-1]):
        lp = head_log_probs(model, lens(cache[h][:, :-1], depth))
        total = total + (final_lp.exp() * (final_lp - lp)).sum(-1).mean()
    return total


def fit_tuned_lens(model, x: torch.Tensor, *, steps: int = 300, lr: float = 1e-2, batch: int = 16, seed: int = 0,
                   progress: bool = False) -> TunedLens:
    """Fit a :class:`TunedLens` on the token windows ``x`` ``[sequences, pos]``: ``steps`` Adam steps (learning rate
    ``lr``, decayed linearly to 0) on ``batch`` windows each, drawn with ``seed``; the model is only read."""
    from analysis.engine.effects import check_eval

    check_eval(model)
    if not isinstance(steps, int) or steps < 1 or not isinstance(batch, int) or batch < 1:
        raise AnalysisError(f"steps and batch must be positive integers, got {steps!r} and {batch!r}")
    if len(x) < 1 or x.shape[1] < 2:
        raise AnalysisError("the tuned lens needs token windows of at least 2 tokens to fit on")
    hooks = lens_hooks(model)
    lens = TunedLens(model.cfg.d_model, hooks).to(model.device)
    opt = torch.optim.Adam(lens.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / steps)
    g = torch.Generator().manual_seed(seed)
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:  # the final norm and head are read, not trained: no gradient reaches the model
            p.requires_grad_(False)
        for _ in tqdm(range(steps), desc="tuned lens", unit="step", disable=not progress, leave=False):
            xb = x[torch.randint(0, len(x), (min(batch, len(x)),), generator=g)].to(model.device)
            with torch.no_grad():
                final, cache = cache_run(model, xb, hooks[:-1])
                final_lp = torch.log_softmax(final[:, :-1].float(), -1)
            with torch.enable_grad():
                loss = _kl_sum(model, lens, cache, final_lp)
                opt.zero_grad(set_to_none=True)
                loss.backward()
            opt.step()
            sched.step()
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
    lens.requires_grad_(False)
    return lens.eval()


__all__ = ["TunedLens", "fit_tuned_lens"]

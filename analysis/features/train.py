"""Training a sparse dictionary on activations streamed from a model (:mod:`analysis.features.stream`)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis.errors import AnalysisError
from analysis.features.dictionary import DictionaryConfig, SparseDictionary, dictionary_class
from analysis.features.stream import activation_batches


def default_lr(d_sae: int, arch: str = "topk") -> float:
    """The default learning rate for ``d_sae`` latents: eai-sparsify's ``2e-4 / sqrt(d_sae / 2**14)`` for TopK, four
    times that for the native architectures (whose squared-error loss, unlike sparsify's FVU, trains slower at the
    same rate: on the demo's residual stream, 200 steps of BatchTopK at 0.3x, 1x and 3x gave FVU 0.61, 0.19, 0.08)."""
    return dictionary_class(arch).base_lr / math.sqrt(d_sae / 2**14)


def train_dictionary(model, cfg: DictionaryConfig, windows: torch.Tensor, *, batch_tokens: int = 1024,
                     buffer_tokens: int | None = None, model_batch: int = 16, lr: float | None = None,
                     seed: int = 0, dead_tokens: int | None = None, warmup_fraction: float = 0.05,
                     decay_fraction: float = 0.2, checkpoint_dir=None, checkpoint_every: int = 0,
                     progress: bool = True) -> tuple[SparseDictionary, pd.DataFrame]:
    """Train a dictionary of ``cfg`` on the activations of ``model`` over ``windows`` ``[n, T]`` (one pass; see
    the module docstring). Returns the dictionary (eval mode) and its history: one row per step with ``tokens``,
    ``loss``, ``fvu``, ``l0`` (mean active latents per token), ``dead_fraction`` and the architecture's own terms."""
    if batch_tokens < 2:
        raise AnalysisError(f"batch_tokens must be at least 2, got {batch_tokens}")
    n_tokens = windows.numel()
    if n_tokens < batch_tokens:
        raise AnalysisError(f"{n_tokens} training tokens are fewer than one batch of {batch_tokens}")
    buffer_tokens = buffer_tokens or min(max(2 * batch_tokens, 32 * batch_tokens), max(2 * batch_tokens, n_tokens))
    batches = activation_batches(model, windows, hooks_of(cfg), batch_tokens=batch_tokens,
                                 buffer_tokens=buffer_tokens, model_batch=model_batch, seed=seed)
    return fit_on_batches(cfg, batches, n_tokens, device=next(model.parameters()).device, lr=lr, seed=seed,
                          dead_tokens=dead_tokens, warmup_fraction=warmup_fraction, decay_fraction=decay_fraction,
                          checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, progress=progress)


def hooks_of(cfg: DictionaryConfig) -> list[str]:
    """The hooks a dictionary's training reads: its input, and for a transcoder the hook it predicts."""
    return [cfg.hook_name] + ([cfg.hook_name_out] if cfg.kind != "sae" else [])


def train_on_activations(cfg: DictionaryConfig, acts: torch.Tensor, targets: torch.Tensor | None = None, *,
                         batch_tokens: int = 1024, seed: int = 0, **kw) -> tuple[SparseDictionary, pd.DataFrame]:
    """Train on activations already in memory (``acts`` ``[n, d_in]``, and a transcoder's ``targets``
    ``[n, d_out]``), shuffled once: the same steps as :func:`train_dictionary` without the model."""
    if (targets is None) != (cfg.kind == "sae"):
        raise AnalysisError("an SAE trains on its input alone; a transcoder needs the targets it predicts")
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(acts.shape[0], generator=gen).to(acts.device)
    tensors = [acts] if targets is None else [acts, targets]
    batches = ([t[perm[i:i + batch_tokens]] for t in tensors] for i in range(0, acts.shape[0], batch_tokens))
    return fit_on_batches(cfg, batches, acts.shape[0], device=acts.device, seed=seed, **kw)


def fit_on_batches(cfg: DictionaryConfig, batches, n_tokens: int, *, device, lr: float | None = None, seed: int = 0,
                   dead_tokens: int | None = None, warmup_fraction: float = 0.05, decay_fraction: float = 0.2, checkpoint_dir=None,
                   checkpoint_every: int = 0, progress: bool = True) -> tuple[SparseDictionary, pd.DataFrame]:
    """The training loop over an iterable of activation batches (one tensor per hook of :func:`hooks_of`) that
    together hold ``n_tokens`` tokens (see the module docstring)."""
    if lr is not None and lr <= 0:
        raise AnalysisError(f"the learning rate must be positive, got {lr}")
    torch.manual_seed(seed)
    d = SparseDictionary.from_config(cfg, device=device).train()
    opt = torch.optim.Adam(d.parameters(), lr=default_lr(cfg.d_sae, cfg.arch) if lr is None else lr)
    base_lr = opt.param_groups[0]["lr"]
    since_fired = torch.zeros(cfg.d_sae, dtype=torch.long, device=device)
    history = _History()
    seen = 0
    steps = None
    bar = tqdm(total=n_tokens, unit="tok", unit_scale=True, desc=f"{cfg.kind} {cfg.arch} {cfg.hook_name}",
               disable=not progress, leave=False)
    for step, batch in enumerate(batches):
        if step == 0:
            s_in = _scale(batch[0])
            s_out = s_in if cfg.kind == "sae" else _scale(batch[1])
            steps = max(1, n_tokens // batch[0].shape[0])
            dead_tokens = dead_tokens or max(batch[0].shape[0], min(10_000_000, n_tokens // 10))
        x = batch[0] * s_in
        y = x if cfg.kind == "sae" else batch[1] * s_out
        if step == 0:
            with torch.no_grad():
                d.b_dec.copy_(y.mean(0))
        frac = step / steps
        for g in opt.param_groups:
            g["lr"] = base_lr * min(1.0, (1 - frac) / decay_fraction) if decay_fraction > 0 else base_lr
        scale = min(1.0, frac / warmup_fraction) if warmup_fraction > 0 else 1.0
        dead = since_fired >= dead_tokens
        loss, parts, fired = d.training_loss(x, y, dead, sparsity_scale=scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        d.project_decoder_grad()
        opt.step()
        d.normalize_decoder()
        with torch.no_grad():
            since_fired += x.shape[0]
            since_fired[fired] = 0
        seen += x.shape[0]
        history.add(seen, {"loss": loss.detach(), **parts, "dead_fraction": dead.float().mean()}, expected=steps)
        bar.update(x.shape[0])
        if step % 20 == 0:
            bar.set_postfix(fvu=f"{parts['fvu']:.3f}", l0=f"{parts['l0']:.1f}")
        if checkpoint_dir and checkpoint_every and (step + 1) % checkpoint_every == 0:
            from analysis.features.saelens_format import save_dictionary
            save_dictionary(_folded(d, s_in, s_out), Path(checkpoint_dir) / f"step_{step + 1}")
    bar.close()
    d.fold_input_scaling(s_in, s_out)
    d.eval()
    return d, history.table()


class _History:
    """The training curves, kept on the device in one preallocated tensor (grown by doubling): a step never waits to
    read its numbers, and no small tensor per step outlives it (thousands of those pin freed pages and grow the CPU
    heap with the number of steps)."""

    def __init__(self):
        self.values: torch.Tensor | None = None
        self.names: list[str] = []
        self.tokens: list[int] = []

    def add(self, tokens: int, numbers: dict, *, expected: int) -> None:
        """One step's 0-d tensors ``numbers`` after ``tokens`` training tokens (``expected`` steps in all)."""
        row = torch.stack([v.float() for v in numbers.values()])
        step = len(self.tokens)
        if self.values is None or step >= len(self.values):
            grown = row.new_zeros(max(expected + 1, 2 * step + 1), len(row))
            if self.values is not None:
                grown[:step] = self.values[:step]
            self.values, self.names = grown, list(numbers)
        self.values[step] = row
        self.tokens.append(tokens)

    def table(self) -> pd.DataFrame:
        """One row per step: ``step``, ``tokens`` and the numbers (read from the device once, now)."""
        n = len(self.tokens)
        table = pd.DataFrame(self.values[:n].cpu().numpy() if n else None, columns=self.names)
        table.insert(0, "tokens", self.tokens)
        table.insert(0, "step", range(n))
        return table



def _scale(a: torch.Tensor) -> float:
    """The factor that brings the mean norm of the rows of ``a`` to ``sqrt(width)`` (SAELens's
    ``expected_average_only_in`` normalisation: the sparsity coefficients then mean the same at any model scale)."""
    return float(a.shape[-1] ** 0.5 / a.norm(dim=-1).mean().clamp_min(1e-12))


def _folded(d: SparseDictionary, s_in: float, s_out: float) -> SparseDictionary:
    import copy

    c = copy.deepcopy(d)
    c.fold_input_scaling(s_in, s_out)
    return c

"""Activations streamed from a model into a shuffled buffer of bounded size, for training sparse dictionaries."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from analysis.engine.staged import cache_run, stop_layer
from analysis.errors import AnalysisError


def hook_width(model, hook: str) -> int:
    """The last dimension of ``hook``'s activation (one forward of two tokens)."""
    if hook not in model.mod_dict:
        raise AnalysisError(f"the model has no hook point {hook!r} (see the hook names in fixedid.model)")
    x = torch.zeros(1, 2, dtype=torch.long, device=next(model.parameters()).device)
    with torch.no_grad():
        _, cache = cache_run(model, x, [hook], **_stop([hook]))
    if cache[hook].dim() != 3:
        raise AnalysisError(f"{hook} has shape {tuple(cache[hook].shape)}; dictionaries read [batch, pos, width] "
                            "activations (for attention heads use hook_attn_out or the residual stream)")
    return cache[hook].shape[-1]


def _stop(hooks) -> dict:
    """Keyword arguments of a forward that runs only as deep as ``hooks`` need, never through the head."""
    stop = stop_layer(hooks)
    return {"return_type": None} if stop is None else {"stop_at_layer": stop}


@torch.no_grad()
def model_activations(model, windows: torch.Tensor, hooks: list[str]) -> list[torch.Tensor]:
    """The activations ``[n_tokens, width]`` of ``hooks`` on ``windows`` ``[n, T]`` (one forward)."""
    x = windows.to(next(model.parameters()).device)
    _, cache = cache_run(model, x, hooks, **_stop(hooks))
    return [cache[h].reshape(-1, cache[h].shape[-1]).float() for h in hooks]


def activation_batches(model, windows: torch.Tensor, hooks: list[str], *, batch_tokens: int, buffer_tokens: int,
                       model_batch: int, seed: int = 0) -> Iterator[list[torch.Tensor]]:
    """Shuffled batches (one tensor ``[batch_tokens, width]`` per hook, the last batch possibly shorter) of the
    activations of ``hooks`` on ``windows`` (see the module docstring)."""
    if buffer_tokens < 2 * batch_tokens:
        raise AnalysisError(f"the buffer ({buffer_tokens} tokens) must hold at least two batches of {batch_tokens}")
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(windows.shape[0], generator=gen)
    chunks = (model_activations(model, windows[order[start:start + model_batch]], hooks)
              for start in range(0, len(order), model_batch))
    yield from buffered_batches(chunks, batch_tokens=batch_tokens, buffer_tokens=buffer_tokens, generator=gen)


def buffered_batches(chunks, *, batch_tokens: int, buffer_tokens: int,
                     generator: torch.Generator) -> Iterator[list[torch.Tensor]]:
    """Shuffled batches of the rows of ``chunks`` (each a list of tensors with rows aligned): a buffer of at most
    ``buffer_tokens`` rows is permuted when full, its first half handed out in batches and its second half kept."""
    buffer: list[torch.Tensor] | None = None
    half = buffer_tokens // 2
    for acts in chunks:
        buffer = acts if buffer is None else [torch.cat([b, a]) for b, a in zip(buffer, acts)]
        while buffer[0].shape[0] >= buffer_tokens:
            perm = torch.randperm(buffer[0].shape[0], generator=generator).to(buffer[0].device)
            buffer = [b[perm] for b in buffer]
            out, buffer = [b[:half] for b in buffer], [b[half:] for b in buffer]
            for i in range(0, half - batch_tokens + 1, batch_tokens):
                yield [b[i:i + batch_tokens] for b in out]
            rest = half % batch_tokens
            if rest:
                buffer = [torch.cat([o[half - rest:], b]) for o, b in zip(out, buffer)]
    if buffer is not None and buffer[0].shape[0]:
        perm = torch.randperm(buffer[0].shape[0], generator=generator).to(buffer[0].device)
        buffer = [b[perm] for b in buffer]
        for i in range(0, buffer[0].shape[0], batch_tokens):
            yield [b[i:i + batch_tokens] for b in buffer]

"""Where a crosscoder's activations come from: one pass of the same token windows through every model, a hook's
activations in a shuffled buffer of bounded size; or float arrays ``[tokens, d]`` a user already has, one per model
with rows aligned, read in order (the last ``eval_tokens`` rows held out)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from analysis.errors import AnalysisError
from analysis.features.stream import buffered_batches, hook_width, model_activations

#: Tokens each model's scale is fitted on (at most).
SAMPLE_TOKENS = 16_384
#: Rows read and checked per chunk of an array.
CHUNK_ROWS = 65_536


class ModelSource:
    """The activations of ``hook`` in every model of ``models`` (``{name: model}``, one tokenizer) over ``windows``
    ``[n, T]``: ``batches()`` yields ``[batch_tokens, models, d]`` tensors, shuffled through a buffer of at most
    ``buffer_tokens`` rows (memory flat in the number of tokens); each window runs through each model once.
    ``transform`` maps each ``[tokens, models, d]`` chunk (a null's turned copy)."""

    def __init__(self, models: dict, hook: str, windows: torch.Tensor, *, batch_tokens: int = 1024,
                 buffer_tokens: int | None = None, model_batch: int = 16, seed: int = 0, transform=None):
        self.models, self.hook, self.windows, self.transform = dict(models), hook, windows, transform
        check_models(self.models, hook)
        self.batch_tokens, self.model_batch, self.seed = batch_tokens, model_batch, seed
        self.n_tokens = windows.numel()
        if self.n_tokens < batch_tokens:
            raise AnalysisError(f"{self.n_tokens} training tokens are fewer than one batch of {batch_tokens}")
        self.buffer_tokens = buffer_tokens or min(max(2 * batch_tokens, 32 * batch_tokens),
                                                  max(2 * batch_tokens, self.n_tokens))

    def _acts(self, windows: torch.Tensor) -> list[torch.Tensor]:
        x = torch.stack([model_activations(m, windows, [self.hook])[0] for m in self.models.values()], 1)
        return [x if self.transform is None else self.transform(x)]

    def activations(self, windows: torch.Tensor) -> torch.Tensor:
        """The activations ``[tokens, models, d]`` of ``windows`` (e.g. the held-out ones), in windows' order."""
        return self._acts(windows)[0]

    def batches(self):
        """The training batches, in the order a seed fixes."""
        gen = torch.Generator().manual_seed(self.seed)
        order = torch.randperm(self.windows.shape[0], generator=gen)
        chunks = (self._acts(self.windows[order[s:s + self.model_batch]])
                  for s in range(0, len(order), self.model_batch))
        for (x,) in buffered_batches(chunks, batch_tokens=self.batch_tokens, buffer_tokens=self.buffer_tokens,
                                     generator=gen):
            yield x

    def sample(self, n: int = SAMPLE_TOKENS) -> torch.Tensor:
        """The first ``n`` tokens (at most) of the training windows, in every model."""
        per = max(1, n // self.windows.shape[1])
        return self._acts(self.windows[:per])[0][:n]


def check_models(models: dict, hook: str) -> int:
    """The width of ``hook`` in every model: refused when there are fewer than two, when their vocabularies differ
    (they must read one token stream), when one lacks the hook or the widths differ."""
    if len(models) < 2:
        raise AnalysisError(f"a crosscoder reads two or more models, got {len(models)}; repeat --ckpt")
    vocab = {n: (m.cfg.vocab_size, tuple(sorted(m.tokenizer.get_vocab().items())) if getattr(m, "tokenizer", None)
                 else None) for n, m in models.items()}
    if len(set(vocab.values())) > 1:
        raise AnalysisError("the checkpoints' vocabularies differ: a crosscoder reads one token stream through every "
                            "model; give checkpoints of one tokenizer")
    widths = {}
    for name, m in models.items():
        if hook not in m.mod_dict:
            raise AnalysisError(f"{name} has no hook point {hook!r}; give a hook every model has")
        widths[name] = hook_width(m, hook)
    if len(set(widths.values())) > 1:
        raise AnalysisError(f"{hook} has different widths in the models ({widths}); the crosscoder's layout needs one")
    return next(iter(widths.values()))


class ArraySource:
    """Activations from files: ``{name: array [tokens, d]}`` (``.npy``, memory-mapped), rows aligned across models;
    the last ``eval_tokens`` rows are held out and the rest read once, in order, ``batch_tokens`` at a time."""

    def __init__(self, arrays: dict, *, eval_tokens: int, batch_tokens: int = 1024):
        self.arrays, self.batch_tokens = dict(arrays), batch_tokens
        self.d = check_arrays(self.arrays)
        rows = len(next(iter(self.arrays.values())))
        if not 0 < eval_tokens < rows:
            raise AnalysisError(f"--eval-tokens {eval_tokens} must be below the {rows} rows of the activations")
        self.n_tokens, self.rows = rows - eval_tokens, rows
        if self.n_tokens < batch_tokens:
            raise AnalysisError(f"{self.n_tokens} training rows are fewer than one batch of {batch_tokens}")

    def _rows(self, index) -> torch.Tensor:
        return torch.from_numpy(np.stack([np.asarray(a[index], dtype=np.float32) for a in self.arrays.values()], 1))

    def batches(self):
        """The training rows, in order."""
        for start in range(0, self.n_tokens, self.batch_tokens):
            yield self._rows(slice(start, min(start + self.batch_tokens, self.n_tokens)))

    def sample(self, n: int = SAMPLE_TOKENS) -> torch.Tensor:
        """``n`` training rows (at most), evenly spaced over them."""
        return self._rows(np.unique(np.linspace(0, self.n_tokens - 1, min(n, self.n_tokens)).astype(int)))

    def held_out(self) -> torch.Tensor:
        """The held-out rows ``[eval_tokens, models, d]``."""
        return self._rows(slice(self.n_tokens, self.rows))


def read_arrays(paths: dict) -> dict:
    """``{name: memory-mapped array}`` of ``{name: path of a .npy file}``, checked (:func:`check_arrays`)."""
    arrays = {}
    for name, path in paths.items():
        path = Path(path)
        if not path.is_file():
            raise AnalysisError(f"--activations {name}={path}: no such file")
        try:
            arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise AnalysisError(f"--activations {name}={path} cannot be read as a .npy array: {e}") from None
    check_arrays(arrays)
    return arrays


def check_arrays(arrays: dict) -> int:
    """The common width of the arrays: refused when fewer than two, not 2-D float arrays, of different row counts or
    widths, or holding NaN or infinite values (checked chunk by chunk, in bounded memory)."""
    if len(arrays) < 2:
        raise AnalysisError(f"a crosscoder reads two or more activation files, got {len(arrays)}; repeat "
                            "--activations NAME=FILE.npy")
    for name, a in arrays.items():
        if a.ndim != 2 or not np.issubdtype(a.dtype, np.floating):
            raise AnalysisError(f"--activations {name}: expected a float array [tokens, d], got {a.dtype} of shape "
                                f"{a.shape}")
    shapes = {n: a.shape for n, a in arrays.items()}
    if len(set(shapes.values())) > 1:
        raise AnalysisError(f"the activation files differ in rows or width ({shapes}); rows are tokens, aligned "
                            "across files, and the layout needs one width")
    for name, a in arrays.items():
        for start in range(0, len(a), CHUNK_ROWS):
            if not np.isfinite(a[start:start + CHUNK_ROWS]).all():
                raise AnalysisError(f"--activations {name} holds NaN or infinite values (rows {start} to "
                                    f"{min(len(a), start + CHUNK_ROWS)})")
    return next(iter(shapes.values()))[1]


__all__ = ["ArraySource", "CHUNK_ROWS", "ModelSource", "SAMPLE_TOKENS", "check_arrays", "check_models",
           "read_arrays"]

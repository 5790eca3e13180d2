"""An nnsight 0.8 wrapper for :class:`fixedid.model.FixedIdLM` that batches several invokes into one forward."""

from __future__ import annotations

import copy
import itertools
import types
from typing import Any, Sequence

import torch
from nnsight import NNsight
from nnsight.intervention.batching import Batcher
from nnsight.intervention.source import STATE

from analysis.errors import AnalysisError

__all__ = ["FixedIdNNsight"]


def _shared_clone(model: torch.nn.Module) -> torch.nn.Module:
    """New module objects over the same parameter and buffer tensors (and tokenizer): nnsight may rewire the
    clone's ``forward`` methods while the caller's model stays as it was."""
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        shared[id(tok)] = tok
    clone = copy.deepcopy(model, shared)
    clone.reset_hooks(including_permanent=True)
    return clone


def _pattern_requested(attn) -> bool:
    """True while a trace of any nnsight wrapper has a worker waiting on (or a cache watching)
    this layer's ``hook_pattern`` / ``hook_attn_scores``.

    ``State.active()`` (nnsight/intervention/source.py, class State) returns the interleaver whose
    trace is running and the three provider names ``{path}.input|skip|output`` of the hook point.
    ``interleaver.parked`` holds the locations workers are parked on; ``interleaver.observers`` the
    locations a ``tracer.cache()`` records. ``wants_pattern`` runs after ``hook_rot_k`` has been
    served, so a worker whose next read is this layer's pattern is parked there by then.
    """
    for hp in (attn.hook_pattern, attn.hook_attn_scores):
        state = hp.__dict__.get(STATE)
        if state is None:
            continue
        interleaver, _, locations = state.active()
        if interleaver is None:
            continue
        parked, observers = interleaver.parked, interleaver.observers
        if any(loc in parked or loc in observers for loc in locations):
            return True
    return False


class FixedIdBatcher(Batcher):
    """The stock dim-0 ``Batcher``, but a 0-dim tensor (the loss of ``return_type="loss"|"both"``) passes
    through instead of raising ``IndexError`` at ``tensor.shape[0]`` (batching.py:117 and :175 in 0.8.1).
    Such a scalar is the whole batch's value: every invoke sees the same batch-mean loss."""

    def _narrow_tensor(self, tensor, group):
        return tensor if tensor.dim() == 0 else super()._narrow_tensor(tensor, group)

    def _widen_tensor(self, full, group, edited):
        return edited if full.dim() == 0 else super()._widen_tensor(full, group, edited)


def _wants_pattern_auto(attn) -> bool:
    # Bound to the Attention instance with types.MethodType, so copy.deepcopy rebinds it to the copy.
    return type(attn).wants_pattern(attn) or _pattern_requested(attn)


class FixedIdNNsight(NNsight):
    """``NNsight`` over a ``FixedIdLM`` that batches several ``tracer.invoke(...)`` into one forward.

    Accepted invoke / trace inputs (first positional argument, or ``tokens=``):

    * ``LongTensor [b, pos]`` (``b`` rows) or ``[pos]`` (one row);
    * a list of ints (one row) or a list of lists of ints (one row each);
    * a string or a list of strings, if a ``tokenizers.Tokenizer`` is given or ``model.tokenizer`` is set;
    * a float tensor ``[b, pos, d_model]`` together with ``start_at_layer=``.

    Invokes of unequal length raise unless ``pad_id`` is given; then they are padded on the *right*
    (a causal model's logits and activations at the real positions are then exactly those of the
    unpadded run; positions counted from the left keep their meaning, ``[:, -1]`` does not).

    ``attention``: ``"auto"`` (default) makes a layer take the explicit-softmax path only when this
    trace reads (or caches) that layer's ``hook_pattern`` / ``hook_attn_scores``; ``"explicit"``
    forces the explicit path for every traced forward; ``"sdpa"`` leaves the model alone (reading a
    pattern then raises ``OutOfOrderError``). nnsight itself registers no torch hooks, so without
    this the model never materialises the pattern.

    Keyword arguments of an invoke that are not the input (``return_type``, ``targets``...) are
    merged: tensors are concatenated along dim 0, other values must agree across invokes.
    """

    _batcher_class = FixedIdBatcher

    def __init__(self, model: torch.nn.Module, *, pad_id: int | None = None, tokenizer: Any = None,
                 attention: str = "auto", **envoy_kwargs: Any) -> None:
        if attention not in ("auto", "explicit", "sdpa"):
            raise AnalysisError(f"attention must be 'auto', 'explicit' or 'sdpa', got {attention!r}")
        model = _shared_clone(model)
        super().__init__(model, **envoy_kwargs)
        # Underscored: Envoy.__getattr__ falls through to the module, so e.g. `.tokenizer` is the model's.
        self._pad_id = pad_id
        self._tok = tokenizer
        self._attention = attention
        if attention == "auto":
            for block in model.blocks:
                attn = block.attn
                if not isinstance(attn.__dict__.get("wants_pattern"), types.MethodType):
                    attn.wants_pattern = types.MethodType(_wants_pattern_auto, attn)

    # ---------------------------------------------------------------------------------------- inputs
    def _tokenizer(self):
        return self._tok if self._tok is not None else getattr(self._module, "tokenizer", None)

    @staticmethod
    def _data(inputs: tuple, kwargs: dict):
        if inputs:
            return inputs[0], inputs[1:], kwargs
        if "tokens" in kwargs:
            kwargs = dict(kwargs)
            return kwargs.pop("tokens"), (), kwargs
        return None, (), kwargs

    def _as_rows(self, data: Any) -> torch.Tensor:
        """One invoke's input as a ``[rows, pos]`` integer tensor, or ``[rows, pos, d]`` residual."""
        if isinstance(data, torch.Tensor):
            if data.is_floating_point():  # start_at_layer residual stream
                return data if data.dim() == 3 else data.unsqueeze(0)
            return data if data.dim() == 2 else data.reshape(1, -1)
        if isinstance(data, str):
            data = [data]
        if isinstance(data, (list, tuple)) and data and isinstance(data[0], str):
            tok = self._tokenizer()
            if tok is None:
                raise AnalysisError("string input needs a tokenizer (FixedIdNNsight(..., tokenizer=) or model.tokenizer)")
            return self._stack([torch.tensor(e.ids, dtype=torch.long).reshape(1, -1) for e in tok.encode_batch(list(data))])
        if isinstance(data, (list, tuple)) and data and isinstance(data[0], (list, tuple, torch.Tensor)):
            return self._stack([self._as_rows(row) for row in data])
        if isinstance(data, (list, tuple)):
            return torch.tensor(list(data), dtype=torch.long).reshape(1, -1)
        raise AnalysisError(f"can't make token rows from {type(data).__name__}")

    def _stack(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """Concatenate ``[b_i, pos_i, ...]`` along dim 0, right-padding pos to the longest (if allowed)."""
        longest = max(p.shape[1] for p in parts)
        if any(p.shape[1] != longest for p in parts):
            if self._pad_id is None:
                raise AnalysisError(f"invokes have different lengths {[p.shape[1] for p in parts]}; pass pad_id= "
                                 "to right-pad them, or give every invoke the same length")
            if parts[0].is_floating_point():
                raise AnalysisError("residual-stream inputs of different lengths can't be padded")
            parts = [torch.nn.functional.pad(p, (0, longest - p.shape[1]), value=self._pad_id) for p in parts]
        return torch.cat(list(parts), dim=0)

    # ---------------------------------------------------------------------------------- nnsight hooks
    def _batch_size(self, *inputs: Any, **kwargs: Any) -> int:
        """Rows an invoke contributes; 0 for params only (``trace(return_type=...)`` + invokes)."""
        data, _, _ = self._data(inputs, kwargs)
        if data is None:
            return 0
        if isinstance(data, torch.Tensor):
            if data.is_floating_point():
                return data.shape[0] if data.dim() == 3 else 1
            return data.shape[0] if data.dim() == 2 else 1
        if isinstance(data, str):
            return 1
        if isinstance(data, (list, tuple)):
            if not data:
                return 0
            return len(data) if isinstance(data[0], (str, list, tuple, torch.Tensor)) else 1
        return 1

    def _batch(self, invokes: list[tuple], fn: Any) -> tuple:
        """``[(inputs, kwargs), ...]`` in row order -> one ``((tokens, *rest), kwargs)`` call."""
        if not invokes:
            return (), {}
        rows, rest, merged = [], None, {}
        for inputs, kwargs in invokes:
            data, extra, kwargs = self._data(inputs, kwargs)
            rows.append(self._as_rows(data))
            if rest is None:
                rest = extra
            elif len(extra) != len(rest) or any(a is not b and a != b for a, b in zip(extra, rest)):
                raise AnalysisError("invokes pass different extra positional arguments")
            for key, value in kwargs.items():
                if isinstance(value, torch.Tensor):
                    merged.setdefault(key, []).append(value)
                elif key in merged and merged[key] != value:
                    raise AnalysisError(f"invokes disagree on {key}={merged[key]!r} vs {value!r}")
                else:
                    merged[key] = value
        merged = {k: (self._stack(v) if isinstance(v, list) and v and isinstance(v[0], torch.Tensor) else v)
                  for k, v in merged.items()}
        return (self._stack(rows), *(rest or ())), merged

    # ------------------------------------------------------------------------------------- running
    def interleave(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """nnsight's ``interleave`` (the traced forward), with every layer's ``force_explicit`` set for its duration
        when ``attention="explicit"`` (and put back after, even on error); otherwise nnsight's own."""
        if self._attention != "explicit":
            return super().interleave(fn, *args, **kwargs)
        model = self._module
        saved = [b.attn.force_explicit for b in model.blocks]
        model.force_explicit_attention = True
        try:
            return super().interleave(fn, *args, **kwargs)
        finally:
            for b, value in zip(model.blocks, saved):
                b.attn.force_explicit = value

"""Attention patterns: where every head of every layer looks, for one prompt, as a tidy table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from analysis.errors import AnalysisError
from analysis.engine import names as hooknames


def prompt_tokens(model, prompt=None, *, task: str | None = None, pair: int = 0) -> torch.Tensor:
    """``[1, T]`` token ids of ``prompt`` (text, or a sequence of ids) or of the clean prompt of pair ``pair`` of a
    built-in ``task``."""
    if (prompt is None) == (task is None):
        raise AnalysisError("give a prompt (text or token ids) or a built-in task, not both")
    if task is not None:
        from analysis.tasks import task_pairs

        if pair < 0:
            raise AnalysisError(f"the pair index must be >= 0, got {pair}")
        pairs = task_pairs(model, task, pair + 1)
        if pair >= len(pairs):
            raise AnalysisError(f"{task} has only {len(pairs)} pairs that fit this model's tokenizer")
        prompt = pairs.texts[pair]["clean"]
    if isinstance(prompt, str):
        if not prompt.strip():
            raise AnalysisError("the prompt is empty")
        tokens = model.to_tokens(prompt)
    else:
        tokens = torch.as_tensor(prompt, dtype=torch.long).reshape(1, -1)
    if tokens.ndim != 2 or tokens.shape[0] != 1 or tokens.shape[1] < 1:
        raise AnalysisError(f"one prompt at a time: got token ids of shape {tuple(tokens.shape)}")
    if tokens.shape[1] > model.cfg.context:
        raise AnalysisError(f"the prompt has {tokens.shape[1]} tokens, more than the model's context "
                            f"{model.cfg.context}")
    if int(tokens.min()) < 0 or int(tokens.max()) >= model.cfg.vocab_size:
        raise AnalysisError(f"token ids must lie in 0..{model.cfg.vocab_size - 1}")
    return tokens


@torch.no_grad()
def attention_patterns(model, prompt=None, *, task: str | None = None, pair: int = 0, layers=None) -> pd.DataFrame:
    """Every head's attention pattern on one prompt (see the module docstring); ``layers``: a subset (default all)."""
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() (analysis.load returns it in eval mode)")
    n = model.cfg.n_layers
    layers = list(range(n)) if layers is None else sorted(set(int(x) for x in layers))
    if not layers or any(not 0 <= x < n for x in layers):
        raise AnalysisError(f"layers must be indices in 0..{n - 1}, got {layers}")
    tokens = prompt_tokens(model, prompt, task=task, pair=pair)
    device = next(model.parameters()).device
    names = [hooknames.attn(x, "pattern") for x in layers]
    _, cache = model.run_with_cache(tokens.to(device), names_filter=lambda name: name in names)
    pat = np.stack([cache[name][0].float().cpu().numpy() for name in names])  # [layers, heads, dest, src]
    strs = [model.tokenizer.decode([int(t)]) for t in tokens[0]] if getattr(model, "tokenizer", None) else \
        [str(int(t)) for t in tokens[0]]
    L, H, T, _ = pat.shape
    dest, src = np.tril_indices(T)
    rows = pd.DataFrame({
        "layer": np.repeat(layers, H * len(dest)),
        "head": np.tile(np.repeat(np.arange(H), len(dest)), L),
        "dest": np.tile(dest, L * H), "src": np.tile(src, L * H),
        "value": pat[:, :, dest, src].reshape(-1),
    })
    rows["dest_token"] = np.asarray(strs, dtype=object)[rows.dest.to_numpy()]
    rows["src_token"] = np.asarray(strs, dtype=object)[rows.src.to_numpy()]
    rows.attrs.update(str_tokens=strs, layers=layers, tokens=tokens[0].tolist())
    return rows


def pattern_array(df: pd.DataFrame) -> np.ndarray:
    """``[layers, heads, dest, src]`` attention weights of an :func:`~analysis.readouts.attention.attention_patterns`
    table (zeros above the diagonal), layers in ``df.attrs["layers"]`` order."""
    need = {"layer", "head", "dest", "src", "value"}
    if need - set(df.columns) or "layers" not in df.attrs:
        raise AnalysisError("pattern_array reads a table of attention_patterns (layer, head, dest, src, value)")
    layers = list(df.attrs["layers"])
    T, H = int(df["dest"].max()) + 1, int(df["head"].max()) + 1
    out = np.zeros((len(layers), H, T, T))
    li = df.layer.map({x: i for i, x in enumerate(layers)}).to_numpy()
    out[li, df["head"].to_numpy(), df.dest.to_numpy(), df.src.to_numpy()] = df.value.to_numpy()
    return out


__all__ = ["attention_patterns", "pattern_array", "prompt_tokens"]

"""Train a sparse dictionary on a checkpoint and measure it on held-out text, in one call."""

from __future__ import annotations


import pandas as pd
import torch

from analysis.corpus import corpus_tokens
from analysis.engine import names as hooknames
from analysis.errors import AnalysisError
from analysis.features.dictionary import DictionaryConfig, SparseDictionary
from analysis.features.metrics import dictionary_metrics
from analysis.features.stream import hook_width
from analysis.features.train import train_dictionary


def split_windows(model, data=None, *, train_tokens: int, eval_tokens: int,
                  seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(train, held_out)`` token windows: ``train_tokens + eval_tokens`` tokens of ``data`` (default the
    checkpoint's validation stream), the last ``eval_tokens`` worth of sequences held out."""
    if train_tokens < 1 or eval_tokens < 1:
        raise AnalysisError(f"training and evaluation tokens must be positive, got {train_tokens} and {eval_tokens}")
    w = corpus_tokens(model, data, tokens=train_tokens + eval_tokens, seq_len=seq_len)
    n_eval = max(1, round(w.shape[0] * eval_tokens / (train_tokens + eval_tokens)))
    if n_eval >= w.shape[0]:
        raise AnalysisError(f"the data hold {w.shape[0]} sequences: too few to hold {n_eval} out for evaluation")
    return w[:-n_eval], w[-n_eval:]


def mlp_output_hook(hook: str) -> str:
    """The MLP output a transcoder reading ``hook`` predicts: ``blocks.L.hook_mlp_out`` for the MLP's input
    (``blocks.L.ln2.hook_normalized``) or the residual before it (``blocks.L.hook_resid_mid``)."""
    layer = hooknames.layer_of(hook)
    if layer is None or hook not in (hooknames.mlp_in(layer), hooknames.resid_mid(layer)):
        raise AnalysisError(f"a transcoder reads an MLP's input (blocks.L.ln2.hook_normalized or "
                            f"blocks.L.hook_resid_mid), got {hook!r}; pass hook_out to predict another hook")
    return hooknames.mlp_out(layer)


def dictionary_config(model, *, hook: str, kind: str = "sae", arch: str = "topk", expansion: int = 8,
                      hook_out: str | None = None, **settings) -> DictionaryConfig:
    """The :class:`DictionaryConfig` of a ``kind``/``arch`` dictionary ``expansion`` times as wide as ``hook``."""
    if expansion < 1:
        raise AnalysisError(f"the expansion factor must be a positive integer, got {expansion}")
    d_in = hook_width(model, hook)
    out = None if kind == "sae" else (hook_out or mlp_output_hook(hook))
    d_out = d_in if out is None else hook_width(model, out)
    return DictionaryConfig(kind=kind, arch=arch, d_in=d_in, d_out=d_out, d_sae=expansion * d_in, hook_name=hook,
                            hook_name_out=out, **settings)


def fit_dictionary(model, cfg: DictionaryConfig, data=None, *, train_tokens: int = 131_072,
                   eval_tokens: int = 16_384, windows: tuple[torch.Tensor, torch.Tensor] | None = None,
                   progress: bool = True, **train_kw) -> tuple[SparseDictionary, pd.DataFrame, pd.DataFrame]:
    """Train ``cfg`` on ``train_tokens`` tokens and measure it on ``eval_tokens`` others: ``(dictionary, metrics,
    history)``. ``windows``: the ``(train, held_out)`` of :func:`split_windows` already made (several dictionaries
    of one model then share one tokenisation)."""
    train, held_out = windows or split_windows(model, data, train_tokens=train_tokens, eval_tokens=eval_tokens)
    d, history = train_dictionary(model, cfg, train, progress=progress, **train_kw)
    return d, dictionary_metrics(model, d, held_out, progress=progress), history

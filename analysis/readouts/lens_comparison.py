"""The logit lens beside learned lenses, on text the learned lenses were not fitted on."""

from __future__ import annotations

import pandas as pd
import torch

from analysis.errors import AnalysisError
from analysis.readouts.lens import lens_table

#: The learned lenses :func:`lens_comparison` fits.
KINDS = ("tuned", "jacobian")


def lens_comparison(model, data=None, *, kinds=("tuned",), tokens: int = 16384, steps: int = 300,
                    seed: int = 0, max_batch: int = 32, progress: bool = False) -> pd.DataFrame:
    """The logit lens and the lenses ``kinds`` (see the module docstring); ``data`` and ``tokens`` as
    :func:`analysis.readouts.lens.logit_lens` takes them; ``steps``: the tuned lens's Adam steps. ``attrs``:
    ``n_tokens`` (read), ``n_fit_tokens``, ``n_sequences``."""
    from analysis.corpus import corpus_tokens
    from analysis.readouts.jacobian_lens import fit_jacobian_lens, jacobian_translator
    from analysis.readouts.tuned_lens import fit_tuned_lens

    kinds = list(dict.fromkeys(kinds))
    if not kinds or any(k not in KINDS for k in kinds):
        raise AnalysisError(f"lens kinds {kinds} must be names from {list(KINDS)}")
    x = data if isinstance(data, torch.Tensor) else corpus_tokens(model, data, tokens=tokens)
    if len(x) < 2:
        raise AnalysisError(f"a fitted lens needs at least 2 token windows (one half to fit, one to read); got "
                            f"{len(x)}: give more --tokens")
    half = len(x) // 2
    fit, read = x[:half], x[half:]
    frames = [lens_table(model, read, max_batch=max_batch, progress=progress).assign(kind="logit")]
    for kind in kinds:
        if kind == "tuned":
            translate = fit_tuned_lens(model, fit, steps=steps, seed=seed, progress=progress)
        else:
            translate = jacobian_translator(fit_jacobian_lens(model, fit, progress=progress), model.cfg.n_layers)
        frames.append(lens_table(model, read, translate, max_batch=max_batch, progress=progress,
                                 desc=f"{kind} lens").assign(kind=kind))
    df = pd.concat(frames, ignore_index=True)
    df = df[["kind"] + [c for c in df.columns if c != "kind"]]
    df.attrs.update(n_tokens=int(read.numel()), n_sequences=int(len(read)), n_fit_tokens=int(fit.numel()))
    return df


__all__ = ["lens_comparison", "KINDS"]

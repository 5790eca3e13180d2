"""The references a crosscoder's fractions are read against, each trained with the same recipe: two seeds of one
variant (how much two trainings of one recipe already differ), a model beside a copy of itself whose stream is turned
by a random orthogonal matrix (the same function in another basis: everything should be shared), and a model beside
its random-initialisation twin."""

from __future__ import annotations

import pandas as pd
import torch

from analysis.features.crosscoder import CrosscoderConfig
from analysis.features.crosscoder_read import latent_table

#: The references, in the order they are reported.
NULLS = ("two seeds", "turned copy", "random init")


def random_rotation(d: int, seed: int = 0) -> torch.Tensor:
    """A uniformly random orthogonal ``[d, d]`` matrix (QR of a Gaussian, signs fixed)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))[None]).float()


#: A live latent is lopsided when model A's share is outside [LOPSIDED, 1 - LOPSIDED]: a finer asymmetry than the
#: classes' (shared up to 0.9).
LOPSIDED = 0.3


def pair_fractions(table: pd.DataFrame, models) -> dict:
    """A two-model crosscoder's live latents as ``shared``, ``exclusive_a`` and ``exclusive_b`` fractions, with
    ``n_live``, the ``lopsided`` fraction (:data:`LOPSIDED`), and the median and spread (5th-95th percentile) of model
    A's share."""
    live = table[table.live]
    a, b = models
    n = max(len(live), 1)
    share = live[f"share_{a}"]
    return {"n_live": len(live), "shared": float((live["class"] == "shared").sum() / n),
            "exclusive_a": float((live["class"] == f"{a} only").sum() / n),
            "exclusive_b": float((live["class"] == f"{b} only").sum() / n),
            "elsewhere": float(live["elsewhere"].sum() / n),
            "lopsided": float(((share < LOPSIDED) | (share > 1 - LOPSIDED)).sum() / n),
            "share_median": float(share.median()),
            "share_p05": float(share.quantile(0.05)), "share_p95": float(share.quantile(0.95))}


def null_rows(recipe: CrosscoderConfig, sources: dict, *, train, progress: bool = False) -> pd.DataFrame:
    """One row per reference of ``sources`` (``{null name: (source, held-out activations)}``, two models each):
    the fractions of :func:`pair_fractions` of a crosscoder with ``recipe``'s settings trained on it by
    ``train(cfg, source)``."""
    rows = []
    for name, (source, held) in sources.items():
        models = tuple(source.models)
        cfg = CrosscoderConfig(**settings_for(recipe, models))
        cc, _ = train(cfg, source)
        rows.append({"null": name, "model_a": models[0], "model_b": models[1],
                     **pair_fractions(latent_table(cc, held), models)})
    return pd.DataFrame(rows)


def settings_for(recipe: CrosscoderConfig, models) -> dict:
    """``recipe``'s settings for another pair of models (its fitted scale and threshold left out)."""
    keep = ("d", "n_latents", "activation", "k", "l1_coefficient", "dedicated", "hook", "aux_coefficient")
    return {"models": tuple(models)} | {k: getattr(recipe, k) for k in keep}


__all__ = ["LOPSIDED", "NULLS", "null_rows", "pair_fractions", "random_rotation", "settings_for"]

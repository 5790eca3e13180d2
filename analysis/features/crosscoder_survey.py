"""Crosscoders over many sets of models with one recipe (the same windows, width, sparsity and seed), as a survey
and the study measure them: one row per two-model crosscoder with its shared and exclusive fractions."""

from __future__ import annotations

import torch

from analysis.features.crosscoder import CrosscoderConfig
from analysis.features.crosscoder_data import ModelSource
from analysis.features.crosscoder_nulls import pair_fractions, random_rotation
from analysis.features.crosscoder_read import latent_table, reconstruction_metrics
from analysis.features.crosscoder_train import train_crosscoder


class Recipe:
    """One crosscoder recipe for every model set: training ``windows`` and ``held`` out ones (``[n, T]`` token ids),
    ``expansion`` latents per dimension, ``k`` active per token (BatchTopK), ``seed``."""

    def __init__(self, windows: torch.Tensor, held: torch.Tensor, *, expansion: int = 8, k: int = 8, seed: int = 0):
        self.windows, self.held, self.expansion, self.k, self.seed = windows, held, expansion, k, seed

    def fit(self, models: dict, hook: str, transform=None):
        """``(crosscoder, held-out activations)`` of ``models`` (``{name: model}``) at ``hook``."""
        source = ModelSource(models, hook, self.windows, batch_tokens=1024, seed=self.seed, transform=transform)
        d = next(iter(models.values())).cfg.d_model
        cfg = CrosscoderConfig(models=tuple(models), d=d, n_latents=self.expansion * d, k=self.k, hook=hook)
        cc, _ = train_crosscoder(cfg, source, seed=self.seed, progress=False)
        return cc, source.activations(self.held)

    def pair(self, models: dict, hook: str, transform=None) -> dict:
        """One two-model crosscoder's fractions (:func:`pair_fractions`) with each model's FVU (``fvu_a``,
        ``fvu_b``)."""
        cc, x = self.fit(models, hook, transform)
        names = list(models)
        fvu = reconstruction_metrics(cc, x).set_index("model").fvu
        return {"model_a": names[0], "model_b": names[1], **pair_fractions(latent_table(cc, x), names),
                "fvu_a": float(fvu[names[0]]), "fvu_b": float(fvu[names[1]])}

    def turned(self, model, name: str, hook: str) -> dict:
        """The turned-copy reference of ``model``: beside itself turned by a random orthogonal matrix."""
        turn = random_rotation(model.cfg.d_model, seed=0)
        return self.pair({name: model, f"{name} turned": model}, hook,
                         lambda x: torch.stack([x[:, 0], x[:, 1] @ turn.to(x)], 1))


__all__ = ["Recipe"]

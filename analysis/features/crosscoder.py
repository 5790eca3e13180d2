"""Crosscoders: one sparse dictionary read from and written into several models at once (Lindsey et al., 2024), the
model-diffing tool: a latent's decoder norm in each model says which models share it and which one alone has it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

from analysis.errors import AnalysisError

#: The latent functions: TopK per token, BatchTopK over a batch (a threshold on the pre-activation at inference), and
#: ReLU with Lindsey et al.'s decoder-norm-weighted L1 penalty.
ACTIVATIONS = ("topk", "batchtopk", "relu")
#: The files a crosscoder is saved as (the layout of the dictionary_learning ``CrossCoder`` that model-diffing tools
#: read).
WEIGHTS, CONFIG = "crosscoder.safetensors", "crosscoder_cfg.json"


@dataclass(frozen=True)
class CrosscoderConfig:
    """What a crosscoder is: the models it reads (names, in the tensors' order), their activations' width ``d``, its
    number of latents, the latent function and its settings, the latents reserved per model (``dedicated``: that many
    per model, first, in the models' order; the rest shared), the hook read, and - fitted when it trains - each
    model's ``scale`` (its activations are divided by it before encoding and the reconstruction multiplied by it) and
    the BatchTopK ``threshold`` on the pre-activation at inference."""

    models: tuple[str, ...]
    d: int
    n_latents: int
    activation: str = "batchtopk"
    k: int = 32
    l1_coefficient: float = 1.0
    dedicated: int = 0
    hook: str | None = None
    scale: tuple[float, ...] | None = None
    threshold: float | None = None
    aux_coefficient: float = 1 / 32

    def __post_init__(self):
        object.__setattr__(self, "models", tuple(self.models))
        if len(self.models) < 2 or len(set(self.models)) != len(self.models):
            raise AnalysisError(f"a crosscoder reads two or more models of distinct names, got {list(self.models)}")
        if self.activation not in ACTIVATIONS:
            raise AnalysisError(f"unknown crosscoder activation {self.activation!r}; use one of "
                                f"{', '.join(ACTIVATIONS)}")
        if self.d < 1 or self.n_latents < 1:
            raise AnalysisError(f"d and n_latents must be positive, got {self.d} and {self.n_latents}")
        if self.activation != "relu" and not 1 <= self.k <= self.n_latents:
            raise AnalysisError(f"k must be in [1, {self.n_latents}] (the latents), got {self.k}")
        if self.dedicated < 0 or self.dedicated * len(self.models) > self.n_latents:
            raise AnalysisError(f"{self.dedicated} dedicated latents per model exceed the {self.n_latents} latents")
        if self.scale is not None:
            object.__setattr__(self, "scale", tuple(float(s) for s in self.scale))

    @property
    def dedicated_ranges(self) -> dict[str, list[int]]:
        """``{model: [start, stop)}`` of each model's dedicated latents (empty without them)."""
        n = self.dedicated
        return {m: [i * n, (i + 1) * n] for i, m in enumerate(self.models)} if n else {}

    def to_json(self) -> dict:
        """The saved config (``crosscoder_cfg.json``)."""
        out = asdict(self)
        out["models"] = list(self.models)
        out["dedicated_ranges"] = self.dedicated_ranges
        return out

    @classmethod
    def from_json(cls, raw: dict) -> "CrosscoderConfig":
        """The config of a saved ``crosscoder_cfg.json``."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: (tuple(v) if k in ("models", "scale") and v is not None else v)
                      for k, v in raw.items() if k in known})


class Crosscoder(nn.Module):
    """A crosscoder of ``cfg``: ``W_enc [models, d, latents]``, ``b_enc [latents]``, ``W_dec [models, latents, d]``,
    ``b_dec [models, d]``. It reads activations ``[batch, models, d]`` (each model's own, at the same tokens); a
    latent's pre-activation sums the models' encoder outputs. A dedicated latent's decoder into every other model is
    held at zero (``mask``)."""

    def __init__(self, cfg: CrosscoderConfig, *, device=None, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        M, d, L = len(cfg.models), cfg.d, cfg.n_latents
        mask = torch.ones(M, L)
        for i, (start, stop) in enumerate(cfg.dedicated_ranges.values()):
            mask[:, start:stop] = 0.0
            mask[i, start:stop] = 1.0
        self.register_buffer("mask", mask.to(device))
        self.register_buffer("scale", torch.tensor(cfg.scale or [1.0] * M, dtype=torch.float32, device=device))
        threshold = float("nan") if cfg.threshold is None else cfg.threshold
        self.register_buffer("threshold", torch.tensor(threshold, dtype=torch.float64, device=device))
        w = torch.randn(M, L, d, generator=generator) * mask[..., None]
        # each latent's decoder: the same norm into every model it writes to, unit norm over all of them
        w = w / w.norm(dim=2, keepdim=True).clamp_min(1e-12) / mask.sum(0).sqrt()[None, :, None]
        self.W_dec = nn.Parameter(w.to(device))
        self.W_enc = nn.Parameter(w.transpose(1, 2).clone().to(device))
        self.b_enc = nn.Parameter(torch.zeros(L, device=device))
        self.b_dec = nn.Parameter(torch.zeros(M, d, device=device))

    # ---------------------------------------------------------------------------------------------- inference
    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, latents]`` from raw activations ``x`` ``[batch, models, d]`` (each divided by its scale)."""
        return torch.einsum("bmd,mdl->bl", x / self.scale[None, :, None], self.W_enc) + self.b_enc

    def latents(self, pre: torch.Tensor) -> torch.Tensor:
        """The latents at inference: TopK per token, ReLU gated by the threshold (BatchTopK), or ReLU."""
        acts = torch.relu(pre)
        if self.cfg.activation == "topk":
            return _keep_top(acts, self.cfg.k)
        if self.cfg.activation == "batchtopk" and not torch.isnan(self.threshold):
            return acts * (pre > self.threshold.to(pre.dtype))
        return acts

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The latents ``[batch, latents]`` of raw activations ``[batch, models, d]``."""
        return self.latents(self.pre_activations(x))

    def decode(self, acts: torch.Tensor, *, scaled: bool = False) -> torch.Tensor:
        """The reconstruction ``[batch, models, d]`` of latents ``acts`` (in the models' own units, or ``scaled``)."""
        out = torch.einsum("bl,mld->bmd", acts, self.W_dec * self.mask[..., None]) + self.b_dec
        return out if scaled else out * self.scale[None, :, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction of raw activations ``x`` ``[batch, models, d]``."""
        return self.decode(self.encode(x))

    def decoder_norms(self) -> torch.Tensor:
        """``[models, latents]``: the norm of each latent's decoder vector into each model (scaled units)."""
        return (self.W_dec * self.mask[..., None]).norm(dim=-1)


def _keep_top(acts: torch.Tensor, k: int) -> torch.Tensor:
    """``acts`` with all but the ``k`` largest entries of each row set to zero."""
    top = acts.topk(k, dim=-1)
    return torch.zeros_like(acts).scatter_(-1, top.indices, top.values)


# -------------------------------------------------------------------------------------------------- files
def save_crosscoder(cc: Crosscoder, path) -> Path:
    """Write ``cc`` as ``crosscoder.safetensors`` (``encoder.weight [models, d, latents]``, ``encoder.bias``,
    ``decoder.weight [models, latents, d]``, ``decoder.bias [models, d]``) and ``crosscoder_cfg.json`` in the
    directory ``path``, each file whole or not at all. Returns the directory."""
    from safetensors.torch import save_file

    from fixedid.atomic import atomic_path, write_text_atomic

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {"encoder.weight": cc.W_enc, "encoder.bias": cc.b_enc, "decoder.weight": cc.W_dec * cc.mask[..., None],
               "decoder.bias": cc.b_dec}
    with atomic_path(path / WEIGHTS) as tmp:
        save_file({k: v.detach().float().cpu().contiguous() for k, v in tensors.items()}, str(tmp))
    write_text_atomic(path / CONFIG, json.dumps(cc.cfg.to_json(), indent=1) + "\n")
    return path


def load_crosscoder(path, *, device=None) -> Crosscoder:
    """A crosscoder saved by :func:`save_crosscoder` (or any directory of that layout)."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / WEIGHTS).is_file() or not (path / CONFIG).is_file():
        raise AnalysisError(f"{path} holds no crosscoder (expected {WEIGHTS} and {CONFIG})")
    cfg = CrosscoderConfig.from_json(json.loads((path / CONFIG).read_text()))
    cc = Crosscoder(cfg, device=device)
    w = load_file(str(path / WEIGHTS), device=str(device or "cpu"))
    with torch.no_grad():
        for name, key in (("W_enc", "encoder.weight"), ("b_enc", "encoder.bias"), ("W_dec", "decoder.weight"),
                          ("b_dec", "decoder.bias")):
            if tuple(w[key].shape) != tuple(getattr(cc, name).shape):
                raise AnalysisError(f"{path / WEIGHTS}: {key} has shape {tuple(w[key].shape)}, the config "
                                    f"{tuple(getattr(cc, name).shape)}")
            getattr(cc, name).copy_(w[key])
    return cc.eval()


def with_fit(cfg: CrosscoderConfig, scale, threshold) -> CrosscoderConfig:
    """``cfg`` with the fitted scales and BatchTopK threshold."""
    return replace(cfg, scale=tuple(float(s) for s in scale), threshold=None if threshold is None else float(threshold))


__all__ = ["ACTIVATIONS", "CONFIG", "WEIGHTS", "Crosscoder", "CrosscoderConfig", "load_crosscoder",
           "save_crosscoder", "with_fit"]

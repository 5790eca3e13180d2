"""Sparse dictionaries: SAEs, transcoders and skip transcoders with TopK, BatchTopK, JumpReLU or ReLU latents."""

from __future__ import annotations

import contextlib
import io
from dataclasses import asdict, dataclass

import torch
from torch import nn

from analysis.errors import AnalysisError

#: What a dictionary maps: its input to itself (``sae``), to another hook (``transcoder``), or that plus a skip path.
KINDS = ("sae", "transcoder", "skip-transcoder")
#: The latent functions (see the module docstring).
ARCHS = ("topk", "batchtopk", "jumprelu", "relu")


def sparsify():
    """eai-sparsify's package (imported without its start-up line about Triton)."""
    with contextlib.redirect_stdout(io.StringIO()):
        import sparsify as sp
    return sp


@dataclass(frozen=True)
class DictionaryConfig:
    """What a dictionary is: its kind, latent architecture, widths, hook points and sparsity settings.

    ``k``: active latents per token (topk; the mean over a batch for batchtopk). ``l1_coefficient``: relu's penalty
    (on activations normalised to mean norm ``sqrt(d_in)``).
    ``l0_coefficient``, ``bandwidth``, ``init_threshold``: jumprelu's (SAELens's defaults 1.0, 0.05, 0.01).
    ``threshold_lr``: batchtopk's running-threshold rate (0.01). ``aux_coefficient``: the AuxK loss on dead latents
    (topk and batchtopk)."""

    kind: str
    arch: str
    d_in: int
    d_sae: int
    hook_name: str
    d_out: int | None = None
    hook_name_out: str | None = None
    k: int = 32
    l1_coefficient: float = 1.0
    l0_coefficient: float = 1.0
    bandwidth: float = 0.05
    init_threshold: float = 0.01
    threshold_lr: float = 0.01
    aux_coefficient: float = 1 / 32

    def __post_init__(self):
        if self.kind not in KINDS:
            raise AnalysisError(f"unknown dictionary kind {self.kind!r}; use one of {', '.join(KINDS)}")
        impl = dictionary_class(self.arch)
        if self.d_out is None:
            object.__setattr__(self, "d_out", self.d_in)
        if self.kind == "sae" and self.d_out != self.d_in:
            raise AnalysisError(f"an SAE reconstructs its input: d_out ({self.d_out}) must equal d_in ({self.d_in})")
        if self.kind != "sae" and not self.hook_name_out:
            raise AnalysisError(f"a {self.kind} needs the hook it predicts (hook_name_out)")
        if impl.fixed_width and self.d_out != self.d_in:
            raise AnalysisError(f"{impl.fixed_width}: d_out must equal d_in")
        if min(self.d_in, self.d_sae) < 1:
            raise AnalysisError(f"d_in and d_sae must be positive, got {self.d_in} and {self.d_sae}")
        if impl.uses_k and not 1 <= self.k <= self.d_sae:
            raise AnalysisError(f"k must be in [1, d_sae={self.d_sae}], got {self.k}")
        if self.bandwidth <= 0:
            raise AnalysisError(f"bandwidth must be positive, got {self.bandwidth}")
        if min(self.l1_coefficient, self.l0_coefficient, self.aux_coefficient) < 0:
            raise AnalysisError("the sparsity and AuxK coefficients must be >= 0, got l1 "
                                f"{self.l1_coefficient}, l0 {self.l0_coefficient}, aux {self.aux_coefficient}")

    @property
    def reads_minus_b_dec(self) -> bool:
        """Whether the decoder bias is subtracted from the input before encoding (SAELens's
        ``apply_b_dec_to_input``): for SAEs, never for transcoders."""
        return self.kind == "sae"

    def to_dict(self) -> dict:
        """The config as a plain dict (``DictionaryConfig(**d)`` rebuilds it)."""
        return asdict(self)


def rectangle(x: torch.Tensor) -> torch.Tensor:
    """1 where ``|x| < 1/2``, else 0: the kernel of JumpReLU's straight-through pseudo-derivative."""
    return ((x > -0.5) & (x < 0.5)).to(x)


class _JumpReLU(torch.autograd.Function):
    """``x * (x > threshold)``; the gradient reaches the threshold through the rectangle-kernel pseudo-derivative."""

    @staticmethod
    def forward(ctx, x, threshold, bandwidth):
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return x * (x > threshold).to(x)

    @staticmethod
    def backward(ctx, grad):
        x, threshold = ctx.saved_tensors
        bw = ctx.bandwidth
        g_x = (x > threshold).to(x) * grad
        g_t = (-(threshold / bw) * rectangle((x - threshold) / bw) * grad).reshape(-1, x.shape[-1]).sum(0)
        return g_x, g_t, None


class _Step(torch.autograd.Function):
    """``x > threshold`` as 0/1; the threshold's pseudo-derivative as in :class:`_JumpReLU` (the L0 penalty)."""

    @staticmethod
    def forward(ctx, x, threshold, bandwidth):
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return (x > threshold).to(x)

    @staticmethod
    def backward(ctx, grad):
        x, threshold = ctx.saved_tensors
        bw = ctx.bandwidth
        g_t = (-(1.0 / bw) * rectangle((x - threshold) / bw) * grad).reshape(-1, x.shape[-1]).sum(0)
        return None, g_t, None


class SparseDictionary(nn.Module):
    """One sparse dictionary (see the module docstring); ``cfg`` is its :class:`DictionaryConfig`.

    The base of one class per latent architecture (:data:`ARCHITECTURES`). It holds what they share: the
    SAELens-named parameters, the kind (an SAE reads its input minus ``b_dec``, a skip transcoder adds its linear
    path), decoding, the forward pass and the native training objective (squared error plus the subclass's sparsity
    term). ``SparseDictionary(cfg)`` builds the class of ``cfg.arch`` (as :meth:`from_config` does)."""

    #: The latent function's part of SAELens's ``architecture`` name (``""``: SAELens's standard ReLU dictionary).
    saelens_family = ""
    #: The learning rate at 2**14 latents (:func:`analysis.features.train.default_lr` scales it to the width).
    base_lr = 8e-4
    #: Whether ``cfg.k``, the active latents per token, is a setting of the architecture.
    uses_k = False
    #: Why the output must be as wide as the input, where it must (``""`` where it need not).
    fixed_width = ""

    def __new__(cls, cfg: DictionaryConfig | None = None, *args, **kwargs):
        # SparseDictionary(cfg) is the dictionary of cfg's architecture; a subclass, or unpickling (no cfg), is itself
        if cls is SparseDictionary and cfg is not None:
            cls = dictionary_class(cfg.arch)
        return super().__new__(cls)

    def __init__(self, cfg: DictionaryConfig, *, device=None, dtype: torch.dtype = torch.float32):
        super().__init__()
        expected = dictionary_class(cfg.arch)
        if not isinstance(self, expected):
            raise AnalysisError(f"{type(self).__name__} cannot hold a {cfg.arch} dictionary: "
                                "build SparseDictionary(cfg)")
        self.cfg = cfg
        self._init_parameters(device, dtype)

    @classmethod
    def from_config(cls, cfg: DictionaryConfig, *, device=None, dtype: torch.dtype = torch.float32) -> SparseDictionary:
        """The dictionary of ``cfg``, an instance of its architecture's class (as ``SparseDictionary(cfg)`` is)."""
        return dictionary_class(cfg.arch)(cfg, device=device, dtype=dtype)

    def _init_parameters(self, device, dtype: torch.dtype) -> None:
        """The native parameters: unit-norm random decoder rows, the encoder their transpose (SAE) or a small random
        matrix (transcoders), zero biases and skip path."""
        cfg = self.cfg
        w = torch.empty(cfg.d_sae, cfg.d_out, device=device, dtype=dtype)
        nn.init.kaiming_uniform_(w)
        self._W_dec = nn.Parameter(w / w.norm(dim=1, keepdim=True))
        self._W_enc = nn.Parameter(self._W_dec.detach().T.clone() if cfg.kind == "sae" else
                                   nn.init.kaiming_uniform_(torch.empty(cfg.d_in, cfg.d_sae, device=device,
                                                                        dtype=dtype)).mul_(0.1))
        self._b_enc = nn.Parameter(torch.zeros(cfg.d_sae, device=device, dtype=dtype))
        self._b_dec = nn.Parameter(torch.zeros(cfg.d_out, device=device, dtype=dtype))
        if cfg.kind == "skip-transcoder":
            self._W_skip = nn.Parameter(torch.zeros(cfg.d_out, cfg.d_in, device=device, dtype=dtype))

    # ---- SAELens-named views of the parameters
    @property
    def W_enc(self) -> torch.Tensor:
        """The encoder ``[d_in, d_sae]``."""
        return self._W_enc

    @property
    def b_enc(self) -> torch.Tensor:
        """The encoder bias ``[d_sae]``."""
        return self._b_enc

    @property
    def W_dec(self) -> torch.Tensor:
        """The decoder ``[d_sae, d_out]``, one row per latent."""
        return self._W_dec

    @property
    def b_dec(self) -> torch.Tensor:
        """The decoder bias ``[d_out]``."""
        return self._b_dec

    @property
    def W_skip(self) -> torch.Tensor | None:
        """A skip transcoder's linear path ``[d_out, d_in]``; None for the other kinds."""
        return self._W_skip if self.cfg.kind == "skip-transcoder" else None

    def inference_threshold(self) -> torch.Tensor | None:
        """The per-latent JumpReLU threshold used at inference (jumprelu and batchtopk), else None."""
        return None

    # ---- inference
    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - b_dec) @ W_enc + b_enc`` for an SAE, ``x @ W_enc + b_enc`` for a transcoder."""
        x = x.to(self.W_enc.dtype)
        if self.cfg.reads_minus_b_dec:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def latents(self, pre: torch.Tensor) -> torch.Tensor:
        """The latent function at inference on pre-activations ``pre``: ``relu(pre)``, zeroed at or below the
        :meth:`inference_threshold` where the architecture has one."""
        thr = self.inference_threshold()
        acts = pre.relu()
        return acts if thr is None else acts * (pre > thr).to(acts)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Dense latent activations ``[..., d_sae]`` at inference (see the module docstring)."""
        return self.latents(self.pre_activations(x))

    def decode(self, acts: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """The output ``[..., d_out]`` of latent activations (``x``, the input, feeds a skip transcoder's path)."""
        out = acts @ self.W_dec + self.b_dec
        if self.W_skip is not None:
            if x is None:
                raise AnalysisError("a skip transcoder's decode needs its input x")
            out = out + x.to(out.dtype) @ self.W_skip.T
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The output ``[..., d_out]`` of the input ``x`` ``[..., d_in]``: :meth:`decode` of :meth:`encode`."""
        return self.decode(self.encode(x), x)

    # ---- training
    def training_loss(self, x: torch.Tensor, y: torch.Tensor, dead: torch.Tensor | None, *,
                      sparsity_scale: float = 1.0) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """``(loss, parts, fired)`` of one batch ``x`` ``[n, d_in]`` -> target ``y`` ``[n, d_out]``: the training
        objective of the architecture, its parts as 0-d tensors (``fvu`` and ``l0``, the mean active latents per
        token, always; tensors, so that a step never waits for the device), and which latents fired ``[d_sae]``.
        ``dead``: the latents that have not fired for a while (the AuxK loss's); ``sparsity_scale`` warms up the
        L1/L0 penalty. Here: the squared error of :meth:`training_latents` plus :meth:`sparsity_loss`, then
        :meth:`update_threshold`."""
        pre = self.pre_activations(x)
        acts = self.training_latents(pre)
        out = self.decode(acts, x)
        err = out - y
        mse = err.pow(2).sum(-1).mean()
        total_var = (y - y.mean(0)).pow(2).sum()
        parts = {"fvu": err.detach().pow(2).sum() / total_var, "l0": (acts > 0).sum(-1).float().mean()}
        penalty, terms = self.sparsity_loss(pre, acts, err, dead, sparsity_scale=sparsity_scale)
        parts.update(terms)
        self.update_threshold(acts)
        return mse + penalty, parts, (acts > 0).any(0)

    def training_latents(self, pre: torch.Tensor) -> torch.Tensor:
        """The latent activations of pre-activations ``pre`` ``[n, d_sae]`` during training."""
        return pre.relu()

    def sparsity_loss(self, pre: torch.Tensor, acts: torch.Tensor, err: torch.Tensor, dead: torch.Tensor | None, *,
                      sparsity_scale: float) -> tuple[torch.Tensor, dict]:
        """``(term, parts)``: the architecture's weighted sparsity (or AuxK) term added to the squared error, and
        its unweighted value(s) as 0-d tensors for the history. ``err``: the output minus the target."""
        raise NotImplementedError(f"{type(self).__name__} defines no sparsity loss")

    @torch.no_grad()
    def update_threshold(self, acts: torch.Tensor) -> None:
        """Update a threshold kept outside the gradient from one batch's training ``acts`` (BatchTopK's)."""

    @torch.no_grad()
    def fold_input_scaling(self, s_in: float, s_out: float) -> None:
        """Fold the scalings a dictionary was trained under into its weights: trained on ``s_in * x`` to predict
        ``s_out * y``, it then reads ``x`` and writes ``y`` with the same latents (SAELens's
        ``fold_activation_norm_scaling_factor``; the decoder rows then have norm ``1 / s_out``)."""
        self.W_enc.mul_(s_in)
        self.W_dec.div_(s_out)
        self.b_dec.div_(s_out)
        if self.W_skip is not None:
            self.W_skip.mul_(s_in / s_out)

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Decoder rows back to unit norm (after each step)."""
        self._W_dec.div_(self._W_dec.norm(dim=1, keepdim=True).clamp_min(torch.finfo(self._W_dec.dtype).eps))

    @torch.no_grad()
    def project_decoder_grad(self) -> None:
        """Remove the gradient's component along each decoder row, so that a step keeps the rows' norm (to first
        order) instead of trading it against the encoder."""
        g = self._W_dec.grad
        if g is not None:
            g -= (g * self._W_dec).sum(1, keepdim=True) * self._W_dec

    # ---- SAELens's layout (:mod:`analysis.features.saelens_format`)
    def saelens_config_fields(self) -> dict:
        """The architecture's own fields of SAELens's ``cfg.json`` (TopK's ``k``)."""
        return {}

    @torch.no_grad()
    def load_weights(self, w: dict[str, torch.Tensor]) -> None:
        """Copy SAELens-named weights ``w`` (``W_enc``, ``b_enc``, ``W_dec``, ``b_dec``, ``W_skip`` of a skip
        transcoder, ``threshold`` where the architecture has one) into this dictionary."""
        for name in ("W_enc", "b_enc", "W_dec", "b_dec") + (("W_skip",) if self.cfg.kind == "skip-transcoder" else ()):
            getattr(self, name).copy_(w[name])


class TopKDictionary(SparseDictionary):
    """TopK: the ``k`` largest of ``relu(pre)`` per token. Its parameters live in eai-sparsify's
    :class:`sparsify.SparseCoder` (``coder``, in its own layout; the SAELens-named properties view them), whose fused
    encoder, FVU and AuxK loss train it."""

    saelens_family = "topk"
    base_lr = 2e-4
    uses_k = True
    fixed_width = "eai-sparsify's TopK coder writes the width it reads"

    def _init_parameters(self, device, dtype: torch.dtype) -> None:
        cfg = self.cfg
        sp = sparsify()
        scfg = sp.SparseCoderConfig(num_latents=cfg.d_sae, k=cfg.k, transcode=cfg.kind != "sae",
                                    skip_connection=cfg.kind == "skip-transcoder")
        self.coder = sp.SparseCoder(cfg.d_in, scfg, device=device or "cpu", dtype=dtype)

    @property
    def W_enc(self) -> torch.Tensor:
        """The encoder ``[d_in, d_sae]`` (a view of the coder's ``encoder.weight``)."""
        return self.coder.encoder.weight.T

    @property
    def b_enc(self) -> torch.Tensor:
        """The encoder bias ``[d_sae]``."""
        return self.coder.encoder.bias

    @property
    def W_dec(self) -> torch.Tensor:
        """The decoder ``[d_sae, d_out]``, one row per latent."""
        return self.coder.W_dec

    @property
    def b_dec(self) -> torch.Tensor:
        """The decoder bias ``[d_out]``."""
        return self.coder.b_dec

    @property
    def W_skip(self) -> torch.Tensor | None:
        """A skip transcoder's linear path ``[d_out, d_in]``; None for the other kinds."""
        return self.coder.W_skip if self.cfg.kind == "skip-transcoder" else None

    def latents(self, pre: torch.Tensor) -> torch.Tensor:
        """The ``k`` largest of ``relu(pre)`` per token, the rest zero."""
        vals, idx = pre.relu().topk(self.cfg.k, dim=-1, sorted=False)
        return torch.zeros_like(pre).scatter_(-1, idx, vals)

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, dead: torch.Tensor | None, *,
                      sparsity_scale: float = 1.0) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """``(loss, parts, fired)`` as in :meth:`SparseDictionary.training_loss`, from eai-sparsify's coder: its FVU
        plus ``aux_coefficient`` times its AuxK loss (``sparsity_scale`` does not apply)."""
        out = self.coder(x, None if self.cfg.kind == "sae" else y, dead_mask=dead)
        loss = out.fvu + self.cfg.aux_coefficient * out.auxk_loss
        fired = torch.zeros(self.cfg.d_sae, dtype=torch.bool, device=x.device)
        fired[out.latent_indices[out.latent_acts > 0]] = True
        l0 = (out.latent_acts > 0).sum(-1).float().mean()
        return loss, {"fvu": out.fvu.detach(), "aux": out.auxk_loss.detach(), "l0": l0}, fired

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Decoder rows back to unit norm (after each step; the coder's own)."""
        self.coder.set_decoder_norm_to_unit_norm()

    @torch.no_grad()
    def project_decoder_grad(self) -> None:
        """Remove the gradient's component along each decoder row (the coder's own)."""
        if self.coder.W_dec.grad is not None:
            self.coder.remove_gradient_parallel_to_decoder_directions()

    def saelens_config_fields(self) -> dict:
        """``k`` and ``rescale_acts_by_decoder_norm`` (false) of SAELens's TopK config."""
        return {"k": self.cfg.k, "rescale_acts_by_decoder_norm": False}


class BatchTopKDictionary(SparseDictionary):
    """BatchTopK: at training, the ``k * n_tokens`` largest of ``relu(pre)`` over the whole batch, with the AuxK
    loss; at inference a JumpReLU at one threshold for every latent, the running mean of the smallest kept activation
    (the float64 buffer ``topk_threshold``, as SAELens keeps it)."""

    saelens_family = "jumprelu"
    uses_k = True

    def _init_parameters(self, device, dtype: torch.dtype) -> None:
        super()._init_parameters(device, dtype)
        self.register_buffer("topk_threshold", torch.zeros((), device=device, dtype=torch.float64))

    def inference_threshold(self) -> torch.Tensor:
        """The running threshold, the same for every latent ``[d_sae]``."""
        return self.topk_threshold.to(self.b_enc.dtype).expand(self.cfg.d_sae)

    def training_latents(self, pre: torch.Tensor) -> torch.Tensor:
        """The ``k * n`` largest of ``relu(pre)`` over the batch ``[n, d_sae]``, the rest zero."""
        flat = pre.relu().flatten()
        top = flat.topk(self.cfg.k * pre.shape[0], sorted=False)
        return torch.zeros_like(flat).scatter(-1, top.indices, top.values).view_as(pre)

    def sparsity_loss(self, pre: torch.Tensor, acts: torch.Tensor, err: torch.Tensor, dead: torch.Tensor | None, *,
                      sparsity_scale: float) -> tuple[torch.Tensor, dict]:
        """``aux_coefficient`` times the AuxK loss (``_aux_loss``; ``sparsity_scale`` does not apply)."""
        aux = self._aux_loss(pre, err.detach(), dead)
        return self.cfg.aux_coefficient * aux, {"aux": aux.detach()}

    @torch.no_grad()
    def update_threshold(self, acts: torch.Tensor) -> None:
        """Move the running threshold by ``threshold_lr`` towards the smallest activation the batch kept."""
        kept = acts[acts > 0]
        if kept.numel():
            lr = self.cfg.threshold_lr
            self.topk_threshold.mul_(1 - lr).add_(lr * kept.min().double())

    def _aux_loss(self, pre: torch.Tensor, err: torch.Tensor, dead: torch.Tensor | None) -> torch.Tensor:
        """AuxK (Gao et al., 2024): the ``d_out // 2`` largest pre-activations among dead latents reconstruct the
        live latents' residual error, scaled down while few latents are dead."""
        if dead is None or not bool(dead.any()):
            return pre.new_zeros(())
        n_dead = int(dead.sum())
        k_aux = max(1, self.cfg.d_out // 2)
        scale = min(n_dead / k_aux, 1.0)
        masked = torch.where(dead, pre, torch.full_like(pre, -torch.inf))
        vals, idx = masked.topk(min(k_aux, n_dead), dim=-1, sorted=False)
        acts = torch.zeros_like(pre).scatter(-1, idx, vals.relu())
        recon = acts @ self.W_dec
        return scale * (recon + err).pow(2).sum(-1).mean() / err.pow(2).sum(-1).mean().clamp_min(1e-12)

    @torch.no_grad()
    def load_weights(self, w: dict[str, torch.Tensor]) -> None:
        """The SAELens-named weights, and the running threshold from the saved JumpReLU ``threshold``."""
        super().load_weights(w)
        self.topk_threshold.copy_(w["threshold"][0].double())


class JumpReLUDictionary(SparseDictionary):
    """JumpReLU: ``relu(pre) * (pre > relu(threshold))``, the ``threshold`` parameter trained through the
    straight-through estimator (``_JumpReLU``, ``_Step``) with an L0 penalty."""

    saelens_family = "jumprelu"

    def _init_parameters(self, device, dtype: torch.dtype) -> None:
        super()._init_parameters(device, dtype)
        self.threshold = nn.Parameter(torch.full((self.cfg.d_sae,), self.cfg.init_threshold, device=device,
                                                 dtype=dtype))

    def inference_threshold(self) -> torch.Tensor:
        """``relu(threshold)`` ``[d_sae]``."""
        return self.threshold.relu()

    def training_latents(self, pre: torch.Tensor) -> torch.Tensor:
        """The JumpReLU of ``pre``, its gradient reaching the threshold through the rectangle kernel."""
        return _JumpReLU.apply(pre, self.threshold.relu(), self.cfg.bandwidth)

    def sparsity_loss(self, pre: torch.Tensor, acts: torch.Tensor, err: torch.Tensor, dead: torch.Tensor | None, *,
                      sparsity_scale: float) -> tuple[torch.Tensor, dict]:
        """The L0 penalty (active latents per token, straight-through), weighted by ``l0_coefficient``."""
        l0 = _Step.apply(pre, self.threshold.relu(), self.cfg.bandwidth).sum(-1).mean()
        return sparsity_scale * self.cfg.l0_coefficient * l0, {"l0_loss": l0.detach()}

    @torch.no_grad()
    def load_weights(self, w: dict[str, torch.Tensor]) -> None:
        """The SAELens-named weights, ``threshold`` included."""
        super().load_weights(w)
        self.threshold.copy_(w["threshold"])


class ReLUDictionary(SparseDictionary):
    """ReLU (SAELens's standard SAE): ``relu(pre)`` with an L1 penalty on the activations weighted by the decoder
    rows' norms."""

    def sparsity_loss(self, pre: torch.Tensor, acts: torch.Tensor, err: torch.Tensor, dead: torch.Tensor | None, *,
                      sparsity_scale: float) -> tuple[torch.Tensor, dict]:
        """The L1 penalty, weighted by ``l1_coefficient``."""
        l1 = (acts * self.W_dec.norm(dim=1)).sum(-1).mean()
        return sparsity_scale * self.cfg.l1_coefficient * l1, {"l1": l1.detach()}


#: The class of each latent architecture: the one place a dictionary's class is chosen (:func:`dictionary_class`).
ARCHITECTURES: dict[str, type[SparseDictionary]] = {"topk": TopKDictionary, "batchtopk": BatchTopKDictionary,
                                                     "jumprelu": JumpReLUDictionary, "relu": ReLUDictionary}


def dictionary_class(arch: str) -> type[SparseDictionary]:
    """The :class:`SparseDictionary` subclass of the architecture ``arch`` (one of :data:`ARCHS`)."""
    cls = ARCHITECTURES.get(arch)
    if cls is None:
        raise AnalysisError(f"unknown architecture {arch!r}; use one of {', '.join(ARCHS)}")
    return cls

"""FixedIdLM: one decoder-only LM class for the three input interfaces, hookable like TransformerLens."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformer_lens.HookedRootModule import HookedRootModule
from transformer_lens.hook_points import HookPoint

from .codes import code_features, code_table, frozen_random_table, id_permutation, random_head
from .config import ModelConfig
from .errors import ConfigError


def _is_hooked(hp: nn.Module) -> bool:
    return bool(hp._forward_hooks or hp._forward_pre_hooks or hp._backward_hooks)


class RMSNorm(nn.Module):
    """RMS norm with a trainable gain ``w`` (``x / sqrt(mean(x^2) + eps) * w``), no bias; the scale and the
    normalised output pass through ``hook_scale`` ``[batch, pos, 1]`` and ``hook_normalized``
    ``[batch, pos, d_model]``."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d))
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d_model]

    def forward(self, x):
        """``x`` ``[batch, pos, d_model]`` normalised over its last dimension, same shape."""
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale * self.w)


class LayerNorm(nn.Module):
    """LayerNorm (``norm = "ln"``): centred, scaled by ``sqrt(var + eps)``, then gain ``w`` and bias ``b``;
    the same hook points as :class:`~fixedid.model.RMSNorm`."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        self.hook_scale = HookPoint()
        self.hook_normalized = HookPoint()

    def forward(self, x):
        """``x`` ``[batch, pos, d_model]`` centred and normalised over its last dimension, same shape."""
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale * self.w + self.b)


def _norm(cfg: ModelConfig) -> nn.Module:
    return (RMSNorm if cfg.norm == "rms" else LayerNorm)(cfg.d_model, cfg.norm_eps)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """Causal self-attention with RoPE and optional grouped-query heads (``n_kv_heads``), projections
    ``q_proj``/``k_proj``/``v_proj``/``o_proj``, and the hook points of the module docstring. The pattern is computed
    explicitly only when :meth:`~fixedid.model.Attention.wants_pattern`; otherwise SDPA."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.d_head = cfg.n_heads, cfg.kv_heads, cfg.d_head
        self.q_proj = nn.Linear(cfg.d_model, self.n_heads * self.d_head, bias=cfg.bias)
        self.k_proj = nn.Linear(cfg.d_model, self.n_kv * self.d_head, bias=cfg.bias)
        self.v_proj = nn.Linear(cfg.d_model, self.n_kv * self.d_head, bias=cfg.bias)
        self.o_proj = nn.Linear(self.n_heads * self.d_head, cfg.d_model, bias=cfg.bias)
        for name in ("q", "k", "v", "rot_q", "rot_k", "attn_scores", "pattern", "z"):
            setattr(self, f"hook_{name}", HookPoint())
        self.force_explicit = False

    def wants_pattern(self) -> bool:
        """Whether this layer computes attention explicitly (so ``hook_attn_scores`` and ``hook_pattern`` fire):
        ``force_explicit`` is set or either hook point has a hook attached."""
        return self.force_explicit or _is_hooked(self.hook_pattern) or _is_hooked(self.hook_attn_scores)

    def forward(self, x, cos, sin, past=None):
        """``past``: optional ``(k, v)`` of earlier positions, ``[batch, n_kv_heads, P, d_head]`` (keys after RoPE);
        ``x`` then holds positions ``P..P+T-1`` and ``cos``/``sin`` must be those positions' rows."""
        B, T, _ = x.shape
        q = self.hook_q(self.q_proj(x).view(B, T, self.n_heads, self.d_head))
        k = self.hook_k(self.k_proj(x).view(B, T, self.n_kv, self.d_head))
        v = self.hook_v(self.v_proj(x).view(B, T, self.n_kv, self.d_head))
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = self.hook_rot_q(q * cos + _rotate_half(q) * sin)
        k = self.hook_rot_k(k * cos + _rotate_half(k) * sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, d_head]
        P = 0
        if past is not None:
            P = past[0].shape[2]
            k, v = torch.cat([past[0].to(k.dtype), k], dim=2), torch.cat([past[1].to(v.dtype), v], dim=2)
        if self.wants_pattern():
            if self.n_kv != self.n_heads:
                k = k.repeat_interleave(self.n_heads // self.n_kv, dim=1)
                v = v.repeat_interleave(self.n_heads // self.n_kv, dim=1)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)
            mask = torch.ones(T, P + T, dtype=torch.bool, device=x.device).triu(P + 1)
            scores = self.hook_attn_scores(scores.masked_fill(mask, float("-inf")))
            pattern = self.hook_pattern(scores.softmax(-1))
            z = pattern.to(v.dtype) @ v
        elif P:
            allowed = torch.ones(T, P + T, dtype=torch.bool, device=x.device).tril(P)
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=self.n_kv != self.n_heads)
        else:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv != self.n_heads)
        z = self.hook_z(z.transpose(1, 2))  # [B, T, heads, d_head]
        return self.o_proj(z.reshape(B, T, self.n_heads * self.d_head))


class MLP(nn.Module):
    """The block's MLP: SwiGLU (``silu(gate_proj x) * up_proj x``, ``hook_pre`` on the gate and
    ``hook_pre_linear`` on the up projection) or GELU (``fc_in``), then ``down_proj``; ``hook_post`` sees the
    ``[batch, pos, d_ff]`` hidden activation."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.kind = cfg.mlp
        if cfg.mlp == "swiglu":
            self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
            self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
            self.hook_pre_linear = HookPoint()
        else:
            self.fc_in = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x):
        """``[batch, pos, d_model]`` -> ``[batch, pos, d_model]``."""
        if self.kind == "swiglu":
            h = F.silu(self.hook_pre(self.gate_proj(x))) * self.hook_pre_linear(self.up_proj(x))
        else:
            h = F.gelu(self.hook_pre(self.fc_in(x)))
        return self.down_proj(self.hook_post(h))


class Block(nn.Module):
    """One pre-norm transformer block: ``x + attn(ln1(x))``, then ``+ mlp(ln2(.))``, with the residual hook
    points ``hook_resid_pre``, ``hook_attn_out``, ``hook_resid_mid``, ``hook_mlp_out`` and ``hook_resid_post``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = _norm(cfg), Attention(cfg), _norm(cfg), MLP(cfg)
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, x, cos, sin, past=None):
        """The residual stream ``x`` ``[batch, pos, d_model]`` through the block, same shape; ``cos``/``sin`` and
        ``past`` as in :meth:`fixedid.model.Attention.forward`."""
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.ln1(x), cos, sin, past)))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))


def input_code_table(cfg: ModelConfig, *, value_map: str | None = None, scale: float | None = None) -> np.ndarray:
    """The ``[vocab, n_bits]`` code table an n-bit-code interface reads (canonical, gf2, permuted), rendered with the
    config's value map and scale unless given."""
    table = code_table(cfg.vocab_size, cfg.n_bits, recoding=cfg.recoding(), bit_order=cfg.bit_order,
                       value_map=value_map or cfg.value_map, scale=cfg.code_scale if scale is None else scale)
    if cfg.interface == "permuted":
        table = np.ascontiguousarray(table[id_permutation(cfg.vocab_size, cfg.table_seed)])
    return table


def constant_code_bits(cfg: ModelConfig) -> list[int]:
    """The columns of the n-bit code the model reads (0-based, in its own bit order) that are the same for every
    token of the vocabulary: a 380-token vocabulary leaves 7 of 16 canonical bits constant (none of the tiny
    recipe's 9), the study's 49,152 tokens none. Empty for interfaces without an n-bit code."""
    if not cfg.has_code:
        return []
    table = input_code_table(cfg)
    return [int(j) for j in np.flatnonzero((table == table[:1]).all(0))]


def _fixed_table(make, shape) -> torch.Tensor:
    """A fixed float32 table ``make()`` as a tensor on the default device; on the meta device only its ``shape``,
    nothing computed (a 151,669 x 2,048 Gaussian table takes seconds, and a model built on meta to count or plan
    its parameters reads no values)."""
    device = torch.get_default_device()
    if device.type == "meta":
        return torch.empty(shape, dtype=torch.float32, device=device)
    return torch.from_numpy(make()).to(device)


class FixedCodeInput(nn.Module):
    """The immutable input: a ``[vocab, n_bits]`` code table in a buffer, repeated to ``d_model``.

    The buffer is not part of the state dict: it is recomputed from the config, and a checkpoint verifies it
    against the sha256 it recorded.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        table = input_code_table(cfg)
        self.register_buffer("code", torch.from_numpy(table).to(torch.get_default_device()), persistent=False)
        self.repeats, self.mode = cfg.code_repeats, cfg.repeat

    def widen(self, rows):
        """``[..., n_bits]`` code rows -> ``[..., d_model]`` as the model reads them."""
        if self.mode == "tile":
            return rows.repeat(*([1] * (rows.dim() - 1)), self.repeats)
        return rows.repeat_interleave(self.repeats, dim=-1)

    def forward(self, tokens):
        """Token ids ``[...]`` -> their widened code rows ``[..., d_model]``."""
        return self.widen(self.code[tokens])


class FrozenTableInput(nn.Module):
    """The ``frozen_random`` geometry control: a frozen ``[vocab, d_model]`` table of seeded Gaussian rows with the
    code rows' norm, in a buffer like a code (``code``, widened by the identity)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        code = code_table(min(cfg.vocab_size, 1 << cfg.n_bits), cfg.n_bits, bit_order=cfg.bit_order,
                          value_map=cfg.value_map, scale=cfg.code_scale)
        norm = float(np.sqrt((code.astype(np.float64) ** 2).sum(1) * max(1, cfg.d_model // cfg.n_bits)).mean())
        table = _fixed_table(lambda: frozen_random_table(cfg.vocab_size, cfg.d_model, cfg.table_seed, norm),
                             (cfg.vocab_size, cfg.d_model))
        self.register_buffer("code", table, persistent=False)
        self.repeats, self.mode = 1, "tile"

    def widen(self, rows):
        """The identity: the table's rows are already ``d_model`` wide."""
        return rows

    def forward(self, tokens):
        """Token ids ``[...]`` -> their frozen rows ``[..., d_model]``."""
        return self.code[tokens]


class FixedOutput(nn.Module):
    """The frozen output heads: ``output = "code"``, whose row ``t`` is a fixed full-rank expansion of token ``t``'s
    code (:func:`fixedid.codes.code_features`), and ``output = "random"``, seeded Gaussian unit-norm rows
    (:func:`fixedid.codes.random_head`); in a buffer named ``weight`` like a linear layer's."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        def rows():
            if cfg.output == "random":
                return random_head(cfg.vocab_size, cfg.d_model, cfg.table_seed)
            if cfg.has_code:  # the code the input reads, as {-1, +1}
                code = input_code_table(cfg, value_map="pm1", scale=1.0)
            else:  # no n-bit code at the input: the canonical code of the id
                code = code_table(cfg.vocab_size, cfg.n_bits, bit_order=cfg.bit_order)
            return code_features(code, cfg.d_model, cfg.table_seed)

        self.register_buffer("weight", _fixed_table(rows, (cfg.vocab_size, cfg.d_model)), persistent=False)

    def forward(self, x):
        """Logits ``x @ weight.T``: ``[..., d_model]`` -> ``[..., vocab]``, in ``x``'s dtype."""
        return F.linear(x, self.weight.to(x.dtype))


class LearnedInput(nn.Module):
    """An ordinary trainable ``[vocab, d_model]`` embedding table."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))

    def forward(self, tokens):
        """Token ids ``[...]`` -> their embedding rows ``[..., d_model]``."""
        return F.embedding(tokens, self.W_E)


def rope_tables(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's cos and sin by position, ``[context, 1, d_head]`` (one base, ``rope_theta``) or ``[context, n_heads,
    d_head]`` (``rope_head_thetas``: a base per head); they broadcast over ``[batch, pos, heads, d_head]``."""
    thetas = [cfg.rope_theta] if cfg.rope_head_thetas is None else cfg.rope_head_thetas
    exponent = torch.arange(0, cfg.d_head, 2, dtype=torch.float32) / cfg.d_head
    inv = torch.stack([1.0 / (float(t) ** exponent) for t in thetas])  # [bases, d_head / 2]
    freqs = torch.arange(cfg.context, dtype=torch.float32)[:, None, None] * inv  # [context, bases, d_head / 2]
    freqs = torch.cat((freqs, freqs), dim=-1)
    return freqs.cos(), freqs.sin()


def _param_seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


class FixedIdLM(HookedRootModule):
    """Decoder-only LM with a ``learned``, ``canonical`` or ``gf2`` input interface (see the module docstring).

    ``forward(tokens)`` returns logits ``[batch, pos, vocab]``; ``return_type="loss"`` the mean next-token loss
    (of ``targets`` when given, else of ``tokens`` shifted by one), ``"both"`` a ``(logits, loss)`` pair. With
    ``start_at_layer=L`` the input is the residual stream entering block ``L``; with ``stop_at_layer=L`` the
    output is the residual stream entering block ``L`` (TransformerLens conventions). ``past_kv`` (one ``(k, v)``
    per block run, keys after RoPE, ``[batch, n_kv_heads, P, d_head]``) makes the input positions ``P..P+T-1``
    of a sequence whose first ``P`` positions those keys and values summarise; hooks then see only the new
    positions (keys and values of ``hook_k``/``hook_v``/``hook_rot_k`` included).

    Initialisation draws every tensor from a generator seeded by ``(config.seed, parameter name)``, so two
    variants built with one seed have bit-identical backbone and head weights whatever their input interface.
    """

    def __init__(self, config: ModelConfig, *, init: bool = True):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise ConfigError(f"FixedIdLM needs a ModelConfig, got {type(config).__name__}")
        self.cfg = config
        self.embed = (FixedCodeInput(config) if config.has_code else
                      FrozenTableInput(config) if config.is_fixed else LearnedInput(config))
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.ln_final = _norm(config)
        if config.output != "learned":
            self.unembed = FixedOutput(config)
        else:
            self.unembed = nn.Linear(config.d_model, config.vocab_size, bias=False)
        cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.tokenizer = None
        self.setup()
        if init:
            self.init_weights()

    # ----------------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self) -> None:
        """(Re)draw every parameter from ``(cfg.seed, name)``-seeded generators; a no-op on the meta device."""
        resid_std = self.cfg.init_std / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if p.is_meta:
                continue
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "w" and p.dim() == 1:
                p.fill_(1.0)
            elif leaf in ("b", "bias"):
                p.zero_()
            else:
                std = resid_std if name.endswith(("o_proj.weight", "down_proj.weight")) else self.cfg.init_std
                if name == "embed.W_E" and self.cfg.embed_init_std is not None:
                    std = self.cfg.embed_init_std
                g = torch.Generator().manual_seed(_param_seed(self.cfg.seed, name))
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * std)

    @property
    def force_explicit_attention(self) -> bool:
        """Whether every layer computes attention explicitly (materialising the pattern) whether or not it is
        hooked; setting it sets every layer's ``force_explicit``."""
        return all(b.attn.force_explicit for b in self.blocks)

    @force_explicit_attention.setter
    def force_explicit_attention(self, value: bool) -> None:
        for b in self.blocks:
            b.attn.force_explicit = bool(value)

    def param_counts(self) -> dict[str, int]:
        """Parameter accounting: ``total``, ``trainable``, ``input_interface``, ``backbone``, ``output_head``.

        The fixed code is a buffer, not a parameter: a fixed interface has ``input_interface == 0``.
        """
        def count(params, trainable_only=False):
            return sum(p.numel() for p in params if p.requires_grad or not trainable_only)

        backbone = list(self.blocks.parameters()) + list(self.ln_final.parameters())
        return {
            "total": count(self.parameters()),
            "trainable": count(self.parameters(), True),
            "input_interface": count(self.embed.parameters(), True),
            "backbone": count(backbone),
            "output_head": count(self.unembed.parameters()),
        }

    def input_code(self, tokens: torch.Tensor) -> torch.Tensor:
        """What enters the residual stream for ``tokens`` (the widened code, or the embedding rows)."""
        return self.embed(tokens)

    # ----------------------------------------------------------------------------------------------------------
    def forward(self, tokens, return_type: str | None = "logits", *, targets=None, start_at_layer: int | None = None,
                stop_at_layer: int | None = None, past_kv=None):
        """Run the model; see the class docstring for ``return_type``, ``targets``, ``start_at_layer``,
        ``stop_at_layer`` and ``past_kv``. ``tokens`` is an integer tensor ``[batch, pos]`` (a float residual stream
        ``[batch, pos, d_model]`` with ``start_at_layer``); ``targets`` ``[batch, pos]`` with ``-100`` where no loss is
        taken. Returns logits ``[batch, pos, vocab]``, the scalar loss, ``(logits, loss)``, None (``return_type=None``),
        or the residual stream ``[batch, pos, d_model]`` with ``stop_at_layer``. A sequence longer than the context
        raises ``ValueError``."""
        if start_at_layer is None:
            if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"tokens must be an integer tensor [batch, pos], got {tuple(tokens.shape)} "
                                 f"{tokens.dtype}")
            x = self.hook_embed(self.embed(tokens))
            start_at_layer = 0
        else:
            x = tokens
        blocks = list(self.blocks)[start_at_layer:stop_at_layer]  # (slicing a ModuleList builds a new one)
        P = 0 if past_kv is None else past_kv[0][0].shape[2]
        if past_kv is not None and len(past_kv) != len(blocks):
            raise ValueError(f"past_kv has {len(past_kv)} entries for {len(blocks)} blocks")
        T = x.shape[1]
        if P + T > self.cfg.context:
            raise ValueError(f"sequence length {P + T} exceeds the model's context {self.cfg.context}")
        cos, sin = self.rope_cos[P:P + T], self.rope_sin[P:P + T]
        for i, block in enumerate(blocks):
            x = block(x, cos, sin, None if past_kv is None else past_kv[i])
        if stop_at_layer is not None:
            return x
        logits = self.unembed(self.ln_final(x))
        if return_type is None:
            return None
        if return_type == "logits":
            return logits
        if return_type not in ("loss", "both"):
            raise ValueError(f"unknown return_type {return_type!r}; use 'logits', 'loss', 'both' or None")
        if targets is None:
            if start_at_layer:
                raise ValueError("targets are needed for a loss when start_at_layer is set")
            logits_for_loss, targets = logits[:, :-1], tokens[:, 1:]
        else:
            logits_for_loss = logits
        loss = F.cross_entropy(logits_for_loss.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                               ignore_index=-100)
        return loss if return_type == "loss" else (logits, loss)

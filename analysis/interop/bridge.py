"""A TransformerLens 4.x ``TransformerBridge`` over a FixedIdLM: no folding, the same weight tensors."""

from __future__ import annotations

import copy
import itertools

import torch
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.factories.architecture_adapter_factory import ArchitectureAdapterFactory
from transformer_lens.model_bridge import ArchitectureAdapter, TransformerBridge
from transformer_lens.model_bridge.generalized_components import (
    AttentionBridge,
    BlockBridge,
    EmbeddingBridge,
    GatedMLPBridge,
    LinearBridge,
    MLPBridge,
    UnembeddingBridge,
)
from transformer_lens.model_bridge.generalized_components.base import GeneralizedComponent
from transformer_lens.model_bridge.sources import build_bridge_from_module
from analysis.engine import names as hooknames

ARCH = "FixedIdLM"


class InputBridge(EmbeddingBridge):
    """EmbeddingBridge whose ``W_E`` is the ``[vocab, d_model]`` table the residual stream reads: the learned
    ``W_E`` parameter, or the widened fixed code (a buffer-derived tensor, not a parameter)."""

    @property
    def W_E(self) -> torch.Tensor:
        """The ``[vocab, d_model]`` rows the residual stream reads: the learned table (the parameter itself), or the
        fixed table widened as the model widens it (a new tensor on each access)."""
        inp = self.original_component
        return inp.W_E if hasattr(inp, "W_E") else inp.widen(inp.code)


class FixedIdAdapter(ArchitectureAdapter):
    """Component mapping onto FixedIdLM's attribute names; all components run the wrapped module's forward."""

    supports_compatibility_mode = False  # compatibility mode = HookedTransformer weight processing: never
    supports_hf_output_attentions = False  # FixedIdLM.forward takes no output_attentions

    def __init__(self, cfg):
        super().__init__(cfg)
        self.supports_fold_ln = False
        self.supports_center_writing_weights = False

        def norm(name):
            return GeneralizedComponent(name=name, config=cfg)

        attn = AttentionBridge(name="attn", config=cfg, submodules={
            "q": LinearBridge(name="q_proj"), "k": LinearBridge(name="k_proj"),
            "v": LinearBridge(name="v_proj"), "o": LinearBridge(name="o_proj")})
        if cfg.gated_mlp:
            mlp = GatedMLPBridge(name="mlp", config=cfg, submodules={
                "gate": LinearBridge(name="gate_proj"), "in": LinearBridge(name="up_proj"),
                "out": LinearBridge(name="down_proj")})
        else:
            mlp = MLPBridge(name="mlp", config=cfg, submodules={
                "in": LinearBridge(name="fc_in"), "out": LinearBridge(name="down_proj")})
        self.component_mapping = {
            "embed": InputBridge(name="embed"),
            "blocks": BlockBridge(name="blocks", config=cfg,
                                  submodules={"ln1": norm("ln1"), "attn": attn, "ln2": norm("ln2"), "mlp": mlp}),
            "ln_final": norm("ln_final"),
            "unembed": UnembeddingBridge(name="unembed", config=cfg),
        }


ArchitectureAdapterFactory.register_adapter(ARCH, FixedIdAdapter)


def bridge_config(cfg) -> TransformerBridgeConfig:
    """TL config fields the bridge and ``transformer_lens.patching`` read, from a fixedid ModelConfig."""
    return TransformerBridgeConfig(
        d_model=cfg.d_model, d_head=cfg.d_head, n_layers=cfg.n_layers, n_ctx=cfg.context, n_heads=cfg.n_heads,
        n_key_value_heads=cfg.kv_heads if cfg.kv_heads != cfg.n_heads else None, d_vocab=cfg.vocab_size,
        d_mlp=cfg.d_ff, act_fn="silu" if cfg.mlp == "swiglu" else "gelu", gated_mlp=cfg.mlp == "swiglu",
        normalization_type="RMS" if cfg.norm == "rms" else "LN", eps=cfg.norm_eps,
        positional_embedding_type="rotary", rotary_dim=cfg.d_head, rotary_base=cfg.rope_theta,
        final_rms=cfg.norm == "rms", original_architecture=ARCH, model_name=cfg.name,
    )


#: HookPoints the bridge registers but cannot fire around an opaque module (it never sees the pattern, the rotated
#: q/k or a norm's scale): the bridge exposes the wrapped module's own HookPoints under these names instead.
NORM_HOOKS = ("hook_scale", "hook_normalized")
OWN_HOOKS = {"attn": ("hook_attn_scores", "hook_pattern", "hook_rot_q", "hook_rot_k"), "ln1": NORM_HOOKS,
             "ln2": NORM_HOOKS}


def to_transformer_bridge(model) -> TransformerBridge:
    """A TransformerBridge over a structural clone of ``model`` that shares its parameters and buffers.

    TransformerLens's own tools (``transformer_lens.patching``, ``run_with_cache``) run on it with the legacy hook
    names and give the model's numbers exactly. Build it after any ``model.to(...)``: a move replaces buffers (RoPE
    tables, the fixed code) on ``model`` only. Never checkpoint through the bridge (its state dict uses TL's keys);
    save the model.
    """
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers(), [model.tokenizer])}
    clone = copy.deepcopy(model, shared)  # new module objects, same tensors (and tokenizer)
    clone.reset_hooks(including_permanent=True)
    bridge = build_bridge_from_module(clone, ARCH, tl_config=bridge_config(model.cfg), model_name=model.cfg.name)
    slots = [(hooknames.norm(i, c), getattr(blk, c), names) for i, blk in enumerate(bridge.blocks)
             for c, names in OWN_HOOKS.items()] + [("ln_final", bridge.ln_final, NORM_HOOKS)]
    for path, comp, names in slots:
        for name in names:
            hp = getattr(comp.original_component, name)
            setattr(comp, name, hp)  # GeneralizedComponent.__setattr__ registers a HookPoint
            hp.name = f"{path}.{name}"
            bridge._hook_registry[hp.name] = hp
    object.__setattr__(bridge, "process_weights", _refuse_processing)  # folding would rewrite the shared weights
    bridge.train(model.training)
    return bridge


def _refuse_processing(*args, **kwargs):
    raise RuntimeError("a FixedIdLM bridge never folds or centres weights (it shares the model's tensors)")


__all__ = ["to_transformer_bridge", "FixedIdAdapter", "bridge_config"]

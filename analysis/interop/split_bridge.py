"""A TransformerLens 4.x ``TransformerBridge`` over a FixedIdLM with TL's per-head q/k/v input forks."""

from __future__ import annotations

import copy
import itertools

from transformer_lens.factories.architecture_adapter_factory import ArchitectureAdapterFactory
from transformer_lens.model_bridge.generalized_components import LinearBridge
from transformer_lens.model_bridge.generalized_components.position_embeddings_attention import (
    PositionEmbeddingsAttentionBridge,
)
from transformer_lens.model_bridge.sources import build_bridge_from_module

from analysis.errors import AnalysisError
from analysis.interop.bridge import NORM_HOOKS, FixedIdAdapter, bridge_config
from analysis.engine import names as hooknames

ARCH = "FixedIdLMSplitQKV"


class ForkedAttentionBridge(PositionEmbeddingsAttentionBridge):
    """TL's re-implemented attention, called with FixedIdLM's ``(x, cos, sin, past)`` signature."""

    def forward(self, x, cos, sin, past=None):
        """Attention of ``x`` ``[batch, pos, d_model]`` -> ``[batch, pos, d_model]``, with fixedid's RoPE tables
        (one base: their first head column) passed on as ``position_embeddings``; the signature of
        :meth:`fixedid.model.Attention.forward`. ``past`` is refused (``NotImplementedError``)."""
        if past is not None:
            raise NotImplementedError("the split-qkv bridge runs whole sequences; it takes no past_kv")
        # fixedid's tables are [pos, 1 or n_heads, d_head] (one base here); HF's rotate-half RoPE takes
        # [batch, pos, d_head]
        pe = (cos[:, 0][None].to(x.dtype), sin[:, 0][None].to(x.dtype))
        out = super().forward(hidden_states=x, position_embeddings=pe, attention_mask=None)
        return out[0] if isinstance(out, tuple) else out


class SplitQKVAdapter(FixedIdAdapter):
    """:class:`~analysis.interop.bridge.FixedIdAdapter` with attention mapped onto
    :class:`~analysis.interop.split_bridge.ForkedAttentionBridge`."""

    def __init__(self, cfg):
        super().__init__(cfg)
        attn = ForkedAttentionBridge(name="attn", config=cfg, submodules={
            "q": LinearBridge(name="q_proj"), "k": LinearBridge(name="k_proj"),
            "v": LinearBridge(name="v_proj"), "o": LinearBridge(name="o_proj")})
        self.component_mapping["blocks"].submodules["attn"] = attn


ArchitectureAdapterFactory.register_adapter(ARCH, SplitQKVAdapter)


def to_split_qkv_bridge(model):
    """A TransformerBridge over a structural clone of ``model`` (sharing its tensors) whose attention exposes TL's
    per-head q/k/v input forks; call ``bridge.set_use_split_qkv_input(True)`` (TL's own tools do) to use them.
    TL's attention turns every head by one RoPE table, so a model whose heads have different bases
    (``rope_head_thetas``) is refused."""
    if model.cfg.one_rope_base is None:
        raise AnalysisError(f"the split-qkv bridge turns every head by one RoPE table, but this model's heads have "
                            f"bases {model.cfg.rope_head_thetas}; use analysis's own path patching and edge "
                            "attribution instead")
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers(), [model.tokenizer])}
    clone = copy.deepcopy(model, shared)
    clone.reset_hooks(including_permanent=True)
    for block in clone.blocks:  # the attributes TL's re-implementation reads off an HF attention module
        block.attn.head_dim = block.attn.d_head
        block.attn.num_key_value_groups = block.attn.n_heads // block.attn.n_kv
    cfg = bridge_config(model.cfg)
    cfg.original_architecture = ARCH
    bridge = build_bridge_from_module(clone, ARCH, tl_config=cfg, model_name=model.cfg.name)
    slots = [(hooknames.norm(i, c), getattr(blk, c)) for i, blk in enumerate(bridge.blocks) for c in ("ln1", "ln2")]
    for path, comp in slots + [("ln_final", bridge.ln_final)]:
        for name in NORM_HOOKS:
            hp = getattr(comp.original_component, name)
            setattr(comp, name, hp)
            hp.name = f"{path}.{name}"
            bridge._hook_registry[hp.name] = hp
    object.__setattr__(bridge, "process_weights", _refuse)
    bridge.train(model.training)
    return bridge


def _refuse(*args, **kwargs):
    raise RuntimeError("a FixedIdLM bridge never folds or centres weights (it shares the model's tensors)")


__all__ = ["to_split_qkv_bridge", "ForkedAttentionBridge", "SplitQKVAdapter"]

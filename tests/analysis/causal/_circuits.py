"""Test-sized models for direct logit attribution and path patching, with norm weights and biases drawn away from
their initial values (ones, zeros), so that a mishandled norm weight or bias shows."""

import copy

import torch

from analysis import load
from fixedid import FixedIdLM, ModelConfig, save_checkpoint

from tests._fixtures import word_tokenizer

PAIRS = [
    dict(clean="When Mary and John went to the park , John gave a ball to",
         corrupt="When Mary and John went to the park , Mary gave a ball to", answer="Mary", wrong="John"),
    dict(clean="When John and Mary went to the park , Mary gave a ball to",
         corrupt="When John and Mary went to the park , Anna gave a ball to", answer="John", wrong="Mary"),
    dict(clean="When Anna and John went to the park , John gave a ball to",
         corrupt="When Anna and John went to the park , Anna gave a ball to", answer="Anna", wrong="John"),
]

#: name -> (interface, config changes): RMSNorm without biases; LayerNorm, biases and a GELU MLP; grouped queries;
#: biases and two RoPE bases across the heads (as the tiny recipe has).
KINDS = {"rms": ("canonical", {}), "ln_bias": ("learned", dict(norm="ln", bias=True, mlp="gelu")),
         "gqa": ("gf2", dict(n_kv_heads=2)),
         "rope_heads": ("gf2", dict(bias=True, rope_head_thetas=[30.0, 10000.0, 30.0, 10000.0]))}


def circuit_model(tmp_path_factory, kind: str):
    interface, changes = KINDS[kind]
    cfg = ModelConfig.preset("toy", vocab_size=64, d_model=64, n_layers=3, n_heads=4, d_ff=128, context=32,
                             interface=interface, init_std=0.2, seed=1, **changes)
    path = tmp_path_factory.mktemp("ck") / kind
    save_checkpoint(FixedIdLM(cfg), path, tokenizer=word_tokenizer())
    model = load(path)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "w":
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif leaf in ("b", "bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model


def folded_twin(model):
    """The same function with the final norm's weight folded into the unembedding (what TL's DLA requires); a
    LayerNorm's bias ``b`` becomes ``b / w``, so that the folded unembedding still reads ``W_U b``."""
    twin = copy.deepcopy(model)
    with torch.no_grad():
        w = twin.ln_final.w.clone()
        twin.unembed.weight.mul_(w[None])
        if hasattr(twin.ln_final, "b"):
            twin.ln_final.b.div_(w)
        twin.ln_final.w.fill_(1.0)
    return twin.eval()

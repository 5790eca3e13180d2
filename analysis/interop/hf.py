"""Hugging Face interchange: a fixedid checkpoint as a ``transformers`` Llama directory, and back."""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

from fixedid import FixedIdLM, ModelConfig, load_checkpoint
from fixedid.atomic import write_text_atomic
from fixedid.codes import table_sha256
from fixedid.device import resolve_device

from analysis.errors import AnalysisError
from analysis.interop.codeinfer import CodeInferredWarning, infer_code
from analysis.engine import names as hooknames

FORMAT = "fixedid-hf/1"


def _check_exportable(cfg: ModelConfig) -> None:
    if cfg.norm != "rms" or cfg.mlp != "swiglu":
        raise AnalysisError(f"only RMSNorm + SwiGLU models map exactly onto the Llama layout; this one has norm "
                            f"{cfg.norm!r} and mlp {cfg.mlp!r} (presets gpt2-small and prior-1024 cannot be "
                            "exported)")
    if cfg.one_rope_base != cfg.rope_theta:
        raise AnalysisError(f"this model gives its heads RoPE bases other than rope_theta {cfg.rope_theta} "
                            f"(rope_head_thetas {cfg.rope_head_thetas}); a Llama turns every head by its one base, so "
                            "it cannot be exported")


def _provenance(model) -> dict:
    cfg = model.cfg.resolved()
    rec = {"format": FORMAT, "interface": cfg.interface, "model_config": cfg.to_dict()}
    if cfg.is_fixed:
        code = cfg.recoding()
        rec["code"] = {"kind": cfg.interface, "n_bits": cfg.n_bits,
                       "matrix": None if code is None else code.to_json()["matrix"],
                       "offset": None if code is None else code.to_json()["offset"],
                       "table_sha256": table_sha256(model.embed.code.detach().cpu().numpy())}
    return rec


def _state_pairs(cfg: ModelConfig):
    """(Llama name, fixedid name) of every tensor but the embedding."""
    pairs = [("model.norm.weight", "ln_final.w"), ("lm_head.weight", "unembed.weight")]
    for i in range(cfg.n_layers):
        h, f = f"model.layers.{i}.", hooknames.block(i) + "."
        pairs += [(h + "input_layernorm.weight", f + "ln1.w"), (h + "post_attention_layernorm.weight", f + "ln2.w")]
        for p in ("q", "k", "v", "o"):
            pairs.append((h + f"self_attn.{p}_proj.weight", f + f"attn.{p}_proj.weight"))
            if cfg.bias:
                pairs.append((h + f"self_attn.{p}_proj.bias", f + f"attn.{p}_proj.bias"))
        for p in ("gate", "up", "down"):
            pairs.append((h + f"mlp.{p}_proj.weight", f + f"mlp.{p}_proj.weight"))
            if cfg.bias:
                pairs.append((h + f"mlp.{p}_proj.bias", f + f"mlp.{p}_proj.bias"))
    return pairs


def llama_config(model, eot: int | None = None):
    """The ``transformers.LlamaConfig`` of ``model``'s shape (untied head, ``attention_bias``/``mlp_bias`` from
    ``bias``, ``eot`` as both BOS and EOS id), carrying the ``fixedid`` record of the module docstring. A model with no
    exact Llama form (LayerNorm, GELU, per-head RoPE bases) raises :class:`~analysis.errors.AnalysisError`."""
    from transformers import LlamaConfig

    c = model.cfg
    _check_exportable(c)
    return LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff,
                       num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads, num_key_value_heads=c.kv_heads,
                       head_dim=c.d_head, hidden_act="silu", max_position_embeddings=c.context, rms_norm_eps=c.norm_eps,
                       rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
                       attention_bias=c.bias, mlp_bias=c.bias, tie_word_embeddings=False, bos_token_id=eot,
                       eos_token_id=eot, fixedid=_provenance(model))


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def export_hf(model, out) -> Path:
    """Write ``model`` (a :class:`fixedid.model.FixedIdLM`, loaded or trained, or a checkpoint directory) as a
    ``transformers`` Llama directory ``out`` (built under a temporary name and renamed into place). Returns ``out``."""
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    if isinstance(model, (str, Path)):
        model = load_checkpoint(model)
    if not isinstance(model, FixedIdLM):
        raise AnalysisError(f"export_hf needs a fixedid model or a checkpoint directory, got {type(model).__name__}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise AnalysisError(f"{out} exists and is not empty; export into a new directory")
    eot = None
    if model.tokenizer is not None:
        from fixedid.data.tokenizer import eot_id

        eot = eot_id(model.tokenizer)
    config = llama_config(model, eot)
    state = {"model.embed_tokens.weight": model.input_code(torch.arange(model.cfg.vocab_size, device=_device(model)))}
    state.update({h: _tensor(model, f) for h, f in _state_pairs(model.cfg)})  # a frozen head is a buffer
    with torch.device("meta"):
        hf = LlamaForCausalLM(config)
    hf.load_state_dict({k: v.detach().float().cpu().contiguous() for k, v in state.items()}, assign=True, strict=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with _quiet_transformers():
            hf.save_pretrained(tmp, safe_serialization=True)
        # transformers 5 writes the base only inside rope_parameters; readers of the flat key (transformers 4,
        # serving stacks) would silently fall back to 10,000, so it is written flat as well
        conf = json.loads((tmp / "config.json").read_text())
        conf["rope_theta"] = model.cfg.rope_theta
        write_text_atomic(tmp / "config.json", json.dumps(conf, indent=2, sort_keys=True))
        if model.tokenizer is not None:
            eos = model.tokenizer.id_to_token(eot)
            PreTrainedTokenizerFast(tokenizer_object=model.tokenizer, eos_token=eos, bos_token=eos,
                                    model_max_length=model.cfg.context).save_pretrained(tmp)
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


class _quiet_transformers:
    """transformers' own progress bars off for the duration (a one-file save needs none)."""

    def __enter__(self):
        from transformers.utils import logging

        self.was = logging.is_progress_bar_enabled()
        logging.disable_progress_bar()

    def __exit__(self, *exc):
        from transformers.utils import logging

        if self.was:
            logging.enable_progress_bar()


def _tensor(model, dotted: str) -> torch.Tensor:
    obj = model
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def is_hf_dir(path) -> bool:
    """Whether ``path`` looks like a ``transformers`` model directory: a ``config.json`` with a ``model_type`` and
    no ``meta.json`` (which marks a fixedid checkpoint). Reads only that JSON; an unreadable one is False."""
    path = Path(path)
    if not (path / "config.json").is_file() or (path / "meta.json").exists():
        return False
    try:
        return "model_type" in json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False


def _read_state(path: Path) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise AnalysisError(f"{path} has no model.safetensors (export with safe serialization)")
    state = {}
    for f in files:
        try:
            state.update(load_file(str(path / f)))
        except (SafetensorError, OSError, ValueError) as e:
            raise AnalysisError(f"{path / f} cannot be read as safetensors ({e}); the file is truncated or "
                                "corrupted") from None
    return state


def _rope(conf: dict) -> dict:
    """The RoPE settings of a Llama config: transformers 5's ``rope_parameters``, else the flat ``rope_theta``
    (refused where the two disagree)."""
    rope = conf.get("rope_parameters") or {"rope_theta": conf.get("rope_theta", 10000.0)}
    if "rope_theta" in conf and float(conf["rope_theta"]) != float(rope.get("rope_theta", conf["rope_theta"])):
        raise AnalysisError(f"config.json gives rope_theta {conf['rope_theta']} but rope_parameters "
                            f"{rope.get('rope_theta')}; fix the one that is wrong")
    return rope


def _hf_config(path: Path) -> dict:
    """``config.json`` of a Llama directory, refused in one line unless it maps onto fixedid's layout."""
    if not is_hf_dir(path):
        raise AnalysisError(f"{path} is not a Hugging Face model directory (no config.json with a model_type)")
    conf = json.loads((path / "config.json").read_text())
    if conf.get("model_type") != "llama":
        raise AnalysisError(f"{path} holds a {conf.get('model_type')!r} model; only the Llama layout (RMSNorm, "
                            "SwiGLU, RoPE) maps onto fixedid")
    needed = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "max_position_embeddings", "rms_norm_eps")
    bad = [k for k in needed if isinstance(conf.get(k), bool) or not isinstance(conf.get(k), (int, float))
           or conf[k] <= 0]
    if bad:
        raise AnalysisError(f"{path}/config.json lacks (or has a non-positive) {', '.join(bad)}; a Llama config "
                            "names every dimension of the model")
    heads = conf["num_attention_heads"]
    head_dim = conf.get("head_dim") or conf["hidden_size"] // heads
    if head_dim * heads != conf["hidden_size"] or conf.get("hidden_act", "silu") != "silu":
        raise AnalysisError(f"{path}: head_dim x heads must equal hidden_size and the activation be silu to fit "
                            "fixedid's attention and SwiGLU")
    if conf.get("attention_bias", False) != conf.get("mlp_bias", False):
        raise AnalysisError(f"{path}: attention_bias and mlp_bias differ; fixedid has one bias switch for both")
    rope = _rope(conf)
    if rope.get("rope_type", "default") != "default":
        raise AnalysisError(f"{path}: rope_type {rope.get('rope_type')!r} is not plain RoPE")
    return conf


def _model_config(path: Path, conf: dict) -> ModelConfig:
    """The recorded fixedid config (checked against the Llama shape), or a learned-interface config of that shape."""
    heads = conf["num_attention_heads"]
    rope = _rope(conf)
    shape = dict(vocab_size=conf["vocab_size"], d_model=conf["hidden_size"], n_layers=conf["num_hidden_layers"],
                 n_heads=heads, n_kv_heads=conf.get("num_key_value_heads", heads), d_ff=conf["intermediate_size"],
                 context=conf["max_position_embeddings"], norm_eps=conf["rms_norm_eps"],
                 rope_theta=float(rope["rope_theta"]), bias=bool(conf.get("attention_bias", False)))
    rec = conf.get("fixedid")
    if rec is None:
        return ModelConfig(**shape, interface="learned", norm="rms", mlp="swiglu", name="hf-import")
    cfg = ModelConfig.from_dict(rec["model_config"])
    mismatch = [k for k, v in shape.items() if (cfg.kv_heads if k == "n_kv_heads" else getattr(cfg, k)) != v]
    if mismatch:
        raise AnalysisError(f"{path}: the Llama shape and the recorded fixedid config disagree on {mismatch}")
    return cfg


def _copy_backbone(model, path: Path, state: dict, tied: bool) -> None:
    """The backbone and head tensors of ``state`` into ``model``; a frozen output head must equal its config's."""
    cfg = model.cfg
    want = {h for h, _ in _state_pairs(cfg)} | {"model.embed_tokens.weight"}
    missing = sorted(want - set(state))
    if "lm_head.weight" in missing and tied:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
        missing.remove("lm_head.weight")
    if missing:
        raise AnalysisError(f"{path}: tensors missing for a fixedid model: {missing[:4]}{' ...' * (len(missing) > 4)}")
    own = dict(model.named_parameters())
    for h, f in _state_pairs(cfg):
        want_shape = tuple(_tensor(model, f).shape)
        if tuple(state[h].shape) != want_shape:
            raise AnalysisError(f"{path}: {h} has shape {tuple(state[h].shape)}, fixedid expects {want_shape}")
        if f in own:
            own[f].copy_(state[h].to(own[f].dtype))
        elif not torch.equal(state[h].cpu(), _tensor(model, f).cpu().to(state[h].dtype)):  # the frozen output head
            raise AnalysisError(f"{path}: {h} is not the fixed output head its config names (output = 'code' or 'random')")


def _set_input(model, path: Path, emb: torch.Tensor, rec: dict | None) -> None:
    """A learned table takes the embedding; a fixed code must be exactly the table its config names, in the dtype the
    embedding is stored in (a code inferred from the embedding, without a record, was verified by
    :func:`~analysis.interop.codeinfer.infer_code` to that dtype's rounding)."""
    cfg = model.cfg
    if not cfg.is_fixed:
        dict(model.named_parameters())["embed.W_E"].copy_(emb)
        return
    if rec is None:
        return
    table = model.input_code(torch.arange(cfg.vocab_size, device=_device(model))).float().cpu()
    sha = table_sha256(model.embed.code.detach().cpu().numpy())
    if rec.get("code", {}).get("table_sha256") not in (None, sha):
        raise AnalysisError(f"{path}: the recorded code table hash does not match the code its config names")
    if emb.shape != table.shape or not torch.equal(emb, table.to(emb.dtype)):
        diff = (emb.float() - table).abs().max().item() if emb.shape == table.shape else float("nan")
        raise AnalysisError(f"{path}: the embedding is not the {cfg.interface} code table its config names (max "
                            f"difference {diff:.3g}); it was changed after export, so import it without the "
                            "fixedid record to study it as a learned-interface model")


def _inferred_config(path: Path, cfg: ModelConfig, state: dict):
    """A record-less directory's config: the code its embedding rows are, when they are one (announced)."""
    emb = state.get("model.embed_tokens.weight")
    if emb is None:
        return cfg, None
    found = infer_code(emb)
    if not found:
        return cfg, found
    warnings.warn(f"{path}: config.json has no fixedid record, but its embedding rows are exactly "
                  f"{found.describe()}; imported as a fixed-code {found.kind} model (the code in a buffer, not a "
                  "learned table). Import with infer=False (import-hf --no-infer) to study the rows as a learned "
                  "table", CodeInferredWarning, stacklevel=3)
    return found.apply(cfg), found


@torch.no_grad()
def import_hf(path, *, device="cpu", model_class: type = FixedIdLM, infer: bool = True):
    """A ``transformers`` Llama directory as a ``model_class`` (a :class:`fixedid.model.FixedIdLM` or subclass): with
    the ``fixedid`` record of :func:`~analysis.interop.hf.export_hf`, the fixed-code model it came from (its embedding
    checked against the code table); without it, the fixed-code model its embedding rows are when
    :func:`~analysis.interop.codeinfer.infer_code` recognises a code in them (with a
    :class:`~analysis.interop.codeinfer.CodeInferredWarning`; not with ``infer=False``), else a learned-interface model
    of the same shape."""
    path = Path(path)
    conf = _hf_config(path)
    cfg = _model_config(path, conf)
    state = _read_state(path)
    rec, found = conf.get("fixedid"), None
    if rec is None and infer:
        cfg, found = _inferred_config(path, cfg, state)
    model = model_class(cfg, init=False).to(resolve_device(device))
    _copy_backbone(model, path, state, bool(conf.get("tie_word_embeddings")))
    _set_input(model, path, state["model.embed_tokens.weight"], rec)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        model.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    model.meta = {"imported_from": str(path), "fixedid": rec,
                  "inferred_code": None if found is None else found.to_dict()}
    return model.eval()


__all__ = ["export_hf", "import_hf", "is_hf_dir", "llama_config"]

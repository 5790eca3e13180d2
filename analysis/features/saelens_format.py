"""Sparse dictionaries on disk in SAELens's layout: a folder with ``cfg.json`` and ``sae_weights.safetensors``."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from fixedid.atomic import atomic_path, write_text_atomic

from analysis.errors import AnalysisError
from analysis.features.dictionary import DictionaryConfig, SparseDictionary, dictionary_class

CFG = "cfg.json"
WEIGHTS = "sae_weights.safetensors"
LAYOUT_VERSION = "6.54.0"


def saelens_architecture(cfg: DictionaryConfig) -> str:
    """The ``architecture`` SAELens names a dictionary of this kind and latent function."""
    family = dictionary_class(cfg.arch).saelens_family
    if cfg.kind == "sae":
        return family or "standard"
    skip = "skip_" if cfg.kind == "skip-transcoder" else ""
    prefix = f"{family}_" if family else ""
    return f"{prefix}{skip}transcoder"


def saelens_config(d: SparseDictionary, *, model_name: str = "") -> dict:
    """The ``cfg.json`` of ``d`` (see the module docstring)."""
    cfg = d.cfg
    out = {"architecture": saelens_architecture(cfg), "d_in": cfg.d_in, "d_sae": cfg.d_sae,
           "dtype": str(d.W_enc.dtype).removeprefix("torch."), "device": "cpu",
           "apply_b_dec_to_input": cfg.reads_minus_b_dec, "normalize_activations": "none",
           "reshape_activations": "none", "hook_name": cfg.hook_name,
           "metadata": {"sae_lens_version": LAYOUT_VERSION, "sae_lens_training_version": LAYOUT_VERSION,
                        "hook_name": cfg.hook_name, "model_name": model_name, "fixedid": cfg.to_dict()}}
    if cfg.kind != "sae":
        out["d_out"] = cfg.d_out
        out["metadata"]["hook_name_out"] = cfg.hook_name_out
    out.update(d.saelens_config_fields())
    return out


def state_dict(d: SparseDictionary) -> dict[str, torch.Tensor]:
    """The SAELens-named weights of ``d`` (contiguous CPU copies)."""
    tensors = {"W_enc": d.W_enc, "b_enc": d.b_enc, "W_dec": d.W_dec, "b_dec": d.b_dec}
    if d.W_skip is not None:
        tensors["W_skip"] = d.W_skip
    thr = d.inference_threshold()
    if thr is not None:
        tensors["threshold"] = thr
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}


def save_dictionary(d: SparseDictionary, path, *, model_name: str = "") -> Path:
    """Write ``d`` into the folder ``path`` (created) in SAELens's layout; each file is written to a temporary name
    and renamed, the weights first, so a reader never sees a config without its weights."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with atomic_path(path / WEIGHTS) as tmp:
        save_file(state_dict(d), str(tmp))
    write_text_atomic(path / CFG, json.dumps(saelens_config(d, model_name=model_name), indent=1))
    return path


def load_dictionary(path, *, device=None, hook_name_out: str | None = None) -> SparseDictionary:
    """A dictionary from a folder in SAELens's layout (one written by :func:`save_dictionary`, or SAELens's own
    ``topk``, ``jumprelu``, ``standard`` and transcoder dictionaries; ``hook_name_out`` names the hook a transcoder
    predicts when its config does not)."""
    path = Path(path)
    if not (path / CFG).is_file() or not (path / WEIGHTS).is_file():
        raise AnalysisError(f"{path} is not a dictionary folder: it needs {CFG} and {WEIGHTS}")
    raw = json.loads((path / CFG).read_text())
    w = load_file(str(path / WEIGHTS))
    missing = [k for k in ("W_enc", "b_enc", "W_dec", "b_dec") if k not in w]
    if missing:
        raise AnalysisError(f"{path / WEIGHTS} lacks {', '.join(missing)}")
    meta = raw.get("metadata") or {}
    own = meta.get("fixedid")
    if own:
        cfg = DictionaryConfig(**own)
    else:
        cfg = _config_from_saelens(raw, meta, hook_name_out)
    d = SparseDictionary.from_config(cfg, device=device, dtype=w["W_enc"].dtype)
    d.load_weights(w)
    return d


def _config_from_saelens(raw: dict, meta: dict, hook_name_out: str | None) -> DictionaryConfig:
    arch = raw.get("architecture", "")
    known = {"topk": ("sae", "topk"), "standard": ("sae", "relu"), "jumprelu": ("sae", "jumprelu"),
             "transcoder": ("transcoder", "relu"), "skip_transcoder": ("skip-transcoder", "relu"),
             "jumprelu_transcoder": ("transcoder", "jumprelu"),
             "jumprelu_skip_transcoder": ("skip-transcoder", "jumprelu"),
             "topk_transcoder": ("transcoder", "topk"), "topk_skip_transcoder": ("skip-transcoder", "topk")}
    if arch not in known:
        raise AnalysisError(f"architecture {arch!r} is not one this toolkit reads ({', '.join(known)})")
    kind, a = known[arch]
    if raw.get("normalize_activations", "none") != "none":
        raise AnalysisError(f"normalize_activations={raw['normalize_activations']!r} is not supported")
    out = meta.get("hook_name_out") or hook_name_out
    if kind != "sae" and not out:
        raise AnalysisError(f"{arch} names no hook_name_out in its metadata: pass the hook it predicts "
                            "(load_dictionary(..., hook_name_out=...))")
    return DictionaryConfig(kind=kind, arch=a, d_in=int(raw["d_in"]), d_sae=int(raw["d_sae"]),
                            d_out=int(raw.get("d_out", raw["d_in"])),
                            hook_name=meta.get("hook_name") or raw.get("hook_name", ""),
                            hook_name_out=None if kind == "sae" else out,
                            k=int(raw.get("k", 32)))

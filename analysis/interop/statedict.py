"""Import a checkpoint of another layout: its state dict, a key map, and a :class:`fixedid.config.ModelConfig`."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from fixedid import FixedIdLM, ModelConfig
from fixedid.config import PRESETS
from fixedid.train.config import preset_of
from fixedid.device import resolve_device

from analysis.errors import AnalysisError
from analysis.interop.codeinfer import CodeInferredWarning, default_rtol, infer_code

#: Our name for the input rows, a key map entry whatever the interface.
INPUT = "embed.W_E"
RULES = ("key", "stacked", "transpose", "chunk", "rows", "reshape")


@dataclass(frozen=True)
class Rule:
    """Where one of our tensors comes from: their ``key`` and the rules applied to it (see the module docstring)."""

    key: str
    stacked: bool = False
    transpose: bool = False
    chunk: tuple[int, int] | None = None
    rows: tuple[int, int] | None = None
    reshape: bool = False


# --------------------------------------------------------------------------------------------------------------
# reading


def _tensors(obj, where: str) -> dict:
    if isinstance(obj, dict):
        for inner in ("state_dict", "model"):
            if isinstance(obj.get(inner), dict) and not isinstance(obj.get(inner), torch.Tensor):
                obj = obj[inner]
                break
    if not isinstance(obj, dict) or not obj:
        raise AnalysisError(f"{where} holds no dict of tensors (a state dict, or one under 'state_dict' or 'model')")
    bad = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise AnalysisError(f"{where}: {bad[:3]} are not tensors; give the state dict itself")
    return dict(obj)


def _load_file(path: Path) -> dict:
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as e:
            raise AnalysisError(f"{path} cannot be read as safetensors ({e})") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle and zip errors come in many types
        raise AnalysisError(f"{path} cannot be read as a torch state dict ({type(e).__name__}: {e}); give a "
                            ".safetensors file or a torch.save of a dict of tensors") from None
    return _tensors(obj, str(path))


def read_state_dict(path) -> dict[str, torch.Tensor]:
    """Every tensor of a ``.safetensors`` file, a torch file, or a directory of shards (an index's, else all
    ``*.safetensors``, else all ``*.bin``/``*.pt``), by name, on the CPU, in their stored dtypes."""
    path = Path(path)
    if path.is_file():
        return _load_file(path)
    if not path.is_dir():
        raise AnalysisError(f"{path} does not exist; give a state dict file or a directory of shards")
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (path / index).is_file():
            files = sorted(set(json.loads((path / index).read_text())["weight_map"].values()))
            break
    else:
        files = sorted(p.name for p in path.glob("*.safetensors")) or \
            sorted(p.name for p in [*path.glob("*.bin"), *path.glob("*.pt"), *path.glob("*.pth")])
    if not files:
        raise AnalysisError(f"{path} holds no .safetensors, .bin or .pt files")
    state = {}
    for f in files:
        part = _load_file(path / f)
        clash = set(part) & set(state)
        if clash:
            raise AnalysisError(f"{path}: {sorted(clash)[:3]} appear in more than one shard")
        state.update(part)
    return state


def _rule(ours: str, value) -> Rule:
    if isinstance(value, str):
        return Rule(value)
    if not isinstance(value, dict) or not isinstance(value.get("key"), str):
        raise AnalysisError(f"key map entry {ours!r}: give their tensor's name, or a table with 'key' and rules")
    unknown = set(value) - set(RULES)
    if unknown:
        raise AnalysisError(f"key map entry {ours!r}: unknown rule(s) {sorted(unknown)}; known: {list(RULES)}")
    for flag in ("stacked", "transpose", "reshape"):
        if not isinstance(value.get(flag, False), bool):
            raise AnalysisError(f"key map entry {ours!r}: {flag} must be true or false")
    pairs = {}
    for name in ("chunk", "rows"):
        v = value.get(name)
        if v is not None and not (isinstance(v, (list, tuple)) and len(v) == 2 and
                                  all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in v)):
            raise AnalysisError(f"key map entry {ours!r}: {name} must be two non-negative integers, got {v!r}")
        pairs[name] = None if v is None else tuple(v)
    if pairs["chunk"] and not pairs["chunk"][0] < pairs["chunk"][1]:
        raise AnalysisError(f"key map entry {ours!r}: chunk [index, count] needs index < count")
    if pairs["rows"] and not pairs["rows"][0] < pairs["rows"][1]:
        raise AnalysisError(f"key map entry {ours!r}: rows [start, stop] needs start < stop")
    return Rule(value["key"], value.get("stacked", False), value.get("transpose", False), pairs["chunk"],
                pairs["rows"], value.get("reshape", False))


def read_key_map(spec) -> tuple[dict[str, Rule], list[str]]:
    """A key map (dict, or a ``.json``/``.toml`` file) as ``({our name: Rule}, ignore patterns)``."""
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        if not path.is_file():
            raise AnalysisError(f"key map {path} does not exist")
        try:
            spec = tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
            raise AnalysisError(f"key map {path} is not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {e}") \
                from None
    if not isinstance(spec, dict):
        raise AnalysisError(f"a key map is a table {{'keys': {{ours: theirs}}, 'ignore': [...]}}, got "
                            f"{type(spec).__name__}")
    spec = dict(spec)
    ignore = spec.pop("ignore", [])
    if "keys" in spec:
        keys = spec.pop("keys")
        if spec:
            raise AnalysisError(f"unknown key map table(s) {sorted(spec)}; a key map has 'keys' and 'ignore'")
    else:
        keys = spec
    if not isinstance(keys, dict) or not keys:
        raise AnalysisError("the key map names no tensors ('keys' is empty)")
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        raise AnalysisError("the key map's 'ignore' must be a list of name patterns")
    return {ours: _rule(ours, v) for ours, v in keys.items()}, ignore


def read_model_config(spec) -> ModelConfig:
    """A :class:`~fixedid.config.ModelConfig` from a preset name, or a JSON/TOML file: a full config, or a ``preset``
    with overrides (at the top level or in a ``[model]`` table, as a training config writes it)."""
    if isinstance(spec, ModelConfig):
        return spec
    if isinstance(spec, str) and spec in PRESETS:
        return ModelConfig.preset(spec)
    path = Path(spec)
    if not path.is_file():
        raise AnalysisError(f"--config {spec!r} is neither a preset ({', '.join(sorted(PRESETS))}) nor a file")
    try:
        d = tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise AnalysisError(f"model config {path} cannot be parsed: {e}") from None
    if isinstance(d, dict) and isinstance(d.get("model"), dict):
        d = d["model"]
    if not isinstance(d, dict):
        raise AnalysisError(f"model config {path} must hold a table of ModelConfig fields")
    d = dict(d)
    if "preset" not in d:
        return ModelConfig.from_dict(d)
    return ModelConfig.preset(preset_of(d), **{k: v for k, v in d.items() if k != "preset"})


# --------------------------------------------------------------------------------------------------------------
# mapping


def _expand(keys: dict[str, Rule], n_layers: int) -> dict[str, tuple[Rule, int | None]]:
    """Every one of our names the key map covers, with its rule and block index (``{i}`` expanded)."""
    out = {}
    for ours, rule in keys.items():
        if ("{i}" in rule.key or rule.stacked) and "{i}" not in ours:
            raise AnalysisError(f"key map entry {ours!r}: {{i}} in their name, or stacked, needs {{i}} in ours")
        for i in range(n_layers) if "{i}" in ours else [None]:
            name = ours if i is None else ours.replace("{i}", str(i))
            if name in out:
                raise AnalysisError(f"key map names {name!r} twice")
            out[name] = (rule if i is None else dataclasses.replace(rule, key=rule.key.replace("{i}", str(i))), i)
    return out


def _fetch(state: dict, ours: str, rule: Rule, block: int | None, shape: tuple) -> torch.Tensor:
    if rule.key not in state:
        raise AnalysisError(f"{ours}: their tensor {rule.key!r} is not in the state dict (it has e.g. "
                            f"{sorted(state)[:3]})")
    t, did = state[rule.key], []
    if rule.stacked:
        if t.dim() < 1 or t.shape[0] <= block:
            raise AnalysisError(f"{ours}: {rule.key!r} {tuple(t.shape)} has no block {block} along dim 0 (stacked)")
        t = t[block]
        did.append(f"block {block}")
    if rule.transpose:
        if t.dim() < 2:
            raise AnalysisError(f"{ours}: {rule.key!r} is {tuple(t.shape)}; transpose needs two dims")
        t = t.transpose(-1, -2)
        did.append("transpose")
    if rule.chunk is not None:
        index, count = rule.chunk
        if t.dim() < 1 or t.shape[0] % count:
            raise AnalysisError(f"{ours}: {rule.key!r} {tuple(t.shape)} does not split into {count} equal parts "
                                "along dim 0")
        size = t.shape[0] // count
        t = t[index * size:(index + 1) * size]
        did.append(f"chunk {index}/{count}")
    if rule.rows is not None:
        start, stop = rule.rows
        if t.dim() < 1 or stop > t.shape[0]:
            raise AnalysisError(f"{ours}: {rule.key!r} {tuple(t.shape)} has no rows {start}:{stop}")
        t = t[start:stop]
        did.append(f"rows {start}:{stop}")
    if rule.reshape:
        if t.numel() != torch.Size(shape).numel():
            raise AnalysisError(f"{ours}: {rule.key!r} has {t.numel()} entries, ours {torch.Size(shape).numel()}; "
                                "reshape keeps the count")
        t = t.reshape(shape)
    if tuple(t.shape) != tuple(shape):
        after = f" after {', '.join(did)}" if did else ""
        raise AnalysisError(f"{ours}: {rule.key!r} is {tuple(t.shape)}{after}, ours is {tuple(shape)} (a transpose, "
                            "chunk, rows or reshape rule?)")
    return t


def _names(cfg: ModelConfig) -> dict[str, tuple]:
    """Our parameter (and frozen head) names and shapes for ``cfg``, from a model on the meta device."""
    with torch.device("meta"):
        m = FixedIdLM(cfg, init=False)
    out = {k: tuple(p.shape) for k, p in m.named_parameters()}
    if cfg.output != "learned":
        out["unembed.weight"] = (cfg.vocab_size, cfg.d_model)
    return out


def _check_rows(model, rows: torch.Tensor) -> None:
    """Rows mapped onto a fixed-code model must be its table (widened, or the bare code) to their dtype's rounding."""
    cfg = model.cfg
    ids = torch.arange(cfg.vocab_size, device=model.embed.code.device)
    if cfg.has_code and tuple(rows.shape) == (cfg.vocab_size, cfg.n_bits):
        table = model.embed.code.detach()
    elif tuple(rows.shape) == (cfg.vocab_size, cfg.d_model):
        table = model.input_code(ids).detach()
    else:
        raise AnalysisError(f"{INPUT}: the rows are {tuple(rows.shape)}; a {cfg.interface} model reads "
                            f"[{cfg.vocab_size}, {cfg.d_model}] (or the bare [{cfg.vocab_size}, {cfg.n_bits}] code)")
    table = table.double().cpu()
    scale = float(table.abs().max())
    dev = float((rows.double().cpu() - table).abs().max()) / scale
    if dev > default_rtol(rows.dtype):
        raise AnalysisError(f"{INPUT}: the rows are not the {cfg.interface} code table the config names (off by "
                            f"{dev:.3g} of its scale); fix the config's code fields, or give a learned config to "
                            "have the code inferred from the rows")


def _check_targets(mapping: dict, names: dict) -> None:
    """Every key the map names is one of our parameters (or the frozen head)."""
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise AnalysisError(f"key map names {unknown[:3]}, which this config's model does not have; ours are e.g. "
                            f"{sorted(names)[:4]} (model.state_dict() lists them)")


def _input_rows(state: dict, mapping: dict, cfg: ModelConfig, names: dict, source: str, infer: bool):
    """``(rows, found, cfg)``: their input rows (None where the map has none), the code :func:`infer_code` found in
    them (learned configs with ``infer`` only) and the config, a fixed-code one where a code was found."""
    rows, found = None, None
    if INPUT in mapping:
        rule, _ = mapping[INPUT]
        raw = state.get(rule.key)
        bare = cfg.has_code and raw is not None and raw.dim() == 2 and raw.shape[-1] == cfg.n_bits != cfg.d_model
        rows = _fetch(state, INPUT, rule, None, (cfg.vocab_size, cfg.n_bits) if bare else names[INPUT])
        if not cfg.is_fixed and infer:
            found = infer_code(rows)
            if found:
                warnings.warn(f"{source}: its input rows ({rule.key}) are exactly {found.describe()}; imported as a "
                              f"fixed-code {found.kind} model (the code in a buffer, not a learned table). Import "
                              "with infer=False (--no-infer) to study the rows as a learned table",
                              CodeInferredWarning, stacklevel=4)
                cfg = found.apply(cfg)
    return rows, found, cfg


def _copy_weights(model, cfg: ModelConfig, state: dict, mapping: dict, rows) -> None:
    """Copy their tensors into ``model``'s parameters; input rows and a frozen output head that are not parameters
    must equal ours."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(mapping))
    if missing:
        raise AnalysisError(f"the key map does not say where {len(missing)} of our parameters come from: "
                            f"{missing[:4]}{' ...' * (len(missing) > 4)}")
    for ours, (rule, block) in mapping.items():
        if ours == INPUT:
            if INPUT in params:
                params[INPUT].copy_(rows.to(params[INPUT].dtype))
            else:
                _check_rows(model, rows)
        elif ours in params:
            params[ours].copy_(_fetch(state, ours, rule, block, tuple(params[ours].shape)).to(params[ours].dtype))
        else:  # a frozen output head, recomputed from the config: theirs must be it
            head = model.unembed.weight
            theirs = _fetch(state, ours, rule, block, tuple(head.shape))
            dev = float((theirs.double().cpu() - head.double().cpu()).abs().max() / head.abs().max())
            if dev > default_rtol(theirs.dtype):
                raise AnalysisError(f"unembed.weight: {rule.key!r} is not the frozen output head (output = "
                                    f"{cfg.output!r}) the config names")


def _check_unused(state: dict, mapping: dict, ignore: list[str], strict: bool) -> None:
    """With ``strict``, every tensor of theirs is mapped or ignored."""
    used = {r.key for r, _ in mapping.values()}
    unused = sorted(k for k in set(state) - used if not any(fnmatch.fnmatchcase(k, p) for p in ignore))
    if unused and strict:
        raise AnalysisError(f"{len(unused)} tensor(s) of the state dict are neither mapped nor ignored: "
                            f"{unused[:4]}{' ...' * (len(unused) > 4)}; map them, or add a pattern to the key map's "
                            "'ignore'")


def _tokenizer(tokenizer, cfg: ModelConfig):
    """``tokenizer`` (a path read as a tokenizer.json), checked to fit the model's vocabulary; None stays None."""
    if tokenizer is not None:
        if isinstance(tokenizer, (str, Path)):
            from tokenizers import Tokenizer

            try:
                tokenizer = Tokenizer.from_file(str(tokenizer))
            except Exception as e:  # tokenizers raises its own Exception type
                raise AnalysisError(f"{tokenizer} cannot be read as a tokenizers tokenizer.json ({e})") from None
        if tokenizer.get_vocab_size(with_added_tokens=True) > cfg.vocab_size:
            raise AnalysisError(f"the tokenizer has {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, more "
                                f"than the model's vocabulary of {cfg.vocab_size}")
    return tokenizer


@torch.no_grad()
def import_state_dict(state, key_map, config, *, device="cpu", model_class: type = FixedIdLM, infer: bool = True,
                      strict: bool = True, tokenizer=None):
    """A checkpoint of another layout as a ``model_class`` (a :class:`fixedid.model.FixedIdLM` or subclass) of
    ``config``.

    ``state``: a dict of tensors or a path (:func:`~analysis.interop.statedict.read_state_dict`); ``key_map``: a dict or
    a JSON/TOML path (:func:`~analysis.interop.statedict.read_key_map`); ``config``: a
    :class:`~fixedid.config.ModelConfig`, a preset name or a config file
    (:func:`~analysis.interop.statedict.read_model_config`). ``infer``: recognise a code in learned-config input rows
    (the module docstring); ``strict=False`` lets tensors of theirs go unused; ``tokenizer``: a ``tokenizers.Tokenizer``
    or a tokenizer.json path to attach. ``model.meta`` records the source, the key map and what
    :func:`~analysis.interop.codeinfer.infer_code` found."""
    source = str(state) if isinstance(state, (str, Path)) else "a state dict"
    state = read_state_dict(state) if isinstance(state, (str, Path)) else _tensors(state, "the state")
    cfg = read_model_config(config)
    keys, ignore = read_key_map(key_map)
    mapping = _expand(keys, cfg.n_layers)
    names = _names(cfg) | {INPUT: (cfg.vocab_size, cfg.d_model)}
    _check_targets(mapping, names)
    rows, found, cfg = _input_rows(state, mapping, cfg, names, source, infer)
    model = model_class(cfg, init=False).to(resolve_device(device))
    _copy_weights(model, cfg, state, mapping, rows)
    _check_unused(state, mapping, ignore, strict)
    model.tokenizer = _tokenizer(tokenizer, cfg)
    model.meta = {"imported_from": source, "key_map": {k: dataclasses.asdict(r) for k, r in keys.items()},
                  "inferred_code": None if found is None else found.to_dict()}
    return model.eval()


__all__ = ["Rule", "import_state_dict", "read_key_map", "read_model_config", "read_state_dict"]

"""``import-hf``: a Hugging Face Llama directory, or a state dict of another layout with a key map and a model
config, back into a fixedid checkpoint (:mod:`analysis.interop.hf`, :mod:`analysis.interop.statedict`)."""

from __future__ import annotations

from pathlib import Path

from analysis.errors import AnalysisError
from analysis.specs.base import Param, Result, Spec

SOURCE = "source (one of)"


def check(params: dict) -> None:
    if (params["hf"] is None) == (params["state"] is None):
        raise AnalysisError("give --hf DIR or --state FILE (one of them)")
    if Path(params["out"]).exists():
        raise AnalysisError(f"{params['out']} exists; import into a new directory")
    if params["hf"] is not None and (params["key_map"] or params["config"] or params["tokenizer"]):
        raise AnalysisError("--key-map, --config and --tokenizer go with --state; a Hugging Face directory carries "
                            "its own config and tokenizer")
    if params["state"] is not None and (not params["key_map"] or not params["config"]):
        raise AnalysisError("--state needs --key-map (their tensor names for ours) and --config (the model's shape), "
                            "e.g. --config prior-1024")


def convert(*, hf, state, key_map, config, tokenizer, no_infer, out) -> Result:
    """Read the source and save it as a checkpoint at ``out``."""
    from fixedid import save_checkpoint

    if hf is not None:
        from analysis.interop.hf import import_hf

        model, source = import_hf(hf, infer=not no_infer), hf
    else:
        from analysis.interop.statedict import import_state_dict, read_model_config

        model = import_state_dict(state, key_map, read_model_config(config), infer=not no_infer, tokenizer=tokenizer)
        source = state
    found = model.meta.get("inferred_code")
    meta = {"imported_from": str(source)} | ({"inferred_code": found} if found else {})
    path = save_checkpoint(model, out, tokenizer=model.tokenizer, **meta)
    how = (" (the code inferred from its input rows)" if found and found["kind"] else
           f" (its input rows are not a code: {found['reason']})" if found else "")
    return Result(summary=f"wrote {path}: a fixedid checkpoint ({model.cfg.interface} interface{how}) from {source}")


SPEC = Spec(
    name="import-hf", group="interop", models="none", outputs=False,
    help="read a Hugging Face Llama directory (or a state dict plus a key map) back into a fixedid checkpoint",
    examples="""
  fixedid-analyze export-hf --ckpt runs/small/gf2 --out hf/small-gf2
  fixedid-analyze import-hf --hf hf/small-gf2 --out runs/gf2-back
""",
    params=(
        Param("hf", None, "a Hugging Face model directory (config.json, model.safetensors)", metavar="DIR",
              group=SOURCE),
        Param("state", None, "a state dict of another layout: a .safetensors file, a torch file (.pt, .bin), or a "
              "directory of them (needs --key-map and --config)", metavar="PATH", group=SOURCE),
        Param("key_map", None, "with --state: a JSON or TOML file mapping fixedid parameter names to the state dict's "
              "(see analysis.interop.statedict)", metavar="FILE"),
        Param("config", None, "with --state: the model's shape and interface: a preset name (prior-1024), a JSON "
              "ModelConfig, or a TOML/JSON file whose [model] table names a preset and overrides"),
        Param("tokenizer", None, "with --state: a tokenizers tokenizer.json to store with the checkpoint",
              metavar="FILE"),
        Param("no_infer", False, "do not look for a code in the input rows: without a record they are a learned "
              "table", switch=True),
        Param("out", None, "the new checkpoint directory (refused when it exists)", required=True, metavar="DIR")),
    compute=convert, check=check,
    library=("analysis.interop.hf:import_hf",),
)


__all__ = ["SPEC", "convert"]

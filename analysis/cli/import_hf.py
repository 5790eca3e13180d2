"""``fixedid-analyze import-hf``: a Hugging Face Llama directory, or a state dict of another layout with a key map and
a model config, back into a fixedid checkpoint.

    fixedid-analyze import-hf --hf hf/tiny-gf2 --out runs/gf2-back
    fixedid-analyze import-hf --state model.safetensors --key-map keys.toml --config prior-1024 --out runs/prior

A directory or state dict whose input rows are exactly a code (and that no fixedid record describes) is imported as
that fixed-code interface; a one-line ``fixedid-analyze: warning: ...`` says which code was recognised.
``--no-infer`` imports such rows as a learned table instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.errors import AnalysisError

HELP = "read a Hugging Face Llama directory (or a state dict plus a key map) back into a fixedid checkpoint"
EXAMPLES = """
  fixedid-analyze export-hf --ckpt runs/small/gf2 --out hf/small-gf2
  fixedid-analyze import-hf --hf hf/small-gf2 --out runs/gf2-back
"""


def add_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", help="a Hugging Face model directory (config.json, model.safetensors)")
    src.add_argument("--state", help="a state dict of another layout: a .safetensors file, a torch file (.pt, .bin), "
                                     "or a directory of them (needs --key-map and --config)")
    p.add_argument("--key-map", help="with --state: a JSON or TOML file mapping fixedid parameter names to the state "
                                     "dict's (see analysis.interop.statedict)")
    p.add_argument("--config", help="with --state: the model's shape and interface: a preset name (prior-1024), a "
                                    "JSON ModelConfig, or a TOML/JSON file whose [model] table names a preset and "
                                    "overrides")
    p.add_argument("--tokenizer", help="with --state: a tokenizers tokenizer.json to store with the checkpoint")
    p.add_argument("--no-infer", action="store_true",
                   help="do not look for a code in the input rows: without a record they are a learned table")
    p.add_argument("--out", required=True, metavar="DIR", help="the new checkpoint directory (refused when it "
                   "exists)")


def run(args) -> int:
    from fixedid import save_checkpoint

    if Path(args.out).exists():
        raise AnalysisError(f"{args.out} exists; import into a new directory")
    if args.hf is not None:
        if args.key_map or args.config or args.tokenizer:
            raise AnalysisError("--key-map, --config and --tokenizer go with --state; a Hugging Face directory "
                                "carries its own config and tokenizer")
        from analysis.interop.hf import import_hf

        model, source = import_hf(args.hf, infer=not args.no_infer), args.hf
    else:
        if not args.key_map or not args.config:
            raise AnalysisError("--state needs --key-map (their tensor names for ours) and --config (the model's "
                                "shape), e.g. --config prior-1024")
        from analysis.interop.statedict import import_state_dict, read_model_config

        model = import_state_dict(args.state, args.key_map, read_model_config(args.config),
                                  infer=not args.no_infer, tokenizer=args.tokenizer)
        source = args.state
    found = model.meta.get("inferred_code")
    meta = {"imported_from": str(source)} | ({"inferred_code": found} if found else {})
    path = save_checkpoint(model, args.out, tokenizer=model.tokenizer, **meta)
    how = (" (the code inferred from its input rows)" if found and found["kind"] else
           f" (its input rows are not a code: {found['reason']})" if found else "")
    print(f"wrote {path}: a fixedid checkpoint ({model.cfg.interface} interface{how}) from {source}")
    return 0

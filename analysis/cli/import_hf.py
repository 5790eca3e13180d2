"""``fixedid-analyze import-hf``: a Hugging Face Llama directory back into a fixedid checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.errors import AnalysisError

HELP = "read a Hugging Face Llama directory back into a fixedid checkpoint"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hf", required=True, help="a Hugging Face model directory (config.json, model.safetensors)")
    p.add_argument("--out", required=True, help="the new checkpoint directory")


def run(args) -> int:
    from fixedid import save_checkpoint

    from analysis.interop.hf import import_hf

    if Path(args.out).exists():
        raise AnalysisError(f"{args.out} exists; import into a new directory")
    model = import_hf(args.hf)
    path = save_checkpoint(model, args.out, tokenizer=model.tokenizer, imported_from=str(args.hf))
    print(f"wrote {path}: a fixedid checkpoint ({model.cfg.interface} interface) from {args.hf}")
    return 0

"""``fixedid-analyze export-hf``: a checkpoint as a Hugging Face ``transformers`` Llama directory."""

from __future__ import annotations

import argparse

from analysis.cli.args import checkpoint_dirs

HELP = "write a checkpoint as a Hugging Face transformers Llama directory"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, help="checkpoint directory")
    p.add_argument("--out", required=True, help="the new Hugging Face directory")


def run(args) -> int:
    from analysis.interop.hf import export_hf
    from analysis.loading import load

    model = load(checkpoint_dirs([args.ckpt])[0])
    out = export_hf(model, args.out)
    print(f"wrote {out}: a transformers LlamaForCausalLM ({model.cfg.interface} interface"
          + (", the fixed code as its embedding, provenance in config.json 'fixedid'" if model.cfg.is_fixed else "")
          + ")" + ("; AutoTokenizer loads its tokenizer" if model.tokenizer is not None else ""))
    return 0

"""``fixedid-analyze export-hf``: a checkpoint as a Hugging Face ``transformers`` Llama directory."""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, one_checkpoint

HELP = "write a checkpoint as a Hugging Face transformers Llama directory"
EXAMPLES = """
  fixedid-train --config small --out runs/small --variants gf2    # a recipe whose heads share one RoPE base
  fixedid-analyze export-hf --ckpt runs/small/gf2 --out hf/small-gf2
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p, one=True)
    p.add_argument("--out", required=True, metavar="DIR", help="the new Hugging Face directory (refused when it "
                   "exists and is not empty)")


def run(args) -> int:
    from analysis.interop.hf import export_hf
    from analysis.loading import load

    model = load(one_checkpoint(args, "export-hf")[1])
    out = export_hf(model, args.out)
    print(f"wrote {out}: a transformers LlamaForCausalLM ({model.cfg.interface} interface"
          + (", the fixed code as its embedding, provenance in config.json 'fixedid'" if model.cfg.is_fixed else "")
          + ")" + ("; AutoTokenizer loads its tokenizer" if model.tokenizer is not None else ""))
    return 0

"""``export-hf``: a checkpoint as a Hugging Face ``transformers`` Llama directory (:mod:`analysis.interop.hf`)."""

from __future__ import annotations

from pathlib import Path

from analysis.specs.base import Param, Result, Spec


def export(model, *, out) -> Result:
    """Write ``model`` to the new directory ``out``."""
    from analysis.interop.hf import export_hf

    where = export_hf(model, out)
    return Result(summary=f"wrote {where}: a transformers LlamaForCausalLM ({model.cfg.interface} interface"
                  + (", the fixed code as its embedding, provenance in config.json 'fixedid'" if model.cfg.is_fixed
                     else "") + ")"
                  + ("; AutoTokenizer loads its tokenizer" if model.tokenizer is not None else ""))


SPEC = Spec(
    name="export-hf", group="interop", models="one", outputs=False, placement=False,
    help="write a checkpoint as a Hugging Face transformers Llama directory",
    examples="""
  fixedid-train --config small --out runs/small --variants gf2    # a recipe whose heads share one RoPE base
  fixedid-analyze export-hf --ckpt runs/small/gf2 --out hf/small-gf2
""",
    params=(Param("out", None, "the new Hugging Face directory (refused when it exists and is not empty)",
                  required=True, metavar="DIR", type=Path),),
    compute=export,
    library=("analysis.interop.hf:export_hf",),
)


__all__ = ["SPEC", "export"]

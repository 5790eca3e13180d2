"""Test-sized checkpoints of the built-in language's word-level tokenizer, shared by the analysis tests."""

import re

from analysis import load
from fixedid import FixedIdLM, ModelConfig, save_checkpoint


def tiny_checkpoint(tmp_path_factory, tokenizer, interface, *, seed=3, context=48, **changes):
    """A freshly initialised (init_std 0.2, so its outputs are far from uniform) 2-layer model, saved as a checkpoint
    that names the built-in language and loaded for analysis; ``ckpt_dir`` is its directory."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    cfg = ModelConfig.preset("toy", vocab_size=vocab, d_model=64, n_layers=2, n_heads=4, d_ff=128, context=context,
                             interface=interface, init_std=0.2, seed=seed, **changes)
    path = tmp_path_factory.mktemp("ck") / interface
    save_checkpoint(FixedIdLM(cfg), path, tokenizer=tokenizer,
                    train_config={"data": {"source": "synthetic", "val_split": "validation"}})
    model = load(path)
    model.ckpt_dir = path
    return model


def prose_blocks(markdown: str) -> list[str]:
    """The prose blocks of a Markdown page, whitespace collapsed: its paragraphs and each bullet on its own (a bullet
    without its marker); fenced blocks, tables, headings and images left out. What the docs tests count words in."""
    text = re.sub(r"```.*?```", "\n\n", markdown, flags=re.DOTALL)
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [s for s in block.splitlines() if not s.lstrip().startswith(("|", "#", "!["))]
        out += [" ".join(re.sub(r"^\s*(?:[-*]|\d+\.) ", "", b).split())
                for b in re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", "\n".join(lines)) if b.strip()]
    return out

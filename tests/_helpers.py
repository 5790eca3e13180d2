"""Test-sized checkpoints of the built-in language's word-level tokenizer, shared by the analysis tests."""

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

"""Constants and helpers that several test modules share: the trainer's test-sized config and the calls that write and
run it, the test-sized config the study and the notebooks train, a word-level tokenizer of a fixed vocabulary, and
TransformerLens's label of an edge-attribution node."""

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

#: The test-sized model both configs below train: the toy preset at width 32, 2 layers of 2 heads.
TINY_MODEL = """
[model]
preset = "toy"
d_model = 32
n_layers = 2
n_heads = 2
d_ff = 64
"""

# ---- the trainer (tests/fixedid/train, the geometry controls, the command line's demo)

#: The trainer's test-sized config: a BPE tokenizer of 512 tokens, 12 steps, evaluated and saved every 6, step 4 kept.
TRAIN_CONFIG = TINY_MODEL + """context = 32

[data]
source = "synthetic"
val_split = "validation"
vocab_size = 512
tokenizer_train_bytes = 150000
train_tokens = 60000
val_tokens = 4096

[train]
steps = 12
batch_size = 8
lr = 1e-2
warmup_steps = 2
eval_every = 6
eval_batches = 2
save_every = 6
log_every = 1
keep = [4]
"""


def write_config(tmp_path, text=TRAIN_CONFIG, name="cfg.toml"):
    """``text`` (by default :data:`TRAIN_CONFIG`) written to ``tmp_path / name``; returns the path."""
    p = tmp_path / name
    p.write_text(text)
    return p


def run_inproc(args, capsys=None):
    """``fixedid-train`` with ``args`` in this process; returns its exit status."""
    from fixedid.train import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code


# ---- the study and the notebooks

#: The test-sized config the study's tests and the notebooks' run train: the built-in word-level tokenizer (4096
#: tokens), context 64, 16 steps, evaluated and saved every 8, step 8 kept.
STUDY_CONFIG = TINY_MODEL + """context = 64
init_std = 0.09

[data]
source = "synthetic"
val_split = "validation"
tokenizer = "words"
vocab_size = 4096
tokenizer_train_bytes = 200000
train_tokens = 60000
val_tokens = 16384

[train]
steps = 16
batch_size = 8
lr = 3e-3
warmup_steps = 2
eval_every = 8
eval_batches = 2
save_every = 8
log_every = 4
keep = [8]
"""

# ---- the causal analyses

#: The vocabulary of :func:`word_tokenizer`, in id order.
WORDS = ["<|endoftext|>", "When", "Mary", "and", "John", "went", "to", "the", "park", ",", "gave", "a", "ball", "Anna"]


def word_tokenizer():
    """A whitespace-split word-level tokenizer of :data:`WORDS` (unknown words read as ``<|endoftext|>``)."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def tl_label(node):
    """The label TransformerLens's edge attribution gives a node of :func:`analysis.causal.edges.graph`: ``embed``,
    ``L{layer}H{head}`` (a head's output), ``L{layer}H{head}.q|k|v`` (its inputs), ``L{layer}.mlp`` or ``logits``."""
    if node.kind == "embed":
        return "embed"
    if node.kind == "attn_head_out":
        return f"L{node.layer}H{node.head}"
    if node.kind in ("q_input", "k_input", "v_input"):
        return f"L{node.layer}H{node.head}.{node.kind[0]}"
    if node.kind in ("mlp_out", "mlp_in"):
        return f"L{node.layer}.mlp"
    return "logits"

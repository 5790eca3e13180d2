"""The names of the model's hook points and submodules, in one place: every analysis builds a name through these
functions rather than by formatting strings of its own, so a name is spelled once (the model's layout: see
:mod:`fixedid.model`)."""

from __future__ import annotations

#: The input rows the model reads (the fixed code or the learned table's rows).
EMBED = "hook_embed"
#: The final norm's output, read by the unembedding.
FINAL_NORMALIZED = "ln_final.hook_normalized"


def block(layer: int, name: str = "") -> str:
    """``blocks.{layer}`` or, with ``name``, ``blocks.{layer}.{name}`` (a submodule or hook point of the block)."""
    return f"blocks.{layer}" + (f".{name}" if name else "")


def resid_pre(layer: int) -> str:
    """The residual stream entering block ``layer``."""
    return block(layer, "hook_resid_pre")


def resid_mid(layer: int) -> str:
    """The residual stream between block ``layer``'s attention and MLP."""
    return block(layer, "hook_resid_mid")


def resid_post(layer: int) -> str:
    """The residual stream leaving block ``layer``."""
    return block(layer, "hook_resid_post")


def resid(layer: int, where: str) -> str:
    """The residual stream of block ``layer`` at ``where``: ``pre``, ``mid`` or ``post``."""
    return block(layer, f"hook_resid_{where}")


def attn_out(layer: int) -> str:
    """Block ``layer``'s attention output (after ``o_proj``)."""
    return block(layer, "hook_attn_out")


def mlp_out(layer: int) -> str:
    """Block ``layer``'s MLP output."""
    return block(layer, "hook_mlp_out")


def attn(layer: int, name: str) -> str:
    """A hook point of block ``layer``'s attention: ``name`` is ``q``, ``k``, ``v``, ``z``, ``pattern``,
    ``attn_scores``, ``rot_q`` or ``rot_k`` (``blocks.{layer}.attn.hook_{name}``)."""
    return block(layer, f"attn.hook_{name}")


def norm(layer: int, which: str) -> str:
    """Block ``layer``'s norm module ``which``: ``ln1`` (before attention) or ``ln2`` (before the MLP)."""
    return block(layer, which)


def norm_hook(layer: int, which: str, name: str = "normalized") -> str:
    """A hook point of block ``layer``'s norm ``which`` (``ln1``/``ln2``): ``normalized`` or ``scale``."""
    return block(layer, f"{which}.hook_{name}")


def mlp_in(layer: int) -> str:
    """The MLP's input: block ``layer``'s second norm's output (what a transcoder reads)."""
    return norm_hook(layer, "ln2")


def stream(n_layers: int) -> list[str]:
    """The residual stream between blocks, input to output: each block's ``hook_resid_pre``, then the last block's
    ``hook_resid_post``."""
    return [resid_pre(i) for i in range(n_layers)] + [resid_post(n_layers - 1)]


def depth_stream(n_layers: int) -> list[str]:
    """The residual stream as the depth-wise readouts read it: the input (``hook_embed``), each later block's
    ``hook_resid_pre``, and the last block's ``hook_resid_post``."""
    return [EMBED] + [resid_pre(i) for i in range(1, n_layers)] + [resid_post(n_layers - 1)]


def layer_of(name: str) -> int | None:
    """The block index in a hook or module name (``blocks.3.attn.hook_z`` -> 3); None outside the blocks."""
    parts = name.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[0] == "blocks" and parts[1].isdigit() else None


__all__ = ["EMBED", "FINAL_NORMALIZED", "attn", "attn_out", "block", "depth_stream", "layer_of", "mlp_in", "mlp_out",
           "norm", "norm_hook", "resid", "resid_mid", "resid_post", "resid_pre", "stream"]

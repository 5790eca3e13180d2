"""Plain forward hooks on named submodules for the length of one block of code, removed on exit (even on error)."""

from __future__ import annotations

from contextlib import contextmanager

from analysis.errors import AnalysisError


def submodule(model, name: str):
    """The submodule ``name`` of ``model`` (a hook point such as ``blocks.1.attn.hook_q``, or a module such as
    ``blocks.1.ln2``); one clear error when there is none."""
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise AnalysisError(f"the model has no submodule {name!r}") from None


@contextmanager
def module_hooks(model, hooks):
    """Register ``(name, fn)`` forward hooks (``fn(module, inputs, output) -> output or None``, PyTorch's
    convention) on the submodules named, in order; remove them all on exit."""
    handles = []
    try:
        for name, fn in hooks:
            handles.append(submodule(model, name).register_forward_hook(fn))
        yield
    finally:
        for h in handles:
            h.remove()


__all__ = ["module_hooks", "submodule"]

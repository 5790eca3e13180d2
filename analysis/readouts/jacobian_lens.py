"""The Jacobian lens (Gurnee et al., 2026) through TransformerLens 4.3's ``JacobianLens``."""

from __future__ import annotations

import torch

from analysis.errors import AnalysisError

#: Leading positions of each window left out of the source average (TransformerLens's default is 16, for prompts of
#: natural text with a beginning-of-text token; the built-in language's windows start mid-document).
SKIP_FIRST_POSITIONS = 1


def fit_jacobian_lens(model, x: torch.Tensor, *, dim_batch: int = 8, skip_first_positions: int = SKIP_FIRST_POSITIONS,
                      progress: bool = False):
    """A TransformerLens ``JacobianLens`` fitted on the token windows ``x`` ``[sequences, pos]`` of ``model`` (one
    forward and ``d_model / dim_batch`` backwards per window; deterministic)."""
    from transformer_lens.tools.analysis import JacobianLens

    from analysis.engine.effects import check_eval
    from analysis.interop.bridge import to_transformer_bridge

    check_eval(model)
    if x.shape[1] < skip_first_positions + 2:
        raise AnalysisError(f"the Jacobian lens needs windows of more than {skip_first_positions + 1} tokens; got "
                            f"{x.shape[1]}")
    bridge = to_transformer_bridge(model).eval()
    windows = x.to(model.device)
    bridge.to_tokens = lambda prompt, *a, **k: windows[int(prompt)][None]  # this bridge only: a window by index
    return JacobianLens.fit(bridge, [str(i) for i in range(len(windows))], corpus="fixedid token windows",
                            dim_batch=dim_batch, max_seq_len=x.shape[1], skip_first_positions=skip_first_positions,
                            show_progress=progress)


def jacobian_translator(lens, n_layers: int):
    """``translate(h, depth)`` for :func:`analysis.readouts.lens.lens_table`: depth ``d`` in ``1 .. n_layers - 1``
    through ``J_{d-1}`` (TransformerLens's ``transport``), the model's own output (depth ``n_layers``) as it is;
    depth 0 is left out (None: no Jacobian lens reads the input)."""
    def translate(h, depth):
        if depth == n_layers:
            return h
        if depth == 0:
            return None
        return lens.transport(h, depth - 1).to(h.dtype)
    return translate


__all__ = ["fit_jacobian_lens", "jacobian_translator", "SKIP_FIRST_POSITIONS"]

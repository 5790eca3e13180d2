"""Where information moves between positions, read off a residual-stream patching map."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.errors import AnalysisError
from analysis.causal.patching import to_tensor


@dataclass
class Flow:
    """Per layer: the restored share at the differing position(s) (``source``, summed over them), at the final
    position (``final``), and the largest at any other position (``elsewhere``); ``moved_at``: the first layer
    whose final-position value exceeds the source value, None if it never does (the last block moves it)."""

    source_positions: list[int]
    source: np.ndarray
    final: np.ndarray
    elsewhere: np.ndarray
    moved_at: int | None

    def to_frame(self) -> pd.DataFrame:
        """One row per layer: ``layer``, ``source``, ``final`` and ``elsewhere`` shares of the patching effect."""
        return pd.DataFrame({"layer": np.arange(len(self.source)), "source": self.source, "final": self.final,
                             "elsewhere": self.elsewhere})


def information_flow(df: pd.DataFrame) -> Flow:
    """The :class:`~analysis.causal.flow.Flow` of an aggregated ``resid_pre`` ``denoise`` result (normalised metric
    recommended)."""
    a = df.attrs
    if a.get("site") != "resid_pre" or a.get("mode") != "denoise" or "pair" in df.columns:
        raise AnalysisError("information_flow reads an aggregated resid_pre map in denoise mode")
    t = to_tensor(df).numpy() - a["baseline"]  # [layer, pos]: effect of each patch
    final = t.shape[1] - 1
    source = [p for p in range(t.shape[1]) if p != final and t[0, p] != 0.0]
    if not source:
        raise AnalysisError("the prompts differ only at the final position: there is no flow to read")
    src = t[:, source].sum(1)
    others = [p for p in range(t.shape[1]) if p != final and p not in source]
    elsewhere = t[:, others].max(1) if others else np.zeros(t.shape[0])
    moved = np.nonzero(t[:, final] > src)[0]
    return Flow(source, src, t[:, final], elsewhere, int(moved[0]) if len(moved) else None)


__all__ = ["Flow", "information_flow"]

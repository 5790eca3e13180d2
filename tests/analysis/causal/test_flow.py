"""Reading where information moves in a resid_pre denoising map (analysis.causal.flow)."""

import numpy as np
import pandas as pd
import pytest

from analysis import AnalysisError
from analysis.causal.flow import information_flow


def frame(values, mode="denoise", site="resid_pre"):
    values = np.asarray(values, dtype=float)
    rows = [(site, layer, pos, pd.NA, values[layer, pos]) for layer in range(values.shape[0])
            for pos in range(values.shape[1])]
    df = pd.DataFrame(rows, columns=["site", "layer", "pos", "head", "value"])
    for c in ("layer", "pos", "head"):
        df[c] = df[c].astype("Int64")
    df.attrs.update(site=site, mode=mode, baseline=0.0, n_layers=values.shape[0], n_pos=values.shape[1])
    return df


def test_flow_finds_the_layer_where_the_final_position_takes_over():
    # positions 0-1 precede the difference (no-ops), position 2 differs, position 4 is final
    f = information_flow(frame([[0, 0, 1.0, 0, 0], [0, 0, 0.8, 0.1, 0.2], [0, 0, 0.3, 0.4, 0.6],
                                [0, 0, 0.0, 0.0, 1.0]]))
    assert f.source_positions == [2] and f.moved_at == 2
    assert f.source.tolist() == pytest.approx([1.0, 0.8, 0.3, 0.0])
    assert f.final.tolist() == pytest.approx([0, 0.2, 0.6, 1.0])
    assert f.elsewhere.tolist() == pytest.approx([0, 0.1, 0.4, 0.0])
    assert list(f.to_frame().columns) == ["layer", "source", "final", "elsewhere"]


def test_flow_that_never_reaches_the_final_position_before_the_last_block():
    f = information_flow(frame([[0, 1.0, 0], [0, 0.9, 0.05]]))
    assert f.moved_at is None and f.source_positions == [1]


def test_flow_refuses_maps_it_cannot_read():
    with pytest.raises(AnalysisError, match="denoise"):
        information_flow(frame([[0, 1.0, 0]], mode="noise"))
    with pytest.raises(AnalysisError, match="denoise"):
        information_flow(frame([[0, 1.0, 0]], site="attn_out"))
    with pytest.raises(AnalysisError, match="only at the final position"):
        information_flow(frame([[0, 0, 1.0]]))

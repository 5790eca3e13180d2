"""Analyses in bfloat16: ``load(dtype=...)`` and the CLI's ``--dtype`` give a half-precision model whose patching,
edge attribution, direct logit attribution, DAS, probe activations and behaviours match the float32 model's up to
bfloat16 rounding; ``load`` places a model where it is told, with no module-level state; bad values are refused."""

import numpy as np
import pandas as pd
import pytest
import torch

from analysis import load
from analysis.causal.das import Streams, fit_subspace
from analysis.causal.das_data import das_data
from analysis.causal.dla import direct_logit_attribution
from analysis.causal.edges import edge_attribution
from analysis.causal.patching import activation_patching
from analysis.cli.main import main as analyze
from analysis.readouts.activations import collect
from analysis.tasks import task_pairs
from fixedid import ConfigError


@pytest.fixture(scope="module")
def pair(model):
    half = load(model.ckpt_dir, dtype="bfloat16")
    return model, half, task_pairs(model, "ioi", 8)


def _close(a, b, scale):
    """Equal up to bfloat16 rounding: within 2% of ``scale`` (the size of the quantities they are made from: a
    bfloat16 value carries 8 significant bits, 0.4% of it), and correlated."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(a) & np.isfinite(b)
    assert ok.mean() > 0.9
    assert np.abs(a[ok] - b[ok]).max() <= 0.02 * scale
    assert np.corrcoef(a[ok], b[ok])[0, 1] > 0.95


def test_bfloat16_analyses_match_float32(pair):
    full, half, batch = pair
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        logits = float(full(batch.clean)[:, -1].abs().max())  # the logits every metric here is made from
    _close(activation_patching(full, batch, metric="logit_diff").value, activation_patching(half, batch, metric="logit_diff").value, logits)
    _close(edge_attribution(full, batch, metric="logit_diff").score, edge_attribution(half, batch, metric="logit_diff").score, logits)
    _close(direct_logit_attribution(full, batch).value, direct_logit_attribution(half, batch).value, logits)
    x, y = (collect(m, tokens=512, hooks=["blocks.1.hook_resid_pre"]).acts["blocks.1.hook_resid_pre"]
            for m in (full, half))
    assert y.dtype == np.float32  # stored in float32 whatever the model computes in
    _close(x.ravel()[:20000], y.ravel()[:20000], float(np.abs(x).max()))


def test_das_fits_on_a_bfloat16_model(pair):
    full, half, _ = pair
    data = das_data(half, "agreement", 8, solved_only=False)
    fit = fit_subspace(Streams(half, data, [1]), 1, 2, epochs=3, batch_size=8)
    assert fit.basis.dtype == torch.float32 and np.isfinite(fit.losses).all()
    assert torch.allclose(fit.basis.T @ fit.basis, torch.eye(2), atol=1e-5)


def test_load_places_a_model_where_it_is_told_and_nowhere_else(model):
    assert next(load(model.ckpt_dir, dtype="bfloat16").parameters()).dtype == torch.bfloat16
    assert next(load(model.ckpt_dir).parameters()).dtype == torch.float32  # no state carried between loads
    with pytest.raises(ConfigError, match="unknown dtype"):
        load(model.ckpt_dir, dtype="int8")
    import analysis.loading

    assert not [n for n, v in vars(analysis.loading).items() if isinstance(v, dict) and not n.startswith("__")]


def test_cli_dtype(model, tmp_path, capsys):
    runs = {}
    for dtype in ("float32", "bfloat16"):
        with pytest.raises(SystemExit) as e:
            analyze(["patching", "--ckpt", str(model.ckpt_dir), "--task", "ioi", "--n-pairs", "4", "--dtype", dtype,
                     "--out", str(tmp_path / dtype)])
        assert e.value.code == 0
        runs[dtype] = pd.read_csv(tmp_path / dtype / "patching.csv")
    with torch.no_grad():
        logits = float(model(task_pairs(model, "ioi", 4).clean)[:, -1].abs().max())
    _close(runs["float32"].value, runs["bfloat16"].value, logits)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        analyze(["patching", "--ckpt", str(model.ckpt_dir), "--task", "ioi", "--dtype", "float8",
                 "--out", str(tmp_path / "bad")])
    assert e.value.code == 2 and "invalid choice: 'float8'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()

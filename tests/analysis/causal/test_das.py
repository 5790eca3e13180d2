"""Distributed alignment search: with a fixed basis the intervened logits equal TransformerLens 4.3's ``interchange``;
the direction of one code bit interchanges that bit exactly (the base becomes the source); the fit reaches at least
the interchange accuracy of TL's ``fit_das`` at the same rank and budget; the sweep's rows and controls; bad input."""

import numpy as np
import pandas as pd
import pytest
import torch
from transformer_lens.tools.analysis.interchange import (SubspaceInterchange, collect_activations, fit_das,
                                                         intervened_logits)

from analysis.causal.das import (Streams, code_direction, evaluate, fit_subspace, hook_name, interchange, interchange_logits,
                                 norm_matched, random_basis, das_sweep)
from analysis.causal.das_data import bit_pairs, bits_with_twins, das_data, prompt_logits, twin_token
from analysis.causal.interventions import _bit_mask
from analysis.cli.main import main as analyze
from analysis.errors import AnalysisError


def _tl_inputs(data, side, rows=None):
    """The base or source token rows of examples ``rows`` (default all) with each example's two candidates appended,
    so that TL's task_logits can read them."""
    rows = torch.arange(len(data)) if rows is None else rows
    return torch.cat([data.prompts[side[rows]], data.candidates[rows]], 1)


def _task_logits(model):
    return lambda x: model(x[:, :-2])[:, -1].gather(1, x[:, -2:])


@pytest.fixture(scope="module")
def ioi(model):
    return das_data(model.eval(), "ioi", 8, solved_only=False)


@pytest.mark.parametrize("position", ["diff", "last"])
def test_fixed_basis_equals_transformer_lens_interchange(model, ioi, position):
    n = model.cfg.n_layers
    basis = random_basis(model.cfg.d_model, 3, seed=5)
    pos = ioi.positions(position)
    for layer in (0, 1, n):
        hook = hook_name(model, layer)
        src = collect_activations(model, hook, _tl_inputs(ioi, ioi.source), _task_logits(model), positions=pos)
        theirs = intervened_logits(model, hook, SubspaceInterchange(basis), _tl_inputs(ioi, ioi.base), src,
                                   _task_logits(model), positions=pos)
        mine = interchange_logits(model, ioi, layer, basis, position=position)
        moved = (theirs - prompt_logits(model, ioi.prompts[ioi.base], ioi.candidates)).abs().max()
        # the prompts differ at one token: its stream differs from layer 0 on, the final one's from layer 1 on
        assert (moved > 1e-3) == (layer < n if position == "diff" else layer > 0)
        assert (mine - theirs).abs().max() <= 1e-5


def test_a_code_bit_direction_interchanges_that_bit_exactly(model):
    bit = bits_with_twins(model, "any")[0]
    data = das_data(model, "bit", 8, bit=bit, solved_only=False, pairs=bit_pairs(model, bit, 8, twins="any"))
    direction = _bit_mask(model, bit).float().cpu()
    basis = (direction / direction.norm())[:, None]
    source = prompt_logits(model, data.prompts[data.source], data.candidates)
    # the prompts differ in that bit at that position only, so the base becomes the source there
    assert torch.allclose(interchange_logits(model, data, 0, basis), source, atol=1e-5)
    assert torch.allclose(code_direction(model, bit), basis)
    own = das_data(model, "bit", bit=bit, solved_only=False, target="source_output", pairs=bit_pairs(model, bit, 8,
                                                                                                   twins="any"))
    swept = das_sweep(model, "bit", layers=[0], ranks=(1,), epochs=1, batch_size=8, data=own, controls=False)
    ref = swept[swept.method == "code_direction"]  # the base becomes the source: its own output, every example
    assert len(ref) == 2 and (ref["rank"] == 1).all() and (ref.iia == 1.0).all()
    other = random_basis(model.cfg.d_model, 1, seed=2)
    assert not torch.allclose(interchange_logits(model, data, 0, other), source, atol=1e-3)
    # the placebo moves each example exactly as far as the bit direction does, elsewhere
    streams = Streams(model, data, [0])
    b, s = streams.x[0][data.base, data.diff], streams.x[0][data.source, data.diff]
    step = norm_matched(other, basis)(b, s) - b
    assert torch.allclose(step.norm(dim=-1), (s - b).norm(dim=-1), rtol=1e-5)
    assert (step @ basis).abs().max() < 0.9 * (s - b).norm(dim=-1).min()


def test_fit_reaches_transformer_lens_fit_das_at_the_same_rank_and_budget(model):
    budget = dict(epochs=12, batch_size=8, lr=1e-2, seed=0)
    bit = bits_with_twins(model, "any")[-1]
    pairs = bit_pairs(model, bit, 12, twins="any")
    cases = [(das_data(model, "bit", bit=bit, pairs=pairs, solved_only=False, target="source_output"), 0, 1),
             (das_data(model, "agreement", 16, solved_only=False, target="source_output"), 1, 2)]
    for data, layer, rank in cases:
        hook, pos, tr = hook_name(model, layer), data.positions("diff"), data.train
        tl = fit_das(model, hook, _tl_inputs(data, data.base, tr), _tl_inputs(data, data.source, tr),
                     data.target[tr], _task_logits(model), rank=rank, base_positions=pos[tr],
                     source_positions=pos[tr], **budget)
        streams = Streams(model, data, [layer])
        mine = fit_subspace(streams, layer, rank, **budget)
        assert len(mine.losses) == budget["epochs"] and mine.losses[-1] < mine.losses[0]
        assert torch.allclose(mine.basis.T @ mine.basis, torch.eye(rank), atol=1e-5)
        for split in (data.train, data.test):
            ours = evaluate(streams, layer, split, interchange(mine.basis), "diff")["iia"]
            theirs = evaluate(streams, layer, split, interchange(tl.basis), "diff")["iia"]
            assert ours >= theirs - 1 / len(split), (layer, rank, ours, theirs)


def test_sweep_rows_controls_and_references(model, ioi):
    n = model.cfg.n_layers
    df = das_sweep(model, "ioi", layers=[0, n], ranks=(2,), epochs=3, batch_size=8, data=ioi)
    assert set(df.method) == {"das", "placebo", "arbitrary_labels", "random_init", "full", "none"}
    assert set(df.split) == {"train", "test"} and df.iia.between(0, 1).all()
    assert (df.iia_lo <= df.iia).all() and (df.iia <= df.iia_hi).all()
    assert len(df) == 2 * 2 * (2 + 4) and df.attrs["n_test"] == len(ioi.test)
    # "none" is the base's own answer, read independently from a plain forward of the base prompts
    own = prompt_logits(model, ioi.prompts[ioi.base], ioi.candidates).argmax(1)
    for split, idx in (("train", ioi.train), ("test", ioi.test)):
        got = df[(df.method == "none") & (df.split == split)].iia
        assert np.allclose(got, float((own[idx] == ioi.target[idx]).float().mean()))
    # after the last block only the final position is read: an edit at the differing token changes nothing
    out = df[(df.layer == n) & (df.split == "test")].set_index("method").iia
    assert out["full"] == out["none"] == out["das"]
    assert df[df.method == "full"]["rank"].unique().tolist() == [model.cfg.d_model]
    quiet = das_sweep(model, "ioi", layers=[1], ranks=(1,), epochs=1, batch_size=8, data=ioi, controls=False)
    assert set(quiet.method) == {"das", "full", "none"}


def test_das_refuses_bad_input(model, ioi):
    with pytest.raises(AnalysisError, match="unknown DAS variable"):
        das_data(model, "nope")
    with pytest.raises(AnalysisError, match="needs the code bit"):
        das_data(model, "bit")
    with pytest.raises(AnalysisError, match="out of range"):
        das_data(model, "bit", bit=model.cfg.n_bits)
    with pytest.raises(AnalysisError, match="bit variable only"):
        das_data(model, "ioi", bit=1)
    with pytest.raises(AnalysisError, match="at least 4 pairs"):
        das_data(model, "ioi", 3)
    with pytest.raises(AnalysisError, match="solves only"):  # an untrained model solves about half the prompts
        das_data(model, "ioi", 8)
    with pytest.raises(AnalysisError, match="unknown DAS target"):
        das_data(model, "ioi", 8, target="nope")
    with pytest.raises(AnalysisError, match="ranks must be"):
        das_sweep(model, ranks=(0,), data=ioi)
    with pytest.raises(AnalysisError, match="layer"):
        das_sweep(model, layers=[model.cfg.n_layers + 1], data=ioi)
    with pytest.raises(AnalysisError, match="position"):
        das_sweep(model, position="middle", data=ioi)
    model.train()
    try:
        with pytest.raises(AnalysisError, match="eval mode"):
            fit_subspace(Streams(model, ioi, [0]), 0, 1)
    finally:
        model.eval()


def test_das_verb_writes_its_table_and_figure(model, tmp_path, capsys):
    out = tmp_path / "das"
    with pytest.raises(SystemExit) as e:
        analyze(["das", "--ckpt", str(model.ckpt_dir), "--variable", "agreement", "--all-pairs", "--n-pairs", "8",
                 "--layers", "0,2", "--ranks", "1,2", "--epochs", "2", "--batch-size", "8", "--out", str(out)])
    assert e.value.code == 0
    assert {p.name for p in out.iterdir()} == {"das.csv", "das.png", "das.pdf"}
    df = pd.read_csv(out / "das.csv")
    assert set(df.layer) == {0, 2} and set(df[df.method == "das"]["rank"]) == {1, 2} and len(df) == 2 * 2 * (2 + 8)
    printed = capsys.readouterr().out
    assert "blocks.0.hook_resid_pre rank   1" in printed and "arbitrary labels fitted" in printed

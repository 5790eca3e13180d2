"""LEACE erasure against a matched placebo: known answers on a synthetic anisotropic toy (the concept removed, the
edits' sizes, the true rank) and, on test-sized models, held-out losses and the per-sequence estimand recomputed
from scratch, erasure by depth, the learned variant and the model's own code bits."""

import numpy as np
import pandas as pd
import pytest
import torch
from concept_erasure import LeaceEraser
from scipy import stats
from sklearn.linear_model import LogisticRegression

from analysis import AnalysisError
from analysis.causal.erasure import (_one_hot, control_concept, depth_of, edit_norm, erasure, erasure_by_depth,
                                     erasure_tables, resid_hooks, true_rank)
from analysis.readouts.probes import Target, control_labels

SEED = 3  # of the shared model fixtures (conftest.py)


# ------------------------------------------------------------------------------ a synthetic anisotropic toy
def toy(seed=0, d=24, n_types=400, n=30_000):
    """Token types with anisotropic type means (axis scales 10 ... 0.1), a binary type-level concept added along a
    known random unit direction ``v``, Zipf-like type frequencies and within-type noise of the same anisotropy."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(10, 0.1, d)
    mu = rng.normal(size=(n_types, d)) * scales
    v = rng.normal(size=d)
    v /= np.linalg.norm(v)
    label = (rng.random(n_types) < 0.4).astype(np.int64)
    mu += 3.0 * np.outer(label, v)
    freq = 1 / np.arange(1, n_types + 1) ** 0.8
    ids = rng.choice(n_types, size=n, p=freq / freq.sum())
    x = mu[ids] + 0.3 * rng.normal(size=(n, d)) * scales
    fit = np.arange(n) % 2 == 0
    return torch.from_numpy(x), ids, label[ids], fit


def test_leace_leaves_a_held_out_linear_probe_at_chance_on_the_toy():
    x, ids, z, fit = toy()
    eraser = LeaceEraser.fit(x[fit], _one_hot(z[fit]))
    erased = eraser(x).numpy()
    majority = max(z[~fit].mean(), 1 - z[~fit].mean())
    before = LogisticRegression(max_iter=2000).fit(x[fit].numpy(), z[fit]).score(x[~fit].numpy(), z[~fit])
    after = LogisticRegression(max_iter=2000).fit(erased[fit], z[fit]).score(erased[~fit], z[~fit])
    assert before > 0.9 and abs(after - majority) < 0.01
    assert true_rank(eraser) == 1


def test_the_placebo_is_a_type_level_concept_of_the_same_label_distribution_and_a_like_sized_edit():
    x, ids, z, fit = toy()
    t = Target("concept", z, "class")
    leace = edit_norm(LeaceEraser.fit(x[fit], _one_hot(z[fit])), x[~fit])
    ratios, shares = [], []
    for s in range(5):
        labels, used = control_concept(t, ids, fit, seed=s)
        assert used == s and np.array_equal(labels, control_labels(t, ids, seed=s))  # the probes' control task
        assert all(len(np.unique(labels[ids == k])) == 1 for k in np.unique(ids)[:50])  # one label per type
        shares.append(labels.mean())
        ratios.append(edit_norm(LeaceEraser.fit(x[fit], _one_hot(labels[fit])), x[~fit]) / leace)
    # labels drawn per type from the concept's token-level shares: matched in expectation (0.42 here)
    assert abs(np.mean(shares) - z.mean()) < 0.05
    # measured: placebo / LEACE edit_norm 2.05 - 6.11 over these draws (median 3.1): the same order, the placebo's a
    # few times larger (a random type-level concept's whitened direction is typical of the whole spread)
    assert all(0.1 < r < 10 for r in ratios), ratios


def test_edit_norm_is_the_mean_squared_edit():
    x, ids, z, fit = toy(n=4000)
    e = LeaceEraser.fit(x[fit], _one_hot(z[fit]))
    L, R, b = e.proj_left.numpy(), e.proj_right.numpy(), e.bias.numpy()
    edit = (x.numpy() - b) @ (L @ R).T  # x - x_erased, from the stored matrices
    assert edit_norm(e, x) == pytest.approx(float((edit ** 2).sum(1).mean()), rel=1e-10)


def test_true_rank_counts_directions_not_columns():
    rng = np.random.default_rng(1)
    d, n = 16, 20_000
    y = rng.integers(0, 4, n)
    general = rng.normal(size=(4, d)) * 2  # four class means in general position: an affine span of dimension 3
    x = torch.from_numpy(general[y] + rng.normal(size=(n, d)) * np.geomspace(30, 1, d))
    assert true_rank(LeaceEraser.fit(x, _one_hot(y))) == 3
    # three classes whose sample means lie exactly on one line (the same noise rows in every class): dimension 1
    line = np.outer([0.0, 1.0, 2.5], rng.normal(size=d)) * 2
    noise = rng.normal(size=(5000, d)) * np.geomspace(30, 1, d)
    y3 = np.repeat(np.arange(3), len(noise))
    x = torch.from_numpy(np.concatenate([m + noise for m in line]))
    e = LeaceEraser.fit(x, _one_hot(y3))
    assert e.proj_left.shape[1] == 2 and true_rank(e) == 1  # the shape says 2
    # a change stored as d x d (as a trace-constrained eraser is) of rank 2
    u, _ = np.linalg.qr(rng.normal(size=(d, d)))
    s = np.zeros(d)
    s[:2] = [1.5, 0.2]
    stored = LeaceEraser(torch.from_numpy(u * np.sqrt(s)), torch.from_numpy((u * np.sqrt(s)).T), None)
    assert stored.proj_left.shape == (d, d) and true_rank(stored) == 2


def test_a_control_draw_missing_a_class_is_redrawn_the_fullest_kept_and_hopeless_ones_refused():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 60, 5000)
    fit = np.ones(5000, dtype=bool)
    t = Target("rare", (ids < 2).astype(np.int64), "class")  # 2 of 60 types: many draws give no type class 1
    labels, used = control_concept(t, ids, fit, seed=0)
    first = next(s for s in (0 + 7919 * a for a in range(10)) if len(np.unique(control_labels(t, ids, s))) == 2)
    assert used == first and np.array_equal(labels, control_labels(t, ids, first))
    # one class per type among 30 types: no draw keeps all 30 classes; the draw with the most is taken
    identity = Target("identity", np.where(ids < 30, ids, -1), "class")
    labels, used = control_concept(identity, ids, fit, seed=0)
    counts = [len(np.unique(control_labels(identity, ids, 7919 * a)[ids < 30])) for a in range(10)]
    assert max(counts) < 30 and used == 7919 * int(np.argmax(counts))
    assert len(np.unique(labels[ids < 30])) == max(counts) and (labels[ids >= 30] == -1).all()
    hopeless = Target("one", np.zeros(5000, dtype=np.int64), "class")
    hopeless.labels[0] = 1  # one token in 5000: no draw of 60 types hits class 1
    with pytest.raises(AnalysisError, match="all gave one class"):
        control_concept(hopeless, ids, fit, seed=0)


def test_depth_and_residual_hooks(model):
    n = model.cfg.n_layers
    assert resid_hooks(model) == [f"blocks.{i}.hook_resid_pre" for i in range(n)] + [f"blocks.{n - 1}.hook_resid_post"]
    assert [depth_of(h) for h in resid_hooks(model)] == list(range(n + 1))
    assert depth_of("hook_embed") == 0 and depth_of("blocks.1.hook_resid_mid") == 1.5
    assert np.isnan(depth_of("blocks.1.hook_attn_out"))


# --------------------------------------------------------------------------------------- test-sized models
def ids(model, n=24, t=48, seed=0):
    return torch.randint(0, model.cfg.vocab_size, (n, t), generator=torch.Generator().manual_seed(seed))


def _ce(model, x):
    with torch.no_grad():
        logits = model(x).float()
    return torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), x[:, 1:], reduction="none").mean(1)


def test_losses_are_held_out_and_the_estimand_is_recomputed_from_scratch(model):
    x = ids(model)
    hook, bit = "blocks.1.hook_resid_pre", 2
    df, seqs = erasure_tables(model, f"canonical_bit:{bit}", hook, x, placebo_draws=2, tasks=(), seed=1)
    test = np.array(df.attrs["test_sequences"])
    row = df.iloc[0]
    assert row.n_test_sequences == len(test) == 12 and row.n_fit_sequences == 12 and row.split_seed == 1
    assert set(seqs.seq) == set(test)
    # the model as is on the held-out windows
    base = _ce(model, x[torch.from_numpy(test)]).double().numpy()
    le = seqs[seqs.condition == "leace"].sort_values("seq")
    np.testing.assert_allclose(le.base_loss, base, rtol=1e-6)
    # LEACE refitted here on the fit windows' activations, installed by hand, losses on the held-out windows
    captured = {}
    handle = model.mod_dict[hook].register_forward_hook(lambda m, i, o: captured.setdefault("a", o.detach()))
    with torch.no_grad():
        model(x)
    handle.remove()
    a = captured["a"].reshape(-1, captured["a"].shape[-1]).double()
    fit_rows = ~np.isin(np.repeat(np.arange(x.shape[0]), x.shape[1]), test)
    z = ((x.reshape(-1).numpy() >> bit) & 1)[fit_rows].astype(float)
    eraser = LeaceEraser.fit(a[torch.from_numpy(fit_rows)], torch.from_numpy(z)[:, None])
    handle = model.mod_dict[hook].register_forward_hook(lambda m, i, o: eraser(o.double()).to(o.dtype))
    try:
        erased = _ce(model, x[torch.from_numpy(test)]).double().numpy()
    finally:
        handle.remove()
    np.testing.assert_allclose(le.loss, erased, rtol=1e-5)
    # the estimand: per sequence, LEACE's change minus the mean placebo change; its t interval over sequences
    pl = seqs[seqs.condition == "placebo"].pivot(index="seq", columns="draw", values="delta_loss").sort_index()
    diff = (erased - base) - pl.mean(1).to_numpy()
    n = len(diff)
    half = stats.t.ppf(0.975, n - 1) * diff.std(ddof=1) / np.sqrt(n)
    got = df[df.condition == "leace"].iloc[0]
    assert got.minus_placebo == pytest.approx(diff.mean(), abs=1e-6)
    assert got.minus_placebo_lo == pytest.approx(diff.mean() - half, abs=1e-6)
    assert got.minus_placebo_hi == pytest.approx(diff.mean() + half, abs=1e-6)
    assert df[df.condition != "leace"].minus_placebo.isna().all()
    # each placebo row's loss change is the mean of its sequences' changes
    for r in df[df.condition == "placebo"].itertuples():
        assert r.delta_loss == pytest.approx(seqs[(seqs.condition == "placebo") & (seqs.draw == r.draw)]
                                             .delta_loss.mean(), abs=1e-12)
    assert list(df["rank"]) == [0, 1, 1, 1] and (df.edit_norm[1:] > 0).all() and df.edit_norm[0] == 0
    assert df.placebo_seed.dropna().nunique() == 2 and (df.n_classes == 2).all()
    # the placebo edits are scaled to the concept's edit's size on the held-out windows
    placebo = df[df.condition == "placebo"]
    np.testing.assert_allclose(placebo.edit_norm, got.edit_norm, rtol=1e-9)
    assert (df[df.condition != "placebo"].edit_scale == 1).all()
    # unmatched: the same placebo erasers, unscaled (the scale is the ratio of the two sizes, squared in the norm)
    plain = erasure_tables(model, f"canonical_bit:{bit}", hook, x, placebo_draws=2, tasks=(), seed=1,
                           match_norm=False)[0]
    raw = plain[plain.condition == "placebo"]
    assert (raw.edit_scale == 1).all() and list(raw.placebo_seed) == list(placebo.placebo_seed)
    np.testing.assert_allclose(raw.edit_norm.to_numpy() * placebo.edit_scale.to_numpy() ** 2,
                               placebo.edit_norm.to_numpy(), rtol=1e-9)
    assert not np.allclose(raw.edit_norm, got.edit_norm, rtol=0.1)  # they were not the same size before


def test_by_depth_in_one_call_with_the_models_own_code_bits(model):
    x = ids(model)
    own = f"code_bit:{model.cfg.n_bits - 1 - 2}"  # the code column at LSB index 2 (configured msb-first order)
    df = erasure_by_depth(model, ["canonical_bit:2", own], x, placebo_draws=1, tasks=())
    hooks = resid_hooks(model)
    assert len(df) == 2 * len(hooks) * 3
    for concept, g in df.groupby("concept"):
        assert list(g[g.condition == "leace"].hook) == hooks
        assert list(g[g.condition == "leace"].depth) == list(range(len(hooks)))
    le = df[df.condition == "leace"]
    assert ((le.probe - le.majority).abs() < 0.03).all()
    # a code column is the input itself: read perfectly before erasure, at the majority after
    first = df[(df.concept == own) & (df.hook == hooks[0])].set_index("condition")
    assert first.probe["none"] == 1.0 and abs(first.probe["leace"] - first.majority["leace"]) < 0.03
    cols = ["condition", "rank", "edit_norm", "probe", "delta_loss", "minus_placebo"]
    same = np.allclose(*(df[df.concept == c][cols[1:]].to_numpy(float) for c in ("canonical_bit:2", own)),
                       equal_nan=True)
    # the canonical code's column is canonical bit 2 itself (the same erasure); gf2's column is another concept
    assert same == (model.cfg.interface == "canonical")


def test_the_learned_variant_is_erased_on_canonical_bits_and_has_no_code_bits(learned):
    x = ids(learned)
    df = erasure(learned, "canonical_bit:1", "blocks.1.hook_resid_pre", x, placebo_draws=1, tasks=())
    le = df[df.condition == "leace"].iloc[0]
    assert le["rank"] == 1 and np.isfinite(le.minus_placebo) and le.minus_placebo_lo <= le.minus_placebo_hi
    with pytest.raises(AnalysisError, match="code_bits targets need a model that reads an n-bit code"):
        erasure(learned, "code_bit:0", "blocks.1.hook_resid_pre", x, tasks=())


def test_bad_input(learned):
    x = ids(learned, n=6)
    for kwargs, match in (({"placebo_draws": 0}, "placebo_draws"), ({"test_fraction": 1.0}, "test_fraction"),
                          ({"hook": ["blocks.1.hook_resid_pre", "nope"]}, "unknown hook point 'nope'")):
        with pytest.raises(AnalysisError, match=match):
            erasure(learned, "canonical_bit:1", data=x, tasks=(), **kwargs)


def test_cli_by_depth_writes_both_tables_and_the_figure(learned, tmp_path, capsys):
    from analysis.cli.main import main

    npy = tmp_path / "ids.npy"
    np.save(npy, ids(learned).numpy())
    out = tmp_path / "er"
    with pytest.raises(SystemExit) as e:
        main(["erasure", "--ckpt", str(learned.ckpt_dir), "--concept", "canonical_bit:2", "--concept", "token",
              "--by-depth", "--data", str(npy), "--tasks", "none", "--draws", "2", "--out", str(out)])
    assert e.value.code == 0
    df, seqs = pd.read_csv(out / "erasure.csv"), pd.read_csv(out / "erasure_sequences.csv")
    hooks = resid_hooks(learned)
    assert set(df.variant) == {"learned"} and list(df.hook.unique()) == hooks
    assert {"minus_placebo", "edit_norm", "rank", "n_test_sequences"} <= set(df.columns)
    assert len(seqs) == 2 * len(hooks) * 3 * df.n_test_sequences.iloc[0]  # concepts x hooks x edits x sequences
    # token identity among the 32 most frequent: up to 31 directions; its placebo coarsens it (fewer classes)
    tok = df[(df.concept == "token") & (df.condition != "none")]
    assert (tok["rank"] > 1).all() and (tok["rank"] <= tok.n_classes - 1).all()
    assert (tok[tok.condition == "placebo"].n_classes <= tok[tok.condition == "leace"].n_classes.max()).all()
    assert all((out / f"erasure.{ext}").exists() for ext in ("png", "pdf"))
    assert "LEACE minus placebo" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["erasure", "--ckpt", str(learned.ckpt_dir), "--concept", "canonical_bit:2", "--by-depth", "--hook",
              "blocks.0.hook_resid_pre", "--data", str(npy), "--out", str(tmp_path / "bad")])
    assert e.value.code == 2 and not (tmp_path / "bad").exists()
    assert capsys.readouterr().err.strip().count("\n") == 0

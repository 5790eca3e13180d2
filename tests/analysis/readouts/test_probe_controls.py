"""The probes' references, each against a known answer: coset-minimal GF(2) weights against brute force over every
mask, the held-out-types split on constructed representations (one that memorises types, one that reads the code),
the bits of a random relabelling, the lexical baseline by hand, C chosen on the training rows only and as an
independent scikit-learn cross-validation would, convergence reported, and the random-init baseline."""

import numpy as np
import pandas as pd
import pytest
import torch

import analysis.readouts.probe_fitting as fitting
import analysis.readouts.probes as probes
from analysis import AnalysisError
from analysis.errors import AnalysisWarning
from analysis.readouts.activations import Activations, collect, token_table
from analysis.readouts.logistic import fit_logistic
from analysis.readouts.probes import (Target, baseline_activations, lexical_baseline, perm_table, probe_table,
                                      split_by_type, targets)
from analysis.loading import random_init_twin
from fixedid.codes import (GF2Code, canonical_code, gf2_inverse, gf2_rank, id_permutation, ids_to_bits,
                           random_invertible)

from tests._helpers import tiny_checkpoint


def synthetic(n_bits=7, n_seq=150, T=16, seed=0, width=None):
    """Activations of a canonical 'model' over ids drawn uniformly from 0 .. 2**n_bits - 1 at two hook points:
    ``memo``, a random Gaussian row per type in more dimensions than types (any type-level labelling is linearly
    separable, but nothing carries over to an unseen type), and ``code``, the type's +-1 code plus noise (its bits
    are linear and carry over)."""
    V = 1 << n_bits
    rng = np.random.default_rng(seed)
    ids = torch.from_numpy(rng.integers(0, V, size=(n_seq, T)))
    tok = token_table(ids)
    flat = tok["id"].to_numpy()
    emb = rng.normal(size=(V, width or V + 32))
    code = canonical_code(flat, n_bits) + rng.normal(scale=0.1, size=(len(flat), n_bits))
    meta = {"interface": "canonical", "n_bits": n_bits, "vocab_size": V, "recoding": None, "bit_order": "msb",
            "table_seed": 0, "n_sequences": n_seq, "seq_len": T}
    return Activations({"memo": emb[flat].astype(np.float32), "code": code.astype(np.float32)}, tok, meta)


def test_the_type_split_separates_memorised_from_readable_type_level_targets():
    acts = synthetic()
    df = probe_table(acts, ["canonical_bits", "perm_bits"], splits=("sequence", "type"), controls=False)
    assert set(df.split) == {"sequence", "type"}
    mean = df[df.status == "fitted"].groupby(["hook", "split", df.target.str.split(":").str[0]]).score.mean()
    # memorising representation: high on held-out sequences (the types were seen), chance on held-out types
    for g in ("canonical_bit", "perm_bit"):
        assert mean["memo", "sequence", g] > 0.9
        assert abs(mean["memo", "type", g] - 0.5) < 0.12
    # the code: its bits carry over to unseen types; a random relabelling's bits are no linear function of it
    assert mean["code", "sequence", "canonical_bit"] > 0.99 and mean["code", "type", "canonical_bit"] > 0.99
    assert mean["code", "sequence", "perm_bit"] < 0.75 and mean["code", "type", "perm_bit"] < 0.75
    # held-out types never appear in training
    test = split_by_type(acts.tokens["id"].to_numpy(), 0.2, 0)
    ids = acts.tokens["id"].to_numpy()
    assert not set(ids[test]) & set(ids[~test]) and len(set(ids[test])) == round(0.2 * len(set(ids)))
    typed = df[df.split == "type"]
    assert typed.control.isna().all() and typed.selectivity.isna().all() and (typed.n_test == test.sum()).all()
    with pytest.raises(AnalysisError, match="splits"):
        probe_table(acts, ["canonical_bits"], splits=("token",))


def test_perm_bits_are_the_bits_of_a_seeded_relabelling_with_no_gf2_weight():
    acts = synthetic(n_bits=6, n_seq=20)
    ids = acts.tokens["id"].to_numpy()
    perm = perm_table(64, seed=3)
    assert sorted(perm) == list(range(64)) and not np.array_equal(perm, id_permutation(64, 3))
    tg = {t.name: t for t in targets(acts, ["perm_bits"], seed=3)}
    for i in range(6):
        t = tg[f"perm_bit:{i}"]
        assert np.array_equal(t.labels, (perm[ids] >> i) & 1) and t.by_type and t.level == "type"
        assert t.gf2_weight is None  # a random function of 6 bits is no XOR of them


def brute_force_weights(code: np.ndarray) -> dict:
    """{function of the vocabulary, as the bytes of its 0/1 values relative to row 0: fewest code bits}, over all
    2**n masks (row-wise parity of ``code & mask``); a function absent from the dict is no XOR of code bits."""
    n = code.shape[1]
    c = (code.astype(np.int64) << np.arange(n)).sum(1)
    best = {}
    for start in range(0, 1 << n, 4096):
        masks = np.arange(start, min(start + 4096, 1 << n), dtype=np.int64)
        par = (np.bitwise_count(c[None] & masks[:, None]) & 1).astype(np.uint8)
        rel = par ^ par[:, :1]
        for key, w in zip(map(bytes, np.packbits(rel, axis=1)), np.bitwise_count(masks)):
            if best.get(key, 99) > w:
                best[key] = int(w)
    return best


def test_gf2_weights_in_the_table_are_the_brute_force_minimum_over_the_vocabulary(tmp_path_factory, tokenizer):
    """A 16-bit gf2 model on the small test vocabulary (ids below 512: bits 9-15 constant) with A = [[L, H], [0, K]]:
    over the vocabulary the code is L x (low bits) and constants, so an id bit is a row of L^-1, while the row weight
    of A^-1 also counts H's columns. Every weight in the table is the minimum over all 2**16 masks; canonical bit 0,
    whose A^-1 row is heavier than its minimum, is read exactly at the input (it is what its weight says)."""
    V = tokenizer.get_vocab_size(with_added_tokens=True)
    assert 256 < V <= 512
    rng = np.random.default_rng(4)
    a = np.zeros((16, 16), dtype=np.uint8)
    low = random_invertible(9, 1)
    while True:  # L with row 0 = e0 (code bit 0 = x0 over the vocabulary), still invertible
        low[0] = np.eye(9, dtype=np.uint8)[0]
        if gf2_rank(low) == 9:
            break
        low = rng.integers(0, 2, size=(9, 9)).astype(np.uint8)
    a[:9, :9] = low
    a[:9, 9:] = rng.integers(0, 2, size=(9, 7))
    a[0, 9:] = 1  # ... XOR all high bits, which are 0 on every id of the vocabulary
    a[9:, 9:] = random_invertible(7, 2)
    code = GF2Code(a, np.zeros(16, dtype=np.uint8))
    m = tiny_checkpoint(tmp_path_factory, tokenizer, "gf2", seed=2, gf2_matrix=a.tolist(), gf2_offset=[0] * 16)
    x = torch.randint(0, V, (80, 48), generator=torch.Generator().manual_seed(0))
    acts = collect(m, x, hooks=["hook_embed"])
    df = probe_table(acts, ["canonical_bits", "xor", "code_bits", "perm_bits"], controls=False,
                     xor_pairs=10).set_index("target")
    vocab_code = code.encode_bits(ids_to_bits(np.arange(V), 16))
    best = brute_force_weights(vocab_code)
    canon = ids_to_bits(np.arange(V), 16)
    perm = ids_to_bits(perm_table(V, 0), 16)
    inv = gf2_inverse(a)
    heavier = 0
    for name, row in df.iterrows():
        kind, _, arg = name.partition(":")
        if kind == "canonical_bit":
            values, full = canon[:, int(arg)], inv[int(arg)]
        elif kind == "xor":
            i, k = map(int, arg.split(","))
            values, full = canon[:, i] ^ canon[:, k], inv[i] ^ inv[k]
        elif kind == "code_bit":
            values, full = vocab_code[:, 15 - int(arg)], None  # msb order: column j is bit 15 - j
        else:
            values, full = perm[:, int(arg)], None
        want = best.get(bytes(np.packbits(values ^ values[0])))
        assert (pd.isna(row.gf2_weight) and want is None) or row.gf2_weight == want, name
        if full is not None and want is not None and full.sum() > want:
            heavier += 1
    assert heavier >= 3  # the old label (the row weight of A^-1) was wrong for these
    assert inv[0].sum() > 1 and df.loc["canonical_bit:0", "gf2_weight"] == 1
    assert df.loc["canonical_bit:0", "score"] == 1.0
    assert (df.loc[[f"canonical_bit:{i}" for i in range(9, 16)], "gf2_weight"] == 0).all()  # constant: weight 0


def test_lexical_baseline_by_hand():
    ids = np.array([1, 1, 1, 2, 2, 3, 5, 1, 2, 4, 3])
    labels = np.array([0, 0, 1, 1, 1, 0, -1, 0, 0, 0, -1])
    test = np.array([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1], bool)
    # training: type 1 -> 0 (two of three), type 2 -> 1, type 3 -> 0; the global majority 0 (three 0s, three 1s:
    # the smaller class). Test rows with a label: type 1 (0, right), type 2 (0, wrong), type 4 unseen -> 0 (right)
    assert lexical_baseline(Target("t", labels, "class", level="context"), ids, test) == pytest.approx(2 / 3)
    y = np.array([0.0, 2.0, 4.0, 6.0, 1.0, 5.0, 10.0])
    sid = np.array([1, 1, 2, 2, 1, 2, 3])
    st = np.array([0, 0, 0, 0, 1, 1, 1], bool)
    pred, true = np.array([1.0, 5.0, 3.0]), y[st]  # type means 1 and 5; unseen type 3: the training mean 3
    want = 1 - ((true - pred) ** 2).sum() / ((true - true.mean()) ** 2).sum()
    assert lexical_baseline(Target("s", y, "scalar", level="context"), sid, st) == pytest.approx(want)


def test_contextual_labels_carry_the_lexical_baseline_and_type_level_targets_the_selectivity(tmp_path_factory,
                                                                                            tokenizer):
    m = tiny_checkpoint(tmp_path_factory, tokenizer, "canonical", seed=2)
    acts = collect(m, tokens=1536, hooks=["hook_embed", "ln_final.hook_normalized"])
    df = probe_table(acts, ["canonical_bits", "number", "ioi_role", "prev_token"], shuffled=False)
    fitted = df[df.status == "fitted"]
    ctx, typ = fitted[fitted.level == "context"], fitted[fitted.level == "type"]
    assert set(ctx.target) == {"number", "ioi_role", "prev_token"}
    assert ctx.lexical.notna().all() and ctx.selectivity.isna().all() and ctx.control.notna().all()
    assert typ.lexical.isna().all() and np.allclose(typ.selectivity, typ.score - typ.control)
    seq = acts.tokens.seq.to_numpy()
    test = probes.split_by_sequence(seq)
    for t in targets(acts, ["number"]):  # the column is the hand-checked function on the probes' own split
        assert (ctx[ctx.target == t.name].lexical == lexical_baseline(t, acts.tokens.id.to_numpy(), test)).all()
    # at the input a fixed code carries nothing but the token's type: no probe beats the lexical baseline
    assert (ctx[ctx.hook == "hook_embed"].score <= ctx[ctx.hook == "hook_embed"].lexical + 0.02).all()


def cv_problem(kind, seed):
    """Two binary problems whose best C is clear on the grid (0.001, 0.1, 10): ``corr``, 10 strongly correlated
    inputs and little noise (a strong penalty shrinks towards the wrong direction: large C wins); ``noise``, 250
    inputs of which 5 carry signal, on 240 training rows (a weak penalty overfits: small C wins)."""
    rng = np.random.default_rng(seed)
    if kind == "corr":
        n_seq, d = 60, 10
        z = rng.normal(size=(n_seq * 10, d))
        x = z @ (np.eye(d) + 3 * np.ones((d, d)) / d)
        y = (z[:, 0] - z[:, 1] + 0.3 * rng.logistic(size=len(z)) > 0).astype(np.int64)
    else:
        n_seq, d = 30, 250
        x = rng.normal(size=(n_seq * 10, d))
        y = (x[:, :5].sum(1) + 2 * rng.logistic(size=len(x)) > 0).astype(np.int64)
    return np.repeat(np.arange(n_seq), 10), x, y


@pytest.mark.parametrize("per_fold", [False, True], ids=["folds-batched", "per-fold"])
@pytest.mark.parametrize("kind, seed, best", [("corr", 2, 10.0), ("noise", 1, 0.001)])
def test_C_is_chosen_on_the_training_rows_only_and_as_an_independent_cross_validation_would(kind, seed, best,
                                                                                           per_fold, monkeypatch):
    """Both ways of solving the folds (every fold in one batched solve; above ``CV_SPLIT_WORK``, one solve per fold
    on its own rows) choose what scikit-learn's cross-validation on the same folds chooses."""
    from sklearn.linear_model import LogisticRegression

    monkeypatch.setattr(fitting, "CV_SPLIT_WORK", 0 if per_fold else float("inf"))

    grid = (0.001, 0.1, 10.0)
    seq, x, y = cv_problem(kind, seed)
    test = probes.split_by_sequence(seq, 0.2, 0)
    fit = fitting._fit(x, [Target("y", y, "class")], test, groups=seq, Cs=grid)["y"]
    # scikit-learn on the same folds (whole training sequences), standardised on the training rows: the pooled
    # validation accuracy per C, and its winner by a clear margin
    mu, sd = x[~test].mean(0), x[~test].std(0)
    xtr, ytr = (x[~test] - mu) / sd, y[~test]
    fold = fitting._folds(seq[~test], 3, 0)
    assert len(set(fold)) == 3 and all(len(set(fold[seq[~test] == s])) == 1 for s in np.unique(seq[~test]))
    acc = {c: sum(int((LogisticRegression(C=c, tol=1e-6, max_iter=5000).fit(xtr[fold != f], ytr[fold != f])
                       .predict(xtr[fold == f]) == ytr[fold == f]).sum()) for f in range(3)) / len(ytr)
           for c in grid}
    ranked = sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))
    assert ranked[0][0] == best and ranked[0][1] - ranked[1][1] > 0.02
    assert fit.C == best and fit.converged
    ref = LogisticRegression(C=best, tol=1e-6, max_iter=5000).fit(xtr, ytr)
    assert abs(fit.score - (ref.predict((x[test] - mu) / sd) == y[test]).mean()) <= 0.01
    # the same choice with the test labels scrambled: the test split is never looked at
    y2 = y.copy()
    y2[test] = np.random.default_rng(9).integers(0, 2, size=test.sum())
    again = fitting._fit(x, [Target("y", y2, "class")], test, groups=seq, Cs=grid)["y"]
    assert again.C == fit.C and again.score != fit.score


def test_per_fold_solves_choose_and_score_as_the_batched_one(monkeypatch):
    """Multi-class and binary targets with rows missing labels (each problem its own mask): the per-fold solves on
    the folds' own rows reach the batched solve's C and test scores."""
    rng = np.random.default_rng(3)
    seq = np.repeat(np.arange(40), 12)
    x = rng.normal(size=(len(seq), 6)) @ rng.normal(size=(6, 6))
    three = np.digitize(x[:, 0] + 0.5 * rng.normal(size=len(x)), [-1, 1])
    three[rng.random(len(x)) < 0.3] = -1  # no label on 30% of the rows
    two = (x[:, 1] - x[:, 2] + rng.logistic(size=len(x)) > 0).astype(np.int64)
    tgts = [Target("three", three, "class"), Target("two", two, "class")]
    test = probes.split_by_sequence(seq, 0.2, 0)
    out = {}
    for per_fold in (False, True):
        monkeypatch.setattr(fitting, "CV_SPLIT_WORK", 0 if per_fold else float("inf"))
        out[per_fold] = fitting._fit(x, tgts, test, groups=seq)
    for name in ("three", "two"):
        assert out[True][name].C == out[False][name].C
        assert out[True][name].score == pytest.approx(out[False][name].score, abs=1e-9)


def test_the_table_records_the_C_it_used():
    acts = synthetic(n_bits=5, n_seq=40)
    df = probe_table(acts, ["canonical_bits"], controls=False)
    assert df[df.status == "fitted"].C.isin(fitting.C_GRID).all() and df.attrs["Cs"] == list(fitting.C_GRID)
    fixed = probe_table(acts, ["canonical_bits"], controls=False, C=0.5)
    assert (fixed[fixed.status == "fitted"].C == 0.5).all()
    with pytest.raises(AnalysisError, match="C must be"):
        probe_table(acts, ["canonical_bits"], C="best")


def test_convergence_is_reported_per_target_and_per_row(monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8)) @ rng.normal(size=(8, 8))
    labels = [(x[:, 0] > 0).astype(int), np.digitize(x[:, 1], [-1, 0, 1])]
    masks = [np.ones(300, bool)] * 2
    for max_iter, want in ((1000, True), (2, False)):
        ws, conv = fit_logistic(x, labels, masks, [2, 4], 10.0, max_iter=max_iter, gtol=1e-5,
                                dtype=torch.float64, return_converged=True)
        for W, c, y, k in zip(ws, conv, labels, [2, 4]):
            # the gradient of the objective, recomputed here: sum of losses + ||w||^2 / (2 C), intercept free
            z = x @ W[:-1] + W[-1]
            if k == 2:
                r = 1 / (1 + np.exp(-z[:, 0])) - y
                g = np.concatenate([x.T @ r + W[:-1, 0] / 10.0, [r.sum()]])
            else:
                p = np.exp(z - z.max(1, keepdims=True))
                r = p / p.sum(1, keepdims=True) - np.eye(k)[y]
                g = np.concatenate([(x.T @ r + W[:-1] / 10.0).ravel(), r.sum(0)])
            assert c == want and (np.abs(g).max() <= 1e-5 * 300) == want
    real = fitting.fit_logistic
    monkeypatch.setattr(fitting, "fit_logistic", lambda *a, **k: real(*a, **{**k, "max_iter": 1}))
    with pytest.warns(AnalysisWarning, match="did not converge"):
        df = probe_table(synthetic(n_bits=5, n_seq=30), ["canonical_bits", "perm_bits"], controls=False)
    assert (df[df.status == "fitted"].converged == False).any()  # noqa: E712


def test_the_random_init_baseline_is_the_twin_on_the_same_tokens(tmp_path_factory, tokenizer):
    m = tiny_checkpoint(tmp_path_factory, tokenizer, "gf2", seed=2)
    x = torch.randint(0, m.cfg.vocab_size, (24, 32), generator=torch.Generator().manual_seed(1))
    acts = collect(m, x, hooks=["hook_embed", "blocks.1.hook_resid_pre"])
    base = baseline_activations(m, acts)
    assert base.hooks == acts.hooks and len(base) == len(acts)
    twin = collect(random_init_twin(m, 5), x, hooks=acts.hooks)
    other = baseline_activations(m, acts, seed=5)
    np.testing.assert_allclose(other.acts["blocks.1.hook_resid_pre"], twin.acts["blocks.1.hook_resid_pre"])
    df = probe_table(acts, ["canonical_bits"], baseline=base, controls=False, splits=("sequence", "type"))
    fitted = df[df.status == "fitted"]
    # the test checkpoint is itself its initialisation: the twin is the same model, so the scores agree
    np.testing.assert_allclose(fitted.random_init, fitted.score)
    with pytest.raises(AnalysisError, match="same tokens"):
        probe_table(acts, ["canonical_bits"], baseline=collect(m, x[:4], hooks=acts.hooks))

"""Activation stores and probes: known answers on the fixed codes, controls, the fast path against scikit-learn."""

import json

import numpy as np
import pytest
import torch

from analysis import AnalysisError
from analysis.readouts.activations import collect, load_activations, token_table
from analysis.readouts.probes import control_labels, fit_probes, probe_table, split_by_sequence, targets
from fixedid.codes import GF2Code
from fixedid.data import SyntheticLanguage
from fixedid.data.tokenizer import train_words

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module")
def tokenizer():
    return train_words(SyntheticLanguage(0).documents(300), 4096)


def make(tmp_path_factory, tokenizer, interface, **changes):
    return tiny_checkpoint(tmp_path_factory, tokenizer, interface, seed=2, **changes)


def uniform_ids(model, n=96, t=48, seed=0):
    return torch.randint(0, model.cfg.vocab_size, (n, t), generator=torch.Generator().manual_seed(seed))


def test_token_table():
    ids = torch.tensor([[5, 6, 5], [7, 5, 5]])
    t = token_table(ids)
    assert list(t.seq) == [0, 0, 0, 1, 1, 1] and list(t.pos) == [0, 1, 2] * 2
    assert list(t.prev_id) == [-1, 5, 6, -1, 7, 5]
    assert t.freq_bucket[t.id == 5].nunique() == 1
    assert t.freq_bucket[t.id == 5].iloc[0] > t.freq_bucket[t.id == 6].iloc[0]


def test_store_round_trip_and_no_partial_directory(tmp_path_factory, tokenizer, tmp_path):
    m = make(tmp_path_factory, tokenizer, "canonical")
    x = uniform_ids(m, n=6)
    mem = collect(m, x)
    disk = collect(m, x, out=tmp_path / "store", dtype="float16", max_batch=4)
    batched = collect(m, x, max_batch=4)  # batches after the first: the hooks write straight into the outputs
    for h in mem.hooks:
        np.testing.assert_allclose(batched.acts[h], mem.acts[h], rtol=0, atol=1e-6)
    # one batch in memory keeps the forward's own activations: their own memory, none a parameter's or buffer's
    held = [t.detach().numpy() for t in (*m.parameters(), *m.buffers())]
    assert not any(np.shares_memory(mem.acts[h], p) for h in mem.hooks for p in held)
    assert not any(np.shares_memory(mem.acts[a], mem.acts[b]) for a in mem.hooks for b in mem.hooks if a != b)
    assert all(mem.acts[h].flags.c_contiguous and mem.acts[h].dtype == np.float32 for h in mem.hooks)
    twice = collect(m, x, hooks=["hook_embed", "blocks.0.hook_resid_pre"])  # one tensor at two hook points
    assert not np.shares_memory(*twice.acts.values())
    np.testing.assert_array_equal(*twice.acts.values())
    assert disk.hooks == mem.hooks == ["hook_embed", "blocks.1.hook_resid_pre", "ln_final.hook_normalized"]
    for h in mem.hooks:
        assert isinstance(disk.acts[h], np.memmap) and disk.acts[h].dtype == np.float16
        np.testing.assert_allclose(disk.acts[h], mem.acts[h], rtol=2e-3, atol=2e-3)
    with torch.no_grad():
        _, cache = m.run_with_cache(x)
    np.testing.assert_allclose(mem.acts["blocks.1.hook_resid_pre"],
                               cache["blocks.1.hook_resid_pre"].reshape(-1, 64).numpy(), atol=1e-5)
    np.testing.assert_allclose(mem.acts["ln_final.hook_normalized"],
                               cache["ln_final.hook_normalized"].reshape(-1, 64).numpy(), atol=1e-5)
    # one forward per batch and nothing more: no forward to learn the widths, no unembedding after the final norm
    rows, heads = [], []
    with m.hooks(fwd_hooks=[("hook_embed", lambda a, hook: rows.append(a.shape[0]))]):
        handle = m.unembed.register_forward_hook(lambda *a: heads.append(1))
        try:
            collect(m, x, max_batch=4)
        finally:
            handle.remove()
    assert rows == [4, 2] and not heads
    again = load_activations(tmp_path / "store")
    assert again.meta["interface"] == "canonical" and len(again) == 6 * 48
    assert json.loads((tmp_path / "store" / "index.json").read_text())["hooks"] == mem.hooks
    with pytest.raises(AnalysisError, match="exists"):
        collect(m, x, out=tmp_path / "store")
    with pytest.raises(AnalysisError, match="unknown hook"):
        collect(m, x, hooks=["blocks.9.hook_resid_pre"], out=tmp_path / "never")
    assert not (tmp_path / "never").exists() and not list(tmp_path.glob(".never*"))


def test_canonical_bits_are_read_exactly_at_the_input_and_constant_bits_are_reported(tmp_path_factory, tokenizer):
    m = make(tmp_path_factory, tokenizer, "canonical")
    acts = collect(m, uniform_ids(m), hooks=["hook_embed"])
    df = probe_table(acts, ["canonical_bits"], controls=False)
    varying = [i for i in range(16) if (m.cfg.vocab_size - 1) >> i]
    for i in range(16):
        row = df[df.target == f"canonical_bit:{i}"].iloc[0]
        if i in varying:
            assert row.status == "fitted" and row.score == 1.0 and row.gf2_weight == 1
        else:
            assert row.status == "constant" and np.isnan(row.score)


def test_an_xor_of_two_code_bits_is_not_linearly_readable(tmp_path_factory, tokenizer):
    # canonical bit 0 = code bit 0 XOR code bit 1 (code bits 0 and 1 vary independently); every other canonical bit
    # is one code bit
    inv = np.eye(16, dtype=np.uint8)
    inv[0, 1] = 1
    code = GF2Code(inv, np.zeros(16, dtype=np.uint8)).inverse()
    m = make(tmp_path_factory, tokenizer, "gf2", gf2_matrix=code.matrix.tolist(), gf2_offset=[0] * 16)
    bits = code.encode_bits(np.array([[1] + [0] * 15, [0, 1] + [0] * 14]))
    assert bits[0, 0] == 1 and bits[1].tolist()[:2] == [1, 1]  # b0 -> c0; b1 -> c0 + c1, so b0 = c0 xor c1
    acts = collect(m, uniform_ids(m, n=160), hooks=["hook_embed"])
    df = probe_table(acts, ["canonical_bits"], controls=False).set_index("target")
    assert df.loc["canonical_bit:0", "gf2_weight"] == 2 and df.loc["canonical_bit:2", "gf2_weight"] == 1
    assert df.loc["canonical_bit:2", "score"] == 1.0 and df.loc["canonical_bit:1", "score"] == 1.0
    xor = df.loc["canonical_bit:0"]
    assert abs(xor.score - xor.majority) < 0.06 and abs(xor.balance - 0.5) < 0.05


def test_fast_path_agrees_with_scikit_learn_and_controls_behave(tmp_path_factory, tokenizer):
    m = make(tmp_path_factory, tokenizer, "gf2")
    acts = collect(m, uniform_ids(m, n=40), hooks=["blocks.1.hook_resid_pre"])
    fams = ["canonical_bits", "xor", "token", "position", "freq_bucket"]
    fast = probe_table(acts, fams, controls=False, C=1.0)
    ref = probe_table(acts, fams, controls=False, method="sklearn", C=1.0)
    assert np.nanmax(np.abs(fast.score.to_numpy() - ref.score.to_numpy())) <= 0.01
    full = probe_table(acts, ["canonical_bits", "token"])
    fitted = full[full.status == "fitted"]
    assert np.allclose(fitted.selectivity, fitted.score - fitted.control, equal_nan=True)
    # shuffled labels carry no information: near the majority baseline
    bits = fitted[fitted.target.str.startswith("canonical")]
    assert (bits.shuffled < bits.majority + 0.1).all()
    ids = acts.tokens["id"].to_numpy()
    t = targets(acts, ["canonical_bits"])[0]
    c = control_labels(t, ids)
    assert all(len(set(c[ids == i])) == 1 for i in np.unique(ids)[:20])  # one label per token type


def test_split_and_bad_input(tmp_path_factory, tokenizer):
    seq = np.repeat(np.arange(10), 5)
    test = split_by_sequence(seq)
    assert test.sum() == 10 and all(len(set(test[seq == s])) == 1 for s in range(10))
    with pytest.raises(AnalysisError, match="at least 2 sequences"):
        split_by_sequence(np.zeros(8, dtype=int))
    m = make(tmp_path_factory, tokenizer, "learned")
    acts = collect(m, uniform_ids(m, n=4), hooks=["hook_embed"])
    with pytest.raises(AnalysisError, match="learned variant has none"):
        targets(acts, ["code_bits"])
    with pytest.raises(AnalysisError, match="unknown probe target"):
        targets(acts, ["colour"])
    with pytest.raises(AnalysisError, match="type split applies"):  # no target is a function of the token
        probe_table(acts, ["position"], splits=("type",))
    assert fit_probes(acts.acts["hook_embed"], targets(acts, ["position"]), split_by_sequence(
        acts.tokens.seq.to_numpy()))["position"] < 0.5  # position is not in a learned token embedding


def test_cli_writes_table_and_figure_and_refuses_bad_input(tmp_path_factory, tokenizer, tmp_path, capsys):
    from analysis.cli.main import main

    dirs = [str(make(tmp_path_factory, tokenizer, interface).ckpt_dir) for interface in ("learned", "canonical")]
    npy = tmp_path / "ids.npy"
    np.save(npy, torch.randint(0, 300, (12, 32), generator=torch.Generator().manual_seed(0)).numpy())
    out = tmp_path / "probes"
    with pytest.raises(SystemExit) as e:
        main(["probes", *sum((["--ckpt", d] for d in dirs), []), "--data", str(npy), "--targets",
              "canonical_bits,xor,token,position", "--out", str(out)])
    assert e.value.code == 0
    df = __import__("pandas").read_csv(out / "probes.csv")
    assert {"variant", "hook", "target", "split", "level", "score", "control", "selectivity", "lexical", "shuffled",
            "random_init", "C", "converged"} <= set(df)
    assert set(df.split) == {"sequence", "type"} and df.random_init.notna().any()
    assert all((out / f"probes{k}.{e}").exists() for k in ("", "_xor", "_selectivity", "_types")
               for e in ("png", "pdf"))
    assert "linear probes over" in capsys.readouterr().out
    for i, args in enumerate([["--targets", "colour"], ["--targets", "code_bits"]]):
        with pytest.raises(SystemExit) as e:
            main(["probes", *sum((["--ckpt", d] for d in dirs), []), "--data", str(npy), *args,
                  "--out", str(tmp_path / f"bad{i}")])
        assert e.value.code == 2 and not (tmp_path / f"bad{i}").exists()
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_leace_erasure_leaves_the_probe_at_the_majority_and_beats_a_placebo_of_equal_rank(tmp_path_factory,
                                                                                          tokenizer, tmp_path,
                                                                                          capsys):
    from analysis.cli.main import main
    from analysis.causal.erasure import erasure

    m = make(tmp_path_factory, tokenizer, "canonical")
    x = uniform_ids(m, n=40)
    before = m(x[:2])
    df = erasure(m, "canonical_bit:1", "hook_embed", x, placebo_draws=2, tasks=())
    assert torch.equal(m(x[:2]), before)  # the eraser's hook is gone afterwards
    assert list(df.condition) == ["none", "leace", "placebo", "placebo"] and list(df["rank"]) == [0, 1, 1, 1]
    none, leace = df.iloc[0], df.iloc[1]
    assert none.probe == 1.0 and abs(leace.probe - leace.majority) < 0.02 and none.delta_loss == 0
    # the code column the concept is read from at the input: erasing it costs more than random directions
    assert leace.delta_loss > df[df.condition == "placebo"].delta_loss.max()
    multi = erasure(m, "freq_bucket", "blocks.1.hook_resid_pre", x, placebo_draws=1, tasks=())
    assert multi["rank"].iloc[1] == 4  # five buckets: LEACE removes up to classes - 1 directions
    for concept, hook, match in (("colour", "hook_embed", "unknown concept"), ("canonical_bit:1", "blocks.9.x",
                                 "unknown hook"), ("canonical_bit:15", "hook_embed", "constant")):
        with pytest.raises(AnalysisError, match=match):
            erasure(m, concept, hook, x, tasks=())
    npy = tmp_path / "ids.npy"
    np.save(npy, x.numpy())
    with pytest.raises(SystemExit) as e:
        main(["erasure", "--ckpt", str(m.ckpt_dir), "--concept", "canonical_bit:1", "--hook", "hook_embed",
              "--data", str(npy), "--tasks", "none", "--draws", "2", "--out", str(tmp_path / "er")])
    assert e.value.code == 0 and (tmp_path / "er" / "erasure.png").exists()
    assert "against placebo" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["erasure", "--ckpt", str(m.ckpt_dir), "--concept", "nope", "--data", str(npy), "--out",
              str(tmp_path / "bad")])
    assert e.value.code == 2 and not (tmp_path / "bad").exists()


def test_latent_labels_align_with_the_validation_tokens(tmp_path_factory, tokenizer):
    m = make(tmp_path_factory, tokenizer, "gf2")
    acts = collect(m, tokens=2048, hooks=["hook_embed"])
    tok = acts.tokens
    assert {"pos_tag", "number", "entity", "depth", "ioi_role"} <= set(tok.columns)
    names = set(SyntheticLanguage(0).names)
    words = [tokenizer.decode([int(i)]).strip() for i in tok["id"]]
    for w, tag, role in zip(words, tok.pos_tag, tok.ioi_role):
        if tag == "NAME":
            assert w in names or w == ""  # "": a name the small test tokenizer never saw (its unknown token)
        if role != "none":
            assert tag == "NAME"
    assert (tok.pos_tag == "EOT").sum() >= 1 and set(tok.ioi_role) <= {"none", "io", "s1", "s2", "io2"}
    df = probe_table(acts, ["pos_tag", "ioi_role", "fact_entity"], controls=False)
    assert set(df.target) == {"pos_tag", "ioi_role", "fact_entity"}
    assert df[df.target != "fact_entity"].score.notna().all()
    entity = targets(acts, ["fact_entity"])[0]
    assert ((entity.labels >= 0) == (tok.pos_tag == "ENTITY").to_numpy()).all() and (df.n_test > 0).all()
    other = collect(m, uniform_ids(m, n=4), hooks=["hook_embed"])
    with pytest.raises(AnalysisError, match="latent label"):
        targets(other, ["pos_tag"])


def test_ioi_sentences_label_their_names_by_role():
    lang = SyntheticLanguage(0)
    seen = 0
    for sentence in lang.labelled_sentences(600, seed=5):
        roles = {w.role: w.word for w in sentence if w.role != "none"}
        if roles:
            seen += 1
            assert set(roles) == {"io", "s1", "s2", "io2"}
            assert roles["s1"] == roles["s2"] and roles["io"] == roles["io2"] and roles["io"] != roles["s1"]
    assert seen > 20


def test_batched_logistic_matches_scikit_learn_per_target():
    """analysis.readouts.logistic fits binary and multinomial targets on different rows in one solve; each equals its own
    scikit-learn LogisticRegression (same C, intercept unpenalised) in predicted probabilities."""
    from sklearn.linear_model import LogisticRegression

    from analysis.readouts.logistic import fit_logistic

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6)) @ rng.normal(size=(6, 6))  # correlated inputs
    w = rng.normal(size=(6, 4))
    logits = x @ w + rng.gumbel(size=(400, 4))
    labels = [(logits[:, 0] > 0).astype(int), logits.argmax(1), (logits[:, 1] > logits[:, 2]).astype(int),
              np.digitize(logits[:, 3], [-1, 0, 1])]
    masks = [np.ones(400, bool), rng.random(400) < 0.6, rng.random(400) < 0.8, np.ones(400, bool)]
    ks = [2, 4, 2, 4]
    import analysis.readouts.logistic as logistic

    refreshed = []
    refresh = logistic._Batch.refresh
    with pytest.MonkeyPatch.context() as mp:  # the solve runs past the step where the preconditioner is refreshed
        mp.setattr(logistic._Batch, "refresh", lambda self, W: (refreshed.append(W.shape), refresh(self, W))[1])
        got = fit_logistic(x, labels, masks, ks, C=0.5, gtol=1e-9, dtype=torch.float64)
    assert refreshed
    for y, m, k, W in zip(labels, masks, ks, got):
        ref = LogisticRegression(C=0.5, tol=1e-10, max_iter=10_000).fit(x[m], y[m])
        z = x @ W[:-1] + W[-1]
        p = 1 / (1 + np.exp(-z[:, 0])) if k == 2 else np.exp(z - z.max(1, keepdims=True))
        p = p if k == 2 else p / p.sum(1, keepdims=True)
        want = ref.predict_proba(x)[:, 1] if k == 2 else ref.predict_proba(x)
        assert W.shape == (7, 1 if k == 2 else k)
        assert np.abs(p - want).max() < 1e-4


def _one_batch(rng, n=300, d=5):
    """A ``_Batch`` of one binary and one 3-class target on different rows, with its inputs (intercept column last)."""
    import analysis.readouts.logistic as logistic

    X = torch.from_numpy(np.hstack([rng.normal(size=(n, d)), np.ones((n, 1))]))
    y3 = rng.integers(0, 3, n)
    Y = torch.zeros(n, 4, dtype=torch.float64)
    Y[:, 0] = torch.from_numpy((rng.random(n) < 0.4).astype(float))
    Y[torch.arange(n), 1 + torch.from_numpy(y3)] = 1.0
    M = torch.from_numpy(np.stack([np.ones(n), rng.random(n) < 0.7], 1).astype(float))
    return logistic._Batch(X, Y, M, [1, 3], [0.5, 2.0], np.array([0, 1])), X, M


@pytest.mark.parametrize("exact", [True, False])
def test_refreshed_blocks_are_the_hessian_blocks_or_their_mean_field(exact):
    """With every row above the curvature threshold, a refresh's block of column c is ``X^T diag(w_c) X`` plus the
    penalty (w = mask x p (1 - p), computed here from a softmax of our own); with every row below it, the column's
    mean curvature times the gram of its target's rows."""
    import analysis.readouts.logistic as logistic

    rng = np.random.default_rng(3)
    fn, X, M = _one_batch(rng)
    W = torch.from_numpy(rng.normal(size=(6, 4)))
    z = (X @ W).numpy()
    p = np.empty_like(z)
    p[:, 0] = 1 / (1 + np.exp(-z[:, 0]))
    e = np.exp(z[:, 1:] - z[:, 1:].max(1, keepdims=True))
    p[:, 1:] = e / e.sum(1, keepdims=True)
    m = M.numpy()[:, [0, 1, 1, 1]]
    w = p * (1 - p) * m
    x = X.numpy()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(logistic, "SPARSE_CURVATURE", -1.0 if exact else 1.0)
        fn.refresh(W)
    for c, C in enumerate([0.5, 2.0, 2.0, 2.0]):
        if exact:
            H = x.T @ (x * w[:, c:c + 1])
        else:
            rows = m[:, c] > 0
            H = w[:, c].sum() / rows.sum() * (x[rows].T @ x[rows])
        ridge = np.full(6, 1 / C)
        ridge[-1] = 1e-6 * (1 + m[:, c].sum() / 4)
        L = fn.col_chol[c]
        assert np.allclose((L @ L.T).numpy(), H + np.diag(ridge), rtol=1e-8, atol=1e-10)
        G = rng.normal(size=(6, 4))
        want = np.linalg.solve(H + np.diag(ridge), G[:, c])
        assert np.allclose(fn.precondition(torch.from_numpy(G))[:, c].numpy(), want, rtol=1e-8, atol=1e-10)


def test_targets_on_few_rows_are_fitted_on_a_copy_of_them_with_the_same_solution():
    """A mask on at most PART_SHARE of the rows gets a part of its own (the smallest first, within PART_ROWS times
    the rows); the others share the full inputs; a fit in parts equals the fit in one batch."""
    import analysis.readouts.logistic as logistic

    n = 100
    Mn = np.zeros((n, 5), bool)
    Mn[:, 0] = True  # every row: shares the inputs
    Mn[:30, 1] = Mn[:30, 2] = True  # 30%, twice (one part)
    Mn[:85, 3] = True  # 85%: a part while the budget (2 x 100 rows) lasts
    Mn[10:96, 4] = True  # 86%: but 30 + 85 + 86 rows exceed the budget
    ids = logistic._mask_ids(Mn)
    assert list(ids) == [0, 1, 1, 2, 3]
    assert list(logistic._parts(Mn, ids)) == [0, 1, 1, 2, 0]
    rng = np.random.default_rng(5)
    x = rng.normal(size=(n, 4))
    labels = [(x[:, 0] > 0).astype(int), np.digitize(x[:, 1], [-0.5, 0.5]), (x[:, 2] > 0).astype(int),
              np.digitize(x[:, 3], [-0.5, 0.5]), (x[:, 1] + x[:, 2] > 0).astype(int)]
    masks, ks = list(Mn.T), [2, 3, 2, 3, 2]
    parts = logistic.fit_logistic(x, labels, masks, ks, C=1.0, gtol=1e-10, dtype=torch.float64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(logistic, "PART_ROWS", 0.0)
        whole = logistic.fit_logistic(x, labels, masks, ks, C=1.0, gtol=1e-10, dtype=torch.float64)
    for a, b in zip(parts, whole):
        a[-1] -= a[-1].mean() if a.shape[1] > 1 else 0
        b[-1] -= b[-1].mean() if b.shape[1] > 1 else 0
        assert np.abs(a - b).max() < 1e-6


def test_the_joint_objective_evaluates_only_the_parts_whose_targets_moved():
    """A backtracked step, or a step where some targets have stopped, evaluates only the parts holding targets that
    moved; the others keep their values, which equal a fresh evaluation to the bit (their columns did not move)."""
    import analysis.readouts.logistic as logistic

    n, rng = 120, np.random.default_rng(7)
    Mn = np.zeros((n, 3), bool)
    Mn[:, 0], Mn[:40, 1], Mn[50:100, 2] = True, True, True  # the full inputs, and two parts of their own
    ks = [1, 3, 1]
    x = torch.from_numpy(np.hstack([rng.normal(size=(n, 4)), np.ones((n, 1))]))
    prob = logistic._Problem(x, Mn, logistic._parts(Mn, logistic._mask_ids(Mn)), ks, [1.0, 2.0, 0.5],
                             logistic._mask_ids(Mn))
    Y, M = logistic._layout(Mn, [rng.integers(0, 2, n), rng.integers(0, 3, n), rng.integers(0, 2, n)], ks, prob.off,
                            torch.float64)
    fn = prob.objective([0, 1, 2], Y, M)
    assert isinstance(fn, logistic._Joint) and [p.T for p in fn.parts] == [1, 1, 1]
    W = torch.from_numpy(rng.normal(size=(5, 5)))
    f, G = fn(W)
    moved = W.clone()
    moved[:, 1:4] += 0.3  # the columns of the second target only
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        call = logistic._Batch.__call__
        mp.setattr(logistic._Batch, "__call__",
                    lambda self, W, grad=True: (calls.append(self.T), call(self, W, grad))[1])
        which = torch.tensor([False, True, False])
        fu, Gu = fn.update(moved, True, which, f.clone(), G.clone())
        assert len(calls) == 1  # one part of three evaluated
        fo, _ = fn.update(moved, False, which, f.clone(), None)
    fresh, Gf = fn(moved)
    assert torch.equal(fu, fresh) and torch.equal(Gu, Gf) and torch.equal(fo, fresh)
    assert not torch.equal(fu[1], f[1]) and torch.equal(fu[[0, 2]], f[[0, 2]])


def test_a_warm_start_refreshes_at_once_and_ends_where_a_cold_start_does():
    """A fit started at a neighbouring C's solution (the cross-validation's path) refreshes its preconditioner at its
    first step and reaches the cold start's solution."""
    import analysis.readouts.logistic as logistic
    from analysis.readouts.logistic import fit_logistic

    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 6))
    labels = [(x[:, 0] + rng.normal(size=500) > 0).astype(int), np.digitize(x[:, 1] + x[:, 2], [-1, 1])]
    masks, ks = [np.ones(500, bool), rng.random(500) < 0.7], [2, 3]
    cold = fit_logistic(x, labels, masks, ks, C=10.0, gtol=1e-10, dtype=torch.float64)
    start = fit_logistic(x, labels, masks, ks, C=1.0, gtol=1e-10, dtype=torch.float64)
    steps = []
    refresh = logistic._Batch.refresh
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(logistic, "_refresh_due", lambda s, warm: (steps.append((s, warm)), s == 0 and warm)[1])
        mp.setattr(logistic._Batch, "refresh", lambda self, W: refresh(self, W))
        warm = fit_logistic(x, labels, masks, ks, C=10.0, gtol=1e-10, dtype=torch.float64, init=start)
    assert steps[0] == (0, True)
    for a, b in zip(cold, warm):  # a multinomial intercept is defined up to a constant (it is not penalised)
        a[-1] -= a[-1].mean() if a.shape[1] > 1 else 0
        b[-1] -= b[-1].mean() if b.shape[1] > 1 else 0
        assert np.abs(a - b).max() < 1e-6

"""Head geometry against answers computed apart from it: held-out R^2 and partial R^2 by numpy least squares on a
head built as a known linear function of bits and log-frequency, their intervals by a bootstrap written here, the
within-frequency-bin null checked row by row and recomputed from scratch, debiased CKA at its two known values, and
the refusal of a reference from the model's own run."""

import numpy as np
import pandas as pd
import pytest
import torch

from analysis.errors import AnalysisError
from analysis.readouts.head import binned_permutation, frequency_bins, frequency_null, head_geometry, kfold
from fixedid.codes import ids_to_bits

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module")
def other(tmp_path_factory, tokenizer):
    """A learned reference of another run (seed 4; the module's models are seed 3)."""
    return tiny_checkpoint(tmp_path_factory, tokenizer, "learned", seed=4)


class swapped:
    """Replace tensors' contents for the duration of a block, restoring them even on error."""

    def __init__(self, *pairs):
        self.pairs = pairs

    def __enter__(self):
        self.saved = [t.detach().clone() for t, _ in self.pairs]
        with torch.no_grad():
            for t, v in self.pairs:
                t.copy_(torch.as_tensor(v, dtype=t.dtype))

    def __exit__(self, *exc):
        with torch.no_grad():
            for (t, _), s in zip(self.pairs, self.saved):
                t.copy_(s)


def _oof_lstsq(X, Y, fold):
    """Out-of-fold ordinary least squares with an intercept, by numpy's lstsq."""
    pred = np.empty_like(Y)
    for f in np.unique(fold):
        te = fold == f
        A = np.hstack([np.ones((int((~te).sum()), 1)), X[~te]])
        coef = np.linalg.lstsq(A, Y[~te], rcond=None)[0]
        pred[te] = np.hstack([np.ones((int(te.sum()), 1)), X[te]]) @ coef
    return pred


def test_r2_and_partial_r2_match_least_squares_on_a_known_head(model):
    V, d = model.cfg.vocab_size, model.cfg.d_model
    rng = np.random.default_rng(1)
    counts = np.floor(np.exp(rng.uniform(0, 9, V)))  # log-uniform, drawn apart from the ids (bits unrelated to it)
    logf = np.log1p(counts)
    bits = ids_to_bits(np.arange(V), model.cfg.n_bits).astype(float)
    bits = bits[:, bits.std(0) > 0]
    signal_bits = bits @ rng.normal(size=(bits.shape[1], d)) * 0.5
    signal_freq = np.outer(logf - 0.08 * logf ** 2, rng.normal(size=d)) * 0.7
    head = signal_bits + signal_freq + rng.normal(size=(V, d)) * 0.6
    with swapped((model.unembed.weight, head)):
        df = head_geometry(model, frequencies=counts, alpha=1e-9, boot=2000, seed=5).set_index(["measure", "basis"])
    Y = torch.as_tensor(head, dtype=torch.float32).double().numpy()  # the head as the model stores it
    fold = kfold(V, 5, 5)
    F = np.stack([logf, logf ** 2, logf ** 3], 1)
    sst_t = ((Y - Y.mean(0)) ** 2).sum(1)
    e_f = ((Y - _oof_lstsq(F, Y, fold)) ** 2).sum(1)
    e_b = ((Y - _oof_lstsq(bits, Y, fold)) ** 2).sum(1)
    e_bf = ((Y - _oof_lstsq(np.hstack([bits, F]), Y, fold)) ** 2).sum(1)
    expected = {("logfreq_r2", "log-frequency"): (e_f, sst_t), ("bits_r2", "canonical"): (e_b, sst_t),
                ("bits_logfreq_r2", "canonical"): (e_bf, sst_t), ("bits_partial_r2", "canonical"): (e_bf, e_f)}
    boot_rng = np.random.default_rng(123)
    draws = [boot_rng.integers(0, V, V) for _ in range(4000)]
    for key, (num, den) in expected.items():
        row = df.loc[key]
        assert abs(row.value - (1 - num.sum() / den.sum())) < 1e-6, key
        b = [1 - num[i].sum() / den[i].sum() for i in draws]
        lo, hi = np.percentile(b, [2.5, 97.5])
        assert abs(row.lo - lo) < 0.15 * (hi - lo) and abs(row.hi - hi) < 0.15 * (hi - lo), key
        assert row.lo < row.value < row.hi
    # the closed form: bits unrelated to frequency explain their own share of what frequency leaves
    s = ((signal_bits - signal_bits.mean(0)) ** 2).sum() / V
    assert abs(df.loc[("bits_partial_r2", "canonical"), "value"] - s / (s + 0.36 * d)) < 0.03
    assert df.loc[("bits_r2", "canonical"), "value"] < df.loc[("bits_logfreq_r2", "canonical"), "value"]
    if model.cfg.interface == "canonical":
        assert abs(df.loc[("bits_r2", "own code"), "value"] - df.loc[("bits_r2", "canonical"), "value"]) < 1e-9


def test_the_frequency_bins_and_their_null_keep_every_row_in_its_bin():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 30, 203)  # many ties
    bins = frequency_bins(counts, 7)
    sizes = np.bincount(bins)
    assert len(sizes) == 7 and sizes.max() - sizes.min() <= 1
    for b in range(6):  # every token of a bin is at least as frequent as every token of the next one
        assert counts[bins == b].min() >= counts[bins == b + 1].max()
    moved = np.zeros(len(bins), bool)
    for perm in frequency_null(bins, 20, 3):
        assert sorted(perm) == list(range(len(bins)))
        assert (bins[perm] == bins).all()
        moved |= perm != np.arange(len(bins))
    assert moved.mean() > 0.95  # and it does move them
    one = binned_permutation(np.zeros(50, int), np.random.default_rng(1))
    assert sorted(one) == list(range(50)) and (one != np.arange(50)).any()  # one bin: a plain permutation


def _brute_overlap(W, E, k):
    def nn(x):
        z = x / np.linalg.norm(x, axis=1, keepdims=True)
        s = z @ z.T
        np.fill_diagonal(s, -np.inf)
        return [set(np.argsort(-r)[:k]) for r in s]
    return np.mean([len(a & b) / k for a, b in zip(nn(W), nn(E))])


def test_against_another_runs_table_with_the_null_recomputed_from_scratch(learned, other):
    counts = np.random.default_rng(2).integers(0, 100, learned.cfg.vocab_size)
    df = head_geometry(learned, other, frequencies=counts, boot=50, null_draws=12, seed=4)
    ref = df.dropna(subset=["reference_seed"])
    assert set(ref.measure) == {"cka_to_learned_input", "debiased_cka_to_learned_input", "nn_overlap",
                                "nn_overlap_chance"}
    assert (ref.reference == str(other.checkpoint_path)).all() and (ref.reference_seed == 4).all()
    assert df[df.measure.str.endswith("r2")].reference.isna().all()
    W = learned.unembed.weight.detach().double().numpy()
    E = other.embed.W_E.detach().double().numpy()
    row = df.set_index("measure").loc["nn_overlap"]
    assert abs(row.value - _brute_overlap(W, E, 10)) < 2e-3
    perms = frequency_null(frequency_bins(counts, 10), 12, 4)
    null = [_brute_overlap(W, E[p], 10) for p in perms]
    assert abs(row.null_mean - np.mean(null)) < 2e-3
    assert abs(row.null_lo - np.percentile(null, 2.5)) < 2e-3 and abs(row.null_hi - np.percentile(null, 97.5)) < 2e-3


def test_debiased_cka_is_one_for_the_same_table_and_near_zero_for_unrelated_ones(learned, other):
    counts = np.arange(learned.cfg.vocab_size)[::-1]
    unrelated = head_geometry(learned, other, frequencies=counts, boot=50, null_draws=10).set_index("measure")
    assert abs(unrelated.loc["debiased_cka_to_learned_input", "value"]) < 0.02  # independent Gaussian tables
    assert unrelated.loc["cka_to_learned_input", "value"] > 0.1  # the bias the debiased estimator removes
    with swapped((other.embed.W_E, learned.unembed.weight.detach().clone())):
        same = head_geometry(learned, other, frequencies=counts, boot=50, null_draws=10).set_index("measure")
    assert abs(same.loc["debiased_cka_to_learned_input", "value"] - 1) < 1e-9
    assert same.loc["nn_overlap", "value"] == 1.0


def test_the_null_holds_what_frequency_alone_gives(learned, other):
    """Two tables related only through frequency (rows: a vector per frequency bin, rotated apart, plus noise)
    agree on many neighbours, far above a plain permutation's k/(V-1); the within-bin null reaches that level."""
    V, d = learned.cfg.vocab_size, learned.cfg.d_model
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 10_000, V)
    bins = frequency_bins(counts, 10)
    centres = rng.normal(size=(10, d))
    rotation = np.linalg.qr(rng.normal(size=(d, d)))[0]
    head = centres[bins] + 0.3 * rng.normal(size=(V, d))
    table = centres[bins] @ rotation + 0.3 * rng.normal(size=(V, d))
    with swapped((learned.unembed.weight, head), (other.embed.W_E, table)):
        df = head_geometry(learned, other, frequencies=counts, boot=50, null_draws=20).set_index("measure")
        plain = head_geometry(learned, other, frequencies=counts, boot=50, null_draws=20, freq_bins=1)
    chance = df.loc["nn_overlap_chance", "value"]
    row, cka = df.loc["nn_overlap"], df.loc["debiased_cka_to_learned_input"]
    assert row.value > 5 * chance and cka.value > 0.5
    # within-bin permutations keep the frequency structure: the null sits where the observed overlap is ...
    assert abs(row.value - row.null_mean) < 0.05 and abs(cka.value - cka.null_mean) < 0.1
    # ... while one bin (a plain permutation) falls to chance and to zero CKA
    plain = plain.set_index("measure")
    assert abs(plain.loc["nn_overlap", "null_mean"] - chance) < 0.01
    assert abs(plain.loc["debiased_cka_to_learned_input", "null_mean"]) < 0.05


def test_a_reference_from_the_models_own_run_is_refused(model, learned, other):
    counts = np.ones(model.cfg.vocab_size)
    for m, ref, why in ((learned, learned, "same run"), (model, learned, "same run"),  # seed 3 both
                        (other, other, "same run"), (learned, model, "learned-interface")):
        with pytest.raises(AnalysisError, match=why):
            head_geometry(m, ref, frequencies=counts)
    assert len(head_geometry(model, other, frequencies=counts, boot=20, null_draws=4))  # another seed serves
    with pytest.raises(AnalysisError, match="non-negative counts"):
        head_geometry(model, frequencies=counts[:-1])


def test_the_command_line_takes_the_reference_and_keeps_the_old_default(model, learned, other, tmp_path, capsys):
    from analysis.cli.main import main

    dirs = ["--ckpt", str(learned.ckpt_dir), "--ckpt", str(model.ckpt_dir)]
    with pytest.raises(SystemExit) as e:
        main(["unembed", *dirs, "--reference", str(other.ckpt_dir), "--null-draws", "5", "--out", str(tmp_path / "r")])
    assert e.value.code == 0 and (tmp_path / "r" / "unembed.png").exists()
    df = pd.read_csv(tmp_path / "r" / "unembed.csv")
    for v in ("learned", model.cfg.interface):  # every variant against the other seed, the learned one included
        g = df[(df.variant == v) & df.measure.isin(["debiased_cka_to_learned_input", "nn_overlap"])]
        assert len(g) == 2 and (g.reference_seed == 4).all() and g.null_mean.notna().all()
    with pytest.raises(SystemExit) as e:  # no --reference: the learned one of the same run serves no one
        main(["unembed", *dirs, "--null-draws", "5", "--out", str(tmp_path / "d")])
    assert e.value.code == 0 and "pass --reference" in capsys.readouterr().out
    assert not pd.read_csv(tmp_path / "d" / "unembed.csv").measure.str.contains("cka").any()
    with pytest.raises(SystemExit) as e:
        main(["unembed", *dirs, "--reference", str(learned.ckpt_dir), "--out", str(tmp_path / "bad")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "same run" in err and len(err.splitlines()) == 1 and not (tmp_path / "bad").exists()

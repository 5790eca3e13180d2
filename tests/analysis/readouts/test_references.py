"""Similarity with its references on test-sized random-init checkpoints of two seeds: every pair under its kind,
values equal to the direct formulas on the activations, known answers (a fixed code is the same input in every
seed; an untrained checkpoint is its own initialisation), the reading against ceiling and null, position 0 left
out, and the CLI."""

import numpy as np
import pytest
import torch

from analysis import AnalysisError
from analysis.readouts import references as refs_module
from analysis.readouts.procrustes import procrustes_similarity
from analysis.readouts.references import read_references, reading_lines, similarity_references, verdict
from analysis.readouts.similarity import debiased_cka, layer_activations, linear_cka
from tests._helpers import tiny_checkpoint

N_WINDOWS, T, BOOT = 16, 48, 60
DIRECT = {"debiased_cka": debiased_cka, "linear_cka": linear_cka, "procrustes": procrustes_similarity}


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer):
    return {(v, s): tiny_checkpoint(tmp_path_factory, tokenizer, v, seed=s) for s in (1, 2)
            for v in ("canonical", "gf2")}


@pytest.fixture(scope="module")
def ids(models):
    vocab = next(iter(models.values())).cfg.vocab_size
    return torch.randint(0, vocab, (N_WINDOWS, T), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def refs(models, ids):
    return similarity_references(models, ids, boot=BOOT, null_draws=8, seed=0)


def test_every_pair_under_its_kind_with_the_direct_values(refs, models, ids):
    t = refs.table
    assert t.attrs["skip_first"] and (t.n_tokens == N_WINDOWS * (T - 1)).all() and (t.n_windows == N_WINDOWS).all()
    kinds = {(r.reference, r.variant_a, r.seed_a, r.variant_b, r.seed_b)
             for r in t[(t.layer == 0) & (t.measure == "debiased_cka")].itertuples()}
    trained = {("same_interface_cross_seed", "canonical", 1, "canonical", 2),
               ("same_interface_cross_seed", "gf2", 1, "gf2", 2),
               ("cross_interface_same_seed", "canonical", 1, "gf2", 1),
               ("cross_interface_same_seed", "canonical", 2, "gf2", 2),
               ("cross_interface_cross_seed", "canonical", 1, "gf2", 2),
               ("cross_interface_cross_seed", "gf2", 1, "canonical", 2)}
    assert kinds == trained | {("permutation_null", *k[1:]) for k in trained} | {
        ("own_initialisation", v, s, v, s) for v, s in models}
    assert set(t.measure) == {"debiased_cka", "linear_cka", "procrustes"}
    assert list(dict.fromkeys(t.hook)) == ["hook_embed", "blocks.1.hook_resid_pre", "ln_final.hook_normalized"]
    # every value is the direct formula on the activations, position 0 left out
    acts = {k: {h: a.reshape(N_WINDOWS, T, -1)[:, 1:].reshape(-1, a.shape[1])
                for h, a in layer_activations(m, ids).items()} for k, m in models.items()}
    real = t[~t.reference.isin(["permutation_null", "own_initialisation"])]
    for r in real.itertuples():
        a, b = acts[(r.variant_a, r.seed_a)][r.hook], acts[(r.variant_b, r.seed_b)][r.hook]
        assert r.value == pytest.approx(DIRECT[r.measure](a, b), abs=1e-9)
    # known answers: a fixed code is the same input whatever the seed; an untrained checkpoint is its initialisation
    same = t[(t.reference == "same_interface_cross_seed") & (t.hook == "hook_embed")]
    assert np.allclose(same[["value", "lo", "hi"]], 1.0)
    assert np.allclose(t[t.reference == "own_initialisation"].value, 1.0)
    # ... and two seeds of one interface differ inside, where the backbones differ
    inside = t[(t.reference == "same_interface_cross_seed") & (t.layer > 0) & (t.measure == "debiased_cka")]
    assert (inside.value < 0.99).all()


def test_intervals_and_the_null(refs):
    t = refs.table
    assert refs.draws.shape == (len(t), BOOT)
    boot = t[(t.reference != "permutation_null") & (t.value < 1 - 1e-9)]
    assert (boot.lo <= boot.value).all() and (boot.value <= boot.hi).all() and (boot.draws == BOOT).all()
    deb = boot[boot.measure == "debiased_cka"]
    assert (deb.boot_bias.abs() < (deb.hi - deb.lo) / 2).all()  # draws centred on the estimate
    shifted = boot[boot.measure != "debiased_cka"]
    centres = refs.draws[shifted.index].mean(1)
    assert np.allclose(centres, shifted.value)  # shifted back by their bias
    null = t[t.reference == "permutation_null"]
    assert (null.draws == 8).all() and np.isnan(refs.draws[null.index]).all()
    dn = null[null.measure == "debiased_cka"]
    assert (dn.lo < 0).all() and (dn.hi > 0).all() and dn.value.abs().max() < 0.01
    assert (null[null.measure == "linear_cka"].value > 0).all()  # linear CKA's null sits above 0
    # the pairs of fixed codes sit far above their null at the input
    real = t[(t.reference == "cross_interface_same_seed") & (t.measure == "debiased_cka") & (t.layer == 0)]
    assert (real.lo.to_numpy() > dn[dn.layer == 0].hi.max()).all()


def test_the_reading_against_ceiling_and_null(refs):
    reading = refs.reading()
    t = refs.table
    r = reading[(reading.measure == "debiased_cka") & (reading.layer == 1)].set_index("quantity")
    at = t[(t.measure == "debiased_cka") & (t.layer == 1)]

    def rows(kind, v=None):
        d = at[at.reference == kind]
        return d if v is None else d[d.variant_a == v]

    cross, same = rows("cross_interface_cross_seed"), rows("cross_interface_same_seed")
    ca, cb = rows("same_interface_cross_seed", "canonical"), rows("same_interface_cross_seed", "gf2")
    assert r.loc["cross_seed", "value"] == pytest.approx(cross.value.mean())
    assert r.loc["same_seed", "value"] == pytest.approx(same.value.mean())
    assert r.loc["ceiling_a", "value"] == pytest.approx(ca.value.iloc[0])
    assert r.loc["ceiling_b", "value"] == pytest.approx(cb.value.iloc[0])
    want = cross.value.mean() / np.sqrt(ca.value.iloc[0] * cb.value.iloc[0])
    assert r.loc["relative", "value"] == pytest.approx(want)
    assert r.loc["shared_init", "value"] == pytest.approx(same.value.mean() - cross.value.mean())
    # the interval of the ratio comes from the common draws
    d = refs.draws
    ratio = d[cross.index].mean(0) / np.sqrt(d[ca.index[0]] * d[cb.index[0]])
    assert (r.loc["relative", "lo"], r.loc["relative", "hi"]) == pytest.approx(tuple(np.quantile(ratio, [.025, .975])))
    null = at[(at.reference == "permutation_null") & (at.variant_a != at.variant_b)]
    assert r.loc["null", "hi"] == pytest.approx(null.hi.max()) and r.loc["null", "n_pairs"] == 4
    assert r.loc["cross_seed", "n_pairs"] == 2 and r.loc["ceiling_a", "n_pairs"] == 1
    # over seeds: the seeds are resampled with their pairs (analysis.stats.seed_bootstrap, checked against the exact
    # distribution in test_stats); here every interval lies within the range of its pairs' values
    from analysis.stats import seed_bootstrap

    assert (r.loc["cross_seed", "seed_lo"], r.loc["cross_seed", "seed_hi"]) == pytest.approx(
        seed_bootstrap(cross.value, cross.seed_a, cross.seed_b)[1:], nan_ok=True)
    assert cross.value.min() - 1e-12 <= r.loc["cross_seed", "seed_lo"] <= r.loc["cross_seed", "seed_hi"] <= \
        cross.value.max() + 1e-12
    assert set(reading.variant_a) == {"canonical"} and set(reading.variant_b) == {"gf2"}
    lines = reading_lines(reading)
    assert len(lines) == 3 and all(line.startswith("canonical vs gf2 @ ") for line in lines)
    assert not any(" - at the" in line or "between the null" in line for line in reading_lines(reading,
                                                                                              verdicts=False))
    assert read_references(refs).equals(reading)


def test_verdicts():
    q = {"cross_seed": (0.01, -0.01, 0.03), "null": (0.0, -0.02, 0.02)}
    assert verdict(q) == "at the null"
    q = {"cross_seed": (0.5, 0.45, 0.55), "null": (0.0, -0.02, 0.02), "relative": (0.9, 0.8, 1.02)}
    assert verdict(q) == "at the ceiling"
    q["relative"] = (0.6, 0.55, 0.66)
    assert verdict(q) == "between the null and the ceiling"
    assert "two seeds" in verdict({"cross_seed": (0.5, 0.4, 0.6)})
    assert "second seed" in verdict({"same_seed": (0.5, 0.4, 0.6)})
    assert verdict({}) == "no cross-variant value"


def test_position_zero_left_out(monkeypatch, models, ids):
    """Two unrelated representations that both mark position 0 with one large offset: CKA reads the mark, unless
    position 0 is left out."""
    rng = np.random.default_rng(0)
    fake = {}
    for k, direction in zip(list(models)[:2], (0, 5)):
        x = rng.normal(size=(N_WINDOWS, T, 64))
        x[:, 0, direction] += 50.0
        fake[id(models[k])] = {"hook_embed": x.reshape(-1, 64).astype(np.float32)}
    monkeypatch.setattr(refs_module, "layer_activations", lambda m, *a, **k: fake[id(m)])
    two = dict(list(models.items())[:2])
    got = {}
    for skip in (False, True):
        t = similarity_references(two, ids, boot=0, null_draws=0, init=False, skip_first=skip).table
        got[skip] = t.set_index("measure").value
        assert t.lo.isna().all() and (t.n_tokens == N_WINDOWS * (T - int(skip))).all()
    assert got[False]["debiased_cka"] > 0.8 and abs(got[True]["debiased_cka"]) < 0.02


def test_bad_input(models, ids, tokenizer, tmp_path_factory):
    two = dict(list(models.items())[:2])
    cases = [({("canonical",): models[("canonical", 1)]}, "keys"),
             ({(1, "canonical"): models[("canonical", 1)]}, "keys"),
             ({}, "mapping"),
             ({("canonical", 1): models[("canonical", 1)]}, "at least two")]
    for arg, match in cases:
        with pytest.raises(AnalysisError, match=match):
            similarity_references(arg, ids, init=False)
    with pytest.raises(AnalysisError, match=">= 0"):
        similarity_references(two, ids, boot=-1)
    from fixedid.data import SyntheticLanguage
    from fixedid.data.tokenizer import train_words

    other = tiny_checkpoint(tmp_path_factory, train_words(SyntheticLanguage(5).documents(60), 4096), "canonical")
    with pytest.raises(AnalysisError, match="tokenizer"):
        similarity_references({**two, ("odd", 1): other}, ids[:, :8] % other.cfg.vocab_size, boot=0)
    from analysis.model import HookedFixedIdLM

    deep = HookedFixedIdLM(models[("canonical", 1)].cfg.replace(n_layers=3)).eval()
    deep.tokenizer = tokenizer
    with pytest.raises(AnalysisError, match="hook points"):
        similarity_references({**two, ("deep", 1): deep}, ids, boot=0, null_draws=0, init=False)
    # seeded: the same call gives the same table
    a = similarity_references(two, ids[:6], boot=5, null_draws=2, init=False, procrustes=False, seed=3).table
    b = similarity_references(two, ids[:6], boot=5, null_draws=2, init=False, procrustes=False, seed=3).table
    assert a.equals(b) and set(a.measure) == {"debiased_cka", "linear_cka"}


def test_cli_references(models, ids, tmp_path, capsys):
    from analysis.cli.main import main

    npy = tmp_path / "ids.npy"
    np.save(npy, ids.numpy())
    dirs = {k: str(m.ckpt_dir) for k, m in models.items()}
    out = tmp_path / "refs"
    ckpts = ["--ckpt", dirs[("canonical", 1)], "--ckpt", dirs[("canonical", 2)],
             "--ckpt", f"gf2={dirs[('gf2', 1)]}", "--ckpt", f"gf2={dirs[('gf2', 2)]}"]
    with pytest.raises(SystemExit) as e:
        main(["similarity", "--references", *ckpts, "--data", str(npy), "--boot", "20", "--null", "3",
              "--out", str(out)])
    assert e.value.code == 0
    names = {p.name for p in out.iterdir()}
    assert {"similarity_references.csv", "similarity_reading.csv", "similarity_references.png",
            "similarity_references.pdf"} <= names
    text = capsys.readouterr().out
    assert "canonical vs gf2 @ blocks.1.hook_resid_pre: across seeds" in text and "of the ceiling" in text
    import pandas as pd

    table = pd.read_csv(out / "similarity_references.csv")
    assert set(table.reference) == {"same_interface_cross_seed", "cross_interface_cross_seed",
                                    "cross_interface_same_seed", "own_initialisation", "permutation_null"}
    assert set(zip(table.variant_a, table.seed_a)) >= {("canonical", 1), ("canonical", 2), ("gf2", 1), ("gf2", 2)}
    bad = [["--ckpt", dirs[("canonical", 1)], "--ckpt", dirs[("canonical", 2)], "--ckpt", dirs[("gf2", 1)]],
           ["--references", "--ckpt", dirs[("canonical", 1)], "--ckpt", f"canonical={dirs[('canonical', 1)]}"],
           ["--references", "--ckpt", f"={dirs[('gf2', 1)]}"],
           ["--references", "--ckpt", dirs[("gf2", 1)], "--ckpt", dirs[("gf2", 2)], "--boot", "-1"],
           ["--references", "--random-init", "--ckpt", dirs[("gf2", 1)]]]
    for i, args in enumerate(bad):
        with pytest.raises(SystemExit) as e:
            main(["similarity", *args, "--data", str(npy), "--out", str(tmp_path / f"bad{i}")])
        assert e.value.code == 2 and not (tmp_path / f"bad{i}").exists()
        assert len(capsys.readouterr().err.strip().splitlines()) == 1

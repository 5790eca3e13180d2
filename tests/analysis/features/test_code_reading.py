"""Dictionary latents read against the code, against answers computed apart from the code under test: AUROC by
scikit-learn on dense columns, the code bits from the model's own input, token purity by counting, correlations by
numpy, the one-to-one matching by trying every assignment; then the survey and the ``features`` verb end to end."""

import itertools
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from analysis.cli.main import main as analyze
from analysis.features import dictionary_config, split_windows, train_dictionary
from analysis.features.code_reading import (Latents, bit_auroc, bit_tables, code_auroc, latent_activations,
                                            latent_tokens, token_feature_share)
from analysis.features.matching import activation_correlations, decoder_cosines, match_dictionaries, summarise
from analysis.features.survey import feature_survey, pair_kind, residual_sites, site_depth
from analysis.readouts.probes import perm_table
from fixedid.codes import ids_to_bits


def _synthetic(seed=0, n=600, d=10, vocab=30):
    """Latents with many ties (silent rows and values on a 0.5 grid), and the dense matrix they came from."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, n)
    dense = np.where(rng.random((n, d)) < 0.3, np.round(rng.random((n, d)) * 4) / 2 + 0.5, 0).astype(np.float32)
    dense[:, 0] = 0  # never fires
    dense[:, 1] = (ids % 2 == 0) * 1.5  # fires exactly on even ids: reads bit 0 with AUROC 0 (fires on 0)
    r, c = np.nonzero(dense)
    return Latents(ids, r, c, dense[r, c], d, "h"), dense


def test_bit_auroc_is_scikit_learns_auroc_on_the_dense_activations():
    lat, dense = _synthetic()
    table = np.random.default_rng(1).integers(0, 2, (30, 6))
    table[:, 0] = np.arange(30) % 2
    table[:, 5] = 1  # constant
    got = bit_auroc(lat, table)
    y = table[lat.ids]
    for j in range(lat.d_sae):
        for b in range(5):
            assert got[j, b] == pytest.approx(roc_auc_score(y[:, b], dense[:, j]), abs=1e-12)
    assert np.isnan(got[:, 5]).all() and (got[0, :5] == 0.5).all()
    best = code_auroc(lat, {"code": table})
    row = best.iloc[0]
    assert row.auroc == pytest.approx(1.0) and row.latent == 1 and row.fires_on == 0 and not row.constant
    assert best.iloc[5].constant and np.isnan(best.iloc[5].auroc)
    # the best latent of every other bit is the largest max(AUROC, 1 - AUROC) over the latents
    ref = [max(max(a, 1 - a) for a in (roc_auc_score(y[:, b], dense[:, j]) for j in range(1, lat.d_sae)))
           for b in range(1, 5)]
    np.testing.assert_allclose(best.auroc[1:5], ref, atol=1e-12)


def test_the_code_bits_are_what_the_model_reads_and_perm_bits_are_the_probes(model):
    tables = bit_tables(model.cfg, seed=3)
    V, n = model.cfg.vocab_size, model.cfg.n_bits
    ids = torch.arange(V // 32 * 32).reshape(-1, 32)
    _, cache = model.run_with_cache(ids, names_filter=["blocks.0.hook_resid_pre"])
    code_in = (cache["blocks.0.hook_resid_pre"][..., :n] > 0).reshape(-1, n).numpy().astype(np.int64)  # msb first
    np.testing.assert_array_equal(code_in[:, ::-1], tables["code"][:ids.numel()])
    np.testing.assert_array_equal(tables["perm"], ids_to_bits(perm_table(V, 3), n))
    assert ("canonical" in tables) == (model.cfg.interface == "gf2")
    if "canonical" in tables:
        np.testing.assert_array_equal(tables["canonical"], ids_to_bits(np.arange(V), n))


def test_token_purity_by_counting():
    lat, dense = _synthetic(seed=2)
    per = latent_tokens(lat)
    for j in range(lat.d_sae):
        counts = Counter(lat.ids[dense[:, j] > 0].tolist())
        assert per.fires[j] == sum(counts.values()) and per.types[j] == len(counts)
        if counts:
            top, c = counts.most_common(1)[0]
            assert per.top_share[j] == pytest.approx(c / sum(counts.values()))
            assert counts[per.top_id[j]] == c
        else:
            assert per.top_id[j] == -1 and np.isnan(per.top_share[j])
    share = token_feature_share(per, purity=0.5, min_fires=5)
    scored = [j for j in range(lat.d_sae) if per.fires[j] >= 5]
    assert share["n_scored"] == len(scored)
    assert share["n_token_features"] == sum(per.top_share[j] >= 0.5 for j in scored)


def test_matching_against_numpy_and_every_assignment(gf2):
    model = gf2
    lat_a, dense_a = _synthetic(seed=3)
    dense_b = np.where(dense_a[:, ::-1] > 0, np.random.default_rng(4).random(dense_a.shape), 0).astype(np.float32)
    dense_b[:, 3] += dense_a[:, 2]  # one latent of b partly follows one of a
    r, c = np.nonzero(dense_b)
    lat_b = Latents(lat_a.ids, r, c, dense_b[r, c], 10, "h")
    corr = activation_correlations(lat_a, lat_b)
    with np.errstate(invalid="ignore", divide="ignore"):
        ref = np.corrcoef(dense_a.T.astype(np.float64), dense_b.T.astype(np.float64))[:10, 10:]
    np.testing.assert_allclose(corr[1:, :-1], ref[1:, :-1], atol=1e-9)
    assert np.isnan(corr[0]).all() and np.isnan(corr[:, -1]).all()  # silent latents: no correlation
    sim = np.random.default_rng(5).random((4, 5))
    best = max(np.mean([sim[i, p[i]] for i in range(4)]) for p in itertools.permutations(range(5), 4))
    got = summarise(sim)
    assert got["hungarian_mean"] == pytest.approx(best) and got["max_mean"] == pytest.approx(sim.max(1).mean())
    cfg = dictionary_config(model, hook="blocks.0.hook_resid_post", expansion=2, k=4)
    from analysis.features import SparseDictionary
    torch.manual_seed(0)
    a, b = SparseDictionary(cfg), SparseDictionary(cfg)
    wa, wb = a.W_dec.detach().double().numpy(), b.W_dec.detach().double().numpy()
    ref = (wa / np.linalg.norm(wa, axis=1, keepdims=True)) @ (wb / np.linalg.norm(wb, axis=1, keepdims=True)).T
    np.testing.assert_allclose(decoder_cosines(a, b), ref, atol=1e-12)


@pytest.fixture(scope="module")
def gf2(tmp_path_factory, tokenizer):
    """One fixed-code checkpoint for the tests whose answer does not depend on which code (gf2 carries both the code
    and the id's bits as families)."""
    from tests._helpers import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory, tokenizer, "gf2")


@pytest.fixture(scope="module")
def survey(gf2, learned):
    return feature_survey({"learned": learned, "code": gf2}, sites=["blocks.0.hook_resid_pre",
                                                                      "blocks.1.hook_resid_post"],
                          train_tokens=4096, eval_tokens=1024, expansion=2, k=4, dictionary_seeds=2,
                          batch_tokens=256, progress=False)


def test_a_dictionary_matches_itself_and_shares_nothing_with_its_null(gf2):
    model = gf2
    train, held = split_windows(model, train_tokens=4096, eval_tokens=1024)
    cfg = dictionary_config(model, hook="blocks.1.hook_resid_post", expansion=2, k=4)
    d, _ = train_dictionary(model, cfg, train, batch_tokens=256, progress=False)
    lat = latent_activations(model, d, held)
    assert lat.n_tokens == held.numel() and (lat.value > 0).all()
    with torch.no_grad():
        acts = model.run_with_cache(held, names_filter=[cfg.hook_name])[1][cfg.hook_name]
        np.testing.assert_allclose(lat.dense(), d.encode(acts.reshape(-1, cfg.d_in)).numpy(), atol=1e-5)
    m = match_dictionaries(d, d, lat, lat).set_index(["measure", "stat"])
    assert (m.value - 1).abs().max() < 1e-9
    assert (m.null < 0.7).all(), m


def test_the_survey_reads_every_model_site_and_reference(survey, gf2):
    model = gf2
    code, tokens, matching, dicts = (survey[k] for k in ("code", "tokens", "matching", "dictionaries"))
    runs = code.drop_duplicates(["model", "init", "dict_seed", "hook"])
    assert len(runs) == 2 * (2 * 2 + 2)  # sites x (models x dictionary seeds + twins)
    assert runs.dict_seed.nunique() == 6  # every dictionary of a site starts from its own seed
    assert set(code.family) == {"code", "perm"} | ({"canonical"} if model.cfg.interface == "gf2" else set())
    assert code[~code.constant].auroc.between(0.5, 1).all()
    assert set(tokens.init) == {"trained", "random_init"} and tokens.share.between(0, 1).all()
    assert set(matching.pair) == {"variant", "random init", "dictionary seed"}
    assert len(matching) == 2 * (1 + 2 + 2) * 4  # sites x pairs x (2 measures x 2 stats)
    assert list(code.columns[:7]) == ["model", "interface", "model_seed", "init", "dict_seed", "hook", "depth"]
    assert set(dicts.metric) >= {"fvu", "l0", "loss_recovered"}
    assert sorted(code.depth.unique()) == [0.0, 2.0]


def test_pairs_and_depths_are_named_for_what_they_are(model, learned):
    assert pair_kind(model, learned) == "variant"
    other = type(model)(model.cfg.replace(seed=model.cfg.seed + 1))
    assert pair_kind(model, other) == "seed" and pair_kind(model, model) == "other checkpoint"
    assert residual_sites(model) == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    assert [site_depth(h) for h in ("blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre", "blocks.1.hook_mlp_out",
                                    "blocks.1.hook_resid_post")] == [0, 1, 1.5, 2]


def test_the_features_verb_writes_tables_and_figures(gf2, learned, tmp_path, capsys):
    model = gf2
    out = tmp_path / "f"
    with pytest.raises(SystemExit) as e:
        analyze(["features", "--ckpt", f"a={model.ckpt_dir}", "--ckpt", f"b={learned.ckpt_dir}", "--site",
                 "blocks.1.hook_resid_post", "--tokens", "2048", "--eval-tokens", "512", "--expansion", "2", "--k",
                 "4", "--no-twins", "--out", str(out)])
    assert e.value.code == 0, capsys.readouterr().err
    for key in ("code", "tokens", "matching", "dictionaries"):
        df = pd.read_csv(out / f"features_{key}.csv")
        assert len(df)
    assert set(pd.read_csv(out / "features_tokens.csv").init) == {"trained"}
    for stem in ("features_code", "features_tokens", "features_matching"):
        assert (out / f"{stem}.png").stat().st_size > 5000 and (out / f"{stem}.pdf").exists()
    assert "2 dictionaries" in capsys.readouterr().out


def test_the_id_bits_top_bit_is_read_apart(survey, gf2):
    model = gf2
    from analysis.features.code_reading import bit_groups

    code = survey["code"]
    groups = bit_groups(code)
    assert (groups[code.family == "perm"] == "perm").all()
    ids = code[code.id_bits & ~code.constant]
    assert set(ids[ids.model == "learned"].family) == {"code"}  # a learned table: the id's bits stand in
    assert set(ids[ids.model == "code"].family) == ({"canonical"} if model.cfg.interface == "gf2" else {"code"})
    # the top varying bit of the ids the held-out tokens hold, found by counting
    top = max(b for b in range(model.cfg.n_bits) if 0 < ((code.bit == b) & ~code.constant & code.id_bits).sum())
    assert (groups[ids.index][ids.bit == top] == "top").all() and (groups[ids.index][ids.bit < top] == "id").all()
    if model.cfg.interface == "gf2":
        assert (groups[(code.family == "code") & (code.model == "code")] == "code").all()

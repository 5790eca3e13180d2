"""GF(2) recoding ablations: exact identities of the buffer swap, the families, the sweep, and bad input."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from analysis import AnalysisError
from analysis.corpus import corpus_tokens
from analysis.causal.recoding import (FAMILIES, column_offset, draw_recodings, matched_hamming, other_variant_code,
                                     own_bits, permuted_inputs, recoded, recoded_table, recoding_from_json,
                                     recoding_sweep, recoding_to_json, token_cycle, transvection_walk)
from fixedid import FixedIdError
from fixedid.codes import GF2Code, code_table
from fixedid.data import SyntheticLanguage

from tests._helpers import tiny_checkpoint


SEED = 3  # of the shared model fixtures (conftest.py)


def make(tmp_path_factory, tokenizer, interface, **changes):
    return tiny_checkpoint(tmp_path_factory, tokenizer, interface, seed=SEED, **changes)


def tokens(model, n=4, t=24, seed=0):
    return torch.randint(0, model.cfg.vocab_size, (n, t), generator=torch.Generator().manual_seed(seed))


def test_identity_is_bit_identical_and_the_buffer_comes_back(model):
    x = tokens(model)
    before = model(x)
    code = model.embed.code.clone()
    with recoded(model, GF2Code.identity(16)):
        assert torch.equal(model(x), before)
    walk = transvection_walk(16, 8, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="inside"):
        with recoded(model, walk):
            assert not torch.equal(model.embed.code, code)
            raise RuntimeError("inside")
    assert torch.equal(model.embed.code, code) and torch.equal(model(x), before)


def test_a_map_followed_by_its_inverse_is_the_identity(model):
    r = GF2Code.random(16, seed=5, affine=True)
    assert torch.equal(recoded_table(model, r.inverse() @ r), model.embed.code)
    assert not torch.equal(recoded_table(model, r), model.embed.code)
    # reading R's table, then mapping it back by R^-1, is reading the own code: the bits round-trip exactly
    assert np.array_equal(r.inverse().encode_bits(r.encode_bits(own_bits(model))), own_bits(model))


@pytest.mark.parametrize("bit_order,value_map", [("msb", "pm1"), ("lsb", "pm1"), ("msb", "01")])
def test_a_single_bit_offset_flips_that_code_column_for_every_token(tmp_path_factory, tokenizer, bit_order, value_map):
    m = make(tmp_path_factory, tokenizer, "gf2", bit_order=bit_order, value_map=value_map)
    own = m.embed.code
    for j in (0, 5, 15):
        flipped = own.clone()
        flipped[:, j] = -own[:, j] if value_map == "pm1" else 1 - own[:, j]
        assert torch.equal(recoded_table(m, column_offset(m, j)), flipped)


def test_other_variant_feeds_the_other_code(model, tmp_path_factory, tokenizer):
    c = model.cfg
    table = recoded_table(model, other_variant_code(model))
    if c.interface == "gf2":
        expect = code_table(c.vocab_size, 16, bit_order=c.bit_order, value_map=c.value_map)
    else:
        expect = code_table(c.vocab_size, 16, recoding=c.replace(interface="gf2").recoding(), bit_order=c.bit_order,
                            value_map=c.value_map)
        sibling = make(tmp_path_factory, tokenizer, "gf2")  # the same config's gf2 variant reads exactly this
        assert torch.equal(sibling.embed.code, torch.from_numpy(expect))
    assert torch.equal(table, torch.from_numpy(expect))


def test_families_and_json_round_trip(model):
    for family in FAMILIES:
        edits = draw_recodings(model, family, draws=2, seed=1)
        assert edits
        for k, d, edit in edits:
            back = recoding_from_json(recoding_to_json(edit))
            assert (back == edit) if isinstance(edit, GF2Code) else np.array_equal(back, edit)
    walks = {k: e for k, d, e in draw_recodings(model, "transvection", draws=1)}
    assert walks[0] == GF2Code.identity(16) and walks[1] != GF2Code.identity(16)
    assert [k for k, _, _ in draw_recodings(model, "offset")] == list(range(16))
    perm = token_cycle(50, 8, np.random.default_rng(0))
    assert sorted(perm) == list(range(50)) and (perm != np.arange(50)).sum() == 8


def test_token_permutation_applies_to_every_variant_and_restores(model, learned):
    for m in (model, learned):
        x = tokens(m)
        before = m(x)
        perm = np.arange(m.cfg.vocab_size)
        perm[[3, 7]] = [7, 3]
        with permuted_inputs(m, perm):
            y = m(x.clone().apply_(lambda t: {3: 7, 7: 3}.get(t, t)))
        assert torch.allclose(y, before, atol=1e-5)  # reading row perm[t] for t = reading token perm[t]
        assert torch.equal(m(x), before)


def test_sweep_frame_is_tidy_reproducible_and_k0_is_free(model):
    df = recoding_sweep(model, "transvection", [0, 2], draws=2, tokens=480, n_pairs=8, tasks=("ioi", "induction"))
    assert list(df.columns) == ["interface", "family", "k", "draw", "changed", "on_support", "hamming", "loss",
                                "delta_loss", "acc_ioi", "acc_induction", "recoding"]
    assert len(df) == 4 and df.attrs["n_tokens"] == 480
    assert (df[df.k == 0].delta_loss == 0).all() and (df[df.k == 0].changed == 0).all()
    assert (df[df.k == 2].changed > 0).any()
    row = df[df.k == 2].iloc[1]
    with recoded(model, recoding_from_json(row.recoding)):
        from analysis.causal.recoding import corpus_loss
        assert corpus_loss(model, corpus_tokens(model, tokens=480)) == row.loss
    assert json.loads(row.recoding)["r"] == 0


def brute_support(own_table, edited_table, x):
    """(on_support, hamming) by a search: each occurrence of ``x`` counts once; a row is on support when it equals
    some row of the own table, its distance is the number of columns in which it differs from its own row."""
    occ = x.numpy().reshape(-1)
    on = [bool((own_table == edited_table[t][None]).all(1).any()) for t in occ]
    return np.mean(on), np.mean([(own_table[t] != edited_table[t]).sum() for t in occ])


def test_support_and_distance_of_every_family_against_a_search(model, learned):
    x = tokens(model, n=3, t=16, seed=4)
    own = model.embed.code.cpu().numpy().copy()
    frames = [recoding_sweep(model, f, ks, draws=2, data=x, tasks=()) for f, ks in
              (("transvection", [0, 1, 3]), ("uniform", None), ("token-permutation", [8]), ("offset", [0, 15]))]
    for row in pd.concat(frames).itertuples():
        edit = recoding_from_json(row.recoding)
        if isinstance(edit, GF2Code):
            edited = recoded_table(model, edit).cpu().numpy()
        else:
            edited = own[edit]
        on, ham = brute_support(own, edited, x)
        assert row.on_support == pytest.approx(on, abs=1e-12) and row.hamming == pytest.approx(ham, abs=1e-12)
    walks = frames[0]
    assert (walks[walks.k == 0].hamming == 0).all() and (walks[walks.k == 0].on_support == 1).all()
    assert (frames[2].on_support == 1).all()  # a token's row is some token's code
    off = frames[3]
    assert (off.hamming == 1).all()
    assert list(off.bit_constant) == [model.cfg.interface == "canonical", False]  # 333 tokens: MSB column constant
    if model.cfg.interface == "canonical":
        assert off.on_support.iloc[0] == 0.0  # flipping a constant column never gives a token's code
    perm = recoding_sweep(learned, "token-permutation", [8], draws=1, data=x, tasks=())
    assert perm.on_support.isna().all() and perm.hamming.isna().all()  # no bits to count


def test_matched_hamming_interpolates_each_curve_and_never_extrapolates():
    rows = []
    for v, slope, hams in (("a", 1.0, [0.0, 1.0, 2.0]), ("b", 2.0, [0.0, 2.0, 4.0])):
        for k, h in enumerate(hams):
            for d, jitter in enumerate((-0.1, 0.1)):  # two draws per k, averaged by the function
                rows.append(dict(variant=v, family="transvection", k=k, draw=d, hamming=h + jitter,
                                 delta_loss=slope * (h + jitter), on_support=1 - h / 4))
    df = pd.DataFrame(rows + [dict(variant="c", family="token-permutation", k=8, draw=0, hamming=np.nan,
                                   delta_loss=1.0, on_support=np.nan)])
    m = matched_hamming(df, [1.0, 3.0]).set_index(["variant", "hamming"])
    assert m.loc[("a", 1.0), "delta_loss"] == pytest.approx(1.0)
    assert m.loc[("b", 1.0), "delta_loss"] == pytest.approx(2.0)
    assert np.isnan(m.loc[("a", 3.0), "delta_loss"]) and m.loc[("b", 3.0), "delta_loss"] == pytest.approx(6.0)
    assert m.loc[("b", 3.0), "on_support"] == pytest.approx(0.25)
    assert m.loc[("a", 1.0), "measured"] and not m.loc[("b", 1.0), "measured"]
    default = matched_hamming(df)  # every measured distance inside both ranges (0 to 2)
    assert sorted(set(default.hamming)) == [0.0, 1.0, 2.0] and set(default.variant) == {"a", "b"}
    with pytest.raises(AnalysisError, match="no rows"):
        matched_hamming(df[df.variant == "c"])


def test_bad_input(model, learned, tmp_path):
    with pytest.raises(AnalysisError, match="no code to recode"):
        recoded_table(learned, GF2Code.identity(16))
    with pytest.raises(AnalysisError, match="no code to recode"):
        recoding_sweep(learned, "uniform", tokens=480, tasks=())
    with pytest.raises(AnalysisError, match="8 bits but the model's code has 16"):
        recoded_table(model, GF2Code.identity(8))
    with pytest.raises(FixedIdError, match="singular"):
        GF2Code(np.zeros((16, 16), dtype=np.uint8), np.zeros(16, dtype=np.uint8))
    with pytest.raises(AnalysisError, match="out of range"):
        column_offset(model, 16)
    with pytest.raises(AnalysisError, match="unknown recoding family"):
        draw_recodings(model, "rotation")
    np.save(tmp_path / "big.npy", np.full((2, 8), model.cfg.vocab_size))
    with pytest.raises(AnalysisError, match="outside the vocabulary"):
        corpus_tokens(model, tmp_path / "big.npy")
    np.save(tmp_path / "long.npy", np.zeros((2, 49), dtype=np.int64))
    with pytest.raises(AnalysisError, match="longer than the model's context"):
        corpus_tokens(model, tmp_path / "long.npy")


def test_corpus_tokens_from_text_and_the_own_validation_stream(model, tmp_path):
    own = corpus_tokens(model, tokens=480)
    assert own.shape == (10, 48) and own.dtype == torch.long
    p = tmp_path / "docs.txt"
    p.write_text("\n".join(SyntheticLanguage(0).documents(30, seed=9)))
    x = corpus_tokens(model, p, tokens=200, seq_len=20)
    assert x.shape == (10, 20)
    q = tmp_path / "docs.jsonl"
    q.write_text("\n".join(json.dumps({"text": d}) for d in SyntheticLanguage(0).documents(30, seed=9)))
    assert torch.equal(corpus_tokens(model, q, tokens=200, seq_len=20), x)
    assert torch.equal(corpus_tokens(model, x), x)  # prepared ids pass as is
    with pytest.raises(AnalysisError, match="integer tensor"):
        corpus_tokens(model, x.float())


def run_cli(*args):
    from analysis.cli.main import main
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    return e.value.code


def test_cli_writes_table_and_figures_and_refuses_bad_input(model, learned, tmp_path, capsys):
    out = tmp_path / "rec"
    assert run_cli("recoding", "--ckpt", model.ckpt_dir, "--ckpt", learned.ckpt_dir, "--family", "token-permutation",
                   "--ks", "0,4", "--draws", "2", "--tokens", "480", "--tasks", "ioi", "--n-pairs", "4",
                   "--out", out) == 0
    df = pd.read_csv(out / "recoding.csv")
    assert len(df) == 8 and set(df.variant) == {model.cfg.interface, "learned"}
    assert {"loss", "delta_loss", "acc_ioi", "recoding", "base_loss"} <= set(df.columns)
    assert (out / "recoding.png").stat().st_size > 0 and (out / "recoding.pdf").stat().st_size > 0
    assert (out / "recoding_hamming.png").stat().st_size > 0  # the code model's rows have a Hamming distance
    assert df[df.variant == "learned"].hamming.isna().all() and df[df.variant != "learned"].hamming.notna().all()
    printed = capsys.readouterr().out
    assert "k=4" in printed and "hamming" in printed
    bad = tmp_path / "bad"
    for args, message in ((["--ckpt", learned.ckpt_dir, "--family", "uniform"], "no code to recode"),
                          (["--ckpt", model.ckpt_dir, "--ks", "1,x"], "--ks: must be comma-separated integers"),
                          (["--ckpt", model.ckpt_dir, "--draws", "0"], "--draws: must be a positive integer"),
                          (["--ckpt", model.ckpt_dir, "--family", "offset", "--ks", "16"], "out of range"),
                          (["--ckpt", tmp_path / "nowhere"], "no checkpoint directory")):
        assert run_cli("recoding", *args, "--tokens", "480", "--tasks", "none", "--out", bad) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not bad.exists()

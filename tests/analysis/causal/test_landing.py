"""Edits compared at a matched landing share: the standardisation against hand-computed values, and the recoding
sweep's two parts against an independent route (the on-support part of a recoding is a token swap)."""

import numpy as np
import pandas as pd
import pytest

from analysis import AnalysisError
from analysis.causal.landing import landing_parts, matched_landing, split_parts
from analysis.causal.recoding import corpus_loss, permuted_inputs, recoded_table, recoding_from_json, recoding_sweep
from analysis.causal.support import CodeSupport, code_keys, table_bits
from analysis.corpus import corpus_tokens

SEED = 3  # of the shared model fixtures (conftest.py)


def parts():
    # variant a: two edits; variant b: one edit that never lands
    return pd.DataFrame(dict(variant=["a", "a", "b"], delta_on=[0.3, 0.1, 0.0], delta_off=[0.2, 0.0, 0.6],
                             share_on=[0.3, 0.1, 0.0], share_off=[0.1, 0.0, 0.5], delta_loss=[0.55, 0.1, 0.6]))


def test_standardisation_by_hand():
    p = landing_parts(parts())
    np.testing.assert_allclose(p.moved, [0.4, 0.1, 0.5])
    np.testing.assert_allclose(p.landing, [0.75, 1.0, 0.0])
    m = matched_landing(parts(), [0.0, 0.5, 1.0]).set_index(["variant", "landing_at"])
    # a: rate_on = (0.3 + 0.1) / (0.3 + 0.1) = 1, rate_off = 0.2 / 0.1 = 2, moved = mean(0.4, 0.1) = 0.25
    assert m.loc[("a", 0.5), "delta_loss"] == pytest.approx(0.25 * (0.5 * 1 + 0.5 * 2))
    assert m.loc[("a", 0.0), "delta_loss"] == pytest.approx(0.25 * 2)
    assert m.loc[("a", 1.0), "delta_loss"] == pytest.approx(0.25 * 1)
    assert m.loc[("a", 0.5), "landing_own"] == pytest.approx(0.4 / 0.5)
    assert m.loc[("a", 0.5), "measure_own"] == pytest.approx(0.325) and m.loc[("a", 0.5), "rows"] == 2
    # b never lands: no on-support rate, so only the all-off share has an estimate
    assert m.loc[("b", 0.0), "delta_loss"] == pytest.approx(0.6)
    assert np.isnan(m.loc[("b", 0.5), "delta_loss"]) and np.isnan(m.loc[("b", 1.0), "delta_loss"])
    default = matched_landing(parts())  # one common share: the mean of the groups' own (0.8 and 0)
    assert list(default.landing_at) == [pytest.approx(0.4)] * 2


def test_at_the_own_share_it_is_the_sum_of_the_parts():
    df = parts().iloc[:2]
    own = landing_parts(df).share_on.sum() / landing_parts(df).moved.sum()
    m = matched_landing(df, [own])
    assert m.delta_loss.iloc[0] == pytest.approx((df.delta_on + df.delta_off).mean())


def test_flip_split_tables_convert():
    split = pd.DataFrame(dict(variant="v", bit=[0, 1], flip=[1.0, 2.0], on=[0.8, 0.0], off=[0.1, 2.0],
                              on_support=[0.9, 0.0]))
    p = split_parts(split)
    np.testing.assert_allclose(p.share_off, [0.1, 1.0])
    m = matched_landing(p.assign(delta_loss=p.flip), 0.5).iloc[0]
    assert m.delta_loss == pytest.approx(1.0 * (0.5 * 0.8 / 0.9 + 0.5 * 2.1 / 1.1))


def test_bad_input():
    with pytest.raises(AnalysisError, match="lacks share_off"):
        matched_landing(parts().drop(columns="share_off"))
    with pytest.raises(AnalysisError, match=r"in \[0, 1\]"):
        matched_landing(parts(), 1.5)
    with pytest.raises(AnalysisError, match="each >= 0"):
        matched_landing(parts().assign(share_on=[0.95, 0.1, 0.0]))
    with pytest.raises(AnalysisError, match="moves any"):
        matched_landing(parts().assign(share_on=0.0, share_off=0.0))
    with pytest.raises(AnalysisError, match="no column seed"):
        matched_landing(parts(), by="seed")
    with pytest.raises(AnalysisError, match="lacks"):
        split_parts(pd.DataFrame(dict(on=[1.0])))


def test_sweep_parts_are_a_token_swap_and_an_off_code_rest(model):
    x = corpus_tokens(model, tokens=480)
    df = recoding_sweep(model, "transvection", [0, 2], draws=2, data=x, tasks=(), split=True)
    k0 = df[df.k == 0]
    assert (k0[["share_on", "share_off", "delta_on", "delta_off"]] == 0).all().all()
    base = corpus_loss(model, x)
    sup = CodeSupport(model)
    counts = np.bincount(x.numpy().reshape(-1), minlength=model.cfg.vocab_size)
    for row in df[df.k == 2].itertuples():
        keys = code_keys(table_bits(model, recoded_table(model, recoding_from_json(row.recoding))))
        landing = sup.landing(keys)
        moved = keys != sup.keys
        on = moved & (landing >= 0)
        assert row.share_on == pytest.approx(counts[on].sum() / counts.sum())
        assert row.share_off == pytest.approx(counts[moved & ~on].sum() / counts.sum())
        perm = np.where(on, landing, np.arange(len(keys)))  # each landing id reads its landing token's row
        with permuted_inputs(model, perm):
            assert row.delta_on == pytest.approx(corpus_loss(model, x) - base, abs=1e-6)
    cyc = recoding_sweep(model, "token-permutation", [8], draws=1, data=x, tasks=(), split=True)
    assert cyc[["share_on", "delta_on"]].isna().all().all()


def test_cli_split_writes_the_parts_and_prints_the_matched_share(model, tmp_path, capsys):
    from analysis.cli.main import main

    out = tmp_path / "rec"
    with pytest.raises(SystemExit) as e:
        main(["recoding", "--ckpt", str(model.ckpt_dir), "--ks", "0,2", "--draws", "2", "--tokens", "480",
              "--tasks", "none", "--split", "--out", str(out)])
    assert e.value.code == 0
    df = pd.read_csv(out / "recoding.csv")
    assert {"delta_on", "delta_off", "share_on", "share_off"} <= set(df.columns)
    printed = capsys.readouterr().out
    g = df[(df.k == 2) & (df.share_on + df.share_off > 0)]  # one variant: the common share is its own
    on, off = g.share_on.sum(), g.share_off.sum()
    own = on / (on + off)
    est = (g.delta_on.sum() + g.delta_off.sum()) / (on + off) * (g.share_on + g.share_off).mean()
    assert f"k=2, landing {own:.0%}: {model.cfg.interface} {est:+.3f}" in printed

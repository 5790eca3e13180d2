"""The demo's bit-flip and recoding sections on test-sized models: the matched comparisons they report, each
recomputed from the tables by hand."""

import re

import numpy as np
import pandas as pd
import pytest

import analysis.demo.bitflip as bitflip
import analysis.demo.recoding as recoding
from analysis.tasks import task_pairs

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer):
    return {v: tiny_checkpoint(tmp_path_factory, tokenizer, v, seed=6) for v in ("canonical", "gf2", "learned")}


@pytest.fixture(scope="module")
def small(models):
    with pytest.MonkeyPatch.context() as mp:  # a few windows: the sections' arithmetic, not their statistics
        mp.setattr(bitflip, "TOKENS", 480)
        mp.setattr(recoding, "TOKENS", 480)
        mp.setattr(recoding, "TRANSVECTIONS", (0, 1, 4, 16))
        mp.setattr(recoding, "DRAWS", 2)
        pairs = task_pairs(models["canonical"], "ioi", 4, seed=0)
        flips, noise, maps = bitflip.bitflip_tables(models, pairs)
        rec = recoding.recoding_table(models)
        yield flips, noise, maps, rec, bitflip.bitflip_reading(flips, noise, maps, split_figure="s.png"), \
            recoding.recoding_reading(rec, hamming_figure="h.png")


def test_bit_flip_lines_leave_constant_columns_out_of_means_and_maxima(small):
    flips, _, _, _, lines, _ = small
    text = "\n".join(lines)
    for v, g in flips.groupby("variant"):
        vary = g[~g.bit_constant.astype(bool)]
        top = vary.loc[vary.delta_loss.idxmax()]
        line = next(s for s in lines if s.startswith(f"- {v}: flipping"))
        assert f"costs {vary.delta_loss.mean():+.2f} nats on average" in line
        assert f"largest: bit {int(top.bit)}, {top.delta_loss:+.2f}" in line
        if g.bit_constant.any():  # the tiny test vocabulary leaves canonical's top 7 columns constant
            const = g[g.bit_constant.astype(bool)]
            assert f"its {len(const)} columns that are constant" in line
            assert f"cost {const.delta_loss.mean():+.2f} on average, reported apart" in line
    assert "![a bit flip split by where it lands](s.png)" in text


def test_the_split_table_is_the_flips_of_the_varying_columns(small):
    flips, _, _, _, lines, _ = small
    split = pd.DataFrame(flips.attrs["split"])
    assert pd.concat([flips, flips]).shape[0] == 2 * len(flips)  # the attrs do not stop a concatenation
    for v, g in flips.groupby("variant"):
        vary = g[~g.bit_constant.astype(bool)].set_index("bit")
        sp = split[split.variant == v].set_index("bit")
        assert list(sp.index) == list(vary.index)
        np.testing.assert_allclose(sp.flip, vary.delta_loss, atol=1e-9)  # the same flips, run a second time
        np.testing.assert_allclose(sp.on_support, vary.on_support, atol=1e-12)
        row = next(s for s in lines if s.startswith(f"| {v} | ") and s.count("|") == 11)
        assert f"| {sp.flip.mean():+.3f} | {sp.on.mean():+.3f} | {sp.off.mean():+.3f} |" in row
        some = sp[sp.on_support > 0]  # landing and random swaps: over the columns that land on tokens at all
        assert f"| {len(some)} of {len(sp)} |" in row
        if len(some):
            assert f"| {some.landing.mean():+.3f} | {some.random.mean():+.3f} |" in row


def test_noise_is_reported_beside_its_decoding_accuracy_and_at_matched_decodability(small):
    _, noise, _, _, lines, _ = small
    assert noise.decode_acc.notna().all()
    for v, g in noise.groupby("variant"):
        pts = g.groupby("scale")[["decode_acc", "delta_loss"]].mean()
        s = pts.loc[0.5]
        row = next(r for r in lines if r.startswith(f"| {v} | ") and "noise" not in r and "(" in r
                   and "scale" not in r)
        assert f"{s.delta_loss:+.2f} ({100 * s.decode_acc:.0f}%)" in row
        # the matched cell at 50% decoding, interpolated by hand between the two scales around it
        d = pts.decode_acc.to_numpy()
        matched = next(r for r in lines if r.startswith(f"| {v} | ") and ("scale" in r or "not reached" in r))
        if d.min() <= 0.5 <= d.max():
            i = int(np.flatnonzero(d <= 0.5)[0])  # the first scale at or below 50% (decoding falls with scale)
            lo, hi = pts.iloc[i], pts.iloc[i - 1] if i > 0 else pts.iloc[i]
            want = lo.delta_loss if hi.decode_acc == lo.decode_acc else lo.delta_loss + (
                0.5 - lo.decode_acc) / (hi.decode_acc - lo.decode_acc) * (hi.delta_loss - lo.delta_loss)
            assert f"{want:+.3f} (scale" in matched.split("|")[3]
        else:
            assert "not reached" in matched.split("|")[3]


def test_recoding_section_compares_at_matched_hamming(small):
    _, _, _, rec, _, lines = small
    text = "\n".join(lines)
    assert "### At matched disturbance" in text and "![loss change and code support" in text
    walks = rec[rec.family == "transvection"]
    for v in ("canonical", "gf2"):
        pts = walks[walks.variant == v].groupby("k")[["hamming", "delta_loss"]].mean()
        pts = pts.groupby("hamming").mean().sort_index()
        h = pts.index.to_numpy()
        row = next(r for r in lines if r.startswith("| 1 |"))
        cell = row.split("|")[2 + ["canonical", "gf2"].index(v)]
        if h.min() <= 1.0 <= h.max():
            assert f"{np.interp(1.0, h, pts.delta_loss.to_numpy()):+.3f}" in cell
        else:
            assert "not reached" in cell
    eq = walks[walks.k == 4].groupby("variant")[["delta_loss", "hamming"]].mean()
    line = next(s for s in lines if s.startswith("At equal k = 4"))
    for v in ("canonical", "gf2"):
        assert f"{v}'s codes by {eq.loc[v, 'hamming']:.2f} bits" in line
    what = next(s for s in lines if s.startswith("What this changes") or s.startswith("No common distance"))
    if what.startswith("What"):
        gap = float(re.search(r"canonical - gf2 is ([+-][0-9.]+) nats", what).group(1))
        assert gap == pytest.approx(eq.loc["canonical", "delta_loss"] - eq.loc["gf2", "delta_loss"], abs=6e-4)
    assert rec[rec.variant == "learned"].hamming.isna().all()


def _standardised(g, at):
    """The landing-share standardisation written out: pooled rates per stratum, scaled to share ``at``."""
    on, off = g.share_on.sum(), g.share_off.sum()
    rate_on = g.delta_on.sum() / on if on > 0 else np.nan
    rate_off = g.delta_off.sum() / off if off > 0 else np.nan
    terms = ([at * rate_on] if at > 0 else []) + ([(1 - at) * rate_off] if at < 1 else [])
    return (g.share_on + g.share_off).mean() * sum(terms), on / (on + off)


def test_recoding_and_flips_at_a_matched_landing_share(small):
    flips, _, _, rec, flip_lines, lines = small
    walks = rec[(rec.family == "transvection") & (rec.k == 4) & (rec.share_on + rec.share_off > 0)]
    assert set(walks.variant) == {"canonical", "gf2"}  # both variants' 4-step walks move some token's code
    own = {v: _standardised(walks[walks.variant == v], 0.5)[1] for v in ("canonical", "gf2")}
    at = (own["canonical"] + own["gf2"]) / 2
    est = {v: _standardised(walks[walks.variant == v], at)[0] for v in ("canonical", "gf2")}
    raw = walks.groupby("variant").delta_loss.mean()
    line = next(s for s in lines if s.startswith("At k = 4 the difference"))
    assert f"is {raw['canonical'] - raw['gf2']:+.3f} nats as measured and {est['canonical'] - est['gf2']:+.3f}" in line
    assert "uses the matched Hamming distance" in line
    split = pd.DataFrame(flips.attrs["split"])
    split = split[~split.bit_constant.astype(bool)]
    parts = split.assign(delta_on=split.on, delta_off=split.off, share_on=split.on_support,
                         share_off=1 - split.on_support)
    own = {v: _standardised(g, 0.5)[1] for v, g in parts.groupby("variant")}
    at = np.mean(list(own.values()))
    line = next(s for s in flip_lines if s.startswith("At a matched landing share"))
    assert f"scaled to {100 * at:.0f}% of the flipped rows" in line
    for v, g in parts.groupby("variant"):
        est = _standardised(g, at)[0]
        assert (f"{v} {est:+.3f} (at its own" if np.isfinite(est) else f"{v} n/a") in line

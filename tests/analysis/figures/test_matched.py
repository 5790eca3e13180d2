"""The matched-disturbance figures draw the numbers of their tables (synthetic tables with known values)."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.figures.interventions import effect_plot, flip_split_plot, noise_decode_plot  # noqa: E402
from analysis.figures.recoding import disturbance_plot  # noqa: E402


def recodings():
    rows = []
    for v, slope in (("canonical", 1.0), ("gf2", 0.5)):
        for k in (0, 1, 2):
            for d in (0, 1):
                h = k * (1 + d) * (2 if v == "gf2" else 1)
                rows.append(dict(variant=v, family="transvection", k=k, draw=d, hamming=float(h),
                                 on_support=1 / (1 + h), delta_loss=slope * h))
        for j, const in ((0, True), (5, False)):
            rows.append(dict(variant=v, family="offset", k=j, draw=0, hamming=1.0, on_support=0.0 if const else 0.9,
                             delta_loss=0.3, bit_constant=const))
    rows.append(dict(variant="learned", family="token-permutation", k=8, draw=0, hamming=np.nan, on_support=np.nan,
                     delta_loss=0.1))
    return pd.DataFrame(rows)


def test_disturbance_plot_draws_the_per_k_means_against_the_distance():
    df = recodings()
    fig = disturbance_plot(df)
    left, right = fig.axes[:2]
    lines = {tuple(np.round(ln.get_xdata(), 6)): ln.get_ydata() for ln in left.get_lines() if len(ln.get_xdata()) > 2}
    for v, slope, scale in (("canonical", 1.0, 1), ("gf2", 0.5, 2)):
        means = df[(df.variant == v) & (df.family == "transvection")].groupby("k").hamming.mean().to_numpy()
        assert tuple(np.round(means, 6)) in lines
        np.testing.assert_allclose(lines[tuple(np.round(means, 6))], slope * means)
    hollow = [c for c in left.collections if len(c.get_offsets()) and c.get_facecolor().size == 0]
    assert len(hollow) == 2  # the constant offset column of each variant
    assert "learned" not in [t.get_text() for t in right.get_legend().get_texts()]  # no bits: left out


def test_noise_decode_plot_puts_decoding_accuracy_on_the_x_axis():
    s = pd.DataFrame(dict(kind="noise", scale=[0.5, 0.5, 1.0, 1.0], draw=[0, 1, 0, 1], delta_loss=[0.1, 0.3, 0.5, 0.7],
                          decode_acc=[0.9, 1.0, 0.4, 0.6]))
    fig = noise_decode_plot({"gf2": s})
    ln = fig.axes[0].get_lines()[0]
    np.testing.assert_allclose(ln.get_xdata(), [0.95, 0.5])
    np.testing.assert_allclose(ln.get_ydata(), [0.2, 0.6])
    lo, hi = fig.axes[0].get_xlim()
    assert lo > hi  # decoding falls to the right


def test_split_plot_bars_are_the_split_table_and_constant_columns_are_left_out():
    split = pd.DataFrame(dict(variant="canonical", bit=[0, 3, 4], flip=[0.5, 0.2, 0.4], on=[0.0, 0.15, 0.1],
                              off=[0.5, 0.05, 0.3], landing=[0.0, 0.15, 0.1], random=[0.0, 0.3, 0.2],
                              interaction=0.0, on_support=[0.0, 0.75, 0.25], hamming_random=4.0,
                              bit_constant=[True, False, False]))
    fig = flip_split_plot(split)
    heights = sorted(round(p.get_height(), 6) for p in fig.axes[0].patches)
    assert heights == sorted([0.2, 0.4, 0.15, 0.1, 0.05, 0.3, 0.3, 0.2])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["3\n75%", "4\n25%"]


def test_constant_columns_are_hatched_in_the_per_bit_bars():
    s = pd.DataFrame(dict(kind="bitflip", bit=[0, 1], pos=pd.NA, delta_loss=[0.1, 0.2], delta_loss_lo=[0.0, 0.1],
                          delta_loss_hi=[0.2, 0.3], bit_constant=[True, False], component=None))
    fig = effect_plot({"canonical": s})
    bars = [p for p in fig.axes[0].patches]
    assert [bool(b.get_hatch()) for b in bars] == [True, False]

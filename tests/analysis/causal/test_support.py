"""Code support, Hamming distance and nearest-row decoding of input edits, each against a brute-force count."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from analysis import AnalysisError
from analysis.causal.interventions import bit_groups, input_intervention, input_rms
from analysis.causal.support import CodeSupport, code_keys, decode_hits, nearest_rows, popcount, table_bits

SEED = 4  # of the shared model fixtures (conftest.py)


def tokens(model, n=4, t=12, seed=0):
    return torch.randint(0, model.cfg.vocab_size, (n, t), generator=torch.Generator().manual_seed(seed))


def brute_nearest(rows, table):
    """Index of the nearest table row of each row: every distance written out, no expansion of the square."""
    rows, table = np.asarray(rows, np.float64), np.asarray(table, np.float64)
    return np.array([int(np.argmin([np.sqrt(((r - t) ** 2).sum()) for t in table])) for r in rows])


def test_nearest_rows_and_decoding_match_a_brute_force_search():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(9, 3))
    own = rng.integers(0, 9, size=200)
    for sd in (0.05, 0.5, 2.0):
        rows = table[own] + sd * rng.normal(size=(200, 3))
        want = brute_nearest(rows, table)
        assert np.array_equal(nearest_rows(rows, table), want)
        assert decode_hits(rows, own, table) == int((want == own).sum())
    assert decode_hits(table, np.arange(9), table) == 9  # an unnoised row is its own nearest
    with pytest.raises(AnalysisError, match="same width"):
        nearest_rows(np.zeros((2, 3)), np.zeros((4, 2)))


def test_keys_popcount_and_landing_of_a_small_code():
    bits = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 1]], dtype=np.uint8)  # codes 0, 1, 6 (column j = bit j)
    assert list(code_keys(bits)) == [0, 1, 6]
    assert list(popcount([0, 1, 6, 7, 255])) == [0, 1, 2, 3, 8]


def test_the_support_of_a_models_code_is_its_own_table(model, learned):
    sup = CodeSupport(model)
    table = model.embed.code.cpu().numpy()
    assert len(set(sup.keys.tolist())) == model.cfg.vocab_size  # one code per token
    assert np.array_equal(sup.landing(sup.keys), np.arange(model.cfg.vocab_size))
    bits = table_bits(model, model.embed.code)
    assert np.array_equal(bits, (table > 0).astype(np.uint8))  # pm1: a column above 0 is a 1
    with pytest.raises(AnalysisError, match="reads no n-bit code"):
        CodeSupport(learned)
    assert CodeSupport.of(learned) is None


def flipped_row_is_a_token(table, row):
    return bool((table == row[None]).all(1).any())


@pytest.mark.parametrize("pos", [None, 5])
def test_bit_flip_support_and_distance_against_the_code_table(model, pos):
    x = tokens(model)
    bits = [0, 6, 7, 8, 12, 15]
    r = input_intervention(model, "bitflip", x, bits=bits, pos=pos).summary
    table = model.embed.code.cpu().numpy()
    occ = x.numpy().reshape(-1) if pos is None else x[:, pos].numpy()
    for b, row in zip(bits, r.itertuples()):
        flipped = table[occ].copy()
        flipped[:, b] = -flipped[:, b]
        want = np.mean([flipped_row_is_a_token(table, f) for f in flipped])
        assert row.on_support == pytest.approx(want, abs=1e-12)
        assert row.hamming == 1.0 and row.edited == pytest.approx(len(occ) / x.numel())
        if row.bit_constant:
            assert row.on_support == 0.0  # a column no token differs in never leads to a token
    if model.cfg.interface == "canonical":  # the last column is the id's lowest bit: 332 ^ 1 = 333 is no token
        last = r[r.bit == 15].iloc[0]
        assert last.on_support == pytest.approx(1 - np.mean(occ == model.cfg.vocab_size - 1))


def test_swap_distance_midpoint_and_the_learned_variant(model, learned):
    x = tokens(model)
    table = model.embed.code.cpu().numpy()
    s = input_intervention(model, "swap", x, positions=[2, 7], token=11).summary
    for p, row in zip((2, 7), s.itertuples()):
        want = np.mean([(table[t] != table[11]).sum() for t in x[:, p].numpy()])
        assert row.hamming == pytest.approx(want) and row.on_support == 1.0
    m = input_intervention(model, "midpoint", x, bits=[3]).summary.iloc[0]
    assert (m.on_support, m.hamming, m.edited) == (0.0, 0.5, 1.0)
    for kind, kw in (("swap", dict(positions=[2])), ("noise", dict(scales=[0.5]))):
        row = input_intervention(learned, kind, tokens(learned), **kw).summary.iloc[0]
        assert np.isnan(row.on_support) and np.isnan(row.hamming)  # no bits to count
    n = input_intervention(model, "noise", x, scales=[0.0, 0.5]).summary
    assert list(n.on_support) == [1.0, 0.0] and n.hamming.iloc[0] == 0.0 and np.isnan(n.hamming.iloc[1])
    assert "decode_acc" not in s.columns


def test_noise_decoding_accuracy_against_a_brute_force_search(model, learned):
    """The noised rows are rebuilt from their documented draws (checked against the sweep's own loss), then every
    row's nearest row of the widened input table is found by a search over the vocabulary."""
    for m in (model, learned):
        x = tokens(m, n=3, t=10, seed=2)
        seed, scales = 5, [0.3, 1.0, 3.0]
        r = input_intervention(m, "noise", x, scales=scales, seed=seed)
        table = m.input_code(torch.arange(m.cfg.vocab_size)).detach()  # [vocab, d_model], as the model reads it
        width = m.embed.code.shape[-1] if m.cfg.is_fixed else m.cfg.d_model
        for scale, row in zip(scales, r.summary.itertuples()):
            z = torch.stack([torch.randn(10, width, generator=torch.Generator().manual_seed(
                int(np.random.default_rng([seed, 0, s]).integers(1 << 62)))) for s in range(3)])
            z = z * scale * input_rms(m)
            noised = (m.input_code(x) + (m.embed.widen(z) if m.cfg.is_fixed else z)).detach()
            with torch.no_grad():
                logits = m.run_with_hooks(x, fwd_hooks=[("hook_embed", lambda a, hook, e=noised: e)])
            ce = F.cross_entropy(logits[:, :-1].transpose(1, 2), x[:, 1:], reduction="none").mean(1)
            got = r.items[r.items.scale == scale].sort_values("item").loss.to_numpy()
            assert np.allclose(got, ce.numpy(), atol=2e-4)  # these are the rows the sweep fed the model
            want = brute_nearest(noised.reshape(-1, noised.shape[-1]).numpy(), table.numpy())
            assert row.decode_acc == pytest.approx(np.mean(want == x.reshape(-1).numpy()), abs=1e-12)
        assert r.summary.decode_acc.is_monotonic_decreasing  # more noise, fewer rows still decode
        assert r.summary.decode_acc.between(0.01, 0.99).any()  # the search had rows to get wrong


def test_bit_groups_keep_constant_columns_apart(model):
    x = tokens(model, n=2, t=8)
    s = input_intervention(model, "bitflip", x).summary
    g = bit_groups(s).set_index("group")
    vary = s[~s.bit_constant.astype(bool)]
    assert g.loc["varying", "n_bits"] == len(vary)
    assert g.loc["varying", "mean_delta_loss"] == pytest.approx(vary.delta_loss.mean())
    assert g.loc["varying", "max_bit"] == int(vary.loc[vary.delta_loss.idxmax(), "bit"])
    if model.cfg.interface == "canonical":  # 333 tokens: the top 7 columns (MSB first) are 0 for every token
        assert g.loc["constant", "n_bits"] == 7 and g.loc["constant", "mean_on_support"] == 0.0
    with pytest.raises(AnalysisError, match="per-bit edits"):
        bit_groups(input_intervention(model, "noise", x, scales=[0.5]).summary)


def test_matched_decoding_interpolates_against_decoding_accuracy():
    import pandas as pd

    from analysis.causal.interventions import matched_decoding

    s = pd.DataFrame(dict(kind="noise", variant="a", scale=[0.5, 1.0, 2.0, 3.0], decode_acc=[1.0, 1.0, 0.8, 0.4],
                          delta_loss=[0.1, 0.2, 0.4, 0.8]))
    m = matched_decoding(s, (0.9, 0.5, 0.3)).set_index("decode_acc")
    # 0.9 lies between scale 1 (the last scale at which every row decodes, 0.2) and scale 2 (0.8, 0.4)
    assert m.loc[0.9, "delta_loss"] == pytest.approx(0.3) and m.loc[0.9, "scale"] == pytest.approx(1.5)
    assert m.loc[0.5, "delta_loss"] == pytest.approx(0.7) and m.loc[0.5, "scale"] == pytest.approx(2.75)
    assert np.isnan(m.loc[0.3, "delta_loss"])  # below what was measured: not extrapolated
    with pytest.raises(AnalysisError, match="decode_acc"):
        matched_decoding(s.drop(columns="decode_acc"))

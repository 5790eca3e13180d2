"""A bit flip split by where it lands, against forwards built from token ids and from naive hooked edits."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from analysis import AnalysisError
from analysis.causal.flipsplit import PARTS, flip_split, random_others, split_table

SEED = 4  # of the shared model fixtures (conftest.py)
TOL = dict(atol=2e-4)


def tokens(model, n=4, t=14, seed=3):
    return torch.randint(0, model.cfg.vocab_size, (n, t), generator=torch.Generator().manual_seed(seed))


def loss(model, x, targets, hook=None):
    with torch.no_grad():
        logits = model.run_with_hooks(x, fwd_hooks=[("hook_embed", hook)] if hook else [])
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), targets[:, 1:], reduction="none").mean(1).numpy()


def landing_by_search(model, bit):
    """For every token, the token whose code row equals its row with column ``bit`` negated (pm1), or -1: a search
    over the rendered table, with no keys."""
    table = model.embed.code.cpu().numpy()
    out = np.full(len(table), -1)
    for t, row in enumerate(table):
        f = row.copy()
        f[bit] = -f[bit]
        hit = np.flatnonzero((table == f[None]).all(1))
        out[t] = hit[0] if len(hit) else -1
    return out


def bits_to_test(model):
    """A column whose flip lands on a token for some but not all rows, one that never does, one that varies."""
    on = {b: (landing_by_search(model, b) >= 0).mean() for b in range(model.cfg.n_bits)}
    mixed = [b for b, s in on.items() if 0 < s < 1]
    never = [b for b, s in on.items() if s == 0]
    return sorted(set(mixed[:2] + never[:1] + [model.cfg.n_bits - 1]))


def test_each_part_is_the_forward_it_names(model):
    x = tokens(model)
    bits = bits_to_test(model)
    assert len(bits) >= 2
    r = flip_split(model, x, bits=bits, seed=2)
    assert len(r.summary) == len(bits) * len(PARTS)
    cols = lambda b: model.embed.widen(torch.nn.functional.one_hot(torch.tensor(b), 16).float()).bool()  # noqa: E731
    for b in bits:
        land = landing_by_search(model, b)[x.numpy()]
        on = torch.from_numpy(land >= 0)

        def flip_where(where, b=b):
            def hook(act, hook):
                act = act.clone()
                c = cols(b)
                sel = where[..., None] & c
                act[sel] = -act[sel]
                return act
            return hook
        want = {"bitflip": loss(model, x, x, flip_where(torch.ones_like(on))),
                "flip-off-support": loss(model, x, x, flip_where(~on))}
        # the on-support part is reading the landing token: a plain forward of token ids
        swapped = torch.where(on, torch.from_numpy(np.where(land >= 0, land, 0)), x)
        want["flip-on-support"] = want["swap-landing"] = loss(model, swapped, x)
        rand = torch.from_numpy(np.stack([random_others(model.cfg.vocab_size, row, 2, b, i)
                                          for i, row in enumerate(x.numpy())]))
        assert not (rand == x).any()
        want["swap-random"] = loss(model, torch.where(on, rand, x), x)
        items = r.items[r.items.bit == b]
        for part, w in want.items():
            got = items[items.kind == part].sort_values("item").loss.to_numpy()
            np.testing.assert_allclose(got, w, **TOL, err_msg=f"{part}, bit {b}")
        s = r.summary[r.summary.bit == b].set_index("kind")
        assert s.loc["bitflip", "on_support"] == pytest.approx(float(on.float().mean()))
        assert s.loc["flip-on-support", "edited"] == pytest.approx(float(on.float().mean()))
        off = s.loc["flip-off-support", "on_support"]
        assert off == 0.0 if (~on).any() else np.isnan(off)  # NaN: the part edits no row
        if on.any():
            table = model.embed.code.cpu().numpy()
            dist = (table[x.numpy()] != table[rand.numpy()]).sum(-1)[on.numpy()]
            assert s.loc["swap-random", "hamming"] == pytest.approx(dist.mean())
            assert s.loc["swap-landing", "hamming"] == 1.0


def test_split_table_lines_up_the_parts(model):
    x = tokens(model, n=3, t=10)
    r = flip_split(model, x, bits=[0, 15])
    t = split_table(r.summary)
    assert list(t.bit) == [0, 15]
    np.testing.assert_allclose(t.interaction, t.flip - t.on - t.off, atol=1e-12)
    np.testing.assert_allclose(t.landing, t.on, atol=1e-5)  # the on-support part is the swap to the landing token
    s = r.summary.set_index(["bit", "kind"])
    assert t.on_support.tolist() == [s.loc[(b, "bitflip"), "on_support"] for b in (0, 15)]
    both = split_table(r.summary.assign(variant="v"))
    assert list(both.variant) == ["v", "v"]
    with pytest.raises(AnalysisError, match="lacks"):  # a summary without one of the parts
        split_table(r.summary[r.summary.kind != "swap-random"])


def test_bad_input(model, learned):
    with pytest.raises(AnalysisError, match="learned variant has none"):
        flip_split(learned, tokens(learned))
    with pytest.raises(AnalysisError, match="out of range"):
        flip_split(model, tokens(model), bits=[16])
    with pytest.raises(AnalysisError, match="no bits"):
        flip_split(model, tokens(model), bits=[])

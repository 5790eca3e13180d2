"""Interventions on the input code, component ablations and bit x layer maps, each against a naive hooked forward."""

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from analysis import AnalysisError
from analysis.causal.bitmap import bit_layer_map
from analysis.cli.main import main
from analysis.causal.ablation import ablation
from analysis.stats import t_interval
from analysis.causal.interventions import input_intervention, input_rms
from analysis.causal.recoding import column_offset, corpus_loss, recoded
from analysis.tasks import task_pairs

from tests._helpers import tiny_checkpoint

TOL = dict(atol=2e-4, rtol=1e-4)


SEED = 4  # of the shared model fixtures (conftest.py)


def make(tmp_path_factory, tokenizer, interface, **changes):
    return tiny_checkpoint(tmp_path_factory, tokenizer, interface, seed=SEED, **changes)


def tokens(model, n=5, t=20, seed=0):
    return torch.randint(0, model.cfg.vocab_size, (n, t), generator=torch.Generator().manual_seed(seed))


def naive(model, x, embed_edit=None, hooks=()):
    """Per-sequence loss and logits of one plain hooked forward."""
    fwd = list(hooks) + ([("hook_embed", lambda act, hook: embed_edit(act))] if embed_edit else [])
    with torch.no_grad():
        logits = model.run_with_hooks(x, fwd_hooks=fwd)
    ce = F.cross_entropy(logits[:, :-1].transpose(1, 2), x[:, 1:], reduction="none").mean(1)
    return ce, logits


def kl(p, q):
    lp, lq = p.log_softmax(-1), q.log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1)


def flip_columns(model, act, bit, pos=None):
    cols = model.embed.widen(torch.nn.functional.one_hot(torch.tensor(bit), model.cfg.n_bits).float()).bool()
    out = act.clone()
    sl = slice(None) if pos is None else slice(pos, pos + 1)
    out[:, sl, cols] = -act[:, sl, cols] if model.cfg.value_map == "pm1" else 1 - act[:, sl, cols]
    return out


@pytest.mark.parametrize("pos", [None, 7])
def test_bit_flips_match_a_naive_hooked_forward(model, pos):
    x = tokens(model)
    base_ce, base_logits = naive(model, x)
    r = input_intervention(model, "bitflip", x, pos=pos, bits=[0, 9, 15])
    assert list(r.summary.bit) == [0, 9, 15] and len(r.items) == 15
    for bit in (0, 9, 15):
        ce, logits = naive(model, x, lambda a: flip_columns(model, a, bit, pos))
        got = r.items[r.items.bit == bit].sort_values("item")
        torch.testing.assert_close(torch.tensor(got.loss.to_numpy(), dtype=torch.float32), ce, **TOL)
        torch.testing.assert_close(torch.tensor(got.delta_loss.to_numpy(), dtype=torch.float32), ce - base_ce,
                                   **TOL)
        want_kl = kl(base_logits[:, :-1], logits[:, :-1]).mean(1)
        torch.testing.assert_close(torch.tensor(got.kl.to_numpy(), dtype=torch.float32), want_kl, **TOL)


def test_a_flip_everywhere_is_the_recoding_offset_of_that_column(model):
    x = tokens(model, n=4, t=24, seed=1)
    r = input_intervention(model, "bitflip", x, bits=[3])
    with recoded(model, column_offset(model, 3)):
        want = corpus_loss(model, x)
    assert abs(r.summary.loss.iloc[0] - want) < 1e-4


def test_midpoint_sets_the_columns_to_the_middle_value(model):
    x = tokens(model)
    r = input_intervention(model, "midpoint", x, bits=[5])
    cols = model.embed.widen(torch.nn.functional.one_hot(torch.tensor(5), 16).float()).bool()

    def mid(a):
        a = a.clone()
        a[..., cols] = 0.0  # pm1: the middle of -1 and +1
        return a
    ce, _ = naive(model, x, mid)
    torch.testing.assert_close(torch.tensor(r.items.sort_values("item").loss.to_numpy(), dtype=torch.float32), ce,
                               **TOL)


def test_swapping_a_row_is_reading_another_token_there(model, learned):
    for m in (model, learned):
        x = tokens(m)
        r = input_intervention(m, "swap", x, positions=[4, -1], token=11)
        assert list(r.summary.pos) == [4, 19]
        y = x.clone()
        y[:, 4] = 11
        ce = F.cross_entropy(m(y)[:, :-1].transpose(1, 2), x[:, 1:], reduction="none").mean(1)
        got = r.items[r.items.pos == 4].sort_values("item").loss.to_numpy()
        torch.testing.assert_close(torch.tensor(got, dtype=torch.float32), ce, **TOL)
        # the final position predicts nothing: swapping it cannot change the loss
        assert np.allclose(r.items[r.items.pos == 19].delta_loss, 0)


def test_random_swaps_and_noise_are_reproducible_and_scale_zero_is_a_no_op(model, learned):
    for m in (model, learned):
        x = tokens(m)
        a = input_intervention(m, "swap", x, positions=[3], seed=2)
        b = input_intervention(m, "swap", x, positions=[3], seed=2)
        assert a.items.loss.equals(b.items.loss) and (a.items.delta_loss.abs() > 0).any()
        n = input_intervention(m, "noise", x, scales=[0.0, 0.5], draws=2, seed=1)
        assert len(n.summary) == 4 and np.allclose(n.items[n.items.scale == 0].delta_loss, 0, atol=1e-5)
        assert (n.summary[n.summary.scale == 0.5].delta_loss.abs() > 1e-4).all()
        assert input_rms(m) > 0


def test_bit_edits_on_the_learned_variant_are_refused(learned):
    for kind in ("bitflip", "midpoint"):
        with pytest.raises(AnalysisError, match="learned variant has none"):
            input_intervention(learned, kind, tokens(learned))
    with pytest.raises(AnalysisError, match="bit x layer"):
        bit_layer_map(learned, tokens(learned), pos=2)


@pytest.mark.parametrize("component", ["head", "attn", "mlp", "block"])
def test_ablations_match_naive_hooked_forwards(model, learned, component):
    for m in (model, learned):
        x = tokens(m, n=6)
        z = ablation(m, x, component=component, how="zero")
        mean = ablation(m, x, component=component, how="mean")
        res = ablation(m, x, component=component, how="resample", seed=3)
        n_units = m.cfg.n_layers * (m.cfg.n_heads if component == "head" else 1)
        assert len(z.summary) == len(mean.summary) == len(res.summary) == n_units
        with torch.no_grad():
            _, cache = m.run_with_cache(x)
        layer, head = 1, 2
        if component == "head":
            name = f"blocks.{layer}.attn.hook_z"
            ref = cache[name][:, :, head]
        else:
            name = {"attn": f"blocks.{layer}.hook_attn_out", "mlp": f"blocks.{layer}.hook_mlp_out",
                    "block": f"blocks.{layer}.hook_resid_post"}[component]
            ref = cache[name] - (cache[f"blocks.{layer}.hook_resid_pre"] if component == "block" else 0)
        perm = torch.as_tensor(res.attrs["resample_order"])
        assert not (perm == torch.arange(len(perm))).any()  # resampling never gives a sequence its own value
        for result, value in ((z, torch.zeros_like(ref)), (mean, ref.mean((0, 1)).expand_as(ref)),
                              (res, ref[perm])):
            captured = {}

            def capture(act, hook):
                captured["pre"] = act
                return act

            def write(act, hook, value=value):
                act = act.clone()
                if component == "head":
                    act[:, :, head] = value
                elif component == "block":
                    act[:] = captured["pre"] + value
                else:
                    act[:] = value
                return act
            ce, _ = naive(m, x, hooks=[(f"blocks.{layer}.hook_resid_pre", capture), (name, write)])
            rows = result.items[(result.items.layer == layer)
                                & ((result.items["head"] == head) if component == "head" else True)]
            got = torch.tensor(rows.sort_values("item").loss.to_numpy(), dtype=torch.float32)
            torch.testing.assert_close(got, ce, **TOL)


def test_prompt_measures_and_intervals(model):
    batch = task_pairs(model, "ioi", 12, seed=0)
    r = ablation(model, batch, component="mlp", how="zero", pos=-1)
    assert r.attrs["data"] == "pairs" and set(r.summary.pos) == {batch.n_pos - 1}
    it = r.items
    assert ((it.logit_diff > 0).astype(float) == it.correct).all()
    with torch.no_grad():
        base = model(batch.clean)[:, -1]
    base_ld = base.gather(1, batch.answer[:, None])[:, 0] - base.gather(1, batch.wrong[:, None])[:, 0]
    one = it[it.layer == 0].sort_values("item")
    torch.testing.assert_close(torch.tensor((one.logit_diff - one.delta_logit_diff).to_numpy(), dtype=torch.float32),
                               base_ld, **TOL)
    s = r.summary.iloc[0]
    assert s.delta_logit_diff_lo <= s.delta_logit_diff <= s.delta_logit_diff_hi and s.n == 12
    m, lo, hi = t_interval(np.array([2.0, 2.0, 2.0]))
    assert m == lo == hi == 2.0
    m, lo, hi = t_interval(np.array([0.0, 1.0, 2.0, 3.0]))
    assert m == 1.5 and lo < 1.5 < hi and abs((hi - lo) / 2 - 3.182446 * np.std([0, 1, 2, 3], ddof=1) / 2) < 1e-5


def test_bit_layer_map_matches_a_naive_patching_loop(model):
    x = tokens(model, n=3, t=10, seed=4)
    p, bits = 4, [1, 12]
    df = bit_layer_map(model, x, pos=p, bits=bits)
    with torch.no_grad():
        _, clean_cache = model.run_with_cache(x)
        clean_last = model(x)[:, -1]
    for bit in bits:
        flip = lambda a, b=bit: flip_columns(model, a, b, p)  # noqa: E731
        for layer in range(model.cfg.n_layers):
            for q in (p - 1, p, 7, 9):
                name = f"blocks.{layer}.hook_resid_pre"

                def patch(act, hook, q=q, name=name):
                    act = act.clone()
                    act[:, q] = clean_cache[name][:, q]
                    return act
                _, logits = naive(model, x, flip, hooks=[(name, patch)])
                want = kl(clean_last, logits[:, -1]).mean()
                got = df[(df.bit == bit) & (df.layer == layer) & (df.pos == q)].value.iloc[0]
                assert abs(got - float(want)) < 2e-4 * max(1.0, float(want))
    at_p = df[(df.layer == 0) & (df.pos == p)]
    assert np.allclose(at_p.restored, 1.0, atol=1e-4)  # undoing the flip where it was made, before any block
    assert np.allclose(df[df.pos < p].restored, 0.0)  # the flip cannot reach earlier positions


@pytest.mark.filterwarnings("ignore:flipping bit")  # a bit whose flip barely moves the metric: compared all the same
@pytest.mark.parametrize("site, hook", [("resid_mid", "hook_resid_mid"), ("resid_post", "hook_resid_post"),
                                        ("attn_out", "hook_attn_out"), ("mlp_out", "hook_mlp_out")])
def test_bit_layer_map_of_every_site_with_the_logit_difference(model, site, hook):
    """The other sites and the task metric, against the same naive loop: the clean prompts of a task with bit k
    flipped at the first differing position, the clean activation of ``site`` written back at (layer, q)."""
    batch = task_pairs(model, "ioi", 3, seed=2)
    x, T = batch.clean, batch.clean.shape[1]
    p, bits = 3, [2, 14]
    df = bit_layer_map(model, batch, pos=p, bits=bits, site=site, metric="logit_diff")

    def ld(logits):
        last = logits[:, -1]
        return (last.gather(1, batch.answer[:, None]) - last.gather(1, batch.wrong[:, None]))[:, 0].mean()

    with torch.no_grad():
        _, clean_cache = model.run_with_cache(x)
    for bit in bits:
        flip = lambda a, b=bit: flip_columns(model, a, b, p)  # noqa: E731
        flipped = float(ld(naive(model, x, flip)[1]))
        for layer in range(model.cfg.n_layers):
            for q in (p, p + 1, T - 1):
                name = f"blocks.{layer}.{hook}"

                def patch(act, hook, q=q, name=name):
                    act = act.clone()
                    act[:, q] = clean_cache[name][:, q]
                    return act
                want = float(ld(naive(model, x, flip, hooks=[(name, patch)])[1]))
                row = df[(df.bit == bit) & (df.layer == layer) & (df.pos == q)].iloc[0]
                assert abs(row.value - want) < 2e-4 * max(1.0, abs(want)), (site, bit, layer, q)
                assert abs(row.flipped - flipped) < 2e-4 * max(1.0, abs(flipped))


def test_bad_input_is_one_clear_error(model, learned):
    x = tokens(model)
    with pytest.raises(AnalysisError, match="out of range for a 16-bit code"):
        input_intervention(model, "bitflip", x, bits=[16])
    with pytest.raises(AnalysisError, match="position 20 is out of range"):
        input_intervention(model, "bitflip", x, pos=20)
    with pytest.raises(AnalysisError, match="head 4 is out of range"):
        ablation(model, x, heads=[4])
    with pytest.raises(AnalysisError, match="layer 2 is out of range"):
        ablation(model, x, layers=[2])
    with pytest.raises(AnalysisError, match="unknown component"):
        ablation(model, x, component="neuron")
    with pytest.raises(AnalysisError, match="vocabulary"):
        input_intervention(model, "swap", x, token=10**6)
    with pytest.raises(AnalysisError, match="beyond the vocabulary|vocabulary"):
        input_intervention(model, "bitflip", torch.full((2, 8), model.cfg.vocab_size))
    with pytest.raises(AnalysisError, match="context"):
        input_intervention(model, "bitflip", torch.zeros((2, 49), dtype=torch.long))


def test_review_edge_cases_are_refused_or_handled(model):
    x = tokens(model, n=3)
    r = ablation(model, x, component="mlp", how="zero", layers=[1, 0])  # any order: units run in order of layer
    assert list(r.summary.layer) == [0, 1]
    for call, match in ((lambda: input_intervention(model, "bitflip", x, bits=[]), "no bits"),
                        (lambda: input_intervention(model, "bitflip", x, bits=[True]), "out of range"),
                        (lambda: input_intervention(model, "noise", x, scales=[float("inf")]), "finite"),
                        (lambda: input_intervention(model, "swap", x, positions=[]), "no positions"),
                        (lambda: ablation(model, x, heads=[]), "no heads"),
                        (lambda: ablation(model, x, how="mean", reference=torch.zeros((2, 99), dtype=torch.long)),
                         "context"),
                        (lambda: bit_layer_map(model, x, pos=2, bits=[]), "no bits")):
        with pytest.raises(AnalysisError, match=match):
            call()


def run_ok(args):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 0


def test_cli_writes_tables_and_figures_and_refuses_bad_input(model, learned, tmp_path, capsys):
    npy = tmp_path / "ids.npy"
    np.save(npy, tokens(model, n=4, t=16).numpy())
    out = tmp_path / "flip"
    run_ok(["interventions", "--ckpt", str(model.ckpt_dir), "--kind", "bitflip", "--data", str(npy), "--bits", "0,7",
          "--out", str(out)])
    for f in ("interventions.csv", "interventions_items.csv", "interventions.png", "interventions.pdf"):
        assert (out / f).stat().st_size > 0
    printed = capsys.readouterr().out
    assert "bitflip edits over 64 corpus tokens" in printed and "bit 7" in printed
    out2 = tmp_path / "abl"
    run_ok(["interventions", "--ckpt", str(learned.ckpt_dir), "--ckpt", str(model.ckpt_dir), "--kind", "ablate",
          "--task", "ioi", "--n-pairs", "8", "--out", str(out2)])
    assert (out2 / "interventions.png").exists()
    out3 = tmp_path / "bl"
    run_ok(["interventions", "--ckpt", str(model.ckpt_dir), "--kind", "bit-layer", "--task", "ioi", "--n-pairs", "6",
          "--bits", "0,8", "--out", str(out3)])
    assert (out3 / "bit_layer.csv").exists()
    capsys.readouterr()
    out4 = tmp_path / "split"
    run_ok(["interventions", "--ckpt", str(model.ckpt_dir), "--kind", "flip-split", "--data", str(npy), "--bits",
            "0,15", "--out", str(out4)])
    split = pd.read_csv(out4 / "flip_split.csv")
    assert list(split.bit) == [0, 15] and {"flip", "on", "off", "landing", "random", "on_support"} <= set(split)
    assert (out4 / "interventions.png").stat().st_size > 0 and "on-support part" in capsys.readouterr().out
    out5 = tmp_path / "noise"
    run_ok(["interventions", "--ckpt", str(learned.ckpt_dir), "--ckpt", str(model.ckpt_dir), "--kind", "noise",
            "--data", str(npy), "--scales", "0.5,2", "--draws", "1", "--out", str(out5)])
    noise = pd.read_csv(out5 / "interventions.csv")
    assert noise.decode_acc.between(0, 1).all() and (out5 / "interventions_decode.png").stat().st_size > 0
    assert "decode" in capsys.readouterr().out
    if model.cfg.interface == "canonical":  # the 7 constant columns are counted apart, not listed as largest
        run_ok(["interventions", "--ckpt", str(model.ckpt_dir), "--kind", "bitflip", "--data", str(npy), "--bits",
                "0,1,15", "--out", str(tmp_path / "flip2")])
        printed = capsys.readouterr().out
        assert "2 columns constant over the vocabulary left out" in printed and "bit 0 " not in printed
    bad = [["--ckpt", str(learned.ckpt_dir), "--kind", "bitflip", "--data", str(npy)],
           ["--ckpt", str(model.ckpt_dir), "--kind", "bitflip", "--data", str(npy), "--bits", "16"],
           ["--ckpt", str(model.ckpt_dir), "--kind", "ablate", "--data", str(npy), "--heads", "9"],
           ["--ckpt", str(model.ckpt_dir), "--kind", "bitflip", "--data", str(npy), "--pos", "99"],
           ["--ckpt", str(tmp_path / "nope"), "--kind", "bitflip"],
           ["--ckpt", str(model.ckpt_dir), "--kind", "swap", "--data", str(npy), "--bits", "1"],
           ["--ckpt", str(model.ckpt_dir), "--kind", "bitflip", "--data", str(npy), "--bits", ""]]
    for i, args in enumerate(bad):
        target = tmp_path / f"bad{i}"
        with pytest.raises(SystemExit) as e:
            main(["interventions", *args, "--out", str(target)])
        assert e.value.code == 2 and not target.exists()
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(("fixedid-analyze: error:", "fixedid-analyze interventions: error:"))


def test_tables_name_the_bits_no_token_differs_in(model):
    """A 333-token vocabulary leaves the top 16 - bit_length(332) = 7 canonical bits (MSB first) at 0 for every
    token; the bit-flip and bit x layer tables say which bits those are."""
    x = tokens(model, n=2, t=8)
    r = input_intervention(model, "bitflip", x, bits=[0, 6, 7, 15])
    if model.cfg.interface == "canonical":
        top = 16 - (model.cfg.vocab_size - 1).bit_length()
        assert list(r.summary.bit_constant) == [b < top for b in (0, 6, 7, 15)]
        assert top == 7
    else:  # gf2 mixes the varying bits into every column (its rows are checked against the code table itself)
        table = model.embed.code[:, : model.cfg.n_bits]
        assert list(r.summary.bit_constant) == [bool((table[:, b] == table[0, b]).all()) for b in (0, 6, 7, 15)]
    df = bit_layer_map(model, x, pos=2, bits=[0, 15])
    assert df.groupby("bit").bit_constant.first().tolist() == list(r.summary.bit_constant.iloc[[0, 3]])
    table = model.embed.code.cpu().numpy()
    for b in (0, 15):  # the share of items whose flipped row at position 2 is some token's row, by a search
        rows = table[x[:, 2].numpy()].copy()
        rows[:, b] = -rows[:, b]
        want = np.mean([(table == row[None]).all(1).any() for row in rows])
        assert (df[df.bit == b].on_support == want).all() and (df.hamming == 1).all()
    assert "bit_constant" not in input_intervention(model, "noise", x, scales=[0.5]).summary

"""Crosscoders against answers known in advance: the same activations given twice, and a model beside an orthogonally
turned copy of itself, are read as shared; features planted as shared or as one model's own are recovered in their
class; the saved files run by a forward written here from the files alone give the metrics; a killed and resumed
training ends where an uninterrupted one does; bad activation files are refused in one line."""

import json

import numpy as np
import pytest
import torch

from analysis.errors import AnalysisError
from analysis.features.crosscoder import Crosscoder, CrosscoderConfig, load_crosscoder, save_crosscoder
from analysis.features.crosscoder_data import ArraySource, read_arrays
from analysis.features.crosscoder_read import class_fractions, classify, latent_table, reconstruction_metrics
from analysis.features.crosscoder_train import train_crosscoder

D = 48


class Rows:
    """A source of activations already in memory, read in order."""

    def __init__(self, x, batch_tokens=512):
        self.x, self.batch_tokens, self.n_tokens = x, batch_tokens, len(x)

    def batches(self):
        for i in range(0, len(self.x), self.batch_tokens):
            yield self.x[i:i + self.batch_tokens]

    def sample(self, n=16384):
        return self.x[:n]


def planted(n, *, shared=24, only=12, per_token=3, seed=0, draw=0):
    """Two models' activations from one sparse code over ``shared + 2 * only`` features: the shared ones in both, the
    next ``only`` in A alone, the last ``only`` in B alone, each written along a random unit direction of its own in
    each model (the models' bases are unrelated). ``seed`` fixes the directions, ``draw`` the tokens."""
    g = torch.Generator().manual_seed(seed)
    F = shared + 2 * only
    dirs = [torch.nn.functional.normalize(torch.randn(F, D, generator=g), dim=1) for _ in range(2)]
    in_a = torch.arange(F) < shared + only
    in_b = (torch.arange(F) < shared) | (torch.arange(F) >= shared + only)
    t = torch.Generator().manual_seed(1000 + draw)
    idx = torch.stack([torch.randperm(F, generator=t)[:per_token] for _ in range(n)])
    c = torch.zeros(n, F).scatter_(1, idx, torch.rand(n, per_token, generator=t) + 0.5)
    return torch.stack([(c * in_a) @ dirs[0], (c * in_b) @ dirs[1]], 1), dirs, in_a, in_b


def train(x, **kw):
    cfg = CrosscoderConfig(models=("a", "b"), d=D, **({"n_latents": 48, "activation": "batchtopk", "k": 4} | kw))
    return train_crosscoder(cfg, Rows(x), progress=False)


def twice(x, turn=None):
    a = x[:, :1]
    return torch.cat([a, a if turn is None else a @ turn], 1)


@pytest.mark.parametrize("turned", [False, True], ids=["identical", "rotated"])
def test_one_model_given_twice_or_turned_is_read_as_shared(turned):
    turn = torch.linalg.qr(torch.randn(D, D, generator=torch.Generator().manual_seed(5)))[0] if turned else None
    cc, _ = train(twice(planted(120_000)[0], turn))
    table = latent_table(cc, twice(planted(8000, draw=1)[0], turn))
    live = table[table.live]
    assert len(live) >= 30  # the 36 features of model A
    assert (live["class"] == "shared").mean() >= 0.95
    assert live.share_a.between(0.4, 0.6).mean() >= 0.95


def test_planted_features_are_recovered_in_their_class():
    x, dirs, in_a, in_b = planted(120_000)
    cc, _ = train(x, n_latents=128)  # 48 features: room for each (at 64 latents, 77% are found)
    table = latent_table(cc, planted(8000, draw=1)[0])
    found, right = [], []
    dec = [torch.nn.functional.normalize(cc.W_dec[m].detach(), dim=1) for m in range(2)]
    for f in range(len(in_a)):
        where = [m for m, has in enumerate((in_a[f], in_b[f])) if has]
        best = [(dirs[m][f] @ dec[m].T).max(0) for m in where]
        found.append(all(float(b.values) >= 0.9 for b in best))
        if found[-1]:
            latent = int(best[0].indices)
            want = "shared" if len(where) == 2 else ("a only" if where == [0] else "b only")
            right.append(table["class"][latent] == want)
    assert np.mean(found) >= 0.9 and np.mean(right) >= 0.9, (np.mean(found), np.mean(right))
    fractions = class_fractions(table).set_index("class")
    assert fractions.loc["shared", "n"] >= 20 and fractions.loc["a only", "n"] >= 10


def test_the_classes_follow_the_stated_thresholds():
    """Hold at 0.1, exclusive at 0.9 (the docs' numbers): each class from shares written out by hand."""
    models = ["a", "b", "c"]
    shares = np.array([[0.34, 0.33, 0.33], [0.92, 0.05, 0.03], [0.85, 0.09, 0.06], [0.5, 0.45, 0.05],
                       [0.1, 0.1, 0.8]])
    assert classify(shares, models) == ["shared", "a only", "mostly a", "shared by a+b", "shared"]
    assert classify(np.array([[0.91, 0.09], [0.5, 0.5], [0.05, 0.95]]), ["a", "b"]) == ["a only", "shared", "b only"]


def test_dedicated_latents_write_into_their_model_alone():
    x = planted(20_000)[0]
    cc, _ = train(x, n_latents=64, dedicated=8)
    norms = cc.decoder_norms().detach()
    assert cc.cfg.dedicated_ranges == {"a": [0, 8], "b": [8, 16]}
    assert float(norms[1, :8].abs().max()) == 0 and float(norms[0, 8:16].abs().max()) == 0
    assert float(norms[0, :8].min()) > 0 and float(norms[1, 16:].min()) > 0
    assert set(latent_table(cc, x[:2000]).query("latent < 8")["class"]) <= {"a only"}


def forward_from_files(path, x):
    """The crosscoder as its files describe it, with no fixedid code: scale divides a model's activations before
    encoding and multiplies its reconstruction; BatchTopK's threshold applies to the pre-activation."""
    from safetensors.numpy import load_file

    w = load_file(str(path / "crosscoder.safetensors"))
    cfg = json.loads((path / "crosscoder_cfg.json").read_text())
    scale = np.asarray(cfg["scale"], dtype=np.float64)[None, :, None]
    xs = x.astype(np.float64) / scale
    pre = np.einsum("bmd,mdl->bl", xs, w["encoder.weight"].astype(np.float64)) + w["encoder.bias"]
    acts = np.maximum(pre, 0) * (pre > cfg["threshold"])
    recon = np.einsum("bl,mld->bmd", acts, w["decoder.weight"].astype(np.float64)) + w["decoder.bias"]
    return acts, recon * scale


def test_the_saved_files_alone_reproduce_the_metrics(tmp_path):
    x = planted(20_000)[0]
    cc, _ = train(x, n_latents=32)
    save_crosscoder(cc, tmp_path / "cc")
    again = load_crosscoder(tmp_path / "cc")
    assert again.cfg == cc.cfg and torch.equal(again.W_enc, cc.W_enc) and torch.equal(again.W_dec, cc.W_dec)
    held = planted(4000, draw=2)[0]
    acts, recon = forward_from_files(tmp_path / "cc", held.numpy())
    metrics = reconstruction_metrics(cc, held).set_index("model")
    xn = held.numpy().astype(np.float64)
    for i, m in enumerate(("a", "b")):
        err = ((xn[:, i] - recon[:, i]) ** 2).sum()
        sst = ((xn[:, i] - xn[:, i].mean(0)) ** 2).sum()
        assert metrics.loc[m, "fvu"] == pytest.approx(err / sst, rel=1e-4, abs=1e-6)
    assert metrics.loc["a", "l0"] == pytest.approx((acts > 0).sum(1).mean(), rel=1e-6)
    assert metrics.loc["a", "dead_fraction"] == pytest.approx(((acts > 0).sum(0) == 0).mean())


def test_a_killed_training_resumed_ends_as_an_uninterrupted_one(tmp_path):
    x = planted(12_000)[0]
    cfg = CrosscoderConfig(models=("a", "b"), d=D, n_latents=32, activation="batchtopk", k=4)
    whole, curve = train_crosscoder(cfg, Rows(x), progress=False)
    first, _ = train_crosscoder(cfg, Rows(x), progress=False, checkpoint_dir=tmp_path, checkpoint_every=5,
                                stop_after=13)  # killed at step 13: the last checkpoint is step 10's
    assert json.loads((tmp_path / "state.json").read_text())["step"] == 10
    resumed, resumed_curve = train_crosscoder(cfg, Rows(x), progress=False, checkpoint_dir=tmp_path,
                                              checkpoint_every=5)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert torch.allclose(getattr(resumed, name), getattr(whole, name), atol=1e-6), name
    assert resumed.cfg.threshold == pytest.approx(whole.cfg.threshold, rel=1e-6)
    assert len(resumed_curve) == len(curve) and np.allclose(resumed_curve.loss, curve.loss, atol=1e-6)


def test_bad_activation_files_are_refused(tmp_path):
    rng = np.random.default_rng(0)
    good = rng.standard_normal((100, 8)).astype(np.float32)
    files = {"a": good, "b": good[:90], "c": good[:, :4], "i": good.astype(np.int64), "n": good.copy()}
    files["n"][50, 3] = np.nan
    paths = {}
    for name, array in files.items():
        np.save(tmp_path / f"{name}.npy", array)
        paths[name] = tmp_path / f"{name}.npy"
    for pick, message in ((("a",), "two or more activation files"), (("a", "b"), "differ in rows or width"),
                          (("a", "c"), "differ in rows or width"), (("a", "i"), "expected a float array"),
                          (("a", "n"), "NaN or infinite")):
        with pytest.raises(AnalysisError, match=message):
            read_arrays({k: paths[k] for k in pick})
    source = ArraySource(read_arrays({"a": paths["a"], "b": paths["a"]}), eval_tokens=20, batch_tokens=16)
    assert source.n_tokens == 80 and tuple(source.held_out().shape) == (20, 2, 8)
    assert torch.equal(torch.cat(list(source.batches())), torch.from_numpy(np.stack([good[:80]] * 2, 1)))
    with pytest.raises(AnalysisError, match="k must be in"):
        CrosscoderConfig(models=("a", "b"), d=8, n_latents=16, k=17)


def test_a_crosscoder_runs_on_the_models_it_reads(model, learned):
    """Activations streamed from test checkpoints: the shapes and the per-model tables line up."""
    from analysis.features.crosscoder_data import ModelSource
    from analysis.features.run import split_windows

    train_w, held = split_windows(model, train_tokens=4096, eval_tokens=1024)
    source = ModelSource({"m": model, "l": learned}, "blocks.0.hook_resid_post", train_w, batch_tokens=256)
    cfg = CrosscoderConfig(models=("m", "l"), d=model.cfg.d_model, n_latents=4 * model.cfg.d_model, k=8)
    cc, curve = train_crosscoder(cfg, source, progress=False)
    x = source.activations(held)
    assert tuple(x.shape) == (held.numel(), 2, model.cfg.d_model) and curve.tokens.iloc[-1] == train_w.numel()
    metrics = reconstruction_metrics(cc, x)
    assert (metrics.fvu < 1).all() and metrics.l0.iloc[0] > 0
    assert isinstance(cc, Crosscoder) and len(latent_table(cc, x)) == cfg.n_latents


def test_the_share_figures_key_every_colour_they_draw():
    """A ternary with a reference drawn under it, and the same three to a row: one legend, a key entry per class colour
    and one for the reference."""
    import pandas as pd

    from analysis.figures.crosscoders import ternaries, ternary

    rng = np.random.default_rng(0)
    shares = rng.dirichlet([20, 20, 20], size=50)
    shares[0] = [0.95, 0.03, 0.02]
    models = ["learned", "canonical", "gf2"]
    table = pd.DataFrame({"live": True, "class": classify(shares, models),
                          **{f"share_{m}": shares[:, i] for i, m in enumerate(models)}})
    nulls = {"three seeds": rng.dirichlet([10, 10, 10], size=40)}
    for fig in (ternary(table, models, nulls), ternaries({"L0 out": table, "L1 out": table}, models,
                                                          {"L0 out": nulls})):
        assert len(fig.legends) == 1
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert {"shared", "learned only", "canonical only", "gf2 only", "reference: three seeds"} <= set(labels)


def test_three_checkpoints_with_references_draw_three_turned_views(learned, tmp_path_factory, tokenizer):
    """``crosscoder`` over three checkpoints with ``--nulls``: the ternary's reference is the first model beside two
    turned copies of itself - one function in three bases, so its latents are shared by all three."""
    from analysis.features.crosscoder_read import HOLD
    from analysis.specs import get_spec, run_spec
    from tests._helpers import tiny_checkpoint

    models = {"learned": learned, **{v: tiny_checkpoint(tmp_path_factory, tokenizer, v, seed=3)
                                     for v in ("canonical", "gf2")}}
    result = run_spec(get_spec("crosscoder"), models, hook="blocks.0.hook_resid_post", k=4, tokens=4096,
                      eval_tokens=1024, nulls=True, no_baseline=True)
    turned = result.attrs["ternary_nulls"]["turned copies"]
    assert turned.shape[1] == 3 and len(turned) > 10
    np.testing.assert_allclose(turned.sum(1), 1, atol=1e-5)
    assert (turned >= HOLD).all(1).mean() >= 0.95
    assert set(result.tables["crosscoder_nulls"].null) == {"turned copy", "random init"}
    labels = [t.get_text() for t in result.figures["crosscoder_shares"].legends[0].get_texts()]
    assert "reference: turned copies" in labels

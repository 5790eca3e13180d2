"""Sparse dictionaries against answers computed apart from them: eai-sparsify's own SparseCoder on the same weights,
the metrics recomputed from the saved SAELens files with plain safetensors and model hooks written here, the
JumpReLU straight-through gradient by hand, BatchTopK's batch-wide selection, and the activation stream's coverage."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from analysis.cli.main import main as analyze
from analysis.errors import AnalysisError
from analysis.features import (DictionaryConfig, SparseDictionary, dictionary_config, dictionary_metrics,
                               load_dictionary, save_dictionary, split_windows, train_dictionary)
from analysis.features.dictionary import _JumpReLU, _Step, sparsify
from analysis.features.stream import activation_batches, model_activations

HOOK = "blocks.1.hook_resid_post"
MLP_IN = "blocks.1.ln2.hook_normalized"


@pytest.fixture(scope="module")
def windows(model):
    return split_windows(model, train_tokens=6144, eval_tokens=1536)


def _fit(model, windows, *, kind, arch):
    """Train on the training windows, measure on the held-out ones."""
    cfg = dictionary_config(model, hook=HOOK if kind == "sae" else MLP_IN, kind=kind, arch=arch, expansion=4, k=8)
    d, hist = train_dictionary(model, cfg, windows[0], batch_tokens=256, progress=False, seed=0)
    return d, dictionary_metrics(model, d, windows[1]), hist


@pytest.mark.parametrize("kind,arch", [("sae", "topk"), ("sae", "batchtopk"), ("sae", "jumprelu"), ("sae", "relu"),
                                       ("transcoder", "topk"), ("transcoder", "jumprelu"),
                                       ("skip-transcoder", "relu"), ("skip-transcoder", "topk")])
def test_every_kind_and_architecture_learns_and_round_trips_through_the_saelens_layout(model, windows, tmp_path,
                                                                                       kind, arch):
    d, met, hist = _fit(model, windows, kind=kind, arch=arch)
    v = dict(zip(met.metric, met.value))
    # it learned: the held-out FVU is below a dictionary that outputs the mean (FVU 1; a random-init MLP's output is
    # harder to predict from 6k tokens than the residual stream is to reconstruct), and training went down
    assert v["fvu"] < (0.6 if kind == "sae" else 0.9), v
    assert hist.fvu.iloc[-10:].mean() < hist.fvu.iloc[:3].mean()
    assert 0 < v["kl_spliced"]
    assert v["loss_recovered"] == pytest.approx((v["loss_zero"] - v["loss_spliced"]) /
                                                (v["loss_zero"] - v["loss_clean"]))
    if arch == "topk":
        assert v["l0"] == pytest.approx(8, abs=1e-9)
    assert list(met.columns[-2:]) == ["metric", "value"] and len(met) == 8
    # SAELens's layout: names, shapes, config fields
    save_dictionary(d, tmp_path / "d")
    w = load_file(str(tmp_path / "d" / "sae_weights.safetensors"))
    cfg = json.loads((tmp_path / "d" / "cfg.json").read_text())
    d_in, d_sae = d.cfg.d_in, d.cfg.d_sae
    assert w["W_enc"].shape == (d_in, d_sae) and w["b_enc"].shape == (d_sae,)
    assert w["W_dec"].shape == (d_sae, d.cfg.d_out) and w["b_dec"].shape == (d.cfg.d_out,)
    assert ("threshold" in w) == (arch in ("jumprelu", "batchtopk"))
    assert ("W_skip" in w) == (kind == "skip-transcoder")
    assert cfg["d_in"] == d_in and cfg["d_sae"] == d_sae and cfg["hook_name"] == d.cfg.hook_name
    assert cfg["metadata"]["hook_name"] == d.cfg.hook_name
    assert cfg["apply_b_dec_to_input"] == (kind == "sae")
    expected_arch = {("sae", "topk"): "topk", ("sae", "batchtopk"): "jumprelu", ("sae", "jumprelu"): "jumprelu",
                     ("sae", "relu"): "standard", ("transcoder", "topk"): "topk_transcoder",
                     ("transcoder", "jumprelu"): "jumprelu_transcoder", ("skip-transcoder", "relu"): "skip_transcoder",
                     ("skip-transcoder", "topk"): "topk_skip_transcoder"}[(kind, arch)]
    assert cfg["architecture"] == expected_arch
    if arch == "topk":
        assert cfg["k"] == 8
    back = load_dictionary(tmp_path / "d")
    x = torch.randn(50, d_in) * 3
    torch.testing.assert_close(back(x), d(x), rtol=0, atol=0)


def _plain_forward(w: dict, cfg: dict, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The dictionary's (acts, output) from the SAELens files alone, as SAELens defines each architecture."""
    xin = x - w["b_dec"] if cfg["apply_b_dec_to_input"] else x
    pre = xin @ w["W_enc"] + w["b_enc"]
    if cfg["architecture"].startswith("topk"):
        top = pre.topk(cfg["k"], dim=-1)
        acts = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
    elif "threshold" in w:
        acts = pre.relu() * (pre > w["threshold"].relu())
    else:
        acts = pre.relu()
    out = acts @ w["W_dec"] + w["b_dec"]
    if "W_skip" in w:
        out = out + x @ w["W_skip"].T
    return acts, out


@pytest.mark.parametrize("kind", ["sae", "transcoder"])
def test_cli_metrics_are_reproduced_from_the_saved_files_with_plain_safetensors(model, tmp_path, kind):
    hook = HOOK if kind == "sae" else MLP_IN
    out_hook = HOOK if kind == "sae" else "blocks.1.hook_mlp_out"
    arch = "topk" if kind == "sae" else "jumprelu"
    with pytest.raises(SystemExit) as done:
        analyze(["sae", "--ckpt", str(model.ckpt_dir), "--hook", hook, "--kind", kind, "--arch", arch, "--expansion",
                 "4", "--k", "8", "--tokens", "4096", "--eval-tokens", "1024", "--batch-tokens", "256", "--out",
                 str(tmp_path / "o")])
    assert done.value.code == 0
    met = pd.read_csv(tmp_path / "o" / "sae_metrics.csv")
    v = dict(zip(met.metric, met.value))
    folder = tmp_path / "o" / met.path.iloc[0]
    w = load_file(str(folder / "sae_weights.safetensors"))
    cfg = json.loads((folder / "cfg.json").read_text())
    _, held = split_windows(model, train_tokens=4096, eval_tokens=1024)
    # the model run by hand: capture the input and target hooks, then splice and zero with hooks written here
    got = {}
    mods = model.mod_dict
    hs = [mods[hook].register_forward_hook(lambda m, i, o: got.__setitem__("in", o.detach())),
          mods[out_hook].register_forward_hook(lambda m, i, o: got.__setitem__("out", o.detach()))]
    with torch.no_grad():
        clean = model(held)
    for h in hs:
        h.remove()
    acts, recon = _plain_forward(w, cfg, got["in"])
    y = got["out"]
    fvu = float((recon - y).pow(2).sum() / (y - y.reshape(-1, y.shape[-1]).mean(0)).pow(2).sum())
    l0 = float((acts > 0).sum(-1).float().mean())
    dead = float(((acts > 0).reshape(-1, acts.shape[-1]).sum(0) == 0).float().mean())
    h = mods[out_hook].register_forward_hook(lambda m, i, o: recon)
    with torch.no_grad():
        spliced = model(held)
    h.remove()

    def ce(logits):
        return float(F.cross_entropy(logits[:, :-1].flatten(0, 1), held[:, 1:].flatten()))

    assert v["fvu"] == pytest.approx(fvu, rel=1e-4)
    assert v["l0"] == pytest.approx(l0, rel=1e-6)
    assert v["dead_fraction"] == pytest.approx(dead, abs=1e-9)
    assert v["loss_clean"] == pytest.approx(ce(clean), rel=1e-5)
    assert v["loss_spliced"] == pytest.approx(ce(spliced), rel=1e-5)
    assert met.n_tokens.iloc[0] == held.numel()
    assert (tmp_path / "o" / "sae_training.png").stat().st_size > 0
    assert (tmp_path / "o" / "sae_training.pdf").stat().st_size > 0


@pytest.mark.parametrize("kind", ["sae", "transcoder", "skip-transcoder"])
def test_topk_inference_equals_eai_sparsify_sparsecoder_on_the_same_weights(tmp_path, kind):
    torch.manual_seed(0)
    cfg = DictionaryConfig(kind=kind, arch="topk", d_in=24, d_sae=96, k=6, hook_name="a",
                           hook_name_out=None if kind == "sae" else "b")
    d = SparseDictionary(cfg)
    with torch.no_grad():  # weights a trained coder could have, biases included
        for p in d.parameters():
            p.normal_()
    save_dictionary(d, tmp_path / "d")
    w = load_file(str(tmp_path / "d" / "sae_weights.safetensors"))
    sp = sparsify()
    coder = sp.SparseCoder(24, sp.SparseCoderConfig(num_latents=96, k=6, transcode=kind != "sae",
                                                    skip_connection=kind == "skip-transcoder"))
    with torch.no_grad():
        coder.encoder.weight.copy_(w["W_enc"].T)
        coder.encoder.bias.copy_(w["b_enc"])
        coder.W_dec.copy_(w["W_dec"])
        coder.b_dec.copy_(w["b_dec"])
        if kind == "skip-transcoder":
            coder.W_skip.copy_(w["W_skip"])
    x = torch.randn(64, 24)
    ours = load_dictionary(tmp_path / "d")(x)
    theirs = coder(x, None if kind == "sae" else torch.randn(64, 24)).sae_out
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_jumprelu_straight_through_gradients_by_hand():
    x = torch.tensor([[0.30, 0.05, -1.0], [0.12, 0.50, 0.21]])
    thr = torch.tensor([0.10, 0.10, 0.20], requires_grad=True)
    bw = 0.05
    out = _JumpReLU.apply(x, thr, bw)
    assert torch.equal(out, torch.tensor([[0.30, 0.0, 0.0], [0.12, 0.50, 0.21]]))
    out.sum().backward()
    # d/dthr = sum over tokens of -(thr/bw) * 1[|x - thr| < bw/2]: x-thr = [.2,-.05,-1.2] and [.02,.4,.01]
    expected = torch.tensor([-(0.10 / bw) * 1, 0.0, -(0.20 / bw) * 1])
    torch.testing.assert_close(thr.grad, expected)
    thr.grad = None
    _Step.apply(x, thr, bw).sum().backward()
    torch.testing.assert_close(thr.grad, torch.tensor([-1 / bw, 0.0, -1 / bw]))


def test_batchtopk_keeps_k_per_token_on_average_and_its_threshold_is_the_running_minimum():
    torch.manual_seed(1)
    cfg = DictionaryConfig(kind="sae", arch="batchtopk", d_in=16, d_sae=64, k=4, hook_name="a", threshold_lr=0.5)
    d = SparseDictionary(cfg)
    x = torch.randn(32, 16)
    mins = []
    for _ in range(2):
        loss, parts, fired = d.training_loss(x, x, None)
        pre = d.pre_activations(x).detach().relu().flatten()
        kept = pre.topk(4 * 32).values
        mins.append(float(kept[kept > 0].min()))
        assert float(parts["l0"]) == pytest.approx(4.0)
    assert float(d.topk_threshold) == pytest.approx(0.5 * (0.5 * mins[0]) + 0.5 * mins[1], rel=1e-6)
    acts = d.encode(x)  # inference: a JumpReLU at that threshold
    pre = d.pre_activations(x)
    torch.testing.assert_close(acts, pre.relu() * (pre > float(d.topk_threshold)))


def test_auxk_reaches_only_dead_latents_and_vanishes_without_them():
    torch.manual_seed(2)
    cfg = DictionaryConfig(kind="sae", arch="batchtopk", d_in=8, d_sae=32, k=2, hook_name="a")
    d = SparseDictionary(cfg)
    x = torch.randn(16, 8)
    pre, err = d.pre_activations(x), torch.randn(16, 8)
    assert float(d._aux_loss(pre, err, None)) == 0.0
    dead = torch.zeros(32, dtype=torch.bool)
    dead[:5] = True
    d._aux_loss(pre, err, dead).backward()
    g = d._W_dec.grad.abs().sum(1)
    assert (g[5:] == 0).all() and (g[:5] > 0).any()


def test_the_stream_hands_out_every_activation_once_shuffled_across_sequences(model):
    w = split_windows(model, train_tokens=2048, eval_tokens=256)[0]
    ref = model_activations(model, w, [HOOK])[0]
    got = list(activation_batches(model, w, [HOOK], batch_tokens=100, buffer_tokens=400, model_batch=3, seed=0))
    rows = torch.cat([b[0] for b in got])
    assert rows.shape == ref.shape
    def rowsort(t):
        a = t.numpy()
        return a[np.lexsort(a.T[::-1])]

    np.testing.assert_array_equal(rowsort(rows), rowsort(ref))
    T = w.shape[1]
    first = got[0][0]
    seqs = {int((ref == r).all(1).nonzero()[0]) // T for r in first}
    assert len(seqs) > 3  # one batch mixes several sequences
    assert all(b[0].shape[0] == 100 for b in got[:-1])
    with pytest.raises(AnalysisError, match="at least two batches"):
        next(activation_batches(model, w, [HOOK], batch_tokens=100, buffer_tokens=150, model_batch=3))


def test_a_saelens_config_without_the_toolkits_metadata_loads_as_the_same_dictionary(tmp_path):
    torch.manual_seed(3)
    for kind, arch in (("sae", "topk"), ("transcoder", "jumprelu")):
        cfg = DictionaryConfig(kind=kind, arch=arch, d_in=12, d_sae=48, k=5, hook_name="a",
                               hook_name_out=None if kind == "sae" else "b")
        d = SparseDictionary(cfg)
        with torch.no_grad():
            for p in d.parameters():
                p.normal_()
        save_dictionary(d, tmp_path / kind)
        raw = json.loads((tmp_path / kind / "cfg.json").read_text())
        del raw["metadata"]["fixedid"]  # as SAELens itself writes it
        raw["metadata"].pop("hook_name_out", None)
        (tmp_path / kind / "cfg.json").write_text(json.dumps(raw))
        x = torch.randn(20, 12)
        if kind != "sae":
            with pytest.raises(AnalysisError, match="names no hook_name_out"):
                load_dictionary(tmp_path / kind)
        back = load_dictionary(tmp_path / kind, hook_name_out=None if kind == "sae" else "b")
        assert (back.cfg.kind, back.cfg.arch, back.cfg.k) == (kind, arch, cfg.k if arch == "topk" else 32)
        torch.testing.assert_close(back(x), d(x), rtol=0, atol=0)


def test_the_cli_writes_nothing_when_a_later_hook_is_bad(model, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        analyze(["sae", "--ckpt", str(model.ckpt_dir), "--hook", HOOK, "--hook", "blocks.9.hook_resid_post",
                 "--tokens", "1024", "--eval-tokens", "256", "--batch-tokens", "256", "--out", str(tmp_path / "o")])
    assert done.value.code == 2
    assert "has no hook point 'blocks.9.hook_resid_post'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bad_configs_raise_the_package_error():
    with pytest.raises(AnalysisError, match="unknown architecture"):
        DictionaryConfig(kind="sae", arch="gated", d_in=4, d_sae=8, hook_name="a")
    with pytest.raises(AnalysisError, match="needs the hook it predicts"):
        DictionaryConfig(kind="transcoder", arch="relu", d_in=4, d_sae=8, hook_name="a")
    with pytest.raises(AnalysisError, match="is not a dictionary folder"):
        load_dictionary("/nonexistent")
    with pytest.raises(AnalysisError, match="coefficients must be >= 0"):
        DictionaryConfig(kind="sae", arch="relu", d_in=4, d_sae=8, hook_name="a", l1_coefficient=-1)


def test_each_architecture_is_its_own_class_chosen_from_the_config():
    import copy
    import pickle

    from analysis.features.dictionary import ARCHITECTURES, ARCHS, ReLUDictionary, dictionary_class

    assert list(ARCHITECTURES) == list(ARCHS) and len(set(ARCHITECTURES.values())) == len(ARCHS)
    for arch, cls in ARCHITECTURES.items():
        assert issubclass(cls, SparseDictionary) and cls is not SparseDictionary and dictionary_class(arch) is cls
        cfg = DictionaryConfig(kind="sae", arch=arch, d_in=8, d_sae=16, k=2, hook_name="a")
        for d in (SparseDictionary(cfg), SparseDictionary.from_config(cfg), cls(cfg)):
            assert type(d) is cls and isinstance(d, SparseDictionary)
        assert type(copy.deepcopy(d)) is cls and type(pickle.loads(pickle.dumps(d))) is cls
    with pytest.raises(AnalysisError, match="cannot hold a topk dictionary"):
        ReLUDictionary(DictionaryConfig(kind="sae", arch="topk", d_in=8, d_sae=16, k=2, hook_name="a"))
    with pytest.raises(AnalysisError, match="unknown architecture"):
        dictionary_class("gated")


def test_the_dictionary_module_never_branches_on_the_architecture():
    """The classes own what differs between architectures: no comparison with, and no ``if``/``match`` on, ``arch``
    anywhere in the module (the registry's dict lookup is the one place the architecture chooses anything)."""
    import ast
    import inspect

    from analysis.features import dictionary

    def names_arch(node):
        return any(isinstance(n, ast.Name) and n.id == "arch" or isinstance(n, ast.Attribute) and n.attr == "arch"
                   for n in ast.walk(node))

    tree = ast.parse(inspect.getsource(dictionary))
    found = [ast.unparse(n) for n in ast.walk(tree)
             if isinstance(n, ast.Compare) and names_arch(n)
             or isinstance(n, (ast.If, ast.IfExp, ast.While)) and names_arch(n.test)
             or isinstance(n, ast.Match) and names_arch(n.subject)]
    assert not found, found

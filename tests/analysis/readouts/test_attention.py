"""Attention patterns (the model's own, checked against q, k and z), the CircuitsVis page in a real headless browser,
the static figure, and bad input."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

from analysis import AnalysisError
from analysis.figures.attention import attention_figure, views_from
from analysis.interop.circuitsvis_view import AttentionView, View, attention_page, write_attention_page
from analysis.readouts.attention import attention_patterns, pattern_array

PROMPT = "When Mary and John went to the park, John gave a ball to"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: .ci/run installs Debian's chromium and sets this: there a missing browser is a failure, not a skip.
REQUIRED = os.environ.get("FIXEDID_REQUIRE_BROWSER") == "1"


def test_patterns_are_the_attention_the_model_computes(model):
    """Independent of the pattern hook: softmax(q k^T / sqrt(d)) with the causal mask from the rotated q and k, and
    the pattern times v equal to the z of the plain (SDPA) forward."""
    df = attention_patterns(model, PROMPT)
    pat = pattern_array(df)
    tokens = torch.tensor([df.attrs["tokens"]])
    names = [f"blocks.{i}.attn.hook_{n}" for i in range(model.cfg.n_layers) for n in ("rot_q", "rot_k", "v", "z")]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)  # no pattern hook: SDPA
    T, d = tokens.shape[1], model.cfg.d_head
    for layer in range(model.cfg.n_layers):
        q = cache[f"blocks.{layer}.attn.hook_rot_q"][0].double()  # [T, heads, d]
        k = cache[f"blocks.{layer}.attn.hook_rot_k"][0].double()
        scores = torch.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        np.testing.assert_allclose(pat[layer], scores.softmax(-1).numpy(), atol=1e-5)
        z = torch.einsum("hqk,khd->qhd", torch.from_numpy(pat[layer]).double(),
                         cache[f"blocks.{layer}.attn.hook_v"][0].double())
        np.testing.assert_allclose(z.numpy(), cache[f"blocks.{layer}.attn.hook_z"][0].double().numpy(), atol=1e-4)
    assert np.allclose(pat.sum(-1), 1, atol=1e-5) and (df.src <= df.dest).all()
    assert len(df) == model.cfg.n_layers * model.cfg.n_heads * T * (T + 1) // 2
    assert df.attrs["str_tokens"][df.dest.iloc[-1]] == df.dest_token.iloc[-1]
    one = attention_patterns(model, task="ioi", layers=[1])
    assert set(one.layer) == {1} and pattern_array(one).shape[0] == 1


def test_bad_input_is_one_line(model):
    for kwargs, match in (({}, "not both"), (dict(prompt=PROMPT, task="ioi"), "not both"),
                          (dict(prompt="  "), "empty"), (dict(prompt=PROMPT, layers=[9]), "layers must be"),
                          (dict(prompt=list(range(model.cfg.context + 1))), "more than the model's context"),
                          (dict(prompt=[model.cfg.vocab_size]), "token ids must lie")):
        with pytest.raises(AnalysisError, match=match):
            attention_patterns(model, **kwargs)
    df = attention_patterns(model, PROMPT)
    with pytest.raises(AnalysisError, match="no head L7H0"):
        views_from({"v": df}, heads=["L7H0"])
    with pytest.raises(AnalysisError, match="patterns must be"):
        attention_page([View("bad", np.zeros((2, 3, 3)), ["a", "b"], ["L0H0", "L0H1"])])


def test_figure_draws_every_chosen_head_per_variant(model, learned):
    frames = {"gf2-or-canonical": attention_patterns(model, PROMPT), "learned": attention_patterns(learned, PROMPT)}
    fig = attention_figure(frames, heads=["L0H1", "L1H0"])
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 4 and panels[0].get_title() == "gf2-or-canonical"
    np.testing.assert_allclose(panels[0].images[0].get_array().filled(np.nan)[-1],
                               pattern_array(frames["gf2-or-canonical"])[0, 1, -1], atol=1e-6)


def _browser(args, tmp_path):
    if CHROMIUM is None:
        if REQUIRED:
            pytest.fail("chromium is required here (.ci/run installs Debian's chromium)")
        pytest.skip("no chromium on this machine (apt-get install chromium; .ci/run installs it)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


def test_the_page_draws_every_head_in_a_real_browser(model, learned, tmp_path):
    """The exported page, opened in headless Chromium with the network off: every head of every variant gets its
    labelled thumbnail canvas in the rendered DOM, and the screenshot is not blank (the heatmaps are painted)."""
    frames = {"first": attention_patterns(model, PROMPT), "second": attention_patterns(learned, PROMPT)}
    views = views_from(frames)
    page = write_attention_page(views, tmp_path / "attention.html")
    assert "unpkg.com" not in page.read_text() and "http" not in re.sub(r"//.*", "", page.read_text()[:2000])
    dom = _browser(["--dump-dom", page.as_uri()], tmp_path).stdout
    heads = model.cfg.n_layers * model.cfg.n_heads
    for i in range(2):
        section = dom.split(f'id="{re.search(r"fixedid-attention-[0-9a-f]+-", dom).group(0)}{i}"')[1][:400_000]
        labels = re.findall(r"<h4[^>]*>(L\d+H\d+)</h4>", section.split("</section>")[0])
        assert sorted(set(labels)) == sorted(views[i].head_names) and len(views[i].head_names) == heads
        assert section.split("</section>")[0].count("<canvas") >= heads
    shot = tmp_path / "shot.png"
    _browser([f"--screenshot={shot}", "--window-size=1000,1400", page.as_uri()], tmp_path)
    import matplotlib.image

    img = matplotlib.image.imread(shot)[..., :3]
    blue = (img[..., 2] > img[..., 0] + 0.15)  # CircuitsVis paints attention in blue shades
    assert blue.mean() > 0.005
    html = AttentionView(views)._repr_html_()
    assert html.count("CircuitsVis.render(") == 2 and html.count("sourceMappingURL=iife.js.map") == 1  # one bundle


def test_cli_writes_the_table_the_page_and_the_figure(model, learned, tmp_path, capsys):
    from analysis.cli.main import main

    args = ["attention", "--ckpt", str(model.ckpt_dir), "--ckpt", str(learned.ckpt_dir), "--task", "ioi",
            "--heads", "L0H0,L1H2", "--out", str(tmp_path / "a")]
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 0
    assert {p.name for p in (tmp_path / "a").iterdir()} >= {"attention.csv", "attention.html", "attention.png",
                                                             "attention.pdf"}
    import pandas as pd

    df = pd.read_csv(tmp_path / "a" / "attention.csv")
    assert set(df.variant) == {model.ckpt_dir.name, learned.ckpt_dir.name}
    capsys.readouterr()
    for bad, match in ((["--heads", "L9H9"], "no head L9H9"), (["--prompt", "x"], "--prompt TEXT or --task")):
        with pytest.raises(SystemExit) as e:
            main(args[:5] + bad + ["--task", "ioi", "--out", str(tmp_path / "b")])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and match in err and "\n" not in err and not (tmp_path / "b").exists()

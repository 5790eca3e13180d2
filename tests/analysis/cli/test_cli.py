"""fixedid-analyze: patching from the command line (every pair source, bad input) and the demo end to end."""

import json

import numpy as np
import pandas as pd
import pytest

from analysis import load
from analysis.cli.main import main
from analysis.tasks import task_pairs
from fixedid import FixedIdLM, ModelConfig, save_checkpoint
from fixedid.data import SyntheticLanguage, train_bpe

from tests._fixtures import TRAIN_CONFIG


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    tok = train_bpe(SyntheticLanguage(0).documents(1500), 1024)
    cfg = ModelConfig.preset("toy", vocab_size=tok.get_vocab_size(with_added_tokens=True), d_model=64, n_layers=2,
                             n_heads=4, d_ff=128, context=64, init_std=0.1)
    return save_checkpoint(FixedIdLM(cfg), tmp_path_factory.mktemp("ck") / "canonical", tokenizer=tok)


def run(*args):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    return e.value.code


IOI = ["--clean", "When Mary and John went to the park, John gave a ball to",
       "--corrupt", "When Mary and John went to the park, Mary gave a ball to", "--answer", "Mary", "--wrong", "John"]


def test_patching_with_a_manual_pair(ckpt, tmp_path, capsys):
    assert run("patching", "--ckpt", ckpt, *IOI, "--out", tmp_path / "o", "--per-pair") == 0
    files = {p.name for p in (tmp_path / "o").iterdir()}
    assert files == {"patching.csv", "patching.png", "patching.pdf", "patching_per_pair.csv"}
    out = capsys.readouterr().out
    assert "Largest changes from the corrupted run's own value" in out and "' John'" in out
    header = (tmp_path / "o" / "patching.csv").read_text().splitlines()[0]
    assert header == "site,layer,pos,head,value"


def test_patching_from_a_task_and_a_file(ckpt, tmp_path, capsys):
    assert run("patching", "--ckpt", ckpt, "--task", "agreement", "--n-pairs", 4, "--site", "z", "--method",
               "attribution", "--mode", "noise", "--out", tmp_path / "t") == 0
    assert "attribution patching (noise: into the clean run) of z over 4 pairs" in capsys.readouterr().out
    pairs = tmp_path / "pairs.jsonl"
    fitted = task_pairs(load(ckpt), "facts", 3).texts  # pairs of one token length
    pairs.write_text("\n".join(json.dumps(p) for p in fitted))
    assert run("patching", "--ckpt", ckpt, "--pairs", pairs, "--site", "mlp_out", "--metric", "answer_prob",
               "--out", tmp_path / "f") == 0
    assert (tmp_path / "f" / "patching.pdf").stat().st_size > 1000


@pytest.mark.parametrize("args, message", [
    (["--ckpt", "/nonexistent/ckpt", *IOI], "no checkpoint directory"),
    (["--clean", "When Mary and John went to the park, John gave a ball to", "--corrupt",
      "When Mary and John went to the park, John gave a ball", "--answer", "Mary", "--wrong", "John"],
     "clean has 14 tokens but corrupt has 13"),
    ([*IOI[:4], "--answer", "Mary Anne", "--wrong", "John"], "not one"),
    ([*IOI, "--site", "resid"], "invalid choice: 'resid'"),
    ([*IOI, "--task", "ioi"], "exactly one source of pairs"),
    (["--clean", "a b"], "go together"),
    (["--task", "sarcasm"], "unknown task 'sarcasm'"),
])
def test_bad_input_is_one_line_and_exit_2(ckpt, tmp_path, capsys, args, message):
    if "--ckpt" not in args:
        args = ["--ckpt", str(ckpt), *args]
    assert run("patching", *args, "--out", tmp_path / "o") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fixedid-analyze") and "error:" in err and message in err and "\n" not in err
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_demo_end_to_end_then_cached(tmp_path, capsys, monkeypatch):
    from analysis.demo import bitflip, probes, recoding

    # the analyses' validation tokens, a quarter of the demo's: what is tested is the wiring and the report
    for module, tokens in ((bitflip, 2048), (recoding, 2048), (probes, 1024)):
        monkeypatch.setattr(module, "TOKENS", tokens)
    cfg = tmp_path / "demo.toml"
    cfg.write_text(TRAIN_CONFIG.replace("context = 32", "context = 64").replace("vocab_size = 512", "vocab_size = 1200"))
    args = ["demo", "--config", cfg, "--cache", tmp_path / "cache", "--out", tmp_path / "demo"]
    assert run(*args) == 0
    out = {p.name for p in (tmp_path / "demo").iterdir()}
    assert {"report.md", "behaviours.csv", "behaviours.png", "behaviours.pdf", "ioi_patching.csv",
            "ioi_resid_pre.png", "ioi_resid_pre.pdf", "recoding.csv", "recoding.png", "recoding.pdf"} <= out
    table = pd.read_csv(tmp_path / "demo" / "behaviours.csv")
    assert set(table.variant) == {"learned", "canonical", "gf2"} and set(table.task) >= {"ioi", "agreement"}
    assert "induction_unlisted" in set(table.task)  # the control beside the behaviours
    assert table.accuracy.between(0, 1).all() and (table.accuracy_low <= table.accuracy).all()
    report = (tmp_path / "demo" / "report.md").read_text()
    for v in ("learned", "canonical", "gf2"):
        assert f"| {v} |" in report and f"**{v}**" in report
    assert "| induction | induction_unlisted |" in report and "`induction_unlisted` is a control" in report
    rec = pd.read_csv(tmp_path / "demo" / "recoding.csv")
    assert set(rec[rec.family == "transvection"].variant) == {"canonical", "gf2"}
    assert set(rec[rec.family == "token-permutation"].variant) == {"learned", "canonical", "gf2"}
    assert (rec[(rec.k == 0) & (rec.family != "other-variant")].delta_loss == 0).all() and "## Recoding" in report
    flips = pd.read_csv(tmp_path / "demo" / "bitflips.csv")
    assert set(flips.variant) == {"canonical", "gf2"} and sorted(set(flips.bit)) == list(range(16))
    noise = pd.read_csv(tmp_path / "demo" / "input_noise.csv")
    assert set(noise.variant) == {"learned", "canonical", "gf2"}
    maps = pd.read_csv(tmp_path / "demo" / "bit_layer.csv")
    assert set(maps.variant) == {"canonical", "gf2"} and {"bitflips.png", "bit_layer.png", "bit_layer.pdf"} <= out
    # the matched comparisons: flips split by where they land, noise against decoding, recoding against bits moved
    assert {"flip_split.csv", "flip_split.png", "input_noise.png", "recoding_hamming.png"} <= out
    assert "decode_acc" in noise.columns and {"hamming", "on_support"} <= set(rec.columns)
    assert "flip_split.png" in report and "recoding_hamming.png" in report
    assert "## Bit flips" in report and "| canonical | 0 |" in report
    probes = pd.read_csv(tmp_path / "demo" / "probes.csv")
    assert set(probes.variant) == {"learned", "canonical", "gf2"} and {"number", "ioi_role"} <= set(probes.target)
    assert "## Probes" in report and "probes.png" in out
    curve = pd.read_csv(tmp_path / "demo" / "circuit_faithfulness.csv")
    assert set(curve.variant) == {"learned", "canonical", "gf2"}
    # every edge kept: the clean run, to float32 rounding in logits (the share divides by a gap near 0 untrained)
    last = curve.groupby("variant").last()
    assert np.allclose((last.recovered - 1) * (last.clean - last.corrupt), 0, atol=1e-5)
    assert "## The IOI circuit of each variant" in report and "circuit_faithfulness.png" in report
    assert {"circuit_canonical.png", "circuit_edges.csv", "circuit_circuit.csv"} <= out
    printed = capsys.readouterr().out
    assert "training the three variants" in printed
    # a second run finds them in the cache: the lookup the demo starts with (the rest of the demo is the same run
    # again, ~30 s here, so it is not repeated)
    from analysis.variants import ensure_variants

    [run_dir] = (tmp_path / "cache").iterdir()  # the one run the demo trained
    assert ensure_variants(str(cfg), tmp_path / "cache") == run_dir
    assert "using the cached variants" in capsys.readouterr().out

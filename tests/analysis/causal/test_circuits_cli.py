"""``fixedid-analyze dla`` and ``fixedid-analyze paths``: the files they write, what they print, and bad input (one
line, exit status 2, nothing written)."""

import pandas as pd
import pytest

from analysis.cli.main import main

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, tokenizer):
    return tiny_checkpoint(tmp_path_factory, tokenizer, "canonical").ckpt_dir


def run(*args):
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    return e.value.code


def test_dla_verb(ckpt, tmp_path, capsys):
    out = tmp_path / "o"
    assert run("dla", "--ckpt", ckpt, "--task", "ioi", "--n-pairs", 4, "--by-position", "--per-pair",
               "--out", out) == 0
    assert {p.name for p in out.iterdir()} == {"dla.csv", "dla_per_pair.csv", "dla.png", "dla.pdf",
                                              "dla_positions.png", "dla_positions.pdf"}
    df = pd.read_csv(out / "dla.csv")
    assert {"component", "label", "layer", "head", "pos", "value", "value_lo", "value_hi"} <= set(df.columns)
    assert "components sum to it within" in capsys.readouterr().out
    assert run("dla", "--ckpt", ckpt, "--prompt", "Mary and John", "--answer", "Mary", "--wrong", "John",
               "--out", tmp_path / "p") == 0


def test_paths_verb(ckpt, tmp_path, capsys):
    out = tmp_path / "o"
    assert run("paths", "--ckpt", ckpt, "--task", "ioi", "--n-pairs", 4, "--sender", "heads",
               "--receivers", "L1H*.q,logits", "--per-pair", "--out", out) == 0
    assert {p.name for p in out.iterdir()} == {"paths.csv", "paths_per_pair.csv", "paths.png", "paths.pdf"}
    df = pd.read_csv(out / "paths.csv")
    assert df.sender.tolist() == [f"L0H{h}" for h in range(4)] and (df.receivers == df.receivers[0]).all()
    assert "Largest changes from the corrupted run's own value" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    ("paths --task ioi --sender L1H0 --receivers L1H2.q", "sender L1H0 does not reach receiver(s) L1H2.q"),
    ("paths --task ioi --receivers L9H0.q", "layer 9 is out of range"),
    ("paths --task ioi --norm none", "invalid choice: 'none'"),
    ("dla --prompt Mary", "--prompt needs --answer and --wrong"),
    ("dla --task ioi --prompt Mary --answer Mary --wrong John", "give exactly one source of prompts"),
    ("dla --task ioi --n-pairs 0", "--n-pairs: must be a positive integer"),
])
def test_bad_input_is_one_line_and_exit_2(ckpt, tmp_path, capsys, args, message):
    verb, *rest = args.split()
    assert run(verb, "--ckpt", ckpt, *rest, "--out", tmp_path / "never") == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "never").exists()

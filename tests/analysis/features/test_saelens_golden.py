"""The toolkit against SAELens 6.54's own loader and inference, run once in a separate environment
(experiments/validation/saelens/run_saelens.py; its numbers are committed in golden/saelens.json): the dictionaries
committed beside them, loaded by the toolkit, give SAELens's L0, FVU, dead fraction and outputs on the same
held-out activations."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from analysis.features import load_dictionary

GOLDEN = Path(__file__).parents[3] / "experiments" / "validation" / "saelens" / "golden"
SAELENS = json.loads((GOLDEN / "saelens.json").read_text())
TOOLKIT = json.loads((GOLDEN / "toolkit.json").read_text())


def test_every_architecture_written_was_compared():
    assert set(SAELENS["dictionaries"]) == set(TOOLKIT)
    assert SAELENS["sae_lens"].startswith("6.54")
    classes = {v["class"] for v in SAELENS["dictionaries"].values()}
    assert {"TopKSAE", "JumpReLUSAE", "StandardSAE", "JumpReLUTranscoder", "SkipTranscoder"} <= classes


@pytest.mark.parametrize("name", sorted(TOOLKIT))
def test_toolkit_inference_matches_saelens_on_the_same_files(name):
    ref = SAELENS["dictionaries"][name]
    entry = TOOLKIT[name]
    d = load_dictionary(GOLDEN / name)
    assert ref["hook_name"] == d.cfg.hook_name
    acts = load_file(str(GOLDEN / "activations.safetensors"))
    x = acts[entry["hook"]]
    y = x if entry["hook_out"] is None else acts[entry["hook_out"]]
    with torch.no_grad():
        feats = d.encode(x)
        out = d.decode(feats, x)
    fvu = float((out - y).double().pow(2).sum() / (y - y.mean(0)).double().pow(2).sum())
    assert fvu == pytest.approx(ref["fvu"], rel=1e-6)
    assert float((feats > 0).sum(-1).double().mean()) == pytest.approx(ref["l0"], abs=1e-9)
    assert float(((feats > 0).sum(0) == 0).double().mean()) == pytest.approx(ref["dead_fraction"], abs=1e-9)
    assert float(out.double().sum()) == pytest.approx(ref["output"]["sum"], rel=1e-5, abs=1e-3)
    assert float(out.double().pow(2).sum()) == pytest.approx(ref["output"]["sq_sum"], rel=1e-6)
    torch.testing.assert_close(out[0], torch.tensor(ref["output"]["first_row"]), rtol=1e-5, atol=1e-5)

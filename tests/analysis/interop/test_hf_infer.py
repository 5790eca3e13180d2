"""Exports with the fixedid record stripped from config.json come back as the model they were: every code interface
and rendering option with the same config fields, code table and logits (the expected values are the exported
model's own), learned stays learned, frozen_random is not a code, and a bfloat16 copy is recognised too."""

import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from analysis import load
from analysis.interop.codeinfer import CodeInferredWarning
from analysis.interop.hf import export_hf, import_hf
from fixedid import FixedIdLM, ModelConfig
from fixedid.errors import FixedIdWarning
from fixedid.codes import random_invertible

FOREIGN = random_invertible(8, 10 ** 6)  # a recoding that is not one of the toolkit's seeded draws
VARIANTS = {
    "canonical": dict(interface="canonical"),
    "canonical-lsb-01-interleave": dict(interface="canonical", bit_order="lsb", value_map="01", repeat="interleave",
                                        code_scale=0.5, output="random"),
    "gf2": dict(interface="gf2"),
    "gf2-affine-lsb": dict(interface="gf2", gf2_affine=True, gf2_seed=7, bit_order="lsb", code_scale=2.0),
    "gf2-foreign-offset": dict(interface="gf2", vocab_size=200, n_bits=8, gf2_matrix=FOREIGN.astype(int).tolist(),
                               gf2_offset=[1, 0, 1, 1, 0, 0, 1, 0]),
    "permuted": dict(interface="permuted", table_seed=2, repeat="interleave"),
    "learned": dict(interface="learned"),
    "frozen_random": dict(interface="frozen_random"),
}
SHAPE = ("vocab_size", "d_model", "n_layers", "n_heads", "kv_heads", "d_ff", "context", "rope_theta", "bias")
CODE = ("interface", "n_bits", "bit_order", "value_map", "code_scale", "repeat", "gf2_matrix", "gf2_offset",
        "gf2_seed", "gf2_affine")


def tiny(**kw):
    cfg = ModelConfig.preset("toy", **{"vocab_size": 300, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 32,
                                        "context": 16, "init_std": 0.2, "seed": 5, **kw})
    return FixedIdLM(cfg).eval()


def strip(out):
    conf = json.loads((out / "config.json").read_text())
    del conf["fixedid"]
    (out / "config.json").write_text(json.dumps(conf))
    return out


def imported(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = import_hf(path, **kw)
    return model, [w for w in caught if issubclass(w.category, CodeInferredWarning)]


@pytest.fixture(scope="module", params=list(VARIANTS))
def stripped(request, tmp_path_factory):
    model = tiny(**VARIANTS[request.param])
    return model, strip(export_hf(model, tmp_path_factory.mktemp("hf") / request.param))


def test_the_record_stripped_export_comes_back_exactly(stripped):
    model, out = stripped
    back, said = imported(out)
    want, got = model.cfg.resolved(), back.cfg.resolved()
    x = torch.randint(0, want.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(back(x), model(x))
    assert {f: getattr(got, f) for f in SHAPE} == {f: getattr(want, f) for f in SHAPE}
    if want.has_code:
        assert {f: getattr(got, f) for f in CODE + ("table_seed",) * (want.interface == "permuted")} == \
            {f: getattr(want, f) for f in CODE + ("table_seed",) * (want.interface == "permuted")}
        assert torch.equal(back.embed.code, model.embed.code) and "embed.W_E" not in dict(back.named_parameters())
        assert len(said) == 1 and f"fixed-code {want.interface} model" in str(said[0].message)
        assert back.meta["inferred_code"]["kind"] == want.interface
    else:  # learned stays learned; frozen_random's Gaussian rows are a learned table here
        assert got.interface == "learned" and not said
        assert back.meta["inferred_code"]["kind"] is None and "many values" in back.meta["inferred_code"]["reason"]
    plain, said = imported(out, infer=False)
    assert plain.cfg.interface == "learned" and not said and plain.meta["inferred_code"] is None


def test_a_bfloat16_copy_is_recognised_as_the_exported_code(tmp_path):
    from safetensors.torch import load_file, save_file

    model = tiny(interface="gf2", gf2_affine=True, gf2_seed=3, code_scale=0.3)  # 0.3 is not a bfloat16 number
    with_record = export_hf(model, tmp_path / "rec")
    state = {k: v.bfloat16() for k, v in load_file(str(with_record / "model.safetensors")).items()}
    save_file(state, str(with_record / "model.safetensors"), metadata={"format": "pt"})
    bare = strip(shutil.copytree(with_record, tmp_path / "bare"))
    ref, _ = imported(with_record)  # the record's import checks the embedding in its stored dtype
    back, said = imported(bare)
    assert len(said) == 1 and ref.cfg.resolved() == model.cfg.resolved()
    assert {f: getattr(back.cfg.resolved(), f) for f in CODE + SHAPE} == \
        {f: getattr(model.cfg.resolved(), f) for f in CODE + SHAPE}
    assert back.cfg.code_scale == 0.3 and torch.equal(back.embed.code, model.embed.code)
    x = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(back(x), ref(x))


def test_an_edited_code_is_not_taken_for_one(tmp_path):
    from safetensors.torch import load_file, save_file

    out = strip(export_hf(tiny(interface="canonical"), tmp_path / "hf"))
    state = load_file(str(out / "model.safetensors"))
    state["model.embed_tokens.weight"][3, 0] += 0.5
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    back, said = imported(out)
    assert back.cfg.interface == "learned" and not said
    assert back.meta["inferred_code"]["reason"].startswith("almost but not exactly a code")


def test_load_and_the_command_line_say_so(tmp_path, capsys):
    from analysis.cli.main import main

    model = tiny(interface="gf2", gf2_seed=4)
    out = strip(export_hf(model, tmp_path / "hf"))
    with pytest.warns(CodeInferredWarning):
        assert load(out).cfg.recoding() == model.cfg.recoding()
    capsys.readouterr()
    # a FixedIdWarning: the command line prints it as one line "fixedid-analyze: warning: ..." (fixedid.clitools)
    assert issubclass(CodeInferredWarning, FixedIdWarning)
    with pytest.raises(SystemExit) as e, pytest.warns(CodeInferredWarning, match="exactly a GF\\(2\\) linear recoding"):
        main(["import-hf", "--hf", str(out), "--out", str(tmp_path / "ck")])
    assert e.value.code == 0 and "(gf2 interface (the code inferred from its input rows))" in capsys.readouterr().out
    meta = json.loads((tmp_path / "ck" / "meta.json").read_text())
    assert meta["inferred_code"]["kind"] == "gf2" and meta["inferred_code"]["gf2_seed"] == 4
    assert np.array_equal(load(tmp_path / "ck").embed.code, model.embed.code)
    with pytest.raises(SystemExit) as e:
        main(["import-hf", "--hf", str(out), "--out", str(tmp_path / "ck2"), "--no-infer"])
    assert e.value.code == 0 and "learned interface" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["import-hf", "--hf", str(out), "--config", "tiny", "--out", str(tmp_path / "ck3")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "go with --state" in err and "\n" not in err

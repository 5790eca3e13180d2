"""Hugging Face interchange, offline: our logits equal transformers' Llama on the same tokens, AutoTokenizer loads
the tokenizer, the fixed code comes back as a fixed-code model, and what does not fit is refused clearly."""

import json

import pytest
import torch

from analysis import AnalysisError, load
from analysis.interop.hf import export_hf, import_hf

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module", params=["learned", "canonical", "gf2", "gqa-bias"])
def exported(request, tmp_path_factory, tokenizer):
    # a non-default RoPE base (paper-1.7b uses 130,000): the logits test fails if transformers reads another base
    changes = {"n_kv_heads": 2, "bias": True, "rope_theta": 130_000.0} if request.param == "gqa-bias" else {}
    interface = "gf2" if request.param == "gqa-bias" else request.param
    model = tiny_checkpoint(tmp_path_factory, tokenizer, interface, **changes)
    if changes:
        with torch.no_grad():  # biases start at zero: give them values so the mapping is tested
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    out = export_hf(model, tmp_path_factory.mktemp("hf") / request.param)
    return model, out


def test_transformers_logits_equal_ours(exported):
    from transformers import LlamaForCausalLM

    model, out = exported
    hf = LlamaForCausalLM.from_pretrained(out).eval()
    x = torch.randint(0, model.cfg.vocab_size, (3, model.cfg.context), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours32, theirs32 = model(x), hf(x).logits
        ours64, theirs64 = model.double()(x), hf.double()(x).logits
    model.float()
    assert (ours64 - theirs64).abs().max() < 1e-5  # the mapping, free of float32 summation order
    assert (ours32 - theirs32).abs().max() < 1e-4 * max(1.0, float(ours32.abs().max()))
    conf = json.loads((out / "config.json").read_text())
    assert conf["model_type"] == "llama" and conf["fixedid"]["interface"] == model.cfg.interface
    if model.cfg.is_fixed:
        code = conf["fixedid"]["code"]
        assert code["kind"] == model.cfg.interface and len(code["table_sha256"]) == 64
        assert (code["matrix"] is None) == (model.cfg.interface == "canonical")


def test_tokenizer_loads_with_autotokenizer_and_the_model_comes_back(exported):
    from transformers import AutoTokenizer

    model, out = exported
    tok = AutoTokenizer.from_pretrained(out)
    text = " Mary and John went to the store."
    assert tok(text)["input_ids"] == model.tokenizer.encode(text, add_special_tokens=False).ids
    for back in (import_hf(out), load(out)):  # analysis.load recognises the directory
        assert back.cfg.interface == model.cfg.interface and back.cfg.resolved() == model.cfg.resolved()
        x = torch.randint(0, model.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            assert torch.equal(back(x), model(x))
        assert back.tokenizer is not None


def test_refusals(exported, tmp_path, tokenizer, tmp_path_factory, capsys):
    from safetensors.torch import load_file, save_file

    model, out = exported
    with pytest.raises(AnalysisError, match="not empty"):
        export_hf(model, out)
    if model.cfg.is_fixed:  # an embedding edited after export is not the code table the config names
        bad = tmp_path / "edited"
        bad.mkdir()
        for f in out.iterdir():
            (bad / f.name).write_bytes(f.read_bytes())
        state = load_file(str(bad / "model.safetensors"))
        state["model.embed_tokens.weight"][3, 0] += 0.5
        save_file(state, str(bad / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(AnalysisError, match="not the .* code table"):
            import_hf(bad)
    ln = tiny_checkpoint(tmp_path_factory, tokenizer, "canonical", norm="ln")
    with pytest.raises(AnalysisError, match="RMSNorm \\+ SwiGLU"):
        export_hf(ln, tmp_path / "ln")
    assert not (tmp_path / "ln").exists()
    mixed = tiny_checkpoint(tmp_path_factory, tokenizer, "canonical", rope_head_thetas=[30.0, 10000.0, 10000.0, 10000.0])
    with pytest.raises(AnalysisError, match="RoPE bases other than rope_theta"):
        export_hf(mixed, tmp_path / "mixed")
    assert not (tmp_path / "mixed").exists()
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(AnalysisError, match="only the Llama layout"):
        import_hf(tmp_path / "gpt")


def test_command_lines(exported, tmp_path, capsys):
    from analysis.cli.main import main

    model, out = exported
    with pytest.raises(SystemExit) as e:
        main(["export-hf", "--ckpt", str(model.ckpt_dir), "--out", str(tmp_path / "hf")])
    assert e.value.code == 0 and (tmp_path / "hf" / "config.json").exists()
    with pytest.raises(SystemExit) as e:
        main(["import-hf", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ck")])
    assert e.value.code == 0 and load(tmp_path / "ck").cfg.interface == model.cfg.interface
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["export-hf", "--ckpt", str(model.ckpt_dir), "--out", str(tmp_path / "hf")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "not empty" in err and "\n" not in err


def test_export_takes_what_a_user_holds(tmp_path):
    # a FixedIdLM straight from fixedid (no .device, no tokenizer), a checkpoint directory, and nothing else
    from fixedid import FixedIdLM, ModelConfig, save_checkpoint

    raw = FixedIdLM(ModelConfig.preset("toy", interface="gf2", vocab_size=300, d_model=64, n_layers=1, n_heads=4,
                                       d_ff=64, context=16, init_std=0.2)).eval()
    x = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = raw(x)
        assert torch.allclose(import_hf(export_hf(raw, tmp_path / "from_model"))(x), want, atol=1e-5)
        save_checkpoint(raw, tmp_path / "ckpt")
        assert torch.allclose(import_hf(export_hf(tmp_path / "ckpt", tmp_path / "from_dir"))(x), want, atol=1e-5)
    with pytest.raises(AnalysisError, match="needs a fixedid model or a checkpoint directory"):
        export_hf(42, tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


def test_the_rope_base_is_written_for_every_reader(exported):
    model, out = exported
    conf = json.loads((out / "config.json").read_text())
    assert conf["rope_theta"] == conf["rope_parameters"]["rope_theta"] == model.cfg.rope_theta

"""import_state_dict: our models written by hand in other layouts (GPT-2's fused, transposed Conv1D attention; a
stacked-layers layout with grouped-query heads in one fused tensor) come back with the original's logits; a fixed
code in the input rows is inferred; what does not fit is refused in one line."""

import json

import pytest
import torch

from analysis import AnalysisError, load
from analysis.interop.codeinfer import CodeInferredWarning
from analysis.interop.statedict import import_state_dict, read_model_config, read_state_dict
from fixedid import FixedIdLM, ModelConfig

GPT2_MAP = """
ignore = ["transformer.h.*.attn.masked_bias"]

[keys]
"embed.W_E" = "transformer.wte.weight"
"ln_final.w" = "transformer.ln_f.weight"
"ln_final.b" = "transformer.ln_f.bias"
"unembed.weight" = "lm_head.weight"
"blocks.{i}.ln1.w" = "transformer.h.{i}.ln_1.weight"
"blocks.{i}.ln1.b" = "transformer.h.{i}.ln_1.bias"
"blocks.{i}.ln2.w" = "transformer.h.{i}.ln_2.weight"
"blocks.{i}.ln2.b" = "transformer.h.{i}.ln_2.bias"
"blocks.{i}.attn.q_proj.weight" = { key = "transformer.h.{i}.attn.c_attn.weight", transpose = true, chunk = [0, 3] }
"blocks.{i}.attn.k_proj.weight" = { key = "transformer.h.{i}.attn.c_attn.weight", transpose = true, chunk = [1, 3] }
"blocks.{i}.attn.v_proj.weight" = { key = "transformer.h.{i}.attn.c_attn.weight", transpose = true, chunk = [2, 3] }
"blocks.{i}.attn.q_proj.bias" = { key = "transformer.h.{i}.attn.c_attn.bias", chunk = [0, 3] }
"blocks.{i}.attn.k_proj.bias" = { key = "transformer.h.{i}.attn.c_attn.bias", chunk = [1, 3] }
"blocks.{i}.attn.v_proj.bias" = { key = "transformer.h.{i}.attn.c_attn.bias", chunk = [2, 3] }
"blocks.{i}.attn.o_proj.weight" = { key = "transformer.h.{i}.attn.c_proj.weight", transpose = true }
"blocks.{i}.attn.o_proj.bias" = "transformer.h.{i}.attn.c_proj.bias"
"blocks.{i}.mlp.fc_in.weight" = { key = "transformer.h.{i}.mlp.c_fc.weight", transpose = true }
"blocks.{i}.mlp.fc_in.bias" = "transformer.h.{i}.mlp.c_fc.bias"
"blocks.{i}.mlp.down_proj.weight" = { key = "transformer.h.{i}.mlp.c_proj.weight", transpose = true }
"blocks.{i}.mlp.down_proj.bias" = "transformer.h.{i}.mlp.c_proj.bias"
"""


def with_biases(model):
    with torch.no_grad():  # biases and LayerNorm shifts start at zero: give them values so the mapping is tested
        for name, p in model.named_parameters():
            if name.endswith((".bias", ".b")):
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    return model


def gpt2_layout(model):
    """Our tensors under GPT-2's names: q, k, v fused and every projection stored [in, out] (Conv1D)."""
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    out = {"transformer.wte.weight": sd["embed.W_E"], "transformer.ln_f.weight": sd["ln_final.w"],
           "transformer.ln_f.bias": sd["ln_final.b"], "lm_head.weight": sd["unembed.weight"]}
    for i in range(model.cfg.n_layers):
        f, h = f"blocks.{i}.", f"transformer.h.{i}."
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[h + theirs + ".weight"], out[h + theirs + ".bias"] = sd[f + ours + ".w"], sd[f + ours + ".b"]
        out[h + "attn.c_attn.weight"] = torch.cat([sd[f + f"attn.{p}_proj.weight"] for p in "qkv"]).T.contiguous()
        out[h + "attn.c_attn.bias"] = torch.cat([sd[f + f"attn.{p}_proj.bias"] for p in "qkv"])
        for ours, theirs in (("attn.o_proj", "attn.c_proj"), ("mlp.fc_in", "mlp.c_fc"), ("mlp.down_proj", "mlp.c_proj")):
            out[h + theirs + ".weight"] = sd[f + ours + ".weight"].T.contiguous()
            out[h + theirs + ".bias"] = sd[f + ours + ".bias"]
        out[h + "attn.masked_bias"] = torch.tensor(-1e4)  # a buffer with no counterpart
    return out


@pytest.fixture(scope="module")
def prior():
    """The predecessor's shape (prior-1024: GELU), test-sized, with LayerNorm and biases, a learned input."""
    cfg = ModelConfig.preset("prior-1024", vocab_size=300, d_model=32, n_layers=2, n_heads=2, d_ff=64, context=16,
                             norm="ln", bias=True, init_std=0.2, interface="learned")
    return with_biases(FixedIdLM(cfg).eval())


def logits(model, seed=0):
    x = torch.randint(0, model.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return model(x)


def test_a_gpt2_layout_comes_back_with_the_same_logits(prior, tmp_path):
    from safetensors.torch import save_file

    state = gpt2_layout(prior)
    save_file(state, str(tmp_path / "model.safetensors"))
    torch.save({"model": state, "iter_num": 5}, tmp_path / "ckpt.pt")  # nanoGPT's wrapper
    (tmp_path / "keys.toml").write_text(GPT2_MAP)
    for source in (tmp_path / "model.safetensors", tmp_path / "ckpt.pt", state):
        back = import_state_dict(source, tmp_path / "keys.toml", prior.cfg)
        assert back.cfg == prior.cfg and (logits(back) - logits(prior)).abs().max() <= 1e-5
        assert torch.equal(logits(back), logits(prior))


def stacked_layout(model):
    """Every block's tensors stacked along dim 0; q, k, v of grouped-query heads fused; gate and up fused; the input
    rows (a code here) stored in bfloat16."""
    sd, n = model.state_dict(), model.cfg.n_layers

    def stack(fmt):
        return torch.stack([sd[fmt.format(i)] for i in range(n)])

    rows = model.input_code(torch.arange(model.cfg.vocab_size)).detach()
    return {"embed": rows.bfloat16(), "head": sd["unembed.weight"], "final_norm": sd["ln_final.w"],
            "layers.norm1": stack("blocks.{}.ln1.w"), "layers.norm2": stack("blocks.{}.ln2.w"),
            "layers.qkv": torch.stack([torch.cat([sd[f"blocks.{i}.attn.{p}_proj.weight"] for p in "qkv"])
                                       for i in range(n)]),
            "layers.out": stack("blocks.{}.attn.o_proj.weight"),
            "layers.gate_up": torch.stack([torch.cat([sd[f"blocks.{i}.mlp.{p}_proj.weight"] for p in ("gate", "up")])
                                           for i in range(n)]),
            "layers.down": stack("blocks.{}.mlp.down_proj.weight")}


def stacked_map(q, kv):
    keys = {"embed.W_E": "embed", "unembed.weight": "head", "ln_final.w": "final_norm",
            "blocks.{i}.ln1.w": {"key": "layers.norm1", "stacked": True},
            "blocks.{i}.ln2.w": {"key": "layers.norm2", "stacked": True},
            "blocks.{i}.attn.q_proj.weight": {"key": "layers.qkv", "stacked": True, "rows": [0, q]},
            "blocks.{i}.attn.k_proj.weight": {"key": "layers.qkv", "stacked": True, "rows": [q, q + kv]},
            "blocks.{i}.attn.v_proj.weight": {"key": "layers.qkv", "stacked": True, "rows": [q + kv, q + 2 * kv]},
            "blocks.{i}.attn.o_proj.weight": {"key": "layers.out", "stacked": True},
            "blocks.{i}.mlp.gate_proj.weight": {"key": "layers.gate_up", "stacked": True, "chunk": [0, 2]},
            "blocks.{i}.mlp.up_proj.weight": {"key": "layers.gate_up", "stacked": True, "chunk": [1, 2]},
            "blocks.{i}.mlp.down_proj.weight": {"key": "layers.down", "stacked": True}}
    return {"keys": keys}


@pytest.fixture(scope="module")
def coded():
    cfg = ModelConfig.preset("toy", vocab_size=300, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
                             context=16, init_std=0.2, interface="gf2", gf2_affine=True, gf2_seed=9)
    return FixedIdLM(cfg).eval()


def test_a_stacked_layout_with_a_code_in_its_rows_is_imported_as_that_code(coded, tmp_path):
    state, kmap = stacked_layout(coded), stacked_map(32, 16)
    (tmp_path / "keys.json").write_text(json.dumps(kmap))
    learned_shape = coded.cfg.replace(interface="learned", gf2_affine=False, gf2_seed=0)
    with pytest.warns(CodeInferredWarning, match="exactly a GF\\(2\\) affine recoding"):
        back = import_state_dict(state, tmp_path / "keys.json", learned_shape)
    assert back.cfg.resolved() == coded.cfg.resolved() and torch.equal(back.embed.code, coded.embed.code)
    assert (logits(back) - logits(coded)).abs().max() <= 1e-5
    assert back.meta["inferred_code"]["gf2_seed"] == 9
    plain = import_state_dict(state, kmap, learned_shape, infer=False)
    assert plain.cfg.interface == "learned" and (logits(plain) - logits(coded)).abs().max() <= 1e-5
    # a table-free checkpoint (codes computed from the ids): no rows, the config names the code
    free = {k: v for k, v in state.items() if k != "embed"}
    no_rows = {"keys": {k: v for k, v in kmap["keys"].items() if k != "embed.W_E"}}
    assert torch.equal(logits(import_state_dict(free, no_rows, coded.cfg)), logits(coded))
    bare = dict(free, embed=coded.embed.code.clone())  # the bare [vocab, n_bits] code is checked too
    assert torch.equal(logits(import_state_dict(bare, kmap, coded.cfg)), logits(coded))
    with pytest.raises(AnalysisError, match="not the gf2 code table the config names"):
        import_state_dict(state, kmap, coded.cfg.replace(gf2_seed=10))


def test_what_does_not_fit_is_refused(prior):
    from analysis.interop.statedict import read_key_map

    state = gpt2_layout(prior)
    keys, ignore = read_key_map(__import__("tomllib").loads(GPT2_MAP))
    base = {"keys": {k: v.__dict__ for k, v in keys.items()}, "ignore": ignore}

    def edited(drop=(), **changes):
        return {"keys": {k: v for k, v in {**base["keys"], **changes}.items() if k not in drop},
                "ignore": base["ignore"]}

    cases = [
        (edited(drop=["ln_final.b"]), "does not say where 1 of our parameters come from: \\['ln_final.b'\\]"),
        ({"keys": base["keys"]}, "2 tensor\\(s\\) of the state dict are neither mapped nor ignored"),
        (edited(**{"blocks.{i}.mlp.fc_in.weight": "transformer.h.{i}.mlp.c_fc.weight"}), "is \\(32, 64\\), ours is"),
        (edited(**{"ln_final.w": {"key": "transformer.ln_f.weight", "flip": True}}), "unknown rule"),
        (edited(**{"blocks.{i}.mlp.gate_proj.weight": "x"}), "does not have"),
        (edited(**{"ln_final.w": "nope"}), "'nope' is not in the state dict"),
        (edited(**{"ln_final.w": {"key": "transformer.ln_f.weight", "chunk": [3, 3]}}), "index < count"),
    ]
    for kmap, match in cases:
        with pytest.raises(AnalysisError, match=match):
            import_state_dict(state, kmap, prior.cfg)
    assert torch.equal(logits(import_state_dict(state, {"keys": base["keys"]}, prior.cfg, strict=False)),
                       logits(prior))


def test_configs_and_files_are_read_as_documented(tmp_path):
    assert read_model_config("prior-1024") == ModelConfig.preset("prior-1024")
    (tmp_path / "train.toml").write_text('[model]\npreset = "prior-1024"\nd_model = 64\nnorm = "ln"\n')
    assert read_model_config(tmp_path / "train.toml") == ModelConfig.preset("prior-1024", d_model=64, norm="ln")
    cfg = ModelConfig.preset("toy", interface="gf2")
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    assert read_model_config(tmp_path / "cfg.json") == cfg
    with pytest.raises(AnalysisError, match="neither a preset"):
        read_model_config("no-such-thing")
    with pytest.raises(AnalysisError, match="holds no .safetensors"):
        read_state_dict(tmp_path)


def test_the_command_line_imports_a_state_dict(prior, tmp_path, capsys):
    from safetensors.torch import save_file

    from analysis.cli.main import main

    save_file(gpt2_layout(prior), str(tmp_path / "model.safetensors"))
    (tmp_path / "keys.toml").write_text(GPT2_MAP)
    (tmp_path / "cfg.json").write_text(prior.cfg.to_json())
    with pytest.raises(SystemExit) as e:
        main(["import-hf", "--state", str(tmp_path / "model.safetensors"), "--key-map", str(tmp_path / "keys.toml"),
              "--config", str(tmp_path / "cfg.json"), "--out", str(tmp_path / "ck")])
    assert e.value.code == 0 and "learned interface" in capsys.readouterr().out
    assert torch.equal(logits(load(tmp_path / "ck")), logits(prior))
    with pytest.raises(SystemExit) as e:
        main(["import-hf", "--state", str(tmp_path / "model.safetensors"), "--out", str(tmp_path / "ck2")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "--state needs --key-map" in err and "\n" not in err

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models, pre_tokenizers

from fixedid import CheckpointError, FixedIdLM, ModelConfig, load_checkpoint, save_checkpoint
from fixedid.checkpoint import file_sha256

TINY = dict(vocab_size=300, d_model=32, n_layers=2, n_heads=2, d_ff=64, context=16)


def make(interface="gf2", **kw):
    return FixedIdLM(ModelConfig.preset("tiny", **TINY, interface=interface, **kw)).eval()


def tok():
    t = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return t


def reseal(path, name):
    """Re-record a file's hash so the loader's deeper checks are reached (simulates a consistent but wrong file)."""
    meta = json.loads((path / "meta.json").read_text())
    meta["files"][name] = file_sha256(path / name)
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("interface", ["learned", "canonical", "gf2"])
def test_round_trip_reproduces_logits_exactly(tmp_path, interface):
    m = make(interface, gf2_affine=True, gf2_seed=4)
    t = torch.randint(0, 300, (3, 16))
    save_checkpoint(m, tmp_path / "ck", tokenizer=tok(), step=7)
    loaded = load_checkpoint(tmp_path / "ck")
    assert not loaded.training
    assert torch.equal(loaded(t), m(t))
    assert loaded.meta["step"] == 7 and loaded.meta["format"] == "fixedid-checkpoint/1"
    assert loaded.tokenizer.encode("a b").ids == [1, 2]
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    if interface == "gf2":
        assert len(cfg["gf2_matrix"]) == 16 and len(cfg["gf2_offset"]) == 16
        assert loaded.cfg.recoding() == m.cfg.recoding()
    assert "embed.code" not in load_file(str(tmp_path / "ck" / "model.safetensors"))


def test_overwrite_is_atomic_and_keeps_foreign_files(tmp_path):
    p = tmp_path / "ck"
    save_checkpoint(make(), p, step=1)
    (p / "metrics.jsonl").write_text('{"step": 1}\n')
    save_checkpoint(make(seed=1), p, step=2)
    assert load_checkpoint(p).meta["step"] == 2
    assert (p / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ck"]  # no temp dirs left behind
    (tmp_path / "notack").mkdir()
    (tmp_path / "notack" / "x.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="not a fixedid checkpoint"):
        save_checkpoint(make(), tmp_path / "notack")
    assert (tmp_path / "notack" / "x.txt").read_text() == "keep me"


def test_failed_save_leaves_nothing(tmp_path):
    with pytest.raises(CheckpointError, match="JSON"):
        save_checkpoint(make(), tmp_path / "ck", note=object())
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def ckpt(tmp_path):
    return save_checkpoint(make(), tmp_path / "ck", tokenizer=tok())


def test_missing_directory_and_files(tmp_path, ckpt):
    with pytest.raises(CheckpointError, match="no checkpoint directory"):
        load_checkpoint(tmp_path / "nope")
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing model.safetensors"):
        load_checkpoint(ckpt)


def test_truncated_weights(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        load_checkpoint(ckpt)
    reseal(ckpt, "model.safetensors")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(ckpt)


def test_flipped_byte_in_weights(ckpt):
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[-5] ^= 0xFF
    (ckpt / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        load_checkpoint(ckpt)


def test_corrupted_json_files(ckpt):
    (ckpt / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot be read as JSON"):
        load_checkpoint(ckpt)


def test_shape_and_dtype_mismatch(ckpt):
    state = load_file(str(ckpt / "model.safetensors"))
    state["blocks.0.attn.q_proj.weight"] = state["blocks.0.attn.q_proj.weight"][:, :-1].contiguous()
    save_file(state, str(ckpt / "model.safetensors"))
    reseal(ckpt, "model.safetensors")
    with pytest.raises(CheckpointError, match="q_proj.weight is torch.float32 \\(32, 31\\)"):
        load_checkpoint(ckpt)
    state["blocks.0.attn.q_proj.weight"] = torch.zeros(32, 32, dtype=torch.float16)
    save_file(state, str(ckpt / "model.safetensors"))
    reseal(ckpt, "model.safetensors")
    with pytest.raises(CheckpointError, match="float16"):
        load_checkpoint(ckpt)
    del state["unembed.weight"]
    save_file(state, str(ckpt / "model.safetensors"))
    reseal(ckpt, "model.safetensors")
    with pytest.raises(CheckpointError, match="missing tensors \\['unembed.weight'\\]"):
        load_checkpoint(ckpt)


def test_code_table_hash_mismatch(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["bit_order"] = "lsb"  # a different, equally valid interface: the trained model would read the wrong code
    (ckpt / "config.json").write_text(json.dumps(cfg))
    reseal(ckpt, "config.json")
    with pytest.raises(CheckpointError, match="code table"):
        load_checkpoint(ckpt)


def test_unknown_config_field_and_format(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "dropout": 0.1}))
    reseal(ckpt, "config.json")
    with pytest.raises(CheckpointError, match="dropout"):
        load_checkpoint(ckpt)
    (ckpt / "config.json").write_text(json.dumps(cfg))
    reseal(ckpt, "config.json")
    meta = json.loads((ckpt / "meta.json").read_text())
    (ckpt / "meta.json").write_text(json.dumps({**meta, "format": "fixedid-checkpoint/9"}))
    with pytest.raises(CheckpointError, match="unknown checkpoint format"):
        load_checkpoint(ckpt)


def test_tokenizer_tampering(ckpt):
    (ckpt / "tokenizer.json").write_text("[]")
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        load_checkpoint(ckpt)
    reseal(ckpt, "tokenizer.json")
    with pytest.raises(CheckpointError, match="not a valid tokenizer"):
        load_checkpoint(ckpt)

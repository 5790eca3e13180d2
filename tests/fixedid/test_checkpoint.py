import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models, pre_tokenizers

from fixedid import CheckpointError, ConfigError, FixedIdLM, ModelConfig, load_checkpoint, save_checkpoint
from fixedid.checkpoint import file_sha256

TINY = dict(vocab_size=300, d_model=32, n_layers=2, n_heads=2, d_ff=64, context=16)


def make(interface="gf2", **kw):
    return FixedIdLM(ModelConfig.preset("toy", **TINY, interface=interface, **kw)).eval()


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


@pytest.mark.parametrize("interface", ["learned", "canonical", "frozen_random"])
def test_a_model_cast_to_bfloat16_saves_as_float32_and_loads_in_any_dtype(tmp_path, interface):
    m = make(interface).to(torch.bfloat16)
    save_checkpoint(m, tmp_path / "ck")  # the code table's hash is its config's float32 table's
    back = load_checkpoint(tmp_path / "ck")
    assert all(p.dtype == torch.float32 for p in back.parameters())
    for (name, a), b in zip(m.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a.float(), b), name  # bfloat16 values are exact in float32
    half = load_checkpoint(tmp_path / "ck", dtype="bfloat16")
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    t = torch.randint(0, 300, (2, 16))
    assert torch.equal(half(t), m(t))
    if interface != "learned":  # an edited table is refused rather than recorded
        m.embed.code[0] = -m.embed.code[0]
        with pytest.raises(CheckpointError, match="restore it before saving"):
            save_checkpoint(m, tmp_path / "edited")
        assert not (tmp_path / "edited").exists()
    with pytest.raises(ConfigError, match="unknown dtype 'float8'"):
        load_checkpoint(tmp_path / "ck", dtype="float8")


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


# ------------------------------------------------------------------------------------ a kill at each step of a save
def _save_in_child(path, model, *, step, kill_at=None, exchange=True, record=None):
    """Save in a forked process that dies (``os._exit``, no cleanup, as a SIGKILL) at the step named ``kill_at``;
    with ``record``, append every step name the save passes to that file. Returns the child's exit status."""
    import os

    pid = os.fork()
    if pid == 0:  # the child
        import fixedid.checkpoint as ck

        def hook(name):
            if record is not None:
                with open(record, "a") as f:
                    f.write(name + "\n")
            if name == kill_at:
                os._exit(17)

        if not exchange:
            ck.exchange_paths = lambda a, b: False
        ck._fault_hook = hook
        try:
            save_checkpoint(model, path, adopt_dir=True, step=step)
        finally:
            os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _run_with_history(root):
    """A variant directory as the trainer leaves it: checkpoint of step 1, metrics, a kept snapshot."""
    vdir = root / "canonical"
    save_checkpoint(make(seed=1), vdir, step=1)
    (vdir / "metrics.jsonl").write_text('{"step": 1, "loss": 5.0}\n')
    save_checkpoint(make(seed=1), vdir / "steps" / "0000001", step=1)
    return vdir


def _steps_of_a_save(tmp_path, exchange):
    vdir = _run_with_history(tmp_path / "probe")
    record = tmp_path / f"steps-{exchange}.txt"
    assert _save_in_child(vdir, make(seed=2), step=2, exchange=exchange, record=record) == 0
    return record.read_text().split()


def test_save_steps_are_the_ones_the_kill_test_walks(tmp_path):
    assert _steps_of_a_save(tmp_path, True) == ["written", "carried", "swapped", "done"]
    assert _steps_of_a_save(tmp_path, False) == ["written", "carried", "moved-aside", "done"]


def test_a_kill_at_any_step_of_a_save_loses_nothing(tmp_path):
    """With an atomic exchange (Linux), the variant directory is at every instant a complete checkpoint, old or
    new, with its metrics and snapshots inside."""
    for i, point in enumerate(_steps_of_a_save(tmp_path, True)):
        vdir = _run_with_history(tmp_path / f"run{i}")
        new = make(seed=2)
        assert _save_in_child(vdir, new, step=2, kill_at=point) == 17
        loaded = load_checkpoint(vdir)
        expect = 1 if point in ("written", "carried") else 2
        assert loaded.meta["step"] == expect, point
        ref = make(seed=expect)
        assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), ref.state_dict().values()))
        assert (vdir / "metrics.jsonl").read_text() == '{"step": 1, "loss": 5.0}\n', point
        assert load_checkpoint(vdir / "steps" / "0000001").meta["step"] == 1, point
        # the next save cleans what the killed one left beside the variant and ends with one directory
        save_checkpoint(make(seed=3), vdir, step=3)
        assert [p.name for p in vdir.parent.iterdir()] == ["canonical"], point
        assert (vdir / "metrics.jsonl").exists() and (vdir / "steps" / "0000001" / "meta.json").exists()


def test_a_kill_between_the_fallback_renames_is_refused_at_resume(tmp_path):
    """Without an atomic exchange, the one unsafe instant leaves the variant under a hidden name; resuming refuses
    in one line and names it, instead of retraining from step 0."""
    from fixedid.train import TrainConfig, check_resumable

    vdir = _run_with_history(tmp_path)
    assert _save_in_child(vdir, make(seed=2), step=2, kill_at="moved-aside", exchange=False) == 17
    assert not vdir.exists()
    cfg = TrainConfig.load("tiny")
    with pytest.raises(CheckpointError, match=r"a save stopped half-way; its newest checkpoint \(step 2\)") as e:
        check_resumable(tmp_path, cfg, ["canonical"])
    assert "\n" not in str(e.value)
    next(tmp_path.glob(".canonical.tmp-*")).rename(vdir)
    check_resumable(tmp_path, cfg, ["canonical"])
    assert load_checkpoint(vdir).meta["step"] == 2
    assert (vdir / "metrics.jsonl").exists() and (vdir / "steps" / "0000001" / "meta.json").exists()


def test_resume_refuses_a_variant_whose_checkpoint_is_gone(tmp_path):
    from fixedid.train import TrainConfig, check_resumable

    cfg = TrainConfig.load("tiny")  # save_every 250
    (tmp_path / "gf2").mkdir()
    (tmp_path / "gf2" / "metrics.jsonl").write_text('{"step": 240}\n{"step": 250}\n')
    check_resumable(tmp_path, cfg, ["gf2", "learned"])  # killed during its first save; another not yet begun
    (tmp_path / "gf2" / "metrics.jsonl").write_text('{"step": 240}\n{"step": 250}\n{"step": 260}\n')
    with pytest.raises(CheckpointError, match="reaches step 260 .past the save at step 250."):
        check_resumable(tmp_path, cfg, ["gf2"])


def test_a_kill_during_a_variants_first_save_retrains_and_leaves_no_litter(tmp_path):
    """The trainer logs step 250 into the variant directory before its first save at 250; a kill inside that save
    leaves no checkpoint, so resuming starts again from step 0, and the next save removes the killed one's files."""
    from fixedid.train import TrainConfig, check_resumable

    vdir = tmp_path / "canonical"
    vdir.mkdir()
    (vdir / "metrics.jsonl").write_text('{"step": 250}\n')
    assert _save_in_child(vdir, make(seed=2), step=250, kill_at="carried") == 17
    assert not (vdir / "meta.json").exists() and list(tmp_path.glob(".canonical.tmp-*"))
    check_resumable(tmp_path, TrainConfig.load("tiny"), ["canonical"])  # nothing lost: no refusal
    save_checkpoint(make(seed=2), vdir, adopt_dir=True, step=250)
    assert [p.name for p in tmp_path.iterdir()] == ["canonical"]
    assert (vdir / "metrics.jsonl").read_text() == '{"step": 250}\n'

"""The trainer end to end on a test-sized config: variants, backbone matching, exact resume after SIGKILL, DDP."""

import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

import fixedid.train.loop as train_mod
from fixedid import FixedIdLM, load_checkpoint
from fixedid.errors import ConfigError
from fixedid.train.config import TrainConfig

from tests._fixtures import TRAIN_CONFIG, run_inproc, write_config


def cli(*args, env_extra=None, timeout=300):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "fixedid.train", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def metrics(path, key="loss"):
    return {r["step"]: r[key] for r in map(json.loads, path.read_text().splitlines()) if key in r}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """All three variants trained in-process, recording the batches each one consumed."""
    tmp = tmp_path_factory.mktemp("run")
    cfg = write_config(tmp)
    seen, original = [], train_mod.batch_at

    def recording(ts, step, *a, **k):
        x, y = original(ts, step, *a, **k)
        seen.append((ts.split, step, hashlib.sha256(x.numpy().tobytes()).hexdigest()))
        return x, y

    train_mod.batch_at = recording
    try:
        code = run_inproc(["--config", str(cfg), "--out", str(tmp / "out"), "--quiet"])
    finally:
        train_mod.batch_at = original
    assert code == 0
    return tmp, cfg, seen


def test_three_variants_train_and_load(trained, capsys):
    tmp, _, _ = trained
    out = tmp / "out"
    losses = {}
    for v in ("learned", "canonical", "gf2"):
        m = load_checkpoint(out / v)
        assert m.cfg.interface == v and m.meta["step"] == 12 and m.tokenizer is not None
        assert m.cfg.vocab_size == m.tokenizer.get_vocab_size(with_added_tokens=True)
        assert set(os.listdir(out / v)) >= {"metrics.jsonl", "optimizer.safetensors", "trainer_state.json"}
        steps = metrics(out / v / "metrics.jsonl")
        assert sorted(steps) == list(range(1, 13))
        assert steps[12] < steps[1] - 0.5  # it learns
        assert sorted(metrics(out / v / "metrics.jsonl", "val_loss")) == [4, 6, 12]  # and where kept
        losses[v] = steps
    assert losses["canonical"] != losses["gf2"]
    run = json.loads((out / "run.json").read_text())
    assert run["variants"] == ["learned", "canonical", "gf2"]


def test_kept_snapshots(trained):
    out = trained[0] / "out"
    for v in ("learned", "canonical", "gf2"):
        snap = load_checkpoint(out / v / "steps" / "0000004")
        assert snap.meta["step"] == 4 and snap.cfg.interface == v and snap.tokenizer is not None
        assert not (out / v / "steps" / "0000004" / "optimizer.safetensors").exists()
        final = load_checkpoint(out / v)
        assert not torch.equal(snap.unembed.weight, final.unembed.weight)
    assert sorted(metrics(out / "gf2" / "metrics.jsonl", "val_loss")) == [4, 6, 12]  # evaluated where kept


def test_same_machine_runs_are_bit_identical(trained, tmp_path):
    """Two runs of one config on one machine give the same bytes: the metrics log and the weights."""
    tmp, cfg, _ = trained
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "again"), "--quiet"]) == 0
    for v in ("learned", "canonical", "gf2"):
        for name in ("metrics.jsonl", "model.safetensors"):
            assert (tmp / "out" / v / name).read_bytes() == (tmp_path / "again" / v / name).read_bytes(), (v, name)
    timing = [json.loads(line) for line in (tmp / "out" / "gf2" / "timing.jsonl").read_text().splitlines()]
    assert [r["step"] for r in timing] == list(range(1, 13)) and all(r["tok_per_s"] > 0 for r in timing)


def test_packaged_configs_by_name(capsys, tmp_path):
    from fixedid.train.config import packaged_configs

    assert {"tiny", "small", "paper-1.7b"} <= set(packaged_configs())
    assert run_inproc(["--config", "tiny", "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    assert "token budget" in capsys.readouterr().out
    # experiments/configs/ holds the same files (links into the package), never a second, diverging copy
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    for name in packaged_configs():
        mine = root / "experiments" / "configs" / f"{name}.toml"
        assert mine.resolve() == (root / "fixedid" / "configs" / f"{name}.toml").resolve()
        assert TrainConfig.load(mine).to_dict() == TrainConfig.load(name).to_dict()


def test_backbone_matched_init_and_identical_batches(trained):
    tmp, cfg_path, seen = trained
    cfg = TrainConfig.load(cfg_path)
    states = {v: FixedIdLM(cfg.model_config(v, 512)).state_dict() for v in ("learned", "canonical", "gf2")}
    for k, t in states["canonical"].items():
        assert torch.equal(t, states["learned"][k]) and torch.equal(t, states["gf2"][k])
    per_variant = [seen[i * len(seen) // 3:(i + 1) * len(seen) // 3] for i in range(3)]
    assert len(per_variant[0]) > 12
    assert per_variant[0] == per_variant[1] == per_variant[2]


def test_dry_run_prints_accounting(tmp_path, capsys):
    assert run_inproc(["--config", str(write_config(tmp_path)), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "input_interface 16,384" in text and "token budget: 12 steps x 8 sequences x 32 tokens" in text
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.replace("[train]", "[train]\nmomentum = 0.9"), "unknown [train] key(s) ['momentum']"),
    (lambda c: c.replace('preset = "toy"', 'preset = "toy"\ninterface = "gf2"'), "set by the trainer"),
    (lambda c: c.replace('source = "synthetic"', 'source = "/nonexistent/corpus.jsonl"'), "does not exist"),
    (lambda c: c + "\n[optim]\nlr = 1\n", "unknown table"),
    (lambda c: c.replace('val_split = "validation"', 'val_split = "validation"\nsynthetic_mix = { poetry = 1.0 }'),
     "unknown sentence kind 'poetry'"),
    (lambda c: c.replace("steps = 12", "steps = twelve"), "not valid TOML"),
])
def test_bad_config_is_one_line_and_exit_2(tmp_path, capsys, edit, message):
    cfg = write_config(tmp_path, edit(TRAIN_CONFIG))
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fixedid-train: error:") and message in err and "\n" not in err
    assert not (tmp_path / "o" / "run.json").exists()


def test_tokenizer_too_large_for_the_code(tmp_path, capsys):
    from tokenizers import Tokenizer, models
    big = Tokenizer(models.WordLevel({f"w{i}": i for i in range(70000)} | {"<|endoftext|>": 70000}, unk_token="w0"))
    big.save(str(tmp_path / "big.json"))
    cfg = write_config(tmp_path, TRAIN_CONFIG.replace("tokenizer_train_bytes",
                                                      f'tokenizer = "{tmp_path / "big.json"}"\ntokenizer_train_bytes'))
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "65536" in capsys.readouterr().err


def test_out_dir_guards(trained, tmp_path, capsys):
    tmp, cfg, _ = trained
    out = tmp / "out"
    before = (out / "canonical" / "model.safetensors").read_bytes()
    other = write_config(tmp_path, TRAIN_CONFIG.replace("lr = 1e-2", "lr = 1e-3"))
    assert run_inproc(["--config", str(other), "--out", str(out), "--quiet"]) == 2
    assert "holds a different run (differs in train.lr)" in capsys.readouterr().err
    assert run_inproc(["--config", str(cfg), "--out", str(out), "--quiet"]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "fresh"), "--resume", "--quiet"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("mine")
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "junk"), "--quiet"]) == 2
    assert (tmp_path / "junk" / "notes.txt").read_text() == "mine"
    assert (out / "canonical" / "model.safetensors").read_bytes() == before
    # resuming a finished run trains nothing and changes nothing
    assert run_inproc(["--config", str(cfg), "--out", str(out), "--resume", "--quiet"]) == 0
    assert "already trained" in capsys.readouterr().out
    assert (out / "canonical" / "model.safetensors").read_bytes() == before


def test_corrupted_checkpoint_at_resume(trained, tmp_path, capsys):
    import shutil
    tmp, cfg, _ = trained
    out = tmp_path / "copy"
    shutil.copytree(tmp / "out", out)
    opt = out / "gf2" / "optimizer.safetensors"
    opt.write_bytes(opt.read_bytes()[:100])
    assert run_inproc(["--config", str(cfg), "--out", str(out), "--resume", "--steps", "14", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "optimizer.safetensors" in err and "corrupted" in err and "\n" not in err


#: Runs fixedid-train in a process that SIGKILLs itself as it is about to take update KILL_AT: a kill at a known
#: point, between two saves, with no timing involved.
KILL_AT = 27
SELF_KILL = f"""
import os, signal, sys
import fixedid.train.loop as loop
real = loop._train_step
def step(v, data, t, i, d):
    if i == {KILL_AT}:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(v, data, t, i, d)
loop._train_step = step
from fixedid.train.cli import main
main(sys.argv[1:])
"""


def test_sigkill_then_resume_gives_identical_losses(tmp_path):
    cfg = write_config(tmp_path, TRAIN_CONFIG.replace("steps = 12", "steps = 40").replace("save_every = 6",
                                                                                          "save_every = 10"))
    common = ["--config", str(cfg), "--variants", "canonical", "--quiet"]
    ref = cli(*common, "--out", str(tmp_path / "ref"))
    assert ref.returncode == 0, ref.stderr
    # the test tokenizer's few hundred ids leave the top canonical bits at 0: one warning line, no Python source
    vocab = load_checkpoint(tmp_path / "ref" / "canonical").cfg.vocab_size
    constant = 16 - (vocab - 1).bit_length()
    assert ref.stderr.splitlines() == [f"fixedid-train: warning: canonical: {constant} of the 16 code bits are the "
                                       f"same for all {vocab:,} tokens (bits {list(range(constant))}); bit flips and "
                                       "recodings of them edit columns no token differs in (the study's 49,152 "
                                       "tokens use every bit)"]
    out = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", SELF_KILL, *common, "--out", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert json.loads((out / "canonical" / "meta.json").read_text())["step"] == 20  # the last save before the kill
    logged = metrics(out / "canonical" / "metrics.jsonl")
    assert max(logged) == KILL_AT  # logged past the checkpoint: the resume must cut these lines back
    res = cli(*common, "--out", str(out), "--resume")
    assert res.returncode == 0, res.stderr
    a, b = metrics(tmp_path / "ref" / "canonical" / "metrics.jsonl"), metrics(out / "canonical" / "metrics.jsonl")
    assert sorted(a) == sorted(b) == list(range(1, 41))
    assert a == b  # bit-identical per-step losses, before and after the kill
    ra, rb = load_checkpoint(tmp_path / "ref" / "canonical"), load_checkpoint(out / "canonical")
    for k, t in ra.state_dict().items():
        assert torch.equal(t, rb.state_dict()[k])


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_torchrun_two_gloo_ranks_equal_one_process(tmp_path, parallel):
    cfg = write_config(tmp_path, TRAIN_CONFIG.replace("[train]", f'[train]\nparallel = "{parallel}"'))
    common = ["--config", str(cfg), "--variants", "gf2", "--quiet"]
    single = cli(*common, "--out", str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "-m", "fixedid.train", *common, "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, env=env, timeout=400)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    a, b = metrics(tmp_path / "one" / "gf2" / "metrics.jsonl"), metrics(tmp_path / "two" / "gf2" / "metrics.jsonl")
    assert sorted(a) == sorted(b) == list(range(1, 13))
    for step in a:
        assert a[step] == pytest.approx(b[step], rel=1e-4, abs=1e-5), step
    va = metrics(tmp_path / "one" / "gf2" / "metrics.jsonl", "val_loss")
    vb = metrics(tmp_path / "two" / "gf2" / "metrics.jsonl", "val_loss")
    assert va == pytest.approx(vb, rel=1e-4)
    ma, mb = load_checkpoint(tmp_path / "one" / "gf2"), load_checkpoint(tmp_path / "two" / "gf2")
    for k, t in ma.state_dict().items():
        torch.testing.assert_close(t, mb.state_dict()[k], rtol=1e-3, atol=1e-4)


def test_weight_decay_groups():
    from fixedid.train.optim import make_optimizer

    cfg = TrainConfig.load("tiny")
    default = cfg.replace_train(embed_weight_decay=None).train
    learned = FixedIdLM(cfg.model_config("learned", 64))
    groups = make_optimizer(learned, default).param_groups
    assert [g["weight_decay"] for g in groups] == [default.weight_decay, 0.0]
    assert any(p is learned.embed.W_E for p in groups[0]["params"])  # decayed with the other matrices
    assert cfg.train.embed_weight_decay == 0.0  # the tiny recipe gives the table a group of its own
    groups = make_optimizer(learned, cfg.train).param_groups
    assert [g["weight_decay"] for g in groups] == [cfg.train.weight_decay, 0.0, 0.0]
    assert groups[2]["params"] == [learned.embed.W_E] and all(p is not learned.embed.W_E for p in groups[0]["params"])
    fixed = make_optimizer(FixedIdLM(cfg.model_config("gf2", 64)), cfg.train).param_groups
    assert len(fixed) == 2  # no table, no third group
    with pytest.raises(ConfigError, match="embed_weight_decay"):
        cfg.replace_train(embed_weight_decay=-1.0)


def test_learning_rate_schedule_with_and_without_a_stable_phase():
    from fixedid.train.optim import lr_at

    t = TrainConfig.load("tiny").replace_train(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1,
                                               decay_start=0).train
    cosine = [lr_at(s, t) for s in range(100)]
    assert cosine[0] == 0.1 and cosine[9] == 1.0 and cosine[10] == 1.0 and cosine[11] < 1.0
    assert all(a >= b for a, b in zip(cosine[9:], cosine[10:])) and abs(cosine[99] - 0.1) < 1e-3
    wsd = TrainConfig.load("tiny").replace_train(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1,
                                                 decay_start=60).train
    assert [lr_at(s, wsd) for s in range(60)] == cosine[:10] + [1.0] * 50  # warm-up, then stable until step 60
    assert lr_at(61, wsd) < 1.0 and lr_at(80, wsd) == pytest.approx(0.55) and lr_at(100, wsd) == 0.1
    with pytest.raises(ConfigError, match="decay_start 100 .step 100. must come before the end of the decay"):
        TrainConfig.load("tiny").replace_train(steps=100, decay_start=100)
    fractions = TrainConfig.load("tiny").replace_train(steps=100, lr=1.0, warmup_steps=0.1, min_lr_ratio=0.1,
                                                       decay_start=0.6).train
    assert [lr_at(s, fractions) for s in range(101)] == [lr_at(s, wsd) for s in range(101)]


@pytest.mark.parametrize("name", ["tiny", "tiny-bpe", "small", "paper-1.7b"])
def test_steps_shortens_every_packaged_config_and_keeps_its_shape(name, capsys):
    full = TrainConfig.load(name).train
    short = TrainConfig.load(name).replace_train(steps=40).train
    # each point sits at the same fraction of the run (to a step), worked out from the packaged numbers by hand
    # (tiny: 2% of 1,600 = 32, 60% = 960, 75% = 1,200; tiny-bpe: of 3,000 60, 1,800, 2,250;
    # of 40: 0.8 -> 1, 24, 30)
    expected = {"tiny": (32, 960, [1200], 1, 24, [30]), "tiny-bpe": (60, 1800, [2250], 1, 24, [30]),
                "small": (200, 0, [], 2, 0, []), "paper-1.7b": (2003, 0, [], 2, 0, [])}[name]
    assert (full.warmup, full.decay_begin, full.snapshot_steps) == expected[:3]
    assert (short.warmup, short.decay_begin, short.snapshot_steps) == expected[3:]
    assert run_inproc(["--config", name, "--out", "unused", "--steps", "40", "--dry-run"]) == 0
    assert "40 steps" in capsys.readouterr().out


@pytest.mark.parametrize("change, message", [
    (dict(keep=[5000]), r"keep entry 5000 is not a step of this run \(0 to steps = 1600\)"),
    (dict(keep=[1.5]), r"keep entry 1.5 is a float, so a fraction of steps, and must be in \[0, 1\]"),
    (dict(keep=["750"]), "keep entry must be a step"),
    (dict(keep=750), "keep must be a list"),
    (dict(warmup_steps=2000), r"warmup_steps 2000 is not a step of this run"),
    (dict(decay_start=-0.1), r"decay_start -0.1 is a float"),
    (dict(lr="3e-3"), r"lr must be a number, got '3e-3'"),
    (dict(beta1=1.0), r"beta1 and beta2 must be in \[0, 1\)"),
    (dict(beta2="0.99"), r"beta2 must be a number"),
    (dict(compile="yes"), r"compile must be true or false"),
    (dict(dtype=16), r"dtype must be a string, got 16"),
])
def test_every_train_key_is_type_and_range_checked(change, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.load("tiny").replace_train(**change)


def test_parameter_matched_variant_trains_beside_the_others(tmp_path, capsys):
    from analysis import load
    from fixedid import FixedIdLM
    from fixedid.config import trainable_params

    cfg = write_config(tmp_path, TRAIN_CONFIG.replace("steps = 12", "steps = 4").replace("keep = [4]", "keep = []"))
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "o"), "--dry-run", "--variants",
                       "learned,canonical-matched"]) == 0
    text = capsys.readouterr().out
    assert "canonical-matched:" in text and "matched by width (d_ff 64 -> " in text and "learned variant's" in text
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet", "--variants",
                       "learned,canonical-matched"]) == 0
    learned, matched = load(tmp_path / "o" / "learned"), load(tmp_path / "o" / "canonical-matched")
    assert matched.cfg.interface == "canonical" and matched.cfg.d_ff > learned.cfg.d_ff
    assert matched.meta["variant"] == "canonical-matched" and learned.meta["variant"] == "learned"
    n_l, n_m = (trainable_params(m.cfg) for m in (learned, matched))
    assert abs(n_m - n_l) <= 0.005 * n_l
    # backbone-matched where shapes allow: at initialisation the attention weights are the same draws
    fresh = [FixedIdLM(m.cfg) for m in (learned, matched)]
    assert torch.equal(fresh[0].blocks[0].attn.q_proj.weight, fresh[1].blocks[0].attn.q_proj.weight)
    bad = write_config(tmp_path, TRAIN_CONFIG.replace('preset = "toy"', 'preset = "toy"\nmatch_params = "depth"'),
                       name="depth.toml")
    assert run_inproc(["--config", str(bad), "--out", str(tmp_path / "d"), "--quiet", "--variants",
                       "canonical-matched"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot land within 0.5%" in err and "\n" not in err


@pytest.mark.parametrize("config, learned", [("tiny", None), ("small", None), ("paper-1.7b", "1,812,039,680")])
def test_dry_run_accounts_for_the_matched_variant(config, learned, tmp_path, capsys):
    assert run_inproc(["--config", config, "--out", str(tmp_path / "o"), "--dry-run", "--variants",
                       "learned,canonical,canonical-matched"]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if "matched by width" in ln)
    pct = float(line.rsplit("(", 1)[1].rstrip("%)"))
    assert abs(pct) <= 0.5 and "canonical-matched: total" in text
    if learned:
        assert f"learned variant's {learned}" in line and "d_ff 8192 -> 8875" in line
    assert not (tmp_path / "o").exists()


def test_the_trained_key_covers_steps_and_snapshots_but_not_logging():
    base = TrainConfig.load("tiny")
    key = base.trained_key()
    assert base.replace_train(steps=400).trained_key() != key  # a shorter run is another model
    assert base.replace_train(keep=[0.5]).trained_key() != key  # other snapshots
    assert base.replace_train(log_every=5, eval_every=50, save_every=100).trained_key() == key
    # the same schedule written as steps or as fractions trains the same thing
    assert base.replace_train(warmup_steps=32, decay_start=960, keep=[1200]).trained_key() == key


def test_a_model_entry_restating_its_presets_value_is_the_same_training():
    """gf2_seed = 0 written out (the toy preset's own recoding) trains what leaving it out trains: the same key and
    fingerprint, no difference listed. Another recoding, or a [model] seed (which overrides [train] seed even at the
    preset's value), is another training."""
    from fixedid.config import ModelConfig

    base = TrainConfig.load("tiny")
    assert "gf2_seed" not in base.model and ModelConfig.preset("toy").gf2_seed == 0
    spelled = TrainConfig(model={**base.model, "gf2_seed": 0}, data=base.data, train=base.train)
    assert spelled.trained_key() == base.trained_key() and spelled.fingerprint() == base.fingerprint()
    assert spelled.differences(base) == []
    other = TrainConfig(model={**base.model, "gf2_seed": 1}, data=base.data, train=base.train)
    assert other.trained_key() != base.trained_key() and other.differences(base) == ["model.gf2_seed"]
    at_seed_1 = base.replace_train(seed=1)
    pinned = TrainConfig(model={**base.model, "seed": ModelConfig.preset("toy").seed}, data=base.data,
                         train=at_seed_1.train)
    assert pinned.trained_key() != at_seed_1.trained_key() and pinned.differences(at_seed_1) == ["model.seed"]


def test_a_data_entry_added_later_is_keyed_only_when_set():
    """split_word_scope came after run keys were published: at its default the [data] table, key and fingerprint
    are what they were without it (the key a table of the earlier entries hashes to, computed here by hand), and
    setting it is another training, listed by name."""
    import dataclasses
    import hashlib
    import json

    bpe = TrainConfig.load("tiny-bpe")
    base = TrainConfig(model=bpe.model, data=dataclasses.replace(bpe.data, split_word_scope="occurrence"),
                       train=bpe.train)
    assert "split_word_scope" not in base.to_dict()["data"]
    by_hand = base._keyed()
    by_hand["data"] = {k: v for k, v in dataclasses.asdict(base.data).items() if k != "split_word_scope"}
    t = base.train
    by_hand["train"].update(warmup_steps=t.warmup, decay_start=t.decay_begin, decay_steps=t.decay_end,
                            keep=t.kept_steps)
    for k in ("save_every", "eval_every", "log_every", "compile"):
        by_hand["train"].pop(k)
    assert base.trained_key() == hashlib.sha256(json.dumps(by_hand, sort_keys=True).encode()).hexdigest()
    per_doc = bpe  # the packaged sub-word recipe cuts per document
    assert per_doc.to_dict()["data"]["split_word_scope"] == "document"
    assert per_doc.trained_key() != base.trained_key() and per_doc.differences(base) == ["data.split_word_scope"]


def test_the_demo_cache_is_keyed_on_what_is_trained(tmp_path, monkeypatch):
    from analysis import variants

    seen = []

    def fake_train(cfg, run_dir, *a, **k):
        seen.append(run_dir.name)
        raise KeyboardInterrupt  # stop before any training

    monkeypatch.setattr(variants.train, "train", fake_train)
    for steps in (1000, 400):
        with pytest.raises(KeyboardInterrupt):
            variants.ensure_variants(TrainConfig.load("tiny").replace_train(steps=steps), tmp_path, quiet=True)
    assert len(set(seen)) == 2 and all(name.startswith("demo-") for name in seen)


@pytest.mark.parametrize("table, line, message", [
    ("model", 'init_std = "0.1"', "init_std must be a number, got '0.1'"),
    ("model", 'rope_theta = "1e4"', "rope_theta must be a number"),
    ("model", 'bias = "no"', "bias must be true or false"),
    ("model", "gf2_affine = 1", "gf2_affine must be true or false, got 1"),
    ("model", "norm_eps = -1", "norm_eps and rope_theta must be positive"),
    ("model", "seed = -1", "seed must be >= 0"),
    ("model", 'd_model = "64"', "d_model must be a positive integer, got '64'"),
    ("data", "source = 5", "[data] source must be a string, got 5"),
    ("data", "shards = 1", "[data] shards must be a string"),
    ("data", "train_tokens = 1.5", "[data] train_tokens must be a positive integer"),
])
def test_every_model_and_data_key_is_type_checked(tmp_path, table, line, message):
    path = write_config(tmp_path, f"[{table}]\n{line}\n")
    with pytest.raises(ConfigError) as e:
        TrainConfig.load(path)
    assert message in str(e.value)


@pytest.mark.parametrize("name", ["tiny", "tiny-bpe"])
def test_the_small_defaults_use_their_code_as_the_study_does(name):
    """Every code bit varies over the vocabulary and about 75% of the code space is in use (the study: 49,152 of
    2^16), for every fixed code the study trains: canonical, three GF(2) recodings and permuted."""
    from fixedid.model import constant_code_bits
    from fixedid.train.prepare import vocab_size_of

    cfg = TrainConfig.load(name)
    vocab = vocab_size_of(cfg.data)
    for variant, gf2_seed in (("canonical", 0), ("gf2", 0), ("gf2", 1), ("gf2", 2), ("permuted", 0)):
        c = TrainConfig(model={**cfg.model, "gf2_seed": gf2_seed}, data=cfg.data, train=cfg.train)
        m = c.model_config(variant, vocab)
        assert constant_code_bits(m) == [], (variant, gf2_seed)
        assert 0.7 < vocab / 2 ** m.n_bits <= 0.76
    # the same vocabulary under a 16-bit code leaves the top bits constant (what these defaults avoid)
    model = {k: v for k, v in cfg.model.items() if k != "rope_head_thetas"}  # its bases are per head of 6 heads
    wide = TrainConfig(model={**model, "n_bits": 16, "d_model": 64, "n_heads": 8}, data=cfg.data, train=cfg.train)
    assert len(constant_code_bits(wide.model_config("canonical", vocab))) == 16 - (vocab - 1).bit_length()


def test_variants_side_by_side_give_the_same_bytes(trained, tmp_path, capsys):
    """--jobs 3 trains the three variants at once, one process and thread each: the weights and the metrics log are
    bit for bit those of the one-after-another run, and the summary lines are the same."""
    tmp, cfg, _ = trained
    assert run_inproc(["--config", str(cfg), "--out", str(tmp_path / "side"), "--jobs", "3"]) == 0
    out = capsys.readouterr().out
    for v in ("learned", "canonical", "gf2"):
        for name in ("metrics.jsonl", "model.safetensors", "optimizer.safetensors"):
            assert (tmp / "out" / v / name).read_bytes() == (tmp_path / "side" / v / name).read_bytes(), (v, name)
        assert (tmp / "out" / v / "steps" / "0000004" / "model.safetensors").read_bytes() == \
            (tmp_path / "side" / v / "steps" / "0000004" / "model.safetensors").read_bytes()
        assert out.count(f"{v}: 12 steps") == 1
    assert json.loads((tmp_path / "side" / "run.json").read_text())["variants"] == ["learned", "canonical", "gf2"]


@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_bad_jobs_is_one_line_and_exit_2(trained, tmp_path, capsys, jobs):
    assert run_inproc(["--config", str(trained[1]), "--out", str(tmp_path / "o"), "--jobs", jobs]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs" in err[0] and not (tmp_path / "o").exists()


def test_a_workers_error_comes_back_as_the_packages_type():
    from fixedid.errors import CheckpointError
    from fixedid.train.parallel import _reraise

    with pytest.raises(CheckpointError, match="no meta.json"):
        _reraise("gf2", 2, 'noise\n{"error": "CheckpointError", "message": "x: no meta.json"}\n', "")
    failed = r"training gf2 in a worker process failed \(exit status 1\):\nTraceback \.\.\.\nboom$"
    with pytest.raises(RuntimeError, match=failed):
        _reraise("gf2", 1, "", "Traceback ...\nboom\n")


def test_jobs_auto_is_every_variant_only_on_a_multicore_cpu(monkeypatch):
    from fixedid.train import parallel

    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 2)
    assert parallel.default_jobs(3, "cpu") == 3
    assert parallel.default_jobs(3, "cuda") == 1
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 1)
    assert parallel.default_jobs(3, "cpu") == 1

"""Every command's bad input, from one table: exit status 2, one line on stderr naming the problem, no traceback,
nothing written (no --out directory, an --out file left as it was)."""

import json
import shutil

import numpy as np
import pytest

from analysis.cli.main import main as analyze
from analysis.interop.hf import export_hf
from analysis.cli.study import main as study
from fixedid.train.cli import main as train

from tests._helpers import tiny_checkpoint

#: (command, arguments, a fragment of the one-line message). ``{name}`` is one of the files of ``files`` below;
#: every row that names no --out gets ``--out {out}`` (``figures`` writes into its --results), which must not exist
#: afterwards.
ROWS = [
    # behaviours
    ("analyze", "behaviours --ckpt {ckpt} --tasks ioi,nonsense", "argument --tasks: must be one or more of"),
    ("analyze", "behaviours --ckpt {ckpt} --n-pairs 0", "argument --n-pairs: must be a positive integer"),
    # patching
    ("analyze", "patching --ckpt /nonexistent/ckpt --task ioi", "no checkpoint directory"),
    ("analyze", "patching --ckpt {ckpt}", "give exactly one source of pairs"),
    ("analyze", "patching --ckpt {trunc} --task ioi", "does not match its recorded sha256"),
    ("analyze", "patching --ckpt {ckpt} --pairs {empty}", "holds no pairs"),
    ("analyze", "patching --ckpt {ckpt} --pairs {nonutf8}", "is not UTF-8 text"),
    ("analyze", "patching --ckpt {ckpt} --task ioi --out {file}", "is a file, not a directory"),
    ("analyze", "patching --ckpt {ckpt} --task ioi --n-pairs 0", "argument --n-pairs: must be a positive integer"),
    ("analyze", "patching --ckpt {ckpt} --task ioi --site resid", "invalid choice: 'resid'"),
    # recoding
    ("analyze", "recoding --ckpt {learned}", "the learned variant has no code to recode"),
    ("analyze", "recoding --ckpt {ckpt} --data {empty}", "holds 0 tokens"),
    ("analyze", "recoding --ckpt {ckpt} --data {nonutf8}", "is not UTF-8 text"),
    ("analyze", "recoding --ckpt {ckpt} --data {floats}", "must be an integer array"),
    ("analyze", "recoding --ckpt {ckpt} --data {oov}", "outside the vocabulary"),
    ("analyze", "recoding --ckpt {ckpt} --ks a,b", "argument --ks: must be comma-separated integers"),
    ("analyze", "recoding --ckpt {ckpt} --out {file}", "is a file, not a directory"),
    # interventions
    ("analyze", "interventions --ckpt {learned} --kind bitflip", "the learned variant has none"),
    ("analyze", "interventions --ckpt {ckpt} --kind bitflip --data {floats}", "must be an integer array"),
    ("analyze", "interventions --ckpt {ckpt} --kind bitflip --data {oov}", "outside the vocabulary"),
    ("analyze", "interventions --ckpt {ckpt} --kind bitflip --data {badnpy}", "cannot be read as a .npy array"),
    ("analyze", "interventions --ckpt {ckpt} --kind bitflip --bits 99", "out of range for a 16-bit code"),
    ("analyze", "interventions --ckpt {ckpt} --kind bit-layer --task ioi --site z", "site must be one of"),
    ("analyze", "interventions --ckpt {ckpt} --kind ablate --layers 7", "layer 7 is out of range"),
    ("analyze", "interventions --ckpt unknown-variant --kind bitflip", "no checkpoint directory"),
    # probes
    ("analyze", "probes --ckpt {ckpt} --targets nonsense", "unknown probe target"),
    ("analyze", "probes --ckpt {ckpt} --data {nonutf8}", "is not UTF-8 text"),
    ("analyze", "probes --ckpt {ckpt} --data {empty}", "holds 0 tokens"),
    ("analyze", "probes --ckpt {ckpt} --out {file}", "is a file, not a directory"),
    # erasure
    ("analyze", "erasure --ckpt {ckpt} --concept token --hook blocks.0.attn.hook_pattern",
     "is not one vector per token"),
    ("analyze", "erasure --ckpt {ckpt} --concept token --hook nonsense", "unknown hook point 'nonsense'"),
    ("analyze", "erasure --ckpt {ckpt} --concept nonsense", "unknown concept 'nonsense'"),
    ("analyze", "erasure --ckpt {ckpt}", "required: --concept"),
    # eval (lm-eval)
    ("analyze", "eval --ckpt {ckpt} --device cuda:99 --limit 2", "device 'cuda:99' is not available here"),
    ("analyze", "eval --ckpt {ckpt} --tasks nonsense", "unknown lm-eval task(s) ['nonsense']"),
    ("analyze", "eval --ckpt {trunc}", "does not match its recorded sha256"),
    # sae (sparse dictionaries)
    ("analyze", "sae --ckpt {ckpt} --hook nonsense", "has no hook point 'nonsense'"),
    ("analyze", "sae --ckpt {ckpt} --hook blocks.0.hook_resid_post --expansion 0",
     "argument --expansion: must be a positive integer"),
    ("analyze", "sae --ckpt {ckpt} --hook blocks.0.hook_resid_post --kind transcoder", "a transcoder reads an MLP"),
    ("analyze", "sae --ckpt {ckpt} --hook blocks.0.hook_resid_post --hook-out blocks.0.hook_mlp_out",
     "--hook-out is for transcoders"),
    ("analyze", "sae --ckpt {ckpt} --hook blocks.0.attn.hook_z", "dictionaries read [batch, pos, width]"),
    ("analyze", "sae --ckpt {ckpt} --hook blocks.0.hook_resid_post --k 100000", "k must be in [1, d_sae="),
    ("analyze", "sae --ckpt {ckpt} --hook blocks.0.hook_resid_post --data {oov}", "outside the vocabulary"),
    ("analyze", "sae --ckpt {ckpt} --hook blocks.0.hook_resid_post --lr 0", "argument --lr: must be positive"),
    ("analyze", "sae --ckpt {ckpt} --hook blocks.0.hook_resid_post --arch relu --l1 -1", "coefficients must be >= 0"),
    # graph (attribution graphs)
    ("analyze", "graph --ckpt {ckpt}", "give exactly one source of prompts"),
    ("analyze", "graph --ckpt {ckpt} --task nonsense", "unknown task 'nonsense'"),
    ("analyze", "graph --ckpt {ckpt} --task ioi --n-prompts 0", "argument --n-prompts: must be a positive integer"),
    ("analyze", "graph --ckpt {ckpt} --task ioi --k 0", "argument --k: must be a positive integer"),
    ("analyze", "graph --ckpt {ckpt} --task ioi --node-threshold 2", "argument --node-threshold: must be in [0, 1]"),
    ("analyze", "graph --ckpt {ckpt} --task ioi --transcoders {file}", "no transcoder of layer 0"),
    # features (dictionaries read against the code)
    ("analyze", "features --ckpt {ckpt} --site nonsense", "has no hook point 'nonsense'"),
    ("analyze", "features --ckpt {ckpt} --site ln_final.hook_normalized", "is not inside a block"),
    ("analyze", "features --ckpt {ckpt} --site blocks.0.attn.hook_z", "dictionaries read [batch, pos, width]"),
    ("analyze", "features --ckpt {ckpt} --k 0", "argument --k: must be a positive integer"),
    ("analyze", "features --ckpt {ckpt} --purity 1.5", "argument --purity: must be in (0, 1]"),
    ("analyze", "features --ckpt {ckpt} --data {oov}", "outside the vocabulary"),
    # lens, head, context
    ("analyze", "lens --ckpt {ckpt} --data {oov}", "outside the vocabulary"),
    ("analyze", "lens --ckpt {ckpt} --data {nonutf8}", "is not UTF-8 text"),
    ("analyze", "lens --ckpt {ckpt} --kind tuned --lens-steps 0", "argument --lens-steps: must be a positive integer"),
    ("analyze", "lens --ckpt {ckpt} --kind jacobian --tokens 1", "argument --tokens: must be at least 2"),
    ("analyze", "unembed --ckpt {ckpt} --k 0", "argument --k: must be a positive integer"),
    ("analyze", "attention --ckpt {ckpt} --task ioi --heads L9H0", "no head L9H0"),
    ("analyze", "attention --ckpt {trunc} --task ioi", "does not match its recorded sha256"),
    ("analyze", "dla --ckpt /nonexistent/ckpt --task ioi", "no checkpoint directory"),
    ("analyze", "paths --ckpt {ckpt} --task ioi --sender L9H0", "L9H0"),
    ("analyze", "edges --ckpt {ckpt} --task ioi --method exact", "invalid choice"),
    ("analyze", "edges --ckpt {ckpt} --task ioi --steps 0", "argument --steps: must be a positive integer"),
    ("analyze", "circuit --ckpt {ckpt} --task ioi --k 0", "argument --k: must be a positive integer"),
    ("analyze", "circuit --ckpt {ckpt} --task ioi --ablation noise", "invalid choice"),
    ("analyze", "das --ckpt {ckpt} --variable bit", "the bit variable needs the code bit to align"),
    ("analyze", "das --ckpt {ckpt} --n-pairs 3", "argument --n-pairs: must be at least 4"),
    ("analyze", "das --ckpt {ckpt} --ranks 0 --all-pairs", "argument --ranks: must be positive integers"),
    ("analyze", "unembed --ckpt {ckpt} --reference {trunc}", "does not match its recorded sha256"),
    ("analyze", "context --ckpt {ckpt} --ks 0", "argument --ks: must be positive integers"),
    ("analyze", "context --ckpt {ckpt} --data {empty}", "holds 0 tokens"),
    # crosscoder
    ("analyze", "crosscoder --ckpt {ckpt} --hook blocks.0.hook_resid_post", "two or more --ckpt"),
    ("analyze", "crosscoder --activations a={acts}", "two or more activation files"),
    ("analyze", "crosscoder --activations a={acts} --activations b={acts_short}", "differ in rows or width"),
    ("analyze", "crosscoder --activations a={acts} --activations b={acts_nan}", "NaN or infinite"),
    ("analyze", "crosscoder --activations a={acts} --activations b={floats}", "differ in rows or width"),
    ("analyze", "crosscoder --ckpt {ckpt} --ckpt {other_vocab} --hook blocks.0.hook_resid_post",
     "vocabularies differ"),
    ("analyze", "crosscoder --ckpt {ckpt} --ckpt {learned} --hook nonsense", "has no hook point 'nonsense'"),
    ("analyze", "crosscoder --activations a={acts} --activations b={acts} --eval-tokens 8 --batch-tokens 8 "
     "--k 100000", "k must be in [1, 64]"),
    ("analyze", "crosscoder --activations a={acts} --activations b={acts} --out {full}", "already holds results"),
    ("analyze", "crosscoder --activations a={acts} --ckpt {ckpt}", "(one of them)"),
    ("analyze", "crosscoder --activations a={acts} --activations b={acts} --eval-tokens 64",
     "--eval-tokens 64 must be below"),
    # Hugging Face interchange
    ("analyze", "export-hf --ckpt {ckpt} --out {file}", "is a file, not a directory"),
    ("analyze", "export-hf --ckpt {trunc}", "does not match its recorded sha256"),
    ("analyze", "import-hf --hf {hf_noheads}", "lacks (or has a non-positive) num_attention_heads"),
    ("analyze", "import-hf --hf {hf_trunc}", "cannot be read as safetensors"),
    ("analyze", "import-hf --hf {ckpt}", "is not a Hugging Face model directory"),
    # figures, similarity, demo
    ("analyze", "figures --results {empty}", "has no measurements.csv"),
    ("analyze", "similarity --ckpt {ckpt}", "give two checkpoints"),
    ("analyze", "similarity --ckpt {ckpt} --ckpt {learned} --data {floats}", "must be an integer array"),
    ("analyze", "demo --config nonsense", "config file nonsense does not exist"),
    ("analyze", "demo --config {file}", "is not valid TOML"),
    ("analyze", "demo --config {lr_string}", "[train] lr must be a number, got '3e-3'"),
    # fixedid-train
    ("train", "--config {lr_string}", "[train] lr must be a number, got '3e-3'"),
    ("train", "--config {keep_late}", "keep entry 5000 is not a step of this run"),
    ("train", "--config {split_rate}", "[data] split_word_rate must be a number in [0, 1)"),
    ("train", "--config {split_scope}", "[data] split_word_scope must be \"occurrence\""),
    ("train", "--config {wide_code}", "n_bits 25 is too large"),
    ("train", "--config tiny --variants learned-bighead", "must list distinct names"),
    ("train", "--config {nonutf8_toml}", "cannot be read"),
    ("train", "--config tiny --steps 0", "steps must be a positive integer"),
    ("train", "--config tiny --device cuda:99", "device 'cuda:99' is not available here"),
    ("train", "--config tiny --out {file}", "is a file, not a directory"),
    ("train", "--config tiny --variants nonsense", "must list distinct names"),
    ("train", "--config tiny --resume", "nothing to resume"),
    # the study
    ("study", "run nonsense", "config file nonsense does not exist"),
    ("study", "run tiny --seeds a", "--seeds 'a' does not parse"),
    ("study", "run tiny --variants nonsense", "must be names from"),
    ("study", "--config tiny", "fixedid-study run tiny"),
    ("study", "run tiny --slurm --walltime abc --print-job-script", "is not a Slurm time"),
]

COMMANDS = {"analyze": (analyze, "fixedid-analyze"), "train": (train, "fixedid-train"),
            "study": (study, "fixedid-study")}


@pytest.fixture(scope="module")
def files(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("bad")
    ckpt = tiny_checkpoint(tmp_path_factory, tokenizer, "canonical").ckpt_dir
    learned = tiny_checkpoint(tmp_path_factory, tokenizer, "learned").ckpt_dir
    trunc = root / "trunc"
    shutil.copytree(ckpt, trunc)
    weights = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    hf = export_hf(ckpt, root / "hf")
    hf_noheads, hf_trunc = root / "hf_noheads", root / "hf_trunc"
    shutil.copytree(hf, hf_noheads)
    conf = json.loads((hf / "config.json").read_text())
    del conf["num_attention_heads"]
    (hf_noheads / "config.json").write_text(json.dumps(conf))
    shutil.copytree(hf, hf_trunc)
    weights = (hf / "model.safetensors").read_bytes()
    (hf_trunc / "model.safetensors").write_bytes(weights[: len(weights) // 3])
    paths = dict(ckpt=ckpt, learned=learned, trunc=trunc, hf_noheads=hf_noheads, hf_trunc=hf_trunc)
    contents = {"empty.txt": b"", "nonutf8.txt": b"\xff\xfe caf\xe9 \x80\n", "file": b"a file, not a directory\n",
                "lr_string.toml": b'[train]\nlr = "3e-3"\n',
                "keep_late.toml": b"[train]\nsteps = 1000\nkeep = [5000]\n",
                "split_rate.toml": b"[data]\nsplit_word_rate = 1.5\n",
                "split_scope.toml": b"[data]\nsplit_word_rate = 0.1\nsplit_word_scope = \"word\"\n",
                "wide_code.toml": b"[model]\nn_bits = 25\n",
                "nonutf8_toml.toml": b"[train]\nsteps = 10 # \xff\n", "badnpy.npy": b"\x93NUMPY not really"}
    for name, data in contents.items():
        (root / name).write_bytes(data)
        paths[name.split(".")[0]] = root / name
    np.save(root / "floats.npy", np.random.default_rng(0).random((4, 16)).astype(np.float32))
    np.save(root / "oov.npy", np.full((4, 16), 60_000, dtype=np.int64))
    paths.update(floats=root / "floats.npy", oov=root / "oov.npy")
    rows = np.random.default_rng(1).random((64, 8)).astype(np.float32)  # activation files of a crosscoder
    for name, array in (("acts", rows), ("acts_short", rows[:40]), ("acts_nan", np.where(rows > 0.99, np.nan, rows))):
        np.save(root / f"{name}.npy", array)
        paths[name] = root / f"{name}.npy"
    (root / "full").mkdir()
    (root / "full" / "results.csv").write_text("an earlier run's\n")
    paths["full"] = root / "full"
    from fixedid.data import SyntheticLanguage
    from fixedid.data.tokenizer import train_words

    other = train_words(SyntheticLanguage(1).documents(50), 4096)  # another vocabulary
    paths["other_vocab"] = tiny_checkpoint(tmp_path_factory, other, "canonical").ckpt_dir
    return paths


@pytest.mark.parametrize("command, args, message", ROWS, ids=[f"{c}:{a.split()[0]}:{i}" for i, (c, a, _)
                                                               in enumerate(ROWS)])
def test_bad_input_is_one_line_exit_2_and_nothing_written(files, tmp_path, capsys, command, args, message):
    out = tmp_path / "out"
    argv = [a.format(**files) for a in args.split()]
    if "--out" not in argv and argv[0] != "figures":
        argv += ["--out", str(out)]
    before = files["file"].read_bytes()
    fn, prog = COMMANDS[command]
    with pytest.raises(SystemExit) as e:
        fn(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(prog) and "error:" in err and message in err, err
    assert not out.exists(), "a refused command wrote its --out"
    assert files["file"].read_bytes() == before


def test_every_verb_is_in_the_table():
    from analysis.cli.main import command_specs

    covered = {args.split()[0] for command, args, _ in ROWS if command == "analyze"}
    assert covered == set(command_specs())
    assert {command for command, _, _ in ROWS} == set(COMMANDS)

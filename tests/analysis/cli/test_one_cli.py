"""The three commands read as one tool: --version everywhere, grouped help, an example ending every verb's help
(parsed by the verb's own parser), --ckpt parsed by one helper, --device auto and one default metric, output
directories that never silently replace another run's, and the deprecated ``head`` verb."""

import argparse
import re
import shlex

import pytest

from analysis.cli import args as cli_args
from analysis.cli.main import DEPRECATED, build_parser, command_specs
from analysis.cli.main import main as analyze
from analysis.cli.study import build_parser as study_parser
from analysis.cli.study import main as study
from analysis.engine.metrics import DEFAULT_METRIC
from analysis.errors import AnalysisError
from fixedid.train.cli import build_parser as train_parser
from fixedid.train.cli import main as train
from fixedid.version import __version__

from tests._helpers import tiny_checkpoint


def exit_code(fn, argv):
    with pytest.raises(SystemExit) as e:
        fn([str(a) for a in argv])
    return e.value.code


@pytest.mark.parametrize("fn, prog", [(analyze, "fixedid-analyze"), (train, "fixedid-train"), (study, "fixedid-study")])
def test_every_entry_point_prints_the_package_version(fn, prog, capsys):
    assert exit_code(fn, ["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"{prog} {__version__}"


def test_the_top_level_help_lists_every_verb_once_under_its_family(capsys):
    assert exit_code(analyze, ["--help"]) == 0
    text = capsys.readouterr().out
    for title in ("training", "causal methods", "circuits", "readouts", "evaluation", "interop", "study"):
        assert f"\n{title}:\n" in text
    listed = re.findall(r"^  ([a-z][a-z-]*)  ", text, re.M)
    assert sorted(listed) == sorted(command_specs()) and len(listed) == len(set(listed))


def subparsers(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in action.choices.items() if name not in DEPRECATED}


def examples(help_text, command):
    """The example commands that end a help text, continuation lines joined and comments dropped."""
    block = help_text[help_text.rindex("examples:\n") + len("examples:\n"):]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip().startswith(command)]


@pytest.mark.parametrize("verb", sorted(command_specs()))
def test_every_verbs_help_ends_with_examples_its_parser_accepts(verb):
    sub = subparsers(build_parser())[verb]
    text = sub.format_help()
    assert text.rstrip().splitlines()[-1].strip().startswith(("fixedid-analyze", "--", "cp ")), text[-300:]
    found = examples(text, "fixedid-analyze")
    assert found and all(argv[1] == verb for argv in found if argv[1] != "export-hf")
    for argv in found:
        build_parser().parse_args(argv[1:])  # a usage error would exit 2
        ckpts = [argv[i + 1] for i, a in enumerate(argv) if a == "--ckpt"]
        if verb not in ("export-hf", "import-hf"):  # a Llama has one RoPE base; the demo's heads have two
            assert all(c.startswith("fixedid-demo/checkpoints/") for c in ckpts), argv


@pytest.mark.parametrize("parser, command", [(train_parser, "fixedid-train"), (study_parser, "fixedid-study")])
def test_train_and_study_help_end_with_examples_they_parse(parser, command):
    found = examples(parser().format_help(), command)
    assert found
    for argv in found:
        parser().parse_args(argv[1:])


def test_every_option_has_help():
    parsers = [("fixedid-train", train_parser()), ("fixedid-study", study_parser())]
    parsers += [(f"fixedid-study {n}", p) for n, p in subparsers(study_parser()).items()]
    parsers += [(f"fixedid-analyze {n}", p) for n, p in subparsers(build_parser()).items()]
    for name, parser in parsers:
        for action in parser._actions:
            if action.option_strings and action.dest != "help":
                assert action.help and action.help != argparse.SUPPRESS, f"{name} {action.option_strings}"


def test_ckpt_device_and_metric_are_spelled_one_way_in_every_verb():
    for name, parser in subparsers(build_parser()).items():
        actions = {a.dest: a for a in parser._actions}
        if "ckpt" in actions:
            ckpt = actions["ckpt"]
            assert isinstance(ckpt, argparse._AppendAction) and ckpt.metavar == "[NAME=]DIR", name
        spec = command_specs()[name]
        if spec.placement and spec.models != "none":
            assert actions["device"].default == "auto", name
        if "metric" in actions and name != "interventions":  # bit-layer's kl/logit_diff is another quantity
            assert actions["metric"].default == DEFAULT_METRIC == "normalized_logit_diff", name
        if "out" in actions and name not in {"export-hf", "import-hf", "demo"}:
            assert "overwrite" in actions, name
    assert "ckpt" in {a.dest for a in subparsers(build_parser())["patching"]._actions}


def test_ckpt_values_parse_as_dir_or_name_equals_dir(tmp_path):
    a, b = tmp_path / "s0" / "canonical", tmp_path / "s1" / "canonical"
    odd = tmp_path / "lr=3e-3"
    for d in (a, b, odd):
        d.mkdir(parents=True)
    assert cli_args.parse_checkpoints([str(a)]) == {"canonical": a}
    assert cli_args.parse_checkpoints([f"mine={a}", str(odd)]) == {"mine": a, "lr=3e-3": odd}
    # two directories of one name: each labelled by its whole path
    assert cli_args.parse_checkpoints([str(a), str(b)]) == {str(a): a, str(b): b}
    with pytest.raises(AnalysisError, match="share the name 'x'"):
        cli_args.parse_checkpoints([f"x={a}", f"x={b}"])
    with pytest.raises(AnalysisError, match="no checkpoint directory at"):
        cli_args.parse_checkpoints([f"x={tmp_path / 'missing'}"])
    with pytest.raises(AnalysisError, match="give DIR or NAME=DIR"):
        cli_args.parse_checkpoints(["=" + str(a)])
    assert cli_args.checkpoint_list([str(a), str(b)]) == [(None, a), (None, b)]  # names may repeat here


@pytest.fixture(scope="module")
def canonical(tmp_path_factory, tokenizer):
    return tiny_checkpoint(tmp_path_factory, tokenizer, "canonical").ckpt_dir


def test_the_default_output_names_verb_variant_and_run_and_is_never_silently_reused(canonical, tmp_path,
                                                                                     monkeypatch, capsys):
    import json

    monkeypatch.chdir(tmp_path)
    weights = json.loads((canonical / "meta.json").read_text())["files"]["model.safetensors"]
    argv = ["patching", "--ckpt", f"gf={canonical}", "--task", "ioi", "--n-pairs", "2"]
    assert exit_code(analyze, argv) == 0
    out = tmp_path / "analysis-out" / f"patching-gf-{weights[:8]}"
    assert (out / "patching.csv").is_file()
    before = (out / "patching.csv").read_bytes()
    capsys.readouterr()
    assert exit_code(analyze, argv + ["--site", "attn_out"]) == 2
    err = capsys.readouterr().err
    assert "already holds results; pass --overwrite" in err and err.count("\n") == 1
    assert (out / "patching.csv").read_bytes() == before
    assert exit_code(analyze, argv + ["--site", "attn_out", "--overwrite"]) == 0
    assert (out / "patching.csv").read_bytes() != before


def test_head_is_a_deprecated_alias_of_unembed(canonical, tmp_path, capsys):
    assert DEPRECATED == {"head": "unembed"}
    assert exit_code(analyze, ["head", "--ckpt", canonical, "--k", "0", "--out", tmp_path / "o"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("fixedid-analyze: warning: 'head' is deprecated and will be removed in the next release; use "
                      "'fixedid-analyze unembed'")
    assert err[1].startswith("fixedid-analyze unembed: error: argument --k: must be a positive integer")

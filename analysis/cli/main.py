"""``fixedid-analyze``: the analysis command line, one verb per analysis spec (built-in or a plugin's), grouped by
family in ``--help``. Bad input gets one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import sys
import textwrap

from fixedid.clitools import ArgumentParser, run_main
from fixedid.version import __version__

from analysis.cli.args import add_spec_args, checkpoint_list, output_dir, parse_checkpoints
from analysis.errors import AnalysisError
from analysis.outputs import check_out
from analysis.specs.registry import all_specs, groups

#: Old verb names kept for one release: ``{old: new}``; using one prints a one-line deprecation warning.
DEPRECATED = {"head": "unembed"}


def command_specs() -> dict:
    """Every verb's spec by name, in ``--help``'s order: the command line's own (:mod:`analysis.cli.tools`), the
    built-in analyses and the plugins', family by family."""
    from analysis.cli.tools import TOOLS

    return {name: spec for members in groups({**TOOLS, **all_specs()}).values() for name, spec in members.items()}


def verb_listing(specs: dict, width: int = 100) -> str:
    """The verbs by family, one wrapped line each, for the top-level ``--help``."""
    pad = max(map(len, specs)) + 4
    lines = []
    for title, members in groups(specs).items():
        lines.append(f"{title}:")
        for name, spec in members.items():
            lines += textwrap.wrap(spec.help, width, initial_indent=f"  {name:<{pad - 2}}",
                                   subsequent_indent=" " * pad)
        lines.append("")
    lines += textwrap.wrap("Run 'fixedid-analyze VERB --help' for a verb's options and examples; the examples run on "
                           "the checkpoints that 'fixedid-analyze demo' links in fixedid-demo/checkpoints/. Training "
                           "is fixedid-train, the study over seeds fixedid-study.", width)
    return "\n".join(lines)


def build_parser(specs: dict | None = None) -> ArgumentParser:
    """The whole ``fixedid-analyze`` parser, one subcommand per spec (the CLI reference is generated from it)."""
    specs = command_specs() if specs is None else specs
    parser = ArgumentParser(prog="fixedid-analyze", usage="%(prog)s [-h] [--version] VERB ...",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            description="Analyse fixedid checkpoints: every verb writes CSV plus PNG and PDF figures "
                                        "and prints a short summary.", epilog=verb_listing(specs))
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB", parser_class=ArgumentParser,
                                help=argparse.SUPPRESS, prog="fixedid-analyze")
    aliases = {new: [old for old, n in DEPRECATED.items() if n == new] for new in specs}
    for name, spec in specs.items():
        p = sub.add_parser(name, aliases=aliases[name], description=spec.help,
                           epilog="examples:\n" + spec.examples.strip("\n"),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        add_spec_args(p, spec)
    return parser


def main(argv=None) -> None:
    """The ``fixedid-analyze`` entry point."""
    run_main("fixedid-analyze", lambda: run(argv))


def run(argv=None) -> int:
    """Parse a command line and run its verb: parameters checked, ``--out`` checked, each checkpoint loaded on
    ``--device`` in ``--dtype``, the analysis computed, its files written, its summary printed."""
    from analysis.specs.execute import checked_params, run_spec, write_result

    specs = command_specs()
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    verb = next((a for a in argv if not a.startswith("-")), None)
    if verb in DEPRECATED:  # said before the command line is read, so it precedes any usage error
        print(f"fixedid-analyze: warning: '{verb}' is deprecated and will be removed in the next release; "
              f"use 'fixedid-analyze {DEPRECATED[verb]}'", file=sys.stderr)
    args = build_parser(specs).parse_args(argv)
    args.command = DEPRECATED.get(args.command, args.command)
    spec = specs[args.command]
    params = checked_params(spec, {p.name: getattr(args, p.name) for p in spec.params})
    given = spec.models not in ("none", "any") or getattr(args, "ckpt", None)
    named, labels = checkpoints(spec, args.ckpt) if given else ({}, None)
    if spec.models == "one" and len(named) != 1:
        raise AnalysisError(f"{spec.name} analyses one checkpoint per run; got {len(named)} --ckpt (run it once for "
                            "each)")
    out = output_dir(args, spec.name, named) if spec.outputs else None
    if not spec.outputs and params.get("out") is not None:
        check_out(params["out"])  # a verb that writes its own --out (a model directory, the demo): never a file
    result = run_spec(spec, named, device=getattr(args, "device", None), dtype=getattr(args, "dtype", None),
                      progress=True, labels=labels, **params)
    if result.summary:
        print(result.summary)
    if out is not None:
        written = write_result(result, out)
        if written:
            print(wrote_line(written, out))
    return 0


def checkpoints(spec, values) -> tuple[dict, dict | None]:
    """``({key: directory}, labels)`` of the ``--ckpt`` values: names must differ, except for a spec that allows
    repeated names (one variant of several seeds), whose keys are ``<name>-<i>`` with ``labels`` ``{key: name}``."""
    if not spec.repeat_names:
        return parse_checkpoints(values), None
    items = [(n or p.name, p) for n, p in checkpoint_list(values)]
    names = [n for n, _ in items]
    keys = names if len(set(names)) == len(names) else [f"{n}-{i}" for i, n in enumerate(names)]
    return dict(zip(keys, (p for _, p in items))), dict(zip(keys, names))


def wrote_line(paths, out) -> str:
    """``wrote a.csv, b.png (+ .pdf) ... in OUT``."""
    names = [str(p.relative_to(out)) + (" (+ .pdf)" if p.suffix == ".png" else "") for p in paths]
    return f"wrote {', '.join(names)} in {out}"

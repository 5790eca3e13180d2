"""``fixedid-analyze``: the analysis command line, one verb per analysis, grouped by family in ``--help``.

    fixedid-analyze demo
    fixedid-analyze patching --ckpt fixedid-demo/checkpoints/canonical --task ioi
    fixedid-analyze VERB --help          # a verb's options, ending with examples that run on the demo's checkpoints

Every verb that analyses checkpoints takes ``--ckpt [NAME=]DIR`` (repeatable; :func:`analysis.cli.args.parse_checkpoints`),
``--device`` (default ``auto``: CUDA where present) and ``--dtype``, and writes CSV plus PNG and PDF figures to
``--out`` (default ``analysis-out/<verb>-<variant>-<run id>``; an existing non-empty one is refused unless
``--overwrite``) and prints a short summary. Bad input gets one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from fixedid.clitools import ArgumentParser, run_main
from fixedid.version import __version__

from analysis.cli import (attention, circuit, context, das, demo, dla, edges, erasure, evaluation, export_hf, features,
                          figures, graph,
                          import_hf, interventions, lens, paths, patching, probes, recoding, sae, similarity, unembed)
from analysis.outputs import check_out

#: The verbs by family, in the order ``--help`` lists them; each module holds ``HELP``, ``EXAMPLES``,
#: ``add_args(parser)`` and ``run(args) -> exit status``.
GROUPS = {
    "training": {"demo": demo},
    "causal methods": {"patching": patching, "interventions": interventions, "recoding": recoding,
                       "erasure": erasure, "context": context},
    "circuits": {"dla": dla, "paths": paths, "edges": edges, "circuit": circuit, "das": das, "graph": graph},
    "readouts": {"probes": probes, "similarity": similarity, "lens": lens, "unembed": unembed,
                 "attention": attention, "sae": sae, "features": features},
    "evaluation": {"eval": evaluation},
    "interop": {"export-hf": export_hf, "import-hf": import_hf},
    "study": {"figures": figures},
}

#: Every verb and its module.
VERBS = {name: verb for group in GROUPS.values() for name, verb in group.items()}

#: Old verb names kept for one release: ``{old: new}``; using one prints a one-line deprecation warning.
DEPRECATED = {"head": "unembed"}

#: Verbs that analyse no loaded model (they convert, redraw or train), so they take no --device / --dtype.
NO_MODEL_OPTIONS = {"figures", "demo", "export-hf", "import-hf"}


def add_model_options(p: argparse.ArgumentParser) -> None:
    """``--device`` and ``--dtype`` for every checkpoint a verb loads (:func:`analysis.loading.load_options`)."""
    group = p.add_argument_group("model placement")
    if not any(a.dest == "device" for a in p._actions):
        group.add_argument("--device", default="auto", help="device for the model(s): auto (default: CUDA where "
                           "present, else the CPU), cpu, cuda, cuda:N or mps")
    group.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                       help="load the model(s) in this precision (default float32, as stored; bfloat16 halves the "
                            "memory, and metrics, log-softmax and probe fits still run in float32)")


def verb_listing(width: int = 100) -> str:
    """The verbs by family, one wrapped line each, for the top-level ``--help``."""
    import textwrap

    pad = max(map(len, VERBS)) + 4
    lines = []
    for title, verbs in GROUPS.items():
        lines.append(f"{title}:")
        for name, verb in verbs.items():
            lines += textwrap.wrap(verb.HELP, width, initial_indent=f"  {name:<{pad - 2}}",
                                   subsequent_indent=" " * pad)
        lines.append("")
    lines += textwrap.wrap("Run 'fixedid-analyze VERB --help' for a verb's options and examples; the examples run on "
                           "the checkpoints that 'fixedid-analyze demo' links in fixedid-demo/checkpoints/. Training "
                           "is fixedid-train, the study over seeds fixedid-study.", width)
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    """The whole ``fixedid-analyze`` parser (the CLI reference is generated from it)."""
    parser = ArgumentParser(prog="fixedid-analyze", usage="%(prog)s [-h] [--version] VERB ...",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            description="Analyse fixedid checkpoints: every verb writes CSV plus PNG and PDF figures "
                                        "and prints a short summary.", epilog=verb_listing())
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB", parser_class=ArgumentParser,
                                help=argparse.SUPPRESS)
    aliases = {new: old for old, new in DEPRECATED.items()}
    for name, verb in VERBS.items():
        p = sub.add_parser(name, aliases=[aliases[name]] if name in aliases else [], description=verb.HELP,
                           epilog="examples:\n" + verb.EXAMPLES.strip("\n"),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        verb.add_args(p)
        if name not in NO_MODEL_OPTIONS:
            add_model_options(p)
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    """The parsed command line (usage errors exit 2 with one line)."""
    return build_parser().parse_args(argv)


def main(argv=None) -> None:
    """The ``fixedid-analyze`` entry point."""
    args = parse_args(argv)
    run_main("fixedid-analyze", lambda: run(args))


def run(args: argparse.Namespace) -> int:
    """Run a parsed command: check ``--out``, place the models, call the verb."""
    from analysis.loading import load_options

    if args.command in DEPRECATED:
        new = DEPRECATED[args.command]
        print(f"fixedid-analyze: warning: '{args.command}' is deprecated and will be removed in the next release; "
              f"use 'fixedid-analyze {new}'", file=sys.stderr)
        args.command = new
    check_out(getattr(args, "out", None))
    with load_options(device=getattr(args, "device", None), dtype=getattr(args, "dtype", None)):
        return VERBS[args.command].run(args)

"""fixedid-analyze: the analysis command line.

    fixedid-analyze patching --ckpt runs/tiny/canonical --task ioi
    fixedid-analyze patching --ckpt DIR --clean TEXT --corrupt TEXT --answer WORD --wrong WORD [--site z]
    fixedid-analyze patching --ckpt DIR --pairs pairs.jsonl --method attribution --mode noise
    fixedid-analyze recoding --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2 --family transvection --draws 4
    fixedid-analyze interventions --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2 --kind bitflip
    fixedid-analyze interventions --ckpt DIR --kind ablate --component head --ablation resample --task ioi
    fixedid-analyze probes --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2 --targets canonical_bits,xor,token
    fixedid-analyze erasure --ckpt runs/tiny/gf2 --concept canonical_bit:3 --hook blocks.1.hook_resid_pre
    fixedid-analyze similarity --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2 [--random-init]
    fixedid-analyze dla --ckpt runs/tiny/canonical --task ioi [--by-position]
    fixedid-analyze paths --ckpt runs/tiny/canonical --task ioi --sender L0H3 --receivers logits|L1H2.q,...
    fixedid-analyze edges --ckpt runs/tiny/canonical --task ioi [--method eap-ig] [--exact]
    fixedid-analyze circuit --ckpt runs/tiny/canonical --ckpt runs/tiny/gf2 --task ioi [--k 32] [--ablation mean]
    fixedid-analyze das --ckpt runs/tiny/canonical --variable agreement [--position last] [--ranks 1,4,16]
    fixedid-analyze demo [--out DIR]

Every command writes CSV plus PNG and PDF figures under ``--out`` and prints a short summary. Bad input (no
checkpoint, unequal prompt lengths, an answer that is not one token, an unknown site...) gets one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse

from fixedid.clitools import ArgumentParser, run_main

from analysis.cli import (attention, circuit, context, das, demo, dla, edges, erasure, evaluation, export_hf, figures,
                          head, import_hf, interventions, lens, paths, patching, probes, recoding, similarity)
from analysis.cli.args import check_out

#: Every verb and the module that holds its ``HELP``, ``add_args(parser)`` and ``run(args) -> exit status``.
VERBS = {"patching": patching, "recoding": recoding, "interventions": interventions, "probes": probes,
         "erasure": erasure, "eval": evaluation, "lens": lens, "head": head, "context": context, "export-hf": export_hf,
         "import-hf": import_hf, "figures": figures, "similarity": similarity, "attention": attention,
         "dla": dla, "paths": paths, "edges": edges, "circuit": circuit, "das": das,
         "demo": demo}


#: Verbs that analyse no loaded model (they convert, redraw or train), so they take no --device / --dtype.
NO_MODEL_OPTIONS = {"figures", "demo", "export-hf", "import-hf"}


def add_model_options(p: argparse.ArgumentParser) -> None:
    """``--device`` and ``--dtype`` for every checkpoint a verb loads (:func:`analysis.loading.load_options`)."""
    group = p.add_argument_group("model placement")
    if not any(a.dest == "device" for a in p._actions):
        group.add_argument("--device", help="device for the model(s): cpu (default), cuda, cuda:N, mps or auto")
    group.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                       help="load the model(s) in this precision (default float32, as stored; bfloat16 halves the "
                            "memory, and metrics, log-softmax and probe fits still run in float32)")


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(prog="fixedid-analyze", description="Analyse fixedid checkpoints.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for name, verb in VERBS.items():
        p = sub.add_parser(name, help=verb.HELP)
        verb.add_args(p)
        if name not in NO_MODEL_OPTIONS:
            add_model_options(p)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    run_main("fixedid-analyze", lambda: run(args))


def run(args: argparse.Namespace) -> int:
    from analysis.loading import load_options

    check_out(getattr(args, "out", None))
    with load_options(device=getattr(args, "device", None), dtype=getattr(args, "dtype", None)):
        return VERBS[args.command].run(args)

"""``fixedid-analyze similarity``: CKA between checkpoints, hook point by hook point, or with its references.

    fixedid-analyze similarity --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2
    fixedid-analyze similarity --references --ckpt study/runs/seed0/canonical --ckpt study/runs/seed1/canonical \\
        --ckpt study/runs/seed0/gf2 --ckpt study/runs/seed1/gf2

Two checkpoints (or one with ``--random-init``): the matrices of linear and debiased CKA between every hook point of
one and every hook point of the other; writes ``similarity.csv`` and ``similarity.png``/``.pdf``.

``--references`` (any number of checkpoints): each ``--ckpt`` is ``DIR`` or ``NAME=DIR``; the name is the variant
(default: the directory's name), the seed is read from the checkpoint's config (``[train] seed``). Every pair is
compared at the same hook point under its kind - two seeds of one variant (the ceiling), two variants of different
seeds, two variants of one seed - and each checkpoint against its initialisation, with a row-permutation null,
debiased and linear CKA and Procrustes similarity, and a 95% bootstrap interval over windows
(:mod:`analysis.readouts.references`). Writes ``similarity_references.csv`` (the table),
``similarity_reading.csv`` (each cross-variant value against its ceiling and null),
``similarity_references.png``/``.pdf`` and prints one line per pair of variants and hook point.

Position 0 of each window (an attention sink in a trained model) is left out unless ``--keep-first``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.cli.args import add_checkpoints, add_out, checkpoint_list, output_dir
from analysis.errors import AnalysisError

HELP = "CKA between checkpoints hook point by hook point, or with its references (--references)"
EXAMPLES = """
  fixedid-analyze similarity --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2
  fixedid-analyze similarity --ckpt fixedid-demo/checkpoints/gf2 --random-init
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)  # two (A, B), or one with --random-init, or any number with --references
    p.add_argument("--references", action="store_true", help="compare every pair under its kind (same variant "
                   "across seeds, variants across seeds, variants of one seed), each checkpoint against its "
                   "initialisation and a permutation null, with bootstrap intervals and Procrustes similarity")
    p.add_argument("--random-init", action="store_true", help="(matrices) also compare each checkpoint with its "
                   "own initialisation (the same seed, untrained)")
    p.add_argument("--keep-first", action="store_true", help="keep position 0 of each window (default: left out; "
                   "it is an attention sink in a trained model)")
    p.add_argument("--boot", type=int, default=1000, help="(references) bootstrap draws over windows (default "
                   "1000; 0: no intervals)")
    p.add_argument("--null", type=int, default=20, help="(references) permutations of the null (default 20; 0: "
                   "none)")
    p.add_argument("--no-init", action="store_true", help="(references) skip each checkpoint against its "
                   "initialisation")
    p.add_argument("--no-procrustes", action="store_true", help="(references) CKA only (Procrustes' bootstrap "
                   "costs an SVD per draw)")
    p.add_argument("--seed", type=int, default=0, help="(references) seed of the bootstrap and the null")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the first checkpoint's validation data)")
    p.add_argument("--tokens", type=int, default=8192, help="tokens to compare on (default 8192)")
    add_out(p)


def named_checkpoints(values) -> list[tuple[str, Path]]:
    """``(name, directory)`` of each ``--ckpt`` ``NAME=DIR`` or ``DIR`` (name: the directory's; names may repeat,
    as one variant of several seeds does)."""
    return [(n or d.name, d) for n, d in checkpoint_list(values)]


def _seed(path: Path) -> int:
    """The checkpoint's seed (``[train] seed``), from its config without loading its weights."""
    from fixedid.checkpoint import load_config

    from analysis.interop.hf import is_hf_dir
    from analysis.loading import load

    return load(path).cfg.seed if is_hf_dir(path) else load_config(path).seed


def run(args) -> int:
    if args.references:
        return _references(args)
    from analysis.figures.style import save_figure, short_hook
    from analysis.outputs import write_csv
    from analysis.figures.similarity import cka_figure
    from analysis.loading import load
    from analysis.loading import random_init_twin
    from analysis.readouts.similarity import cka_matrix

    if len(args.ckpt) > 2:
        raise AnalysisError("more than two checkpoints: add --references to compare them all under their kinds")
    if len(args.ckpt) == 1 and not args.random_init:
        raise AnalysisError("give two checkpoints (--ckpt A --ckpt B), or one with --random-init")
    named = named_checkpoints(args.ckpt)
    out = output_dir(args, "similarity", dict(named))
    models = [load(p) for _, p in named]
    names = [n for n, _ in named]
    if len(names) == 2 and names[0] == names[1]:
        names = [str(p) for _, p in named]
    pairs = [(f"{names[0]} vs {names[1]}", models[0], models[1])] if len(models) == 2 else []
    if args.random_init:
        pairs += [(f"{n} vs its initialisation", m, random_init_twin(m)) for n, m in zip(names, models)]
    frames = {}
    for label, a, b in pairs:
        frames[label] = cka_matrix(a, b, args.data, tokens=args.tokens, skip_first=not args.keep_first,
                                   progress=True)
    import pandas as pd

    df = pd.concat([f.assign(comparison=k) for k, f in frames.items()], ignore_index=True)
    df = df[["comparison"] + [c for c in df.columns if c != "comparison"]]
    write_csv(df, out / "similarity.csv")
    save_figure(cka_figure(frames), out, "similarity")
    n_tok = next(iter(frames.values())).attrs["n_tokens"]
    where = "every position" if args.keep_first else "position 0 left out"
    print(f"debiased linear CKA over {n_tok:,} tokens ({where}), same hook point in both (linear CKA in brackets):")
    for label, f in frames.items():
        same = f[f.layer_a == f.layer_b]
        cells = ", ".join(f"{short_hook(h)} {d:.2f} ({c:.2f})"
                          for h, d, c in zip(same.hook_a, same.debiased, same.cka))
        print(f"  {label}: {cells}")
    print(f"wrote {out / 'similarity.csv'} and {out / 'similarity.png'} (+ .pdf)")
    return 0


def _references(args) -> int:
    from analysis.figures.similarity import references_figure
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.readouts.references import reading_lines, similarity_references

    if args.random_init:
        raise AnalysisError("--random-init is for the matrices; --references compares each checkpoint with its "
                        "initialisation already (--no-init skips it)")
    if args.boot < 0 or args.null < 0:
        raise AnalysisError(f"--boot and --null must be >= 0, got {args.boot} and {args.null}")
    named = named_checkpoints(args.ckpt)
    out = output_dir(args, "similarity", {f"{n}-{i}": p for i, (n, p) in enumerate(named)})
    models = {}
    for name, path in named:
        key = (name, _seed(path))
        if key in models:
            raise AnalysisError(f"{models[key]} and {path} are both {name} of seed {key[1]}; name them apart "
                                "(--ckpt NAME=DIR)")
        models[key] = path
    refs = similarity_references(models, args.data, tokens=args.tokens, skip_first=not args.keep_first,
                                 boot=args.boot, null_draws=args.null, init=not args.no_init,
                                 procrustes=not args.no_procrustes, seed=args.seed, progress=True)
    reading = refs.reading()
    write_csv(refs.table, out / "similarity_references.csv")
    write_csv(reading, out / "similarity_reading.csv")
    measures = ("debiased_cka",) if args.no_procrustes else ("debiased_cka", "procrustes")
    save_figure(references_figure(refs.table, measures), out, "similarity_references")
    t = refs.table
    where = "every position" if args.keep_first else "position 0 left out"
    print(f"debiased linear CKA over {t.n_tokens.iloc[0]:,} tokens in {t.n_windows.iloc[0]} windows ({where}); "
          f"[95% bootstrap interval over windows, {args.boot} draws]; null: {args.null} permutations of one side's "
          "tokens:")
    lines = reading_lines(reading)
    for line in lines:
        print(f"  {line}")
    if not lines:  # one variant: its ceiling and initialisation alone
        d = t[(t.measure == "debiased_cka") & t.reference.isin(["same_interface_cross_seed", "own_initialisation"])]
        for (kind, v, hook), g in d.groupby(["reference", "variant_a", "hook"], sort=False):
            print(f"  {v} {kind.replace('_', ' ')} @ {hook}: {g.value.mean():.2f} (over {len(g)} pairs)")
    print(f"wrote {out / 'similarity_references.csv'}, {out / 'similarity_reading.csv'} and "
          f"{out / 'similarity_references.png'} (+ .pdf)")
    return 0

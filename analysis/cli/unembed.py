"""``fixedid-analyze unembed`` (formerly ``head``): the geometry of each variant's output head, the unembedding.

    fixedid-analyze unembed --ckpt runs/s0/learned --ckpt runs/s0/canonical --ckpt runs/s0/gf2 --reference runs/s1/learned

Writes ``unembed.csv`` (variant x measure, :func:`analysis.readouts.head.head_geometry`: held-out R^2 of the head rows
from code bits and from log-frequency, the bits' partial R^2 beyond log-frequency, and against a learned input table
of another run biased and debiased CKA and nearest-neighbour overlap, with a within-frequency-bin permutation null)
and ``unembed.png``/``.pdf``. ``--reference`` names the learned checkpoint of another seed that every variant is
compared with, the learned one included; without it the learned checkpoint among ``--ckpt`` serves the variants of
other runs only (a model is never compared with its own run), and the others get R^2 rows only. Token frequencies
are counted over ``--tokens`` tokens of ``--data`` (default: each checkpoint's own validation stream).
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints, stacked
from analysis.errors import AnalysisError

HELP = "the output head's geometry: R^2 from code bits and frequency, similarity to a learned input table"
EXAMPLES = """
  fixedid-analyze unembed --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--reference", help="a learned-interface checkpoint of another seed whose input table every head "
                   "is compared with (default: the learned one among --ckpt, for the checkpoints of other runs)")
    p.add_argument("--k", type=int, default=10, help="nearest neighbours compared (default 10)")
    p.add_argument("--data", help="text/JSONL/.npy data whose token counts are the frequencies (default: the "
                   "checkpoint's own validation stream)")
    p.add_argument("--tokens", type=int, default=65_536, help="tokens counted for the frequencies (default 65536)")
    p.add_argument("--null-draws", type=int, default=100,
                   help="draws of the within-frequency-bin permutation null (default 100)")
    add_out(p)


def run(args) -> int:
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.figures.output import head_figure
    from analysis.readouts.head import check_reference, head_geometry
    from analysis.loading import load

    if args.k < 1:
        raise AnalysisError("--k must be positive")
    if args.null_draws < 2:
        raise AnalysisError("--null-draws must be at least 2")
    named = parse_checkpoints(args.ckpt)
    paths = list(named.values())
    out = output_dir(args, "unembed", named)
    models = {n: load(p) for n, p in zip(named, paths)}
    if args.reference:
        reference = load(parse_checkpoints([args.reference]).popitem()[1])
        if reference.cfg.is_fixed:
            raise AnalysisError(f"--reference {args.reference} is a fixed-code checkpoint; name a learned one")
        for m in models.values():  # refuse before anything is computed or written
            check_reference(m, reference)
        refs = {n: reference for n in models}
    else:
        learned = next((m for m in models.values() if not m.cfg.is_fixed), None)
        refs = {n: learned if learned is not None and _serves(m, learned, check_reference) else None
                for n, m in models.items()}
    df = stacked([head_geometry(m, refs[n], k=args.k, data=args.data, tokens=args.tokens,
                                null_draws=args.null_draws, progress=True).assign(variant=n)
                  for n, m in models.items()])
    write_csv(df, out / "unembed.csv")
    save_figure(head_figure(df), out, "unembed")
    alone = [n for n, r in refs.items() if r is None]
    print("output head geometry" + (f" (no reference of another run for {', '.join(alone)}: R^2 only; pass "
                                    "--reference a learned checkpoint of another seed)" if alone else "") + ":")
    for n, g in df.groupby("variant", sort=False):
        g = g.set_index(["measure", "basis"])
        cells = [f"{m} ({b}) {r.value:.3f} [{r.lo:.3f}, {r.hi:.3f}]" for (m, b), r in g.iterrows()
                 if m in ("bits_r2", "logfreq_r2", "bits_partial_r2")]
        cells += [f"{m} {r.value:.3f} (null {r.null_mean:.3f} [{r.null_lo:.3f}, {r.null_hi:.3f}])"
                  for (m, b), r in g.iterrows() if m in ("debiased_cka_to_learned_input", "nn_overlap")]
        print(f"  {n}: " + "; ".join(cells))
    print(f"wrote {out / 'unembed.csv'} and {out / 'unembed.png'} (+ .pdf)")
    return 0


def _serves(model, reference, check) -> bool:
    """Whether ``reference`` may serve ``model`` (another run, the same tokenizer)."""
    try:
        check(model, reference)
    except AnalysisError:
        return False
    return True

"""``fixedid-analyze paths``: path patching of senders into chosen receivers of one checkpoint.

    fixedid-analyze paths --ckpt fixedid-demo/checkpoints/canonical --task ioi --sender heads --receivers logits
    fixedid-analyze paths --ckpt DIR --task ioi --sender L0H3 --receivers L1H2.q,L1H3.k
    fixedid-analyze paths --ckpt DIR --pairs pairs.jsonl --sender all --receivers L1.mlp --mode noise --norm frozen

Senders: ``embed``, ``L0H3``, ``L0H*``, ``L0.mlp`` (comma-separated), or a set: ``all``, ``heads``, ``mlps``.
Receivers: ``logits``, ``L1H2.q``/``.k``/``.v``/``.qkv``, ``L1H*.q``, ``L1.mlp``. Writes ``paths.csv`` (with
``--per-pair`` also ``paths_per_pair.csv``) and ``paths.png``/``.pdf``, and prints the senders with the largest
effects.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from analysis.causal.patching import MODES
from analysis.causal.paths import NORMS
from analysis.errors import AnalysisWarning

HELP = "path patching: senders (heads, MLPs, input) into chosen receivers (q/k/v of heads, MLPs, logits)"
EXAMPLES = """
  fixedid-analyze paths --ckpt fixedid-demo/checkpoints/canonical --task ioi --sender heads --receivers logits
  fixedid-analyze paths --ckpt fixedid-demo/checkpoints/gf2 --task ioi --sender L0H3 --receivers L1H2.q,L1H3.k
"""


def add_args(p: argparse.ArgumentParser) -> None:
    from analysis.cli.args import add_out
    from analysis.cli.patching import add_metric, add_pair_args

    add_pair_args(p)
    p.add_argument("--sender", default="all", help="sender labels or set (default: all upstream senders)")
    p.add_argument("--receivers", default="logits", help="receiver labels (default: logits)")
    p.add_argument("--mode", default="denoise", choices=MODES, help="denoise: the senders' clean writes into the "
                   "corrupted run; noise: their corrupted writes into the clean run (default denoise)")
    p.add_argument("--norm", default="recompute", choices=NORMS,
                   help="the receivers' norm: recomputed from the patched stream (default) or its scale frozen")
    add_metric(p)
    p.add_argument("--per-pair", action="store_true", help="also write one row per pair (paths_per_pair.csv)")
    add_out(p)


def summarize(df, k: int = 6) -> str:
    a = df.attrs
    eff = (df.value - a["baseline"]).abs()
    top = df.loc[eff.sort_values(ascending=False).index[:k]]
    patched = "corrupted" if a["mode"] == "denoise" else "clean"
    lines = [f"path patching ({a['mode']}: senders' writes into the {patched} run, norm {a['norm']}) into "
             f"{', '.join(a['receivers'])} over {a['n_pairs']} pairs, metric {a['metric']}: clean {a['clean']:.3f}, "
             f"corrupt {a['corrupt']:.3f}", f"Largest changes from the {patched} run's own value {a['baseline']:.3f}:"]
    for _, r in top.iterrows():
        lines.append(f"  {r.sender:>8s}: {r.value:.3f} ({r.value - a['baseline']:+.3f}) "
                     f"[{r.value_lo:.3f}, {r.value_hi:.3f}]")
    return "\n".join(lines)


def run(args) -> int:
    from analysis.causal.paths import path_patching
    from analysis.cli.patching import checkpoint_and_pairs
    from analysis.figures.circuits import paths_figure
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv

    name, out, model, pairs = checkpoint_and_pairs(args, "paths")
    kw = dict(senders=args.sender, receivers=args.receivers, mode=args.mode, metric=args.metric, norm=args.norm)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AnalysisWarning)
        df = path_patching(model, pairs, **kw)
        per_pair = path_patching(model, pairs, per_pair=True, **kw) if args.per_pair else None
    for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, AnalysisWarning)):
        print(f"fixedid-analyze: warning: {message}", file=sys.stderr)
    write_csv(df, out / "paths.csv")
    if per_pair is not None:
        write_csv(per_pair, out / "paths_per_pair.csv")
    save_figure(paths_figure(df, title=f"{name}: path patching ({args.mode}, {len(pairs)} pairs, norm "
                                       f"{args.norm})"), out, "paths")
    print(summarize(df))
    print(f"wrote {out / 'paths.csv'} and {out / 'paths.png'} (+ .pdf)")
    return 0

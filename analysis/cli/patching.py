"""``fixedid-analyze patching``: activation or attribution patching of one checkpoint.

    fixedid-analyze patching --ckpt runs/tiny/canonical --task ioi
    fixedid-analyze patching --ckpt DIR --clean TEXT --corrupt TEXT --answer WORD --wrong WORD [--site z]
    fixedid-analyze patching --ckpt DIR --pairs pairs.jsonl --method attribution --mode noise

Writes ``patching.csv`` (with ``--per-pair`` also ``patching_per_pair.csv``) and ``patching.png``/``.pdf``, and
prints the patches that move the metric furthest from the patched run's own value.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from analysis.cli.args import checkpoint_dirs
from analysis.causal.patching import MODES, SITES
from analysis.engine.metrics import METRICS
from analysis.errors import AnalysisError, AnalysisWarning

HELP = "activation or attribution patching of one checkpoint"


def add_pair_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    """--ckpt (repeatable with ``many``) and the prompt pairs (--task, --pairs, or one
    --clean/--corrupt/--answer/--wrong), shared by the verbs that read pairs (:func:`pairs_from_args`)."""
    if many:
        p.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; repeat for more")
    else:
        p.add_argument("--ckpt", required=True, help="checkpoint directory (e.g. runs/tiny/canonical)")
    src = p.add_argument_group("prompt pairs (one of)")
    src.add_argument("--task", help="built-in task: ioi, agreement, facts or induction, or the control "
                     "induction_unlisted")
    src.add_argument("--pairs", help="JSONL file of {clean, corrupt, answer, wrong}")
    src.add_argument("--clean", help="clean prompt (with --corrupt, --answer, --wrong)")
    src.add_argument("--corrupt")
    src.add_argument("--answer", help="the word that continues the clean prompt (leading space is added)")
    src.add_argument("--wrong", help="the competing word")
    p.add_argument("--n-pairs", type=int, default=16, help="pairs drawn for --task (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --task pairs")


def add_args(p: argparse.ArgumentParser) -> None:
    add_pair_args(p)
    p.add_argument("--site", default="resid_pre", choices=SITES)
    p.add_argument("--mode", default="denoise", choices=MODES)
    p.add_argument("--method", default="activation", choices=("activation", "attribution"))
    p.add_argument("--metric", default="normalized_logit_diff", choices=sorted(METRICS))
    p.add_argument("--per-pair", action="store_true", help="also write one row per pair (patching_per_pair.csv)")
    p.add_argument("--out", help="output directory (default: analysis-out/<checkpoint name>)")


def checkpoint_and_pairs(args):
    """``(checkpoint directory, loaded model, prompt pairs)`` of a verb's --ckpt and pair arguments
    (:func:`add_pair_args`), with one clear error for a missing directory or a non-positive --n-pairs."""
    from analysis.loading import load

    (ckpt,) = checkpoint_dirs([args.ckpt])
    if args.n_pairs < 1:
        raise AnalysisError(f"--n-pairs must be positive, got {args.n_pairs}")
    model = load(ckpt)
    return ckpt, model, pairs_from_args(model, args)


def pairs_from_args(model, args):
    from analysis.pairs import make_pairs, read_pairs_jsonl
    from analysis.tasks import task_pairs

    manual = [args.clean, args.corrupt, args.answer, args.wrong]
    given = [args.task is not None, args.pairs is not None, any(v is not None for v in manual)]
    if sum(given) != 1:
        raise AnalysisError("give exactly one source of pairs: --task NAME, --pairs FILE, or --clean/--corrupt/"
                            "--answer/--wrong")
    if args.task is not None:
        return task_pairs(model, args.task, args.n_pairs, seed=args.seed)
    if args.pairs is not None:
        return make_pairs(model, read_pairs_jsonl(args.pairs))
    if any(v is None for v in manual):
        raise AnalysisError("--clean, --corrupt, --answer and --wrong go together: give all four")
    return make_pairs(model, dict(clean=args.clean, corrupt=args.corrupt, answer=args.answer, wrong=args.wrong))


def summarize(df, k: int = 5) -> str:
    """The ``k`` patches that move the metric furthest from the patched run's own baseline (the corrupted run in
    ``denoise`` mode, the clean run in ``noise`` mode), one per line, after the baselines."""
    a = df.attrs
    eff = (df.value - a["baseline"]).abs()
    top = df.loc[eff.sort_values(ascending=False).index[:k]]
    patched = "corrupted" if a["mode"] == "denoise" else "clean"
    lines = [f"{a['method']} patching ({a['mode']}: into the {patched} run) of {a['site']} over {a['n_pairs']} "
             f"pairs, metric {a['metric']}: clean {a['clean']:.3f}, corrupt {a['corrupt']:.3f}"]
    if a["metric"] == "normalized_logit_diff":
        gap = a["raw_clean"] - a["raw_corrupt"]
        lines[0] += (f" (raw logit differences: clean {a['raw_clean']:+.3f}, corrupt {a['raw_corrupt']:+.3f}, gap "
                     f"{gap:+.3f})")
    lines.append(f"Largest changes from the {patched} run's own value {a['baseline']:.3f}:")
    for _, r in top.iterrows():
        where = [f"layer {r.layer}"] + ([f"head {r['head']}"] if r["head"] is not None and str(r["head"]) != "<NA>"
                                        else [])
        if str(r.pos) != "<NA>":
            where.append(f"pos {r.pos} {a['str_tokens'][int(r.pos)]!r}")
        lines.append(f"  {', '.join(where)}: {r.value:.3f} ({r.value - a['baseline']:+.3f})")
    return "\n".join(lines)


def run(args) -> int:
    from analysis.figures.patching import heatmap
    from analysis.figures.style import save_figure
    from analysis.outputs import write_csv
    from analysis.causal.patching import activation_patching, attribution_patching

    ckpt, model, pairs = checkpoint_and_pairs(args)
    fn = activation_patching if args.method == "activation" else attribution_patching
    kw = dict(site=args.site, mode=args.mode, metric=args.metric)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AnalysisWarning)
        df = fn(model, pairs, **kw)
        per_pair = fn(model, pairs, per_pair=True, **kw) if args.per_pair else None
    for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, AnalysisWarning)):
        print(f"fixedid-analyze: warning: {message}", file=sys.stderr)
    out = Path(args.out) if args.out else Path("analysis-out") / ckpt.name
    write_csv(df, out / "patching.csv")
    if per_pair is not None:
        write_csv(per_pair, out / "patching_per_pair.csv")
    import matplotlib.pyplot as plt

    heatmap(df, title=f"{ckpt.name}: {args.method} patching of {args.site} ({args.mode}, {len(pairs)} pairs)")
    save_figure(plt.gcf(), out, "patching")
    print(summarize(df))
    print(f"wrote {out / 'patching.csv'} and {out / 'patching.png'} (+ .pdf)")
    return 0

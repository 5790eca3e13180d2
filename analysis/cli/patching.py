"""``fixedid-analyze patching``: activation or attribution patching of one checkpoint.

    fixedid-analyze patching --ckpt fixedid-demo/checkpoints/canonical --task ioi
    fixedid-analyze patching --ckpt DIR --clean TEXT --corrupt TEXT --answer WORD --wrong WORD [--site z]
    fixedid-analyze patching --ckpt DIR --pairs pairs.jsonl --method attribution --mode noise

Writes ``patching.csv`` (with ``--per-pair`` also ``patching_per_pair.csv``) and ``patching.png``/``.pdf``, and
prints the patches that move the metric furthest from the patched run's own value.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from analysis.cli.args import DEFAULT_METRIC, add_checkpoints, add_out, one_checkpoint, output_dir
from analysis.causal.patching import MODES, SITES
from analysis.engine.metrics import METRICS
from analysis.errors import AnalysisError, AnalysisWarning

HELP = "activation or attribution patching of one checkpoint"
EXAMPLES = """
  fixedid-analyze patching --ckpt fixedid-demo/checkpoints/canonical --task ioi
  fixedid-analyze patching --ckpt fixedid-demo/checkpoints/gf2 --task agreement --site z --method attribution
  fixedid-analyze patching --ckpt fixedid-demo/checkpoints/learned \\
      --clean "When Mary and John went to the park, John gave a ball to" \\
      --corrupt "When Mary and John went to the park, Mary gave a ball to" --answer Mary --wrong John
"""


def add_pair_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    """--ckpt (``many``: the verb compares several checkpoints) and the prompt pairs (--task, --pairs, or one
    --clean/--corrupt/--answer/--wrong), shared by the verbs that read pairs (:func:`pairs_from_args`)."""
    add_checkpoints(p, one=not many)
    src = p.add_argument_group("prompt pairs (one of)")
    src.add_argument("--task", help="built-in task: ioi, agreement, facts or induction, or the control "
                     "induction_unlisted")
    src.add_argument("--pairs", help="JSONL file of {clean, corrupt, answer, wrong}")
    src.add_argument("--clean", help="clean prompt (with --corrupt, --answer, --wrong)")
    src.add_argument("--corrupt", help="corrupted prompt, of the clean prompt's token length")
    src.add_argument("--answer", help="the word that continues the clean prompt (leading space is added)")
    src.add_argument("--wrong", help="the competing word")
    p.add_argument("--n-pairs", type=int, default=16, help="pairs drawn for --task (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --task pairs")


def add_args(p: argparse.ArgumentParser) -> None:
    add_pair_args(p)
    p.add_argument("--site", default="resid_pre", choices=SITES, help="the activation patched, at every layer "
                   "(and position; per head for z) (default resid_pre)")
    p.add_argument("--mode", default="denoise", choices=MODES, help="denoise: clean activations into the corrupted "
                   "run; noise: corrupted activations into the clean run (default denoise)")
    p.add_argument("--method", default="activation", choices=("activation", "attribution"), help="activation: "
                   "one forward per patch; attribution: its first-order estimate from one backward (default "
                   "activation)")
    add_metric(p)
    p.add_argument("--per-pair", action="store_true", help="also write one row per pair (patching_per_pair.csv)")
    add_out(p)


def add_metric(p: argparse.ArgumentParser) -> None:
    """``--metric``, with the default every causal verb shares (:data:`analysis.cli.args.DEFAULT_METRIC`)."""
    p.add_argument("--metric", default=DEFAULT_METRIC, choices=sorted(METRICS), help="what is measured on the "
                   f"answer and wrong tokens (default {DEFAULT_METRIC}: 0 at the corrupted run, 1 at the clean run)")


def checkpoint_and_pairs(args, verb: str):
    """``(checkpoint name, output directory, loaded model, prompt pairs)`` of a verb's --ckpt, --out and pair
    arguments (:func:`add_pair_args`), with one clear error for a missing directory, an --out that holds another
    run's results or a non-positive --n-pairs, all before the model is loaded."""
    from analysis.loading import load

    name, ckpt = one_checkpoint(args, verb)
    out = output_dir(args, verb, {name: ckpt})
    if args.n_pairs < 1:
        raise AnalysisError(f"--n-pairs must be positive, got {args.n_pairs}")
    model = load(ckpt)
    return name, out, model, pairs_from_args(model, args)


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

    name, out, model, pairs = checkpoint_and_pairs(args, "patching")
    fn = activation_patching if args.method == "activation" else attribution_patching
    kw = dict(site=args.site, mode=args.mode, metric=args.metric)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AnalysisWarning)
        df = fn(model, pairs, **kw)
        per_pair = fn(model, pairs, per_pair=True, **kw) if args.per_pair else None
    for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, AnalysisWarning)):
        print(f"fixedid-analyze: warning: {message}", file=sys.stderr)
    write_csv(df, out / "patching.csv")
    if per_pair is not None:
        write_csv(per_pair, out / "patching_per_pair.csv")
    import matplotlib.pyplot as plt

    heatmap(df, title=f"{name}: {args.method} patching of {args.site} ({args.mode}, {len(pairs)} pairs)")
    save_figure(plt.gcf(), out, "patching")
    print(summarize(df))
    print(f"wrote {out / 'patching.csv'} and {out / 'patching.png'} (+ .pdf)")
    return 0

"""``fixedid-analyze dla``: direct logit attribution of one checkpoint's logit difference (answer - wrong).

    fixedid-analyze dla --ckpt fixedid-demo/checkpoints/canonical --task ioi [--by-position] [--per-pair]
    fixedid-analyze dla --ckpt DIR --prompt TEXT --answer WORD --wrong WORD
    fixedid-analyze dla --ckpt DIR --pairs pairs.jsonl [--corrupt-prompts]

Writes ``dla.csv`` (with ``--per-pair`` also ``dla_per_pair.csv``) and ``dla.png``/``.pdf`` (with ``--by-position``
also ``dla_positions.png``/``.pdf``), and prints the components that write most along the answer direction.
"""

from __future__ import annotations

import argparse
from analysis.cli.args import add_checkpoints, add_out, one_checkpoint, output_dir
from analysis.errors import AnalysisError

HELP = "direct logit attribution (per head, attention layer, MLP, input) of one checkpoint"
EXAMPLES = """
  fixedid-analyze dla --ckpt fixedid-demo/checkpoints/canonical --task ioi --by-position
  fixedid-analyze dla --ckpt fixedid-demo/checkpoints/learned \\
      --prompt "When Mary and John went to the park, John gave a ball to" \\
      --answer Mary --wrong John
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p, one=True)
    src = p.add_argument_group("prompts (one of)")
    src.add_argument("--task", help="built-in task: ioi, agreement, facts or induction, or the control "
                     "induction_unlisted")
    src.add_argument("--pairs", help="JSONL file of {clean, corrupt, answer, wrong}")
    src.add_argument("--prompt", help="one prompt (with --answer and --wrong)")
    src.add_argument("--answer", help="the word that continues the prompt (leading space is added)")
    src.add_argument("--wrong", help="the competing word")
    p.add_argument("--n-pairs", type=int, default=16, help="pairs drawn for --task (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --task pairs")
    p.add_argument("--corrupt-prompts", action="store_true", help="attribute the corrupted prompt of each pair")
    p.add_argument("--by-position", action="store_true", help="also split each head by the source position it reads")
    p.add_argument("--per-pair", action="store_true", help="also write one row per pair (dla_per_pair.csv)")
    add_out(p)


def prompts_from_args(model, args):
    from analysis.pairs import make_pairs, read_pairs_jsonl
    from analysis.tasks import task_pairs

    given = [args.task is not None, args.pairs is not None, args.prompt is not None]
    if sum(given) != 1:
        raise AnalysisError("give exactly one source of prompts: --task NAME, --pairs FILE, or --prompt TEXT with "
                            "--answer and --wrong")
    if args.task is not None:
        return task_pairs(model, args.task, args.n_pairs, seed=args.seed)
    if args.pairs is not None:
        return make_pairs(model, read_pairs_jsonl(args.pairs))
    if args.answer is None or args.wrong is None:
        raise AnalysisError("--prompt needs --answer and --wrong")
    return make_pairs(model, dict(clean=args.prompt, corrupt=args.prompt, answer=args.answer, wrong=args.wrong))


def summarize(df, k: int = 6) -> str:
    a = df.attrs
    rows = df[df["pos"].isna() & df.component.isin(["head", "mlp", "embed", "attn_bias", "ln_final_bias"])]
    top = rows.loc[rows.value.abs().sort_values(ascending=False).index[:k]]
    lines = [f"direct logit attribution over {a['n_pairs']} {a['prompt']} prompt(s): logit difference "
             f"{a['logit_diff']:+.3f} (final norm scale frozen; components sum to it within "
             f"{a['max_sum_error']:.1e})", "Largest direct writes:"]
    for _, r in top.iterrows():
        lines.append(f"  {r.label:>10s}: {r.value:+.3f} [{r.value_lo:+.3f}, {r.value_hi:+.3f}]")
    return "\n".join(lines)


def run(args) -> int:
    from analysis.causal.dla import direct_logit_attribution
    from analysis.figures.circuits import dla_figure, dla_positions_figure
    from analysis.figures.style import save_figure
    from analysis.loading import load
    from analysis.outputs import write_csv

    name, ckpt = one_checkpoint(args, "dla")
    out = output_dir(args, "dla", {name: ckpt})
    if args.n_pairs < 1:
        raise AnalysisError(f"--n-pairs must be positive, got {args.n_pairs}")
    model = load(ckpt)
    batch = prompts_from_args(model, args)
    kw = dict(prompt="corrupt" if args.corrupt_prompts else "clean", by_position=args.by_position)
    df = direct_logit_attribution(model, batch, **kw)
    write_csv(df, out / "dla.csv")
    if args.per_pair:
        write_csv(direct_logit_attribution(model, batch, per_pair=True, **kw), out / "dla_per_pair.csv")
    save_figure(dla_figure(df, title=f"{name}: direct logit attribution ({len(batch)} prompts, final norm "
                                     "scale frozen)"), out, "dla")
    if args.by_position:
        save_figure(dla_positions_figure(df), out, "dla_positions")
    print(summarize(df))
    print(f"wrote {out / 'dla.csv'} and {out / 'dla.png'} (+ .pdf)")
    return 0

"""``fixedid-analyze attention``: every head's attention pattern on one prompt, variants side by side.

    fixedid-analyze attention --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --task ioi
    fixedid-analyze attention --ckpt fixedid-demo/checkpoints/gf2 --prompt "When Mary and John went to the park, John gave" \\
        --heads L1H3,L2H0

Writes ``attention.csv`` (variant, layer, head, dest, src, value and the two tokens), ``attention.html`` (the
CircuitsVis ``AttentionHeads`` view of every variant, standalone and offline: open it in a browser) and
``attention.png``/``.pdf`` (the static figure for papers: ``--heads`` picks the heads it shows).
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints, stacked
from analysis.errors import AnalysisError

HELP = "attention patterns of every head on one prompt: a CircuitsVis page (offline) and a static figure"
EXAMPLES = """
  fixedid-analyze attention --ckpt fixedid-demo/checkpoints/learned \\
      --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 --task ioi
  fixedid-analyze attention --ckpt fixedid-demo/checkpoints/gf2 \\
      --prompt "When Mary and John went to the park, John gave" \\
      --heads L1H3,L2H0
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--prompt", help="the text to look at (or use --task)")
    p.add_argument("--task", help="a built-in task (ioi, agreement, facts, induction, or the control "
                   "induction_unlisted): its clean prompt of --pair")
    p.add_argument("--pair", type=int, default=0, help="which of the task's pairs (default 0)")
    p.add_argument("--heads", help="heads for the static figure and the page, e.g. L1H3,L2H0 (default: every head)")
    add_out(p)


def run(args) -> int:
    from analysis.figures.attention import attention_figure, views_from
    from analysis.figures.style import save_figure
    from analysis.interop.circuitsvis_view import write_attention_page
    from analysis.loading import load
    from analysis.outputs import write_csv
    from analysis.readouts.attention import attention_patterns

    named = parse_checkpoints(args.ckpt)
    paths = list(named.values())
    out = output_dir(args, "attention", named)
    if (args.prompt is None) == (args.task is None):
        raise AnalysisError("give --prompt TEXT or --task NAME (one of them)")
    heads = [h.strip() for h in args.heads.split(",") if h.strip()] if args.heads else None
    models = {n: load(p) for n, p in zip(named, paths)}
    tokenizers = {n: m.tokenizer.get_vocab() if getattr(m, "tokenizer", None) else None for n, m in models.items()}
    if len({str(sorted(t.items())) if t else None for t in tokenizers.values()}) > 1:
        raise AnalysisError("the checkpoints have different tokenizers: the patterns would not share one prompt")
    frames = {n: attention_patterns(m, args.prompt, task=args.task, pair=args.pair) for n, m in models.items()}
    views = views_from(frames, heads=heads)  # checks the head names before anything is written
    df = stacked([f.assign(variant=n) for n, f in frames.items()])
    write_csv(df, out / "attention.csv")
    first = next(iter(frames.values()))
    write_attention_page(views, out / "attention.html",
                         title="attention: " + "".join(first.attrs["str_tokens"]).strip())
    save_figure(attention_figure(frames, heads=heads), out, "attention")
    print(f"{len(first.attrs['str_tokens'])} tokens, {len(views[0].head_names)} heads per variant; wrote "
          f"{out / 'attention.csv'}, {out / 'attention.html'} (open it in a browser) and {out / 'attention.png'} "
          "(+ .pdf)")
    return 0

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
    fixedid-analyze demo [--out DIR]

Every command writes CSV plus PNG and PDF figures under ``--out`` and prints a short summary. Bad input (no
checkpoint, unequal prompt lengths, an answer that is not one token, an unknown site...) gets one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from fixedid.clitools import ArgumentParser, run_main

from .cli_interventions import checkpoint_dirs, int_list
from .errors import AnalysisError, AnalysisWarning
from .metrics import METRICS
from .patching import MODES, SITES


def add_patching_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ckpt", required=True, help="checkpoint directory (e.g. runs/tiny/canonical)")
    src = p.add_argument_group("prompt pairs (one of)")
    src.add_argument("--task", help="built-in task: ioi, agreement, facts or induction")
    src.add_argument("--pairs", help="JSONL file of {clean, corrupt, answer, wrong}")
    src.add_argument("--clean", help="clean prompt (with --corrupt, --answer, --wrong)")
    src.add_argument("--corrupt")
    src.add_argument("--answer", help="the word that continues the clean prompt (leading space is added)")
    src.add_argument("--wrong", help="the competing word")
    p.add_argument("--n-pairs", type=int, default=16, help="pairs drawn for --task (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --task pairs")
    p.add_argument("--site", default="resid_pre", choices=SITES)
    p.add_argument("--mode", default="denoise", choices=MODES)
    p.add_argument("--method", default="activation", choices=("activation", "attribution"))
    p.add_argument("--metric", default="normalized_logit_diff", choices=sorted(METRICS))
    p.add_argument("--per-pair", action="store_true", help="also write one row per pair (patching_per_pair.csv)")
    p.add_argument("--out", help="output directory (default: analysis-out/<checkpoint name>)")


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(prog="fixedid-analyze", description="Analyse fixedid checkpoints.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    add_patching_args(sub.add_parser("patching", help="activation or attribution patching of one checkpoint"))
    rec = sub.add_parser("recoding", help="feed fixed-code models their code through GF(2) maps (no retraining)")
    rec.add_argument("--ckpt", required=True, action="append",
                     help="checkpoint directory; repeat to compare variants in one table and figure")
    rec.add_argument("--family", default="transvection",
                     choices=("transvection", "uniform", "permutation", "offset", "other-variant",
                              "token-permutation"))
    rec.add_argument("--draws", type=int, default=4, help="random draws per k (default 4)")
    rec.add_argument("--ks", help="comma-separated k values (transvection count, token count, or code column)")
    rec.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    rec.add_argument("--tokens", type=int, default=32_768, help="tokens of --data to evaluate (default 32768)")
    rec.add_argument("--tasks", default="ioi,agreement,facts,induction",
                     help="built-in tasks whose accuracy is measured under each map ('none' to skip)")
    rec.add_argument("--n-pairs", type=int, default=64, help="pairs per task (default 64)")
    rec.add_argument("--seed", type=int, default=0, help="seed of the random draws")
    rec.add_argument("--out", help="output directory (default: analysis-out/recoding-<family>)")
    from .cli_interventions import add_args as add_intervention_args
    add_intervention_args(sub.add_parser("interventions", help="edit the input code, ablate components, or map "
                                         "where a code bit's information goes (bit x layer)"))
    from .cli_probes import add_args as add_probe_args
    add_probe_args(sub.add_parser("probes", help="linear probes across depth with control task, shuffled labels "
                                  "and random-init baselines"))
    from .cli_probes import add_erasure_args
    add_erasure_args(sub.add_parser("erasure", help="erase a concept at a hook point with LEACE, against a "
                                    "random-direction placebo"))
    from .cli_eval import add_args as add_eval_args
    add_eval_args(sub.add_parser("eval", help="lm-eval tasks (the built-in language's, or any lm-eval task whose data "
                                 "loads) through the fixedid model; JSON and a tidy CSV"))
    from .cli_output import add_head_args, add_lens_args
    add_lens_args(sub.add_parser("lens", help="the logit lens across depth: accuracy and KL to the final "
                                 "distribution, variants side by side"))
    add_head_args(sub.add_parser("head", help="the output head's geometry: R^2 from code bits, similarity to the "
                                 "learned input table"))
    from .cli_context import add_args as add_context_args
    add_context_args(sub.add_parser("context", help="context use: loss with the context cut to k tokens, attention "
                                    "vs MLP ablation shares, alternative segmentations"))
    exp = sub.add_parser("export-hf", help="write a checkpoint as a Hugging Face transformers Llama directory")
    exp.add_argument("--ckpt", required=True, help="checkpoint directory")
    exp.add_argument("--out", required=True, help="the new Hugging Face directory")
    imp = sub.add_parser("import-hf", help="read a Hugging Face Llama directory back into a fixedid checkpoint")
    imp.add_argument("--hf", required=True, help="a Hugging Face model directory (config.json, model.safetensors)")
    imp.add_argument("--out", required=True, help="the new checkpoint directory")
    fig = sub.add_parser("figures", help="redraw every figure of a study directory from its CSVs (no model)")
    fig.add_argument("--results", required=True, help="a study directory (python -m experiments.study --out)")
    sim = sub.add_parser("similarity", help="linear and debiased CKA between checkpoints, hook point by hook point")
    sim.add_argument("--ckpt", required=True, action="append", help="checkpoint directory; give two (A, B), or one "
                     "with --random-init")
    sim.add_argument("--random-init", action="store_true", help="also compare each checkpoint with its own "
                     "initialisation (the same seed, untrained)")
    sim.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the first checkpoint's validation data)")
    sim.add_argument("--tokens", type=int, default=8192, help="tokens to compare on (default 8192)")
    sim.add_argument("--out", help="output directory (default: analysis-out/similarity)")
    demo = sub.add_parser("demo", help="train the three tiny variants (or use the cache) and compare IOI patching")
    demo.add_argument("--out", default="fixedid-demo", help="where the figures and report.md go")
    demo.add_argument("--cache", help="where trained variants are cached (default $FIXEDID_CACHE or ~/.cache/fixedid)")
    demo.add_argument("--config", help="training config: a TOML file or a packaged config name (default: tiny)")
    return parser.parse_args(argv)


def pairs_from_args(model, args):
    from .pairs import make_pairs, read_pairs_jsonl
    from .tasks import task_pairs

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


def run_patching(args) -> int:
    from .figures import heatmap, save_figure, write_csv
    from .model import load
    from .patching import activation_patching, attribution_patching

    ckpt = Path(args.ckpt)
    if not ckpt.is_dir():
        raise AnalysisError(f"no checkpoint directory at {ckpt}; train one with fixedid-train or pass --ckpt DIR")
    if args.n_pairs < 1:
        raise AnalysisError(f"--n-pairs must be positive, got {args.n_pairs}")
    model = load(ckpt)
    pairs = pairs_from_args(model, args)
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


def run_recoding(args) -> int:
    import pandas as pd

    from .figures import recoding_plot, save_figure, write_csv
    from .model import load
    from .recoding import recoding_sweep

    ks = int_list(args.ks, "--ks")
    tasks = () if args.tasks.strip().lower() == "none" else tuple(t for t in args.tasks.split(",") if t)
    frames = []
    for path in checkpoint_dirs(args.ckpt):
        model = load(path)
        df = recoding_sweep(model, args.family, ks, draws=args.draws, seed=args.seed, data=args.data,
                            tokens=args.tokens, tasks=tasks, n_pairs=args.n_pairs, progress=True)
        frames.append(df.assign(variant=path.name, base_loss=df.attrs["base_loss"]))
    df = pd.concat(frames, ignore_index=True)
    df = df[["variant"] + [c for c in df.columns if c != "variant"]]
    out = Path(args.out) if args.out else Path("analysis-out") / f"recoding-{args.family}"
    write_csv(df, out / "recoding.csv")
    n_tok = frames[0].attrs["n_tokens"]
    save_figure(recoding_plot(df, title=f"{args.family} recodings, loss over {n_tok:,} tokens"), out, "recoding")
    acc = [c for c in df.columns if c.startswith("acc_")]
    print(f"recoding family {args.family}: loss change from each model's own code (mean [min, max] over draws)"
          + (", task accuracy mean" if acc else ""))
    for (variant, k), g in df.groupby(["variant", "k"], sort=False):
        line = (f"  {variant} k={k}: own {g.base_loss.iloc[0]:.3f} nats, delta {g.delta_loss.mean():+.3f} "
                f"[{g.delta_loss.min():+.3f}, {g.delta_loss.max():+.3f}]")
        line += "".join(f", {c[4:]} {g[c].mean():.0%}" for c in acc)
        print(line)
    print(f"wrote {out / 'recoding.csv'} and {out / 'recoding.png'} (+ .pdf)")
    return 0


def run_similarity(args) -> int:
    import pandas as pd

    from .figures import save_figure, write_csv
    from .figures_interventions import cka_figure
    from .figures_probes import short_hook
    from .model import load
    from .similarity import cka_matrix, random_init_twin

    if len(args.ckpt) > 2 or (len(args.ckpt) == 1 and not args.random_init):
        raise AnalysisError("give two checkpoints (--ckpt A --ckpt B), or one with --random-init")
    paths = checkpoint_dirs(args.ckpt)
    models = [load(p) for p in paths]
    names = [p.name for p in paths]
    if len(names) == 2 and names[0] == names[1]:
        names = [str(p) for p in paths]
    pairs = [(f"{names[0]} vs {names[1]}", models[0], models[1])] if len(models) == 2 else []
    if args.random_init:
        pairs += [(f"{n} vs its initialisation", m, random_init_twin(m)) for n, m in zip(names, models)]
    frames = {}
    for label, a, b in pairs:
        frames[label] = cka_matrix(a, b, args.data, tokens=args.tokens, progress=True)
    df = pd.concat([f.assign(comparison=k) for k, f in frames.items()], ignore_index=True)
    df = df[["comparison"] + [c for c in df.columns if c != "comparison"]]
    out = Path(args.out) if args.out else Path("analysis-out") / "similarity"
    write_csv(df, out / "similarity.csv")
    save_figure(cka_figure(frames), out, "similarity")
    n_tok = next(iter(frames.values())).attrs["n_tokens"]
    print(f"debiased linear CKA over {n_tok:,} tokens, same hook point in both (linear CKA in brackets):")
    for label, f in frames.items():
        same = f[f.layer_a == f.layer_b]
        cells = ", ".join(f"{short_hook(h)} {d:.2f} ({c:.2f})"
                          for h, d, c in zip(same.hook_a, same.debiased, same.cka))
        print(f"  {label}: {cells}")
    print(f"wrote {out / 'similarity.csv'} and {out / 'similarity.png'} (+ .pdf)")
    return 0


def run_export_hf(args) -> int:
    from .hf import export_hf
    from .model import load

    model = load(checkpoint_dirs([args.ckpt])[0])
    out = export_hf(model, args.out)
    print(f"wrote {out}: a transformers LlamaForCausalLM ({model.cfg.interface} interface"
          + (", the fixed code as its embedding, provenance in config.json 'fixedid'" if model.cfg.is_fixed else "")
          + ")" + ("; AutoTokenizer loads its tokenizer" if model.tokenizer is not None else ""))
    return 0


def run_import_hf(args) -> int:
    from fixedid import save_checkpoint

    from .hf import import_hf

    if Path(args.out).exists():
        raise AnalysisError(f"{args.out} exists; import into a new directory")
    model = import_hf(args.hf)
    path = save_checkpoint(model, args.out, tokenizer=model.tokenizer, imported_from=str(args.hf))
    print(f"wrote {path}: a fixedid checkpoint ({model.cfg.interface} interface) from {args.hf}")
    return 0


def run_figures(args) -> int:
    from .study_report import redraw

    paths = redraw(args.results)
    print(f"redrew {len(paths)} figures (PNG + PDF) in {Path(args.results) / 'figures'}: "
          + ", ".join(p.stem for p in paths))
    return 0


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.command == "patching":
        command = run_patching
    elif args.command == "recoding":
        command = run_recoding
    elif args.command == "interventions":
        from .cli_interventions import run as command
    elif args.command == "similarity":
        command = run_similarity
    elif args.command == "probes":
        from .cli_probes import run as command
    elif args.command == "lens":
        from .cli_output import run_lens as command
    elif args.command == "head":
        from .cli_output import run_head as command
    elif args.command == "context":
        from .cli_context import run as command
    elif args.command == "export-hf":
        command = run_export_hf
    elif args.command == "import-hf":
        command = run_import_hf
    elif args.command == "figures":
        command = run_figures
    elif args.command == "eval":
        from .cli_eval import run as command
    elif args.command == "erasure":
        from .cli_probes import run_erasure as command
    else:
        from .demo import run_demo as command
    run_main("fixedid-analyze", lambda: command(args))


if __name__ == "__main__":
    main()

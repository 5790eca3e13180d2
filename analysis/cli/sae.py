"""``fixedid-analyze sae``: train sparse dictionaries (SAEs, transcoders, skip transcoders) at hook points of one
or more checkpoints and measure them on held-out text (:mod:`analysis.features`).

    fixedid-analyze sae --ckpt fixedid-demo/checkpoints/canonical --hook blocks.1.hook_resid_post

Writes each dictionary in SAELens's layout (``<variant>/<hook>-<kind>-<arch>/cfg.json`` and
``sae_weights.safetensors``), ``sae_metrics.csv`` (one row per dictionary and metric: L0, FVU, dead fraction, the
next-token loss clean, spliced and zero-ablated, loss recovered, KL), ``sae_training.csv`` (the training curves) and
``sae_training.png``/``.pdf``.
"""

from __future__ import annotations

import argparse

from analysis.cli.args import add_checkpoints, add_out, output_dir, parse_checkpoints, stacked
from analysis.errors import AnalysisError

HELP = "sparse dictionaries (SAE, transcoder, skip transcoder; TopK, BatchTopK, JumpReLU, ReLU) and their metrics"
EXAMPLES = """
  fixedid-analyze sae --ckpt fixedid-demo/checkpoints/canonical --hook blocks.1.hook_resid_post
  fixedid-analyze sae --ckpt fixedid-demo/checkpoints/gf2 --kind transcoder --arch jumprelu --hook blocks.1.ln2.hook_normalized
"""


def add_args(p: argparse.ArgumentParser) -> None:
    add_checkpoints(p)
    p.add_argument("--hook", action="append", required=True, help="hook point a dictionary reads (repeatable), "
                   "e.g. blocks.1.hook_resid_post; a transcoder reads an MLP's input, blocks.L.ln2.hook_normalized")
    p.add_argument("--hook-out", help="the hook a transcoder predicts (default: the MLP output of --hook's block)")
    p.add_argument("--kind", default="sae", choices=("sae", "transcoder", "skip-transcoder"), help="sae (default): "
                   "reconstruct the hook's activation; transcoder: predict the MLP's output from --hook; "
                   "skip-transcoder: a transcoder with a linear skip path")
    p.add_argument("--arch", default="topk", choices=("topk", "batchtopk", "jumprelu", "relu"),
                   help="latent function (default topk, through eai-sparsify's SparseCoder)")
    p.add_argument("--expansion", type=int, default=8, help="latents per input dimension (default 8)")
    p.add_argument("--k", type=int, default=32, help="topk/batchtopk: active latents per token (default 32)")
    p.add_argument("--l1", type=float, default=1.0, help="relu: L1 coefficient (default 1.0)")
    p.add_argument("--l0", type=float, default=1.0, help="jumprelu: L0 coefficient (default 1.0)")
    p.add_argument("--data", help="a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")
    p.add_argument("--tokens", type=int, default=131_072, help="training tokens (default 131072)")
    p.add_argument("--eval-tokens", type=int, default=16_384, help="held-out tokens the metrics are measured on "
                   "(default 16384; never trained on)")
    p.add_argument("--batch-tokens", type=int, default=1024, help="tokens per training step (default 1024)")
    p.add_argument("--lr", type=float, help="Adam learning rate (default: scaled with the width; see the docs)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialisation and the shuffling (default 0)")
    add_out(p)


def run(args) -> int:
    import pandas as pd

    from analysis.features.run import dictionary_config, fit_dictionary, split_windows
    from analysis.features.saelens_format import save_dictionary
    from analysis.figures.features import training_figure
    from analysis.figures.style import save_figure
    from analysis.loading import load
    from analysis.outputs import write_csv

    named = parse_checkpoints(args.ckpt)
    for name, value in (("--expansion", args.expansion), ("--k", args.k), ("--tokens", args.tokens),
                        ("--eval-tokens", args.eval_tokens), ("--batch-tokens", args.batch_tokens)):
        if value < 1:
            raise AnalysisError(f"{name} must be a positive integer, got {value}")
    if args.kind == "sae" and args.hook_out:
        raise AnalysisError("--hook-out is for transcoders: an SAE reconstructs the hook it reads")
    if args.lr is not None and args.lr <= 0:
        raise AnalysisError(f"--lr must be positive, got {args.lr}")
    out = output_dir(args, "sae", named)
    metrics, histories, trained = [], [], []
    for variant, path in named.items():
        model = load(path)
        configs = [dictionary_config(model, hook=hook, kind=args.kind, arch=args.arch, expansion=args.expansion,
                                     hook_out=args.hook_out, k=args.k, l1_coefficient=args.l1,
                                     l0_coefficient=args.l0) for hook in args.hook]  # every hook checked first
        windows = split_windows(model, args.data, train_tokens=args.tokens, eval_tokens=args.eval_tokens)
        for cfg in configs:
            d, met, hist = fit_dictionary(model, cfg, windows=windows, batch_tokens=args.batch_tokens, lr=args.lr,
                                          seed=args.seed)
            folder = f"{variant}/{cfg.hook_name}-{args.kind}-{args.arch}"
            trained.append((d, out / folder, str(path)))
            metrics.append(met.assign(variant=variant, path=folder))
            histories.append(hist.assign(variant=variant, hook=cfg.hook_name))
            v = dict(zip(met.metric, met.value))
            print(f"  {variant} {cfg.hook_name}: L0 {v['l0']:.1f}, FVU {v['fvu']:.3f}, dead "
                  f"{v['dead_fraction']:.1%}, loss recovered {v['loss_recovered']:.3f} (clean {v['loss_clean']:.3f}, "
                  f"spliced {v['loss_spliced']:.3f}, zero {v['loss_zero']:.3f} nats)")
    for d, folder, model_name in trained:  # written once everything has trained: a failure leaves nothing behind
        save_dictionary(d, folder, model_name=model_name)
    met_df = stacked(metrics)
    hist_df = pd.concat(histories, ignore_index=True)
    write_csv(met_df, out / "sae_metrics.csv")
    write_csv(hist_df, out / "sae_training.csv")
    save_figure(training_figure(hist_df, met_df), out, "sae_training")
    n_eval = int(met_df.n_tokens.iloc[0])
    print(f"{args.kind} {args.arch}, {args.expansion}x width, metrics on {n_eval:,} held-out tokens; wrote "
          f"{out / 'sae_metrics.csv'}, the dictionaries (SAELens layout) and {out / 'sae_training.png'} (+ .pdf)")
    return 0

"""``sae``: sparse dictionaries (SAEs, transcoders, skip transcoders) trained at hook points and measured on held-out
text (:mod:`analysis.features`), saved in SAELens's layout."""

from __future__ import annotations

from functools import partial

from analysis.errors import AnalysisError
from analysis.features.dictionary import ARCHS, KINDS
from analysis.specs import shared, types
from analysis.specs.base import Param, Result, Spec


def check(params: dict) -> None:
    if params["kind"] == "sae" and params["hook_out"]:
        raise AnalysisError("--hook-out is for transcoders: an SAE reconstructs the hook it reads")


def _save(d, model_name, path):
    from analysis.features.saelens_format import save_dictionary

    save_dictionary(d, path, model_name=model_name)


def train(model, *, hook, hook_out, kind, arch, expansion, k, l1, l0, data, tokens, eval_tokens, batch_tokens, lr,
          seed, name="model", ckpt=None) -> Result:
    """One dictionary per hook of one model: its metrics, its training curve, and its folder."""
    import pandas as pd

    from analysis.features.run import dictionary_config, fit_dictionary, split_windows

    configs = [dictionary_config(model, hook=h, kind=kind, arch=arch, expansion=expansion, hook_out=hook_out, k=k,
                                 l1_coefficient=l1, l0_coefficient=l0) for h in hook]  # every hook checked first
    windows = split_windows(model, data, train_tokens=tokens, eval_tokens=eval_tokens)
    result, metrics, histories = Result(), [], []
    for cfg in configs:
        d, met, hist = fit_dictionary(model, cfg, windows=windows, batch_tokens=batch_tokens, lr=lr, seed=seed)
        folder = f"{name}/{cfg.hook_name}-{kind}-{arch}"
        result.files[folder] = partial(_save, d, str(ckpt) if ckpt is not None else name)
        metrics.append(met.assign(path=folder))
        histories.append(hist.assign(hook=cfg.hook_name))
        v = dict(zip(met.metric, met.value))
        result.summary += (f"  {name} {cfg.hook_name}: L0 {v['l0']:.1f}, FVU {v['fvu']:.3f}, dead "
                           f"{v['dead_fraction']:.1%}, loss recovered {v['loss_recovered']:.3f} (clean "
                           f"{v['loss_clean']:.3f}, spliced {v['loss_spliced']:.3f}, zero {v['loss_zero']:.3f} "
                           "nats)\n")
    result.tables = {"sae_metrics": pd.concat(metrics, ignore_index=True),
                     "sae_training": pd.concat(histories, ignore_index=True)}
    result.summary = result.summary.rstrip("\n")
    return result


def training_figure(result: Result):
    from analysis.figures.features import training_figure as draw

    return draw(result.tables["sae_training"], result.tables["sae_metrics"])


def summarize(result: Result) -> str:
    p, met = result.params, result.tables["sae_metrics"]
    return (result.summary + f"\n{p['kind']} {p['arch']}, {p['expansion']}x width, metrics on "
            f"{int(met.n_tokens.iloc[0]):,} held-out tokens; the dictionaries in SAELens's layout")


SPEC = Spec(
    name="sae", group="readouts",
    help="sparse dictionaries (SAE, transcoder, skip transcoder; TopK, BatchTopK, JumpReLU, ReLU) and their metrics",
    examples="""
  fixedid-analyze sae --ckpt fixedid-demo/checkpoints/canonical --hook blocks.1.hook_resid_post
  fixedid-analyze sae --ckpt fixedid-demo/checkpoints/gf2 --kind transcoder --arch jumprelu --hook blocks.1.ln2.hook_normalized
""",
    params=(
        Param("hook", None, "hook point a dictionary reads (repeatable), e.g. blocks.1.hook_resid_post; a transcoder "
              "reads an MLP's input, blocks.L.ln2.hook_normalized", repeat=True, required=True),
        Param("hook_out", None, "the hook a transcoder predicts (default: the MLP output of --hook's block)"),
        Param("kind", "sae", "sae: reconstruct the hook's activation; transcoder: predict the MLP's output from "
              "--hook; skip-transcoder: a transcoder with a linear skip path", choices=KINDS),
        Param("arch", "topk", "latent function (topk through eai-sparsify's SparseCoder)", choices=ARCHS),
        Param("expansion", 8, "latents per input dimension", type=types.positive_int),
        Param("k", 32, "topk/batchtopk: active latents per token", type=types.positive_int),
        Param("l1", 1.0, "relu: L1 coefficient", type=float),
        Param("l0", 1.0, "jumprelu: L0 coefficient", type=float),
        shared.data(), shared.tokens(131_072, "training tokens"),
        Param("eval_tokens", 16_384, "held-out tokens the metrics are measured on (never trained on)",
              type=types.positive_int),
        Param("batch_tokens", 1024, "tokens per training step", type=types.positive_int),
        Param("lr", None, "Adam learning rate (default: scaled with the width; see the docs)",
              type=types.positive_float),
        shared.seed("seed of the initialisation and the shuffling")),
    compute=train, check=check,
    figures={"sae_training": training_figure},
    summary=summarize,
    library=("analysis.features.run:fit_dictionary",),
)


__all__ = ["SPEC", "train"]

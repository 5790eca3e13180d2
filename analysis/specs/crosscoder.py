"""``crosscoder``: one sparse dictionary over several models' activations (checkpoints at a hook, or activation files),
each latent's decoder norm per model read as shared or one model's own, against references trained the same way
(:mod:`analysis.features.crosscoder`)."""

from __future__ import annotations

from functools import partial

from analysis.errors import AnalysisError
from analysis.features.crosscoder import ACTIVATIONS
from analysis.specs import shared, types
from analysis.specs.base import Param, Result, Spec


def _inputs(models, activations, hook, data, tokens, eval_tokens, batch_tokens, seed):
    """``(source, held-out activations, held-out windows or None, models dict)`` of the checkpoints or the files."""
    from analysis.features.crosscoder_data import ArraySource, ModelSource, read_arrays
    from analysis.features.run import split_windows

    if bool(len(models)) == bool(activations):
        raise AnalysisError("give two or more --ckpt [NAME=]DIR with --hook, or two or more --activations "
                            "NAME=FILE.npy (one of them)")
    if activations:
        names = [n for n, _ in activations]
        if len(set(names)) != len(names):
            raise AnalysisError(f"two --activations share a name: {names}")
        source = ArraySource(read_arrays(dict(activations)), eval_tokens=eval_tokens, batch_tokens=batch_tokens)
        return source, source.held_out(), None, {}
    if len(models) < 2 or hook is None:
        raise AnalysisError("a crosscoder of checkpoints reads two or more --ckpt at one --hook (e.g. "
                            "blocks.1.hook_resid_post)")
    loaded = dict(models.items())
    train, held = split_windows(next(iter(loaded.values())), data, train_tokens=tokens, eval_tokens=eval_tokens)
    source = ModelSource(loaded, hook, train, batch_tokens=batch_tokens, seed=seed)
    return source, source.activations(held), held, loaded


def _save(cc, path):
    from analysis.features.crosscoder import save_crosscoder

    save_crosscoder(cc, path.parent)


def diff_models(models, *, hook, activations, expansion, activation, k, l1, dedicated, data, tokens, eval_tokens,
                batch_tokens, lr, seed, nulls, null_seed, no_baseline, progress=False) -> Result:
    """Train the crosscoder and read it: its latents, metrics and class fractions, and (``nulls``) its references."""
    from analysis.features.crosscoder import CrosscoderConfig
    from analysis.features.crosscoder_read import class_fractions, latent_table, reconstruction_metrics
    from analysis.features.crosscoder_train import train_crosscoder

    source, x_eval, held, loaded = _inputs(models, activations, hook, data, tokens, eval_tokens, batch_tokens, seed)
    names = list(loaded) or [n for n, _ in activations]
    d = x_eval.shape[-1]
    cfg = CrosscoderConfig(models=tuple(names), d=d, n_latents=expansion * d, activation=activation, k=k,
                           l1_coefficient=l1, dedicated=dedicated, hook=hook)  # refuses --k above the latents
    train = partial(train_crosscoder, lr=lr, seed=seed, progress=progress)
    cc, curve = train(cfg, source)
    latents, metrics = latent_table(cc, x_eval), reconstruction_metrics(cc, x_eval)
    result = Result(tables={}, files={"crosscoder.safetensors": partial(_save, cc)},
                    attrs={"models": names, "null_shares": {}, "ternary_nulls": {}})
    if loaded:
        latents, metrics = _with_models(cc, loaded, hook, source, held, x_eval, latents, metrics, no_baseline, seed)
    result.tables |= {"crosscoder_latents": latents, "crosscoder_metrics": metrics,
                      "crosscoder_classes": class_fractions(latents), "crosscoder_training": curve}
    if nulls:
        if not loaded:
            raise AnalysisError("--nulls trains references from a checkpoint: give --ckpt, not --activations")
        result.tables["crosscoder_nulls"], result.attrs["null_shares"] = _nulls(
            cfg, loaded, hook, source, held, null_seed, train)
        if len(loaded) == 3:  # the ternary's reference: the first model beside two turned copies of itself
            result.attrs["ternary_nulls"]["turned copies"] = _turned_triple(cfg, *next(iter(loaded.items())), hook,
                                                                            source, held, train)
    return result


def _with_models(cc, loaded, hook, source, held, x_eval, latents, metrics, no_baseline, seed):
    """The latent table with its code readings, the metrics with the spliced losses and the per-model SAEs."""
    from analysis.features.crosscoder_models import code_readings, sae_baselines, spliced_losses

    latents = latents.merge(code_readings(cc, loaded, x_eval, held.flatten().numpy(), seed=seed), on="latent")
    metrics = metrics.merge(spliced_losses(cc, loaded, hook, held), on="model")
    if not no_baseline:
        metrics = metrics.merge(sae_baselines(loaded, hook, source.windows, held, n_latents=cc.cfg.n_latents,
                                              l0=float(metrics.l0.iloc[0]), seed=seed), on="model")
    return latents, metrics


def _nulls(cfg, loaded, hook, source, held, null_seed, train):
    """The references of the first checkpoint: its turned copy, its random-init twin, and (``null_seed``) another
    seed of its variant; ``(table, {null: model A's shares of the live latents})``."""
    from analysis.features.crosscoder_data import ModelSource
    from analysis.features.crosscoder_nulls import null_rows, random_rotation
    from analysis.features.crosscoder_read import latent_table
    from analysis.loading import load, random_init_twin

    name, model = next(iter(loaded.items()))
    turn = random_rotation(cfg.d, seed=0)
    pairs = {"turned copy": ({name: model, f"{name} turned": model},
                             lambda x: torch_stack_turned(x, turn)),
             "random init": ({name: model, f"{name} init": random_init_twin(model)}, None)}
    if null_seed is not None:
        other = load(null_seed, device=next(model.parameters()).device)
        pairs = {"two seeds": ({name: model, f"{name} other seed": other}, None)} | pairs
    sources = {}
    for null, (models, transform) in pairs.items():
        s = ModelSource(models, hook, source.windows, batch_tokens=source.batch_tokens, seed=source.seed,
                        transform=transform)
        sources[null] = (s, s.activations(held))
    shares = {}

    def keep(cfg2, s):
        cc, curve = train(cfg2, s)
        null = next(n for n, (src, _) in sources.items() if src is s)
        table = latent_table(cc, sources[null][1])
        shares[null] = table[table.live][f"share_{cfg2.models[0]}"].to_numpy()
        return cc, curve

    return null_rows(cfg, sources, train=keep), shares


def _turned_triple(cfg, name, model, hook, source, held, train):
    """The live latents' shares ``[n, 3]`` of a crosscoder with ``cfg``'s settings over ``model`` and two copies of
    it turned by two random orthogonal matrices: three views of one function, drawn under a three-model ternary."""
    from analysis.features.crosscoder import CrosscoderConfig
    from analysis.features.crosscoder_data import ModelSource
    from analysis.features.crosscoder_nulls import random_rotation, settings_for
    from analysis.features.crosscoder_read import latent_table

    turns = [random_rotation(cfg.d, seed=s) for s in (0, 1)]
    names = (name, f"{name} turned", f"{name} turned 2")
    s = ModelSource(dict.fromkeys(names, model), hook, source.windows, batch_tokens=source.batch_tokens,
                    seed=source.seed, transform=lambda x: torch_stack_turned(x, *turns))
    cc, _ = train(CrosscoderConfig(**settings_for(cfg, names)), s)
    table = latent_table(cc, s.activations(held))
    return table[table.live][[f"share_{m}" for m in names]].to_numpy()


def torch_stack_turned(x, *turns):
    """``[tokens, models, d]`` activations with each model after the first turned by its orthogonal matrix."""
    import torch

    return torch.stack([x[:, 0]] + [x[:, i + 1] @ t.to(x) for i, t in enumerate(turns)], 1)


def shares_figure(result: Result):
    """Two models: the share histogram with the references; three: the ternary plot over the turned copies'
    latents (with ``--nulls``); more: none."""
    from analysis.figures.crosscoders import share_histogram, ternary

    models, latents = result.attrs["models"], result.tables["crosscoder_latents"]
    if len(models) == 2:
        return share_histogram(latents, models, result.attrs["null_shares"])
    if len(models) != 3:
        return None
    return ternary(latents, models, result.attrs["ternary_nulls"])


def summarize(result: Result) -> str:
    """The class fractions, each model's FVU and loss recovered, and the references."""
    classes, metrics = result.tables["crosscoder_classes"], result.tables["crosscoder_metrics"]
    n_live = int(classes.n_live.iloc[0]) if len(classes) else 0
    lines = [f"crosscoder over {', '.join(result.attrs['models'])}: {n_live} live latents; "
             + "; ".join(f"{r['class']} {r.fraction:.0%}" for _, r in classes.iterrows())]
    for r in metrics.itertuples():
        line = f"  {r.model}: L0 {r.l0:.1f}, FVU {r.fvu:.3f}"
        if hasattr(r, "loss_recovered"):
            line += f", loss recovered {r.loss_recovered:.3f}"
        if hasattr(r, "sae_fvu"):
            line += f" (its own SAE at k {r.sae_k}: FVU {r.sae_fvu:.3f}, loss recovered {r.sae_loss_recovered:.3f})"
        lines.append(line)
    if "crosscoder_nulls" in result.tables:
        for r in result.tables["crosscoder_nulls"].itertuples():
            lines.append(f"  reference {r.null} ({r.model_a} / {r.model_b}): shared {r.shared:.0%}, exclusive "
                         f"{r.exclusive_a:.0%} / {r.exclusive_b:.0%}")
    turned = result.attrs["ternary_nulls"].get("turned copies")
    if turned is not None:
        from analysis.features.crosscoder_read import HOLD

        lines.append(f"  reference turned copies ({result.attrs['models'][0]} in three bases, the ternary's): "
                     f"{len(turned)} live latents, shared {(turned >= HOLD).all(1).mean():.0%}")
    return "\n".join(lines)


SPEC = Spec(
    name="crosscoder", group="readouts", models="any", joint=True,
    help="a crosscoder over several models (model diffing): which latents they share and which one alone has",
    examples="""
  fixedid-analyze crosscoder --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2 \\
      --hook blocks.2.hook_resid_post --nulls
  fixedid-analyze crosscoder --activations a=acts_a.npy --activations b=acts_b.npy --eval-tokens 4096
""",
    params=(
        Param("hook", None, "the hook point every checkpoint is read at, e.g. blocks.1.hook_resid_post"),
        Param("activations", None, "NAME=FILE.npy: activations you already have, a float array [tokens, d] per model "
              "with rows aligned across files (repeat; instead of --ckpt)", type=types.named_file, repeat=True),
        Param("expansion", 8, "latents per activation dimension", type=types.positive_int),
        Param("activation", "batchtopk", "the latent function: batchtopk (a threshold at inference), topk, or relu "
              "(with the decoder-norm-weighted L1 penalty)", choices=ACTIVATIONS),
        Param("k", 32, "topk/batchtopk: active latents per token", type=types.positive_int),
        Param("l1", 1.0, "relu: the L1 coefficient", type=types.nonnegative_float),
        Param("dedicated", 0, "latents reserved per model (their decoders into the other models held at zero)",
              type=types.nonnegative_int),
        shared.data(), shared.tokens(131_072, "training tokens (checkpoints)"),
        Param("eval_tokens", 16_384, "held-out tokens every reading is measured on (with --activations: the last "
              "rows)", type=types.positive_int),
        Param("batch_tokens", 1024, "tokens per training step", type=types.at_least(2)),
        Param("lr", None, "Adam learning rate (default 8e-4 / sqrt(latents / 16384))", type=types.positive_float),
        shared.seed("seed of the initialisation and the shuffling"),
        Param("nulls", False, "also train the references of the first checkpoint: its copy turned by a random "
              "orthogonal matrix, its random-init twin, and with --null-seed another seed of its variant",
              switch=True),
        Param("null_seed", None, "a checkpoint of the first checkpoint's variant from another seed (the two-seed "
              "reference)", metavar="DIR", type=types.directory),
        Param("no_baseline", False, "skip the per-model SAEs of the same width at the same L0", switch=True)),
    compute=diff_models,
    figures={"crosscoder_shares": shares_figure},
    summary=summarize,
    library=("analysis.features.crosscoder_train:train_crosscoder",),
)


__all__ = ["SPEC", "diff_models", "shares_figure", "summarize", "torch_stack_turned"]

"""Training a crosscoder on activations streamed from several models (or read from files), one pass, resumable from
its checkpoints: each model's scale fitted on a sample of the training tokens, AuxK revival of dead latents, the
BatchTopK threshold calibrated on that sample at the end, progress shown as a bar with rate and ETA."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis.errors import AnalysisError
from analysis.features.crosscoder import Crosscoder, CrosscoderConfig, _keep_top, with_fit

#: The checkpoint a training leaves (and resumes from) in its ``checkpoint_dir``.
STATE, STATE_JSON = "state.safetensors", "state.json"


def default_lr(n_latents: int) -> float:
    """The default Adam rate for ``n_latents`` latents: the native dictionaries' (``8e-4 / sqrt(latents / 2**14)``)."""
    return 8e-4 / math.sqrt(n_latents / 2**14)


def crosscoder_loss(cc: Crosscoder, xs: torch.Tensor, dead: torch.Tensor, sparsity_scale: float = 1.0):
    """``(loss, parts, acts)`` of scaled activations ``xs`` ``[batch, models, d]``: the squared error summed over
    models and dimensions and averaged over tokens, plus the decoder-norm-weighted L1 (ReLU) and the AuxK term that
    trains ``dead`` latents to explain the error; ``parts``: 0-d tensors of the terms, the L0 and each model's FVU."""
    cfg = cc.cfg
    pre = xs.reshape(xs.shape[0], -1) @ cc.W_enc.reshape(-1, cfg.n_latents) + cc.b_enc
    relu = torch.relu(pre)
    if cfg.activation == "topk":
        acts = _keep_top(relu, cfg.k)
    elif cfg.activation == "batchtopk":
        flat = relu.flatten()
        top = flat.topk(min(cfg.k * xs.shape[0], flat.numel()))
        acts = torch.zeros_like(flat).scatter_(0, top.indices, top.values).view_as(relu)
    else:
        acts = relu
    err = xs - (sparse_decode(cc, acts) + cc.b_dec)
    mse = err.pow(2).sum((1, 2)).mean()
    total = (xs - xs.mean(0)).pow(2).sum((0, 2)).clamp_min(1e-12)
    parts = {"mse": mse, "l0": (acts > 0).float().sum(1).mean()}
    loss = mse
    if cfg.activation == "relu":
        penalty = cfg.l1_coefficient * sparsity_scale * (acts * cc.decoder_norms().sum(0)).sum(1).mean()
        parts["l1"], loss = penalty, loss + penalty
    aux = _aux_loss(cc, relu, err.detach(), dead)
    parts["aux"], loss = aux, loss + cfg.aux_coefficient * aux
    for i, m in enumerate(cfg.models):
        parts[f"fvu_{m}"] = err[:, i].detach().pow(2).sum() / total[i]
    return loss, parts, acts


def _aux_loss(cc: Crosscoder, relu: torch.Tensor, err: torch.Tensor, dead: torch.Tensor) -> torch.Tensor:
    """AuxK (Gao et al., 2024): the top ``d / 2`` dead latents' reconstruction of the error (eai-sparsify's ``k`` for
    one model's width), as a fraction of its variance."""
    idx = dead.nonzero().flatten()
    if idx.numel() == 0:
        return relu.new_zeros(())
    k = min(idx.numel(), max(1, err.shape[2] // 2))
    top = relu[:, idx].topk(k, dim=-1)  # among the dead latents only
    aux = torch.zeros_like(relu).index_put_((torch.arange(relu.shape[0], device=relu.device)[:, None].expand(-1, k),
                                             idx[top.indices]), top.values)
    guess = sparse_decode(cc, aux)
    return (err - guess).pow(2).sum() / (err - err.mean(0)).pow(2).sum().clamp_min(1e-12)


def sparse_decode(cc: Crosscoder, acts: torch.Tensor) -> torch.Tensor:
    """``acts @ W_dec`` for every model ``[batch, models, d]`` (no bias, scaled units) from the active latents alone:
    one ``embedding_bag`` over the latents' decoder rows, laid out ``[latents, models * d]`` (the work of the active
    latents, not of all of them; a dense product where most latents are active)."""
    w = cc.W_dec if not cc.cfg.dedicated else cc.W_dec * cc.mask[..., None]
    M, L, d = w.shape
    rows, cols = acts.nonzero(as_tuple=True)
    if rows.numel() > acts.numel() // 8:
        return torch.einsum("bl,mld->bmd", acts, w)
    flat = w.permute(1, 0, 2).reshape(L, M * d)
    counts = torch.bincount(rows, minlength=acts.shape[0])
    offsets = torch.cumsum(counts, 0) - counts
    out = torch.nn.functional.embedding_bag(cols, flat, offsets, mode="sum", per_sample_weights=acts[rows, cols])
    return out.view(acts.shape[0], M, d)


def fit_scales(sample: torch.Tensor) -> torch.Tensor:
    """Each model's scale ``[models]``: the root mean squared norm of its activations in ``sample``
    ``[tokens, models, d]`` (dividing by it gives unit mean squared norm)."""
    return sample.pow(2).sum(-1).mean(0).sqrt().clamp_min(1e-12)


class _Run:
    """The state of one training: the crosscoder, its optimizer, the steps done, the dead-latent counters and the
    curves; saved to and restored from a checkpoint directory."""

    def __init__(self, cfg: CrosscoderConfig, sample: torch.Tensor, *, device, lr, seed):
        gen = torch.Generator().manual_seed(seed)
        scale = fit_scales(sample.to(device))
        self.cc = Crosscoder(with_fit(cfg, scale.tolist(), None), device=device, generator=gen).train()
        with torch.no_grad():
            self.cc.b_dec.copy_((sample.to(device) / scale[None, :, None]).mean(0))
        self.opt = torch.optim.Adam(self.cc.parameters(), lr=lr)
        self.base_lr, self.step, self.tokens = lr, 0, 0
        self.since_fired = torch.zeros(cfg.n_latents, dtype=torch.long, device=device)
        self.rows: list[dict] = []

    def save(self, where: Path) -> None:
        """Write the state whole into ``where`` (tensors as safetensors, the rest as JSON; nothing pickled)."""
        from safetensors.torch import save_file

        from fixedid.atomic import atomic_path, write_text_atomic

        where.mkdir(parents=True, exist_ok=True)
        opt = self.opt.state_dict()
        tensors = {f"cc.{k}": v for k, v in self.cc.state_dict().items()} | {"since_fired": self.since_fired}
        for i, st in opt["state"].items():
            tensors |= {f"opt.{i}.{k}": torch.as_tensor(v) for k, v in st.items()}
        with atomic_path(where / STATE) as tmp:
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp))
        meta = {"step": self.step, "tokens": self.tokens, "rows": self.rows,
                "param_groups": opt["param_groups"]}
        write_text_atomic(where / STATE_JSON, json.dumps(meta) + "\n")

    def restore(self, where: Path) -> None:
        """Read the state :meth:`save` wrote."""
        from safetensors.torch import load_file

        device = self.since_fired.device
        t = load_file(str(where / STATE), device=str(device))
        meta = json.loads((where / STATE_JSON).read_text())
        self.cc.load_state_dict({k[3:]: v for k, v in t.items() if k.startswith("cc.")})
        self.since_fired.copy_(t["since_fired"])
        state: dict = {}
        for key, v in t.items():
            if key.startswith("opt."):
                _, i, name = key.split(".", 2)
                state.setdefault(int(i), {})[name] = v.cpu() if name == "step" else v
        self.opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
        self.step, self.tokens, self.rows = meta["step"], meta["tokens"], meta["rows"]


def train_crosscoder(cfg: CrosscoderConfig, source, *, device="cpu", lr: float | None = None, seed: int = 0,
                     dead_tokens: int | None = None, warmup_fraction: float = 0.05, decay_fraction: float = 0.2,
                     checkpoint_dir=None, checkpoint_every: int = 0, stop_after: int | None = None,
                     progress: bool = True) -> tuple[Crosscoder, pd.DataFrame]:
    """Train a crosscoder of ``cfg`` on ``source`` (its ``batches()``: ``[batch, models, d]`` tensors in a fixed order,
    ``n_tokens`` of them in all, and ``sample()``: tokens the scales are fitted on). With ``checkpoint_dir`` the state
    is saved every ``checkpoint_every`` steps and a training that finds one there resumes from it (the batches
    before it replayed, not trained on): the result equals an uninterrupted run's. ``stop_after``: stop after that
    many steps (what a killed run leaves). Returns the crosscoder (eval mode, its scales and threshold in its config)
    and one row per step: ``step, tokens, loss, mse, l0, aux, fvu_<model>..., dead_fraction`` (and ``l1``)."""
    if lr is not None and not lr > 0:
        raise AnalysisError(f"the learning rate must be positive, got {lr}")
    torch.manual_seed(seed)
    run = _Run(cfg, source.sample(), device=device, lr=lr or default_lr(cfg.n_latents), seed=seed)
    where = Path(checkpoint_dir) if checkpoint_dir else None
    if where is not None and (where / STATE).is_file():
        run.restore(where)
    n_steps = max(1, math.ceil(source.n_tokens / source.batch_tokens))
    dead_tokens = dead_tokens or max(source.batch_tokens, min(10_000_000, source.n_tokens // 10))
    bar = tqdm(total=source.n_tokens, initial=run.tokens, unit="tok", unit_scale=True, desc="crosscoder",
               disable=not progress, leave=False)
    for i, x in enumerate(source.batches()):
        if i < run.step:
            continue  # trained on before the checkpoint this run resumed from
        if stop_after is not None and run.step >= stop_after:
            break
        _step(run, x.to(device), n_steps, dead_tokens, warmup_fraction, decay_fraction)
        bar.update(x.shape[0])
        if where is not None and checkpoint_every and run.step % checkpoint_every == 0:
            run.save(where)
    bar.close()
    cc = run.cc.eval()
    threshold = calibrated_threshold(cc, source.sample()) if cfg.activation == "batchtopk" else None
    cc.cfg = with_fit(cc.cfg, cc.scale.tolist(), threshold)
    cc.threshold.fill_(float("nan") if threshold is None else threshold)
    return cc, pd.DataFrame(run.rows)


@torch.no_grad()
def calibrated_threshold(cc: Crosscoder, sample: torch.Tensor) -> float:
    """The BatchTopK threshold of the trained crosscoder: the pre-activation above which latents fire ``k`` times per
    token on average over ``sample`` (raw activations; the tokens the scales were fitted on), as training's batch
    selection keeps them."""
    pre = cc.pre_activations(sample.to(cc.W_dec.device)).flatten()
    n = min(cc.cfg.k * sample.shape[0], pre.numel())
    return float(pre.topk(n).values[-1].clamp_min(0))


def _step(run: _Run, x: torch.Tensor, n_steps: int, dead_tokens: int, warmup: float, decay: float) -> None:
    """One optimizer step on the raw activations ``x``, the schedule and the counters advanced."""
    cc, frac = run.cc, run.step / n_steps
    for g in run.opt.param_groups:
        g["lr"] = run.base_lr * min(1.0, (1 - frac) / decay) if decay > 0 else run.base_lr
    xs = x / cc.scale[None, :, None]
    dead = run.since_fired >= dead_tokens
    loss, parts, acts = crosscoder_loss(cc, xs, dead, min(1.0, frac / warmup) if warmup > 0 else 1.0)
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    run.opt.step()
    with torch.no_grad():
        if cc.cfg.activation != "relu":  # TopK's scale is free: each latent's decoder at unit norm over all models
            cc.W_dec.div_(cc.W_dec.norm(dim=(0, 2), keepdim=True).clamp_min(1e-12))
        fired = (acts > 0).any(0)
        run.since_fired += x.shape[0]
        run.since_fired[fired] = 0
    run.step += 1
    run.tokens += x.shape[0]
    run.rows.append({"step": run.step - 1, "tokens": run.tokens, "loss": float(loss.detach()),
                     **{k: float(v.detach()) for k, v in parts.items()}, "dead_fraction": float(dead.float().mean())})


__all__ = ["STATE", "STATE_JSON", "calibrated_threshold", "crosscoder_loss", "default_lr", "fit_scales",
           "sparse_decode", "train_crosscoder"]

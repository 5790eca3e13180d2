"""The training loop: the backbone-matched variants with one recipe, resumable exactly, torchrun-ready.

Every variant is trained with one recipe, one seed and one data order into ``<out>/<variant>/``: a checkpoint
directory (see :mod:`fixedid.checkpoint`, with the optimizer and resume state as extra files) plus
``metrics.jsonl``. ``<out>/data/`` holds the tokenizer and shards, shared by the variants; ``<out>/run.json`` the
training config. Backbone matching holds by construction: per-name seeded init (:class:`fixedid.FixedIdLM`) and a
stateless data order (:func:`fixedid.data.batch_at`), so only the input interface differs.

Exact resume: the learning rate and the batch are pure functions of the step, and a checkpoint carries the model,
the AdamW state and the RNG state, so ``--resume`` after a SIGKILL logs the same per-step losses as an uninterrupted
run. Under torchrun the global batch is sharded by rank (DDP; gloo on CPU, nccl on CUDA) and equals the single
process batch of the same config.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from tqdm.auto import tqdm

from ..checkpoint import load_checkpoint, save_checkpoint
from ..atomic import write_text_atomic
from ..config import VARIANTS
from ..data import batch_at, tokenizer_hash
from ..errors import CheckpointError, ConfigError
from ..model import FixedIdLM
from .distributed import Dist, full_state, grad_sync, load_optimizer, setup_dist, wrap
from .optim import deserialize_optimizer_state, lr_at, make_optimizer, serialize_optimizer_state
from .prepare import PreparedData, prepare_data
from .config import TrainConfig

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


def autocast_ctx(dtype: str, device: torch.device):
    if dtype == "bf16" or (dtype == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def flops_per_token(model: FixedIdLM) -> float:
    """Training FLOPs per token, 6N for the matmul parameters plus the attention score terms (nanoGPT's count)."""
    c = model.param_counts()  # the input table is a lookup, not a matmul: it is not counted
    return 6 * (c["backbone"] + c["output_head"]) + 12 * model.cfg.n_layers * model.cfg.d_model * model.cfg.context


# ----------------------------------------------------------------------------------------------------------------
# the output directory


def check_out_dir(out: Path, cfg: TrainConfig, resume: bool) -> None:
    """Refuse, before anything is written, an --out that holds something else (or, without --resume, anything)."""
    run_file = out / "run.json"
    if run_file.exists():
        try:
            old = TrainConfig.from_dict(json.loads(run_file.read_text())["config"])
        except (ValueError, KeyError, TypeError, ConfigError) as e:
            raise ConfigError(f"{run_file} cannot be read ({e}); choose another --out") from None
        if old.fingerprint() != cfg.fingerprint():
            raise ConfigError(f"{out} holds a different run (differs in {', '.join(cfg.differences(old))}); "
                              "choose another --out")
        if not resume:
            raise ConfigError(f"{out} already holds this run; pass --resume to continue it or choose another --out")
    elif resume:
        raise ConfigError(f"nothing to resume in {out} (no run.json); drop --resume to start a new run")
    elif out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty and holds no fixedid run; choose another --out")


def truncate_metrics(path: Path, step: int) -> None:
    """Keep the metrics lines up to ``step`` (and drop a line torn by a kill) before a resumed run appends."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("step", math.inf) <= step:
            kept.append(line)
    write_text_atomic(path, "".join(k + "\n" for k in kept))


# ----------------------------------------------------------------------------------------------------------------
# one variant


def save_state(raw: FixedIdLM, opt, vdir: Path, data: PreparedData, cfg: TrainConfig, step: int, d: Dist,
               extra_meta: dict, *, resume: bool = True, keep: bool = False) -> None:
    """Checkpoint the model (collective under FSDP; rank 0 writes): with ``resume``, into ``vdir`` with its
    optimizer, RNG and step; with ``keep``, also as a model-only snapshot in ``vdir/steps/<step>``."""
    state_dict, named_opt = full_state(raw, opt, d)
    if d.main:
        model = raw
        if d.fsdp:  # rank 0 rebuilds a plain copy from the gathered full tensors
            model = FixedIdLM(raw.cfg, init=False)
            model.load_state_dict(state_dict)
        meta = dict(step=step, tokens=step * cfg.train.batch_size * raw.cfg.context, variant=raw.cfg.interface,
                    train_config=cfg.to_dict(), tokenizer_sha256=tokenizer_hash(data.tokenizer),
                    unigram_loss=data.unigram_loss, **extra_meta)
        if keep:
            save_checkpoint(model, kept_dir(vdir, step), tokenizer=data.tokenizer, **meta)
        if resume:
            tensors, groups = serialize_optimizer_state(named_opt)
            rng = {"torch": torch.get_rng_state()}
            if torch.cuda.is_available():
                rng.update({f"cuda{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
            state = {"step": step, "optimizer": groups}
            save_checkpoint(model, vdir, tokenizer=data.tokenizer, adopt_dir=True, **meta,
                            extra_files={"optimizer.safetensors": tensors, "rng.safetensors": st_save(rng),
                                         "trainer_state.json": json.dumps(state).encode()})
    d.barrier()


def kept_dir(vdir: Path, step: int) -> Path:
    """Where the model-only snapshot of step ``step`` (``[train] keep``) lives: ``<variant>/steps/<step>``."""
    return Path(vdir) / "steps" / f"{step:07d}"


def run_complete(run_dir, cfg: TrainConfig, variants) -> bool:
    """Every one of ``variants`` in ``run_dir`` is trained to ``cfg``'s last step and has the snapshots its
    ``[train] keep`` asks for."""
    run_dir = Path(run_dir)
    for v in variants:
        try:
            if json.loads((run_dir / v / "meta.json").read_text()).get("step") != cfg.train.steps:
                return False
        except (OSError, ValueError):
            return False
        if not all((kept_dir(run_dir / v, k) / "meta.json").exists() for k in cfg.train.keep if k < cfg.train.steps):
            return False
    return True


def restore_state(model: FixedIdLM, vdir: Path) -> tuple[int, dict]:
    """Load the newest checkpoint's weights and RNG into ``model``; return (step, named optimizer state)."""
    ck = load_checkpoint(vdir)
    if ck.cfg.resolved() != model.cfg.resolved():
        raise CheckpointError(f"{vdir} holds a model of another configuration; choose another --out")
    model.load_state_dict(ck.state_dict())
    try:
        state = json.loads((vdir / "trainer_state.json").read_text())
        named = deserialize_optimizer_state((vdir / "optimizer.safetensors").read_bytes(), state["optimizer"])
        rng = st_load((vdir / "rng.safetensors").read_bytes())
        step = int(state["step"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{vdir} has no usable resume state ({e}); it cannot be resumed") from None
    if step != ck.meta.get("step"):
        raise CheckpointError(f"{vdir}: resume state and model disagree on the step; the checkpoint is corrupted")
    torch.set_rng_state(rng["torch"])
    if torch.cuda.is_available() and "cuda0" in rng:
        torch.cuda.set_rng_state_all([rng[f"cuda{i}"] for i in range(torch.cuda.device_count()) if f"cuda{i}" in rng])
    return step, named


@torch.no_grad()
def evaluate(model, data: PreparedData, cfg: TrainConfig, ctx: int, micro: int, d: Dist) -> float:
    t = cfg.train
    was_training = model.training
    model.eval()
    losses = []
    for i in range(t.eval_batches):
        x, y = batch_at(data.val, i, micro, ctx, seed=t.seed + 1, rank=d.rank, world_size=d.world)
        with autocast_ctx(t.dtype, d.device):
            losses.append(model(x.to(d.device), return_type="loss", targets=y.to(d.device)).item())
    model.train(was_training)
    return d.mean(sum(losses) / len(losses))


def train_variant(cfg: TrainConfig, variant: str, out: Path, data: PreparedData, d: Dist, *, resume: bool,
                  quiet: bool) -> dict:
    t = cfg.train
    vocab = data.tokenizer.get_vocab_size(with_added_tokens=True)
    raw = FixedIdLM(cfg.model_config(variant, vocab))
    ctx = raw.cfg.context
    vdir = out / variant
    start, named_opt = 0, None
    if resume and (vdir / "meta.json").exists():
        start, named_opt = restore_state(raw, vdir)
        if d.main:
            truncate_metrics(vdir / "metrics.jsonl", start)
            truncate_metrics(vdir / "timing.jsonl", start)
    raw.to(d.device)
    model = wrap(raw, d)
    opt = make_optimizer(raw, t)  # after wrapping: FSDP2 replaces the parameters by sharded ones
    if named_opt is not None:
        try:
            load_optimizer(raw, opt, named_opt, d)
        except (KeyError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"{vdir}: the optimizer state does not fit the model ({e}); it cannot be "
                                  "resumed") from None
    if t.compile:
        model = torch.compile(model)
    micro = t.micro_batch_size or t.batch_size // d.world
    if t.batch_size % (micro * d.world):
        raise ConfigError(f"batch_size {t.batch_size} is not a multiple of micro_batch_size {micro} x {d.world} "
                          "ranks; adjust one of them")
    accum = t.batch_size // (micro * d.world)
    tokens_per_step = t.batch_size * ctx
    bar = tqdm(total=t.steps, initial=start, desc=f"{variant:>9}", unit="step", disable=quiet or not d.main,
               dynamic_ncols=True, leave=True)
    metrics = (vdir / "metrics.jsonl") if d.main else None  # a pure function of the config and the machine's math
    timing = (vdir / "timing.jsonl") if d.main else None  # wall-clock throughput, which varies run to run
    last = {"loss": float("nan"), "val_loss": float("nan")}
    t_run, t_log, steps_log = time.perf_counter(), time.perf_counter(), 0
    model.train()
    for step in range(start, t.steps):
        lr = lr_at(step, t)
        for g in opt.param_groups:
            g["lr"] = lr
        loss_sum = 0.0
        for m in range(accum):
            x, y = batch_at(data.train, step, micro, ctx, seed=t.seed, rank=d.rank * accum + m,
                            world_size=d.world * accum)
            with grad_sync(model, d, enabled=m == accum - 1):
                with autocast_ctx(t.dtype, d.device):
                    loss = model(x.to(d.device), return_type="loss", targets=y.to(d.device))
                (loss / accum).backward()
            loss_sum += loss.detach().item()
        grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), t.grad_clip if t.grad_clip > 0 else math.inf)
        opt.step()
        opt.zero_grad(set_to_none=True)
        done, steps_log = step + 1, steps_log + 1
        bar.update(1)
        final = done == t.steps
        if done % t.log_every == 0 or final:
            loss_val = d.mean(loss_sum / accum)
            now = time.perf_counter()
            tok_s = tokens_per_step * steps_log / (now - t_log)
            t_log, steps_log = now, 0
            last["loss"] = loss_val
            bar.set_postfix(loss=f"{loss_val:.3f}", tok_s=f"{tok_s:,.0f}")
            if metrics:
                vdir.mkdir(parents=True, exist_ok=True)
                with open(metrics, "a") as f:
                    f.write(json.dumps({"step": done, "loss": loss_val, "lr": lr, "grad_norm": float(grad_norm),
                                        "tokens": done * tokens_per_step}) + "\n")
                with open(timing, "a") as f:
                    f.write(json.dumps({"step": done, "tok_per_s": tok_s}) + "\n")
        if done % t.eval_every == 0 or final or done in t.keep:
            last["val_loss"] = evaluate(model, data, cfg, ctx, micro, d)
            if metrics:
                with open(metrics, "a") as f:
                    f.write(json.dumps({"step": done, "val_loss": last["val_loss"]}) + "\n")
        resume_point, kept = done % t.save_every == 0 or final, done in t.keep
        if resume_point or kept:
            save_state(raw, opt, vdir, data, cfg, done, d, {"val_loss": last["val_loss"], "loss": last["loss"]},
                       resume=resume_point, keep=kept)
    bar.close()
    elapsed = time.perf_counter() - t_run
    trained = t.steps - start
    summary = {"variant": variant, "steps": t.steps, "trained_steps": trained, "loss": last["loss"],
               "val_loss": last["val_loss"], "unigram_loss": data.unigram_loss,
               "tok_per_s": trained * tokens_per_step / elapsed if trained else float("nan"),
               "params": raw.param_counts()["trainable"]}
    if d.device.type == "cuda" and trained:
        name = torch.cuda.get_device_name(d.device)
        peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
        if peak:
            summary["mfu"] = summary["tok_per_s"] * flops_per_token(raw) / (peak * d.world)
    return summary



def train(cfg: TrainConfig, out, variants=("learned", "canonical", "gf2"), *, resume: bool = False,
          quiet: bool = False, device: str = "auto") -> list[dict]:
    """Train ``variants`` with one recipe into ``out`` (see the module docstring); returns one summary dict per
    variant (as :func:`format_summary` prints them). The Python face of ``fixedid-train``."""
    out = Path(out)
    variants = list(variants)
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants or len(set(variants)) != len(variants):
        raise ConfigError(f"variants {variants} must be distinct names from {list(VARIANTS)}")
    d = setup_dist(device, cfg.train.parallel)
    check_out_dir(out, cfg, resume)
    d.barrier()  # every rank has checked --out before rank 0 writes anything into it
    n_bits = cfg.model_config("canonical", 2).n_bits
    if d.main:
        data = prepare_data(cfg.data, out / "data", n_bits=n_bits, progress=not quiet)
        write_text_atomic(out / "run.json", json.dumps({"config": cfg.to_dict(), "variants": variants}, indent=1))
    d.barrier()
    if not d.main:
        data = prepare_data(cfg.data, out / "data", n_bits=n_bits, build=False)
    return [train_variant(cfg, v, out, data, d, resume=resume, quiet=quiet) for v in variants]



__all__ = ["train", "train_variant", "check_out_dir", "kept_dir", "run_complete"]

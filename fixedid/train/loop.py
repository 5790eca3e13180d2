"""The training loop: the backbone-matched variants with one recipe, resumable exactly, torchrun-ready."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
import warnings
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from tqdm.auto import tqdm

from ..checkpoint import load_checkpoint, save_checkpoint
from ..atomic import write_text_atomic
from ..config import VARIANTS
from ..data import batch_at, tokenizer_hash
from ..errors import CheckpointError, ConfigError, FixedIdWarning
from ..model import FixedIdLM, constant_code_bits
from .distributed import Dist, full_state, grad_sync, load_optimizer, setup_dist, wrap
from .optim import deserialize_optimizer_state, lr_at, make_optimizer, serialize_optimizer_state
from .prepare import PreparedData, prepare_data
from .config import OptimConfig, TrainConfig

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


def autocast_ctx(dtype: str, device: torch.device):
    """The context a forward runs under for ``[train] dtype``: bfloat16 autocast for ``"bf16"``, and for
    ``"auto"`` on CUDA; otherwise nothing (float32)."""
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
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a directory; give a directory (it is created if missing)")
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


def check_resumable(out: Path, cfg: TrainConfig, variants) -> None:
    """Refuse to resume a variant whose checkpoint is gone though the run had one: a save stopped between its two
    renames (where no atomic exchange exists) leaves it under a hidden name beside the variant, and a metrics log
    past the first save point means that save completed. Without this, ``--resume`` would retrain from step 0. (A
    kill during the first save itself leaves no checkpoint and metrics up to that step: retraining is right.)"""
    first_save = min(cfg.train.save_every, cfg.train.steps)
    for v in variants:
        vdir = out / v
        if (vdir / "meta.json").exists():
            continue
        aside = sorted(p for p in out.glob(f".{v}.*-*") if (p / "meta.json").exists())
        if aside and any(out.glob(f".{v}.old-*")):
            steps = {p: json.loads((p / "meta.json").read_text()).get("step", -1) for p in aside}
            best = max(aside, key=steps.get)
            raise CheckpointError(f"{vdir} is missing: a save stopped half-way; its newest checkpoint (step "
                                  f"{steps[best]}) is {best}: rename it to {vdir} and resume")
        logged = _last_step(vdir / "metrics.jsonl")
        if logged > first_save:
            raise CheckpointError(f"{vdir} has no checkpoint, but its metrics.jsonl reaches step {logged} (past the "
                                  f"save at step {first_save}): the checkpoint was lost; restore it, or move "
                                  f"{vdir} away to retrain the variant from step 0")


def _last_step(path: Path) -> int:
    if not path.exists():
        return 0
    last = 0
    for line in path.read_text().splitlines():
        try:
            last = max(last, int(json.loads(line).get("step", 0)))
        except (ValueError, TypeError, AttributeError):
            continue
    return last


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
    optimizer, RNG and step; with ``keep``, also as a model-only snapshot in ``vdir/steps/<step:07d>``."""
    state_dict, named_opt = full_state(raw, opt, d)
    if d.main:
        model = raw
        if d.fsdp:  # rank 0 rebuilds a plain copy from the gathered full tensors
            model = FixedIdLM(raw.cfg, init=False)
            model.load_state_dict(state_dict)
        meta = dict(step=step, tokens=step * cfg.train.batch_size * raw.cfg.context, variant=vdir.name,
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
    """Where the model-only snapshot of step ``step`` (``[train] keep``) lives: ``<variant>/steps/<step:07d>``
    (``steps/0000750``)."""
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
        if not all((kept_dir(run_dir / v, k) / "meta.json").exists() for k in cfg.train.snapshot_steps):
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
    """The validation loss (nats per token): the mean over ``[train] eval_batches`` fixed batches of ``micro``
    windows of ``ctx`` tokens from the validation split (the same windows at every evaluation, drawn with seed
    ``[train] seed + 1``), averaged over ranks. Runs without gradients and restores the model's train/eval mode; every
    rank must call it."""
    t = cfg.train
    was_training = model.training
    model.eval()
    losses = []
    for i in range(t.eval_batches):
        x, y = batch_at(data.val, i, micro, ctx, seed=t.seed + 1, rank=d.rank, world_size=d.world)
        with autocast_ctx(t.dtype, d.device):
            losses.append(model(to_device(x, d.device), return_type="loss", targets=to_device(y, d.device)))
    model.train(was_training)
    return d.mean(host_sum(losses) / len(losses))


@dataclasses.dataclass
class _Variant:
    """One variant set up for training: its model, optimizer, first step and micro-batching."""
    raw: FixedIdLM  # the plain model (checkpoints, parameter counts, gradient clipping)
    model: torch.nn.Module  # ``raw`` wrapped for DDP/FSDP and, with ``[train] compile``, compiled
    opt: torch.optim.Optimizer
    start: int  # the first step to train: 0, or the step of the checkpoint resumed from
    micro: int  # rows per forward pass on each rank
    accum: int  # gradient-accumulation micro-batches per step on each rank

    @property
    def ctx(self) -> int:
        return self.raw.cfg.context


def _setup_variant(cfg: TrainConfig, variant: str, vdir: Path, data: PreparedData, d: Dist, *,
                   resume: bool) -> _Variant:
    """Build the variant's model and optimizer on ``d``'s device; with ``resume`` and a checkpoint in ``vdir``,
    restore them (and the RNG) and cut its metrics and timing logs back to the checkpoint's step."""
    t = cfg.train
    vocab = data.tokenizer.get_vocab_size(with_added_tokens=True)
    raw = FixedIdLM(cfg.model_config(variant, vocab))
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
    return _Variant(raw, model, opt, start, micro, t.batch_size // (micro * d.world))


def warn_constant_bits(variant: str, cfg) -> None:
    """A :class:`~fixedid.errors.FixedIdWarning` when some code bits are the same for every token of the vocabulary:
    flipping or recoding such a bit edits a column no token differs in, so bit-level comparisons between codes inherit
    it."""
    bits = constant_code_bits(cfg)
    if bits:
        warnings.warn(f"{variant}: {len(bits)} of the {cfg.n_bits} code bits are the same for all "
                      f"{cfg.vocab_size:,} tokens (bits {bits}); bit flips and recodings of them edit columns no "
                      "token differs in (the study's 49,152 tokens use every bit)", FixedIdWarning, stacklevel=2)


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` on ``device``; to CUDA from pinned memory without blocking, so the copy is not a host sync (a copy
    from pageable memory waits for the device's queue to drain)."""
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


def host_sum(losses: list[torch.Tensor]) -> float:
    """The sum, as a Python float, of the scalar tensors ``losses`` read in one device-to-host copy: each value is
    read exactly (as ``.item()`` would) and added in order in double precision, so the result is bit for bit the
    sum of ``.item()`` reads, whatever the device."""
    total = 0.0
    for value in torch.stack([v.detach().reshape(()) for v in losses]).tolist():
        total += value
    return total


def _train_step(v: _Variant, data: PreparedData, t: OptimConfig, step: int,
                d: Dist) -> tuple[float, list[torch.Tensor], torch.Tensor]:
    """One optimizer step at step ``step``'s learning rate, gradients accumulated over ``v.accum`` micro-batches;
    returns ``(lr, the micro-batch losses, gradient norm before clipping)``, the last two as tensors on the device:
    nothing here waits for the device (read them with :func:`~fixedid.train.loop.host_sum` and ``float`` where a value
    is needed)."""
    lr = lr_at(step, t)
    for g in v.opt.param_groups:
        g["lr"] = lr
    losses = []
    for m in range(v.accum):
        x, y = batch_at(data.train, step, v.micro, v.ctx, seed=t.seed, rank=d.rank * v.accum + m,
                        world_size=d.world * v.accum)
        with grad_sync(v.model, d, enabled=m == v.accum - 1):
            with autocast_ctx(t.dtype, d.device):
                loss = v.model(to_device(x, d.device), return_type="loss", targets=to_device(y, d.device))
            (loss / v.accum).backward()
        losses.append(loss.detach())
    grad_norm = torch.nn.utils.clip_grad_norm_(v.raw.parameters(), t.grad_clip if t.grad_clip > 0 else math.inf)
    v.opt.step()
    v.opt.zero_grad(set_to_none=True)
    return lr, losses, grad_norm


class _StepLog:
    """A variant's ``metrics.jsonl`` (a pure function of the config and the machine's math) and ``timing.jsonl``
    (wall-clock throughput, which varies run to run), appended to by the main rank only; and the throughput
    since the last logged step."""

    def __init__(self, vdir: Path, main: bool, tokens_per_step: int):
        self.vdir, self.tokens_per_step = vdir, tokens_per_step
        self.metrics = (vdir / "metrics.jsonl") if main else None
        self.timing = (vdir / "timing.jsonl") if main else None
        self.t_log, self.steps = time.perf_counter(), 0

    def step_done(self) -> None:
        self.steps += 1

    def train(self, done: int, loss: float, lr: float, grad_norm) -> float:
        """Log the training record of step ``done``; return the tokens per second since the last one."""
        now = time.perf_counter()
        tok_s = self.tokens_per_step * self.steps / (now - self.t_log)
        self.t_log, self.steps = now, 0
        if self.metrics:
            self.vdir.mkdir(parents=True, exist_ok=True)
            with open(self.metrics, "a") as f:
                f.write(json.dumps({"step": done, "loss": loss, "lr": lr, "grad_norm": float(grad_norm),
                                    "tokens": done * self.tokens_per_step}) + "\n")
            with open(self.timing, "a") as f:
                f.write(json.dumps({"step": done, "tok_per_s": tok_s}) + "\n")
        return tok_s

    def val(self, done: int, val_loss: float) -> None:
        if self.metrics:
            with open(self.metrics, "a") as f:
                f.write(json.dumps({"step": done, "val_loss": val_loss}) + "\n")


def train_variant(cfg: TrainConfig, variant: str, out: Path, data: PreparedData, d: Dist, *, resume: bool,
                  quiet: bool) -> dict:
    """Train (or, with ``resume``, continue) one variant into ``out/<variant>``: log, evaluate and checkpoint on
    ``[train]``'s schedule; return its summary (see ``_summary``)."""
    t = cfg.train
    vdir = out / variant
    v = _setup_variant(cfg, variant, vdir, data, d, resume=resume)
    if d.main and v.start < t.steps:
        warn_constant_bits(variant, v.raw.cfg)
    tokens_per_step = t.batch_size * v.ctx
    bar = tqdm(total=t.steps, initial=v.start, desc=f"{variant:>9}", unit="step", disable=quiet or not d.main,
               dynamic_ncols=True, leave=True)
    log = _StepLog(vdir, d.main, tokens_per_step)
    last = {"loss": float("nan"), "val_loss": float("nan")}
    t_run = time.perf_counter()
    kept = set(t.kept_steps)
    v.model.train()
    for step in range(v.start, t.steps):
        lr, losses, grad_norm = _train_step(v, data, t, step, d)
        done = step + 1
        log.step_done()
        bar.update(1)
        final = done == t.steps
        if done % t.log_every == 0 or final:  # the only host read of a training step: the logged step's losses
            last["loss"] = d.mean(host_sum(losses) / v.accum)
            tok_s = log.train(done, last["loss"], lr, grad_norm)
            bar.set_postfix(loss=f"{last['loss']:.3f}", tok_s=f"{tok_s:,.0f}")
        if done % t.eval_every == 0 or final or done in kept:
            last["val_loss"] = evaluate(v.model, data, cfg, v.ctx, v.micro, d)
            log.val(done, last["val_loss"])
        resume_point, snapshot = done % t.save_every == 0 or final, done in kept
        if resume_point or snapshot:
            save_state(v.raw, v.opt, vdir, data, cfg, done, d, {"val_loss": last["val_loss"], "loss": last["loss"]},
                       resume=resume_point, keep=snapshot)
    bar.close()
    return _summary(variant, v, cfg, data, d, last, time.perf_counter() - t_run)


def _summary(variant: str, v: _Variant, cfg: TrainConfig, data: PreparedData, d: Dist, last: dict,
             elapsed: float) -> dict:
    """The summary of a trained variant: the last losses, throughput over the steps trained in this call and,
    on a known CUDA device, the model FLOPs utilisation."""
    t = cfg.train
    trained = t.steps - v.start
    summary = {"variant": variant, "steps": t.steps, "trained_steps": trained, "loss": last["loss"],
               "val_loss": last["val_loss"], "unigram_loss": data.unigram_loss,
               "tok_per_s": trained * t.batch_size * v.ctx / elapsed if trained else float("nan"),
               "params": v.raw.param_counts()["trainable"]}
    if d.device.type == "cuda" and trained:
        name = torch.cuda.get_device_name(d.device)
        peak = next((val for k, val in PEAK_BF16_FLOPS.items() if k in name), None)
        if peak:
            summary["mfu"] = summary["tok_per_s"] * flops_per_token(v.raw) / (peak * d.world)
    return summary


def train(cfg: TrainConfig, out, variants=("learned", "canonical", "gf2"), *, resume: bool = False,
          quiet: bool = False, device: str = "auto", jobs: int = 1) -> list[dict]:
    """Train ``variants`` with one recipe into ``out`` (see the module docstring); returns one summary dict per
    variant (as :func:`fixedid.train.cli.format_summary` prints them). The Python face of ``fixedid-train``.
    ``jobs > 1`` trains up to that many variants at once on the CPU, in processes of their own sharing the cores
    (:mod:`fixedid.train.parallel`: the same weights; on 2 cores no faster for the tiny recipe); on CUDA and under
    torchrun it is ignored."""
    out = Path(out)
    variants = list(variants)
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants or len(set(variants)) != len(variants):
        raise ConfigError(f"variants {variants} must be distinct names from {list(VARIANTS)}")
    if jobs < 1:
        raise ConfigError(f"jobs {jobs} must be at least 1")
    d = setup_dist(device, cfg.train.parallel)
    check_out_dir(out, cfg, resume)
    if resume:
        check_resumable(out, cfg, variants)
    d.barrier()  # every rank has checked --out before rank 0 writes anything into it
    if d.main:
        data = _prepare(cfg, out, variants, progress=not quiet)
    d.barrier()
    if not d.main:
        data = prepare_data(cfg.data, out / "data", n_bits=_n_bits(cfg), build=False)
    if jobs > 1 and len(variants) > 1 and d.world == 1 and d.device.type == "cpu":
        from .parallel import train_side_by_side

        return train_side_by_side(cfg, out, variants, jobs=jobs, quiet=quiet, device=str(d.device))
    return [train_variant(cfg, v, out, data, d, resume=resume, quiet=quiet) for v in variants]


def side_by_side_worker(argv: list[str]) -> None:
    """A worker process of :func:`fixedid.train.parallel.train_side_by_side`: ``RUN_JSON OUT VARIANT THREADS
    DEVICE``; trains the variant of the prepared run and prints its summary as one JSON line on stdout, or the
    package's error as ``{"error": type, "message": text}`` (exit status 2)."""
    import sys

    from .. import errors

    run_json, run_dir, variant, threads, device = argv
    torch.set_num_threads(int(threads))
    try:
        summary = train(TrainConfig.load(run_json), run_dir, [variant], resume=True, quiet=True, device=device)[0]
    except errors.FixedIdError as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}), flush=True)
        sys.exit(2)
    print(json.dumps(summary), flush=True)


def prepare_run(cfg: TrainConfig, out, variants, *, quiet: bool = False) -> None:
    """Make ``out`` ready for :func:`~fixedid.train.loop.train` with ``resume=True`` (or ``fixedid-train --resume``) of
    any subset of ``variants``, training nothing: check it (a run of this config in it is kept), build its data and
    write ``run.json``. One process; afterwards the variants can be trained one by one, by different processes at once,
    each exactly as if the run had trained them together (each variant's init and data order are its own)."""
    out = Path(out)
    variants = list(variants)
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants or len(set(variants)) != len(variants):
        raise ConfigError(f"variants {variants} must be distinct names from {list(VARIANTS)}")
    check_out_dir(out, cfg, resume=(out / "run.json").exists())
    _prepare(cfg, out, variants, progress=not quiet)


def _n_bits(cfg: TrainConfig) -> int:
    return cfg.model_config("canonical", 2).n_bits


def _prepare(cfg: TrainConfig, out: Path, variants: list[str], *, progress: bool) -> PreparedData:
    """The main rank's part of a run's start: the data, and ``run.json`` naming the variants trained in ``out``
    (those of earlier calls first, then the new ones)."""
    data = prepare_data(cfg.data, out / "data", n_bits=_n_bits(cfg), progress=progress)
    try:
        old = json.loads((out / "run.json").read_text()).get("variants", [])
    except (OSError, ValueError, AttributeError):
        old = []
    record = {"config": cfg.to_dict(), "variants": list(dict.fromkeys([*old, *variants]))}
    write_text_atomic(out / "run.json", json.dumps(record, indent=1))
    return data



__all__ = ["train", "prepare_run", "train_variant", "check_out_dir", "check_resumable", "kept_dir", "run_complete"]

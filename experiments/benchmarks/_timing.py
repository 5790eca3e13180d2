"""Side-by-side timing helpers for the benchmark scripts: interleaved repeats, median of per-round ratios."""

from __future__ import annotations

import statistics
import time


def time_once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def per_round(fns: dict, *, rounds: int = 7, warmup: int = 2) -> dict[str, list[float]]:
    """Each callable's seconds per round: ``warmup`` untimed calls each, then one timed call each per round,
    interleaved so machine noise hits all of them alike, in alternating order (see :func:`round_order`)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for r in range(rounds):
        for name, fn in round_order(fns, r):
            times[name].append(time_once(fn))
    return times


def compare(fns: dict, *, rounds: int = 7, warmup: int = 2) -> dict[str, float]:
    """The median seconds per call of each callable, timed by :func:`per_round`."""
    return {name: statistics.median(ts) for name, ts in per_round(fns, rounds=rounds, warmup=warmup).items()}


def round_order(fns: dict, r: int) -> list:
    """Round ``r``'s order of the callables: as given on even rounds, reversed on odd ones, so none always runs right
    after the same other one (what one leaves behind - caches, freed memory the next must fault in again - then falls
    on each alike)."""
    items = list(fns.items())
    return items if r % 2 == 0 else items[::-1]


def median_ratio(fns: dict, num: str, den: str, *, rounds: int = 7, warmup: int = 2) -> tuple[float, dict]:
    """Median over rounds of time[num]/time[den] measured back to back (:func:`per_round`), with the per-name
    medians."""
    times = per_round(fns, rounds=rounds, warmup=warmup)
    ratios = [a / b for a, b in zip(times[num], times[den])]
    return statistics.median(ratios), {n: statistics.median(t) for n, t in times.items()}


def machine_speed(steps: int = 12, warmup: int = 3) -> float:
    """How fast this machine is, as tokens/s of a bare training loop of the demo's tiny recipe (random init,
    canonical code, the built-in language's 380 word tokens, the recipe's batch and context, AdamW, random batches),
    timed after ``warmup`` steps at the current torch thread count: the number a reader compares machines by."""
    import torch

    from fixedid import FixedIdLM
    from fixedid.train.config import TrainConfig

    cfg = TrainConfig.load("tiny")
    model = FixedIdLM(cfg.model_config("canonical", 380)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    b, t = cfg.train.batch_size, model.cfg.context
    batches = [torch.randint(0, 380, (b, t + 1), generator=g) for _ in range(steps + warmup)]
    for i, x in enumerate(batches):
        if i == warmup:
            start = time.perf_counter()
        loss = model(x[:, :-1], return_type="loss", targets=x[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return steps * b * t / (time.perf_counter() - start)


def machine_line() -> str:
    """``machine: ...`` - :func:`machine_speed` at the current thread count, for a script's output."""
    import torch

    return (f"machine: a bare training loop of the tiny recipe runs at {machine_speed():,.0f} tokens/s "
            f"({torch.get_num_threads()} threads)")


def thread_counts(text: str) -> list[int]:
    """``--threads 1,2`` as ``[1, 2]`` (an argparse type)."""
    import argparse

    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"give thread counts as positive integers, comma-separated (e.g. 1,2), "
                                         f"not {text!r}")
    return counts

"""Side-by-side timing helpers for the benchmark scripts: interleaved repeats, median of per-round ratios."""

from __future__ import annotations

import statistics
import time


def time_once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(fns: dict, *, rounds: int = 7, warmup: int = 2) -> dict[str, float]:
    """Run each callable once per round, interleaved, so machine noise hits all of them alike.

    Returns the median seconds per call for each name.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(time_once(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


def median_ratio(fns: dict, num: str, den: str, *, rounds: int = 7, warmup: int = 2) -> tuple[float, dict]:
    """Median over rounds of time[num]/time[den] measured back to back, with the per-name medians."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    ratios, times = [], {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(time_once(fn))
        ratios.append(times[num][-1] / times[den][-1])
    return statistics.median(ratios), {n: statistics.median(t) for n, t in times.items()}

"""A small side-by-side timing harness: interleaved rounds, median per-call microseconds.

Absolute times on a shared machine are noise; the ratio of two implementations measured in
the same rounds, alternating which goes first, is the number to report.

The garbage collector is off while a round is timed, and is not forced between rounds: with
torch imported a full ``gc.collect()`` takes ~0.2 s, longer than most rounds. Garbage made in
a round is collected by the normal gc after it, outside the timing.
"""

from __future__ import annotations

import functools
import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    name: str
    median_us: float
    min_us: float
    rounds: int = 0


def compare(
    runners: dict[str, Callable[[], int]],
    setup: Callable[[], None] | None = None,
    rounds: int = 21,
) -> dict[str, Timing]:
    """Time each runner (which returns how many calls it made) over ``rounds`` rounds.

    ``setup`` runs before every runner in every round (e.g. to clear caches for cold timings).
    The order of runners alternates between rounds so neither side always runs warm.
    """
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            if setup is not None:
                setup()
            gc.disable()
            t0 = time.perf_counter_ns()
            calls = runners[name]()
            t1 = time.perf_counter_ns()
            gc.enable()
            samples[name].append((t1 - t0) / 1000 / calls)
    return {name: Timing(name, statistics.median(v), min(v), len(v)) for name, v in samples.items()}


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(c: object) -> str:
    if isinstance(c, float):
        return f"{c:.2f}"
    return str(c)


# --------------------------------------------------------------------------------------------
# Per-round measurements for the propagation suite: each side prepares its own inputs (outside
# the timing) and returns its mean per-call µs for the round.

Call = tuple[Callable[..., object], tuple[object, ...]]


def interleave(
    measure: dict[str, Callable[[int], float]],
    rounds: int,
    budget_s: float | None = None,
    min_rounds: int = 3,
) -> dict[str, Timing]:
    """Median and min over the rounds of ``measure[side](round)`` (µs per call).

    The sides take turns going first, so neither always runs right after the other's
    garbage or cache traffic. With ``budget_s``, rounds stop once that many seconds have
    passed and at least ``min_rounds`` are done (for cells a slow path makes expensive);
    ``Timing.rounds`` says how many ran.
    """
    samples: dict[str, list[float]] = {name: [] for name in measure}
    names = list(measure)
    start = time.perf_counter()
    for r in range(rounds):
        if budget_s is not None and r >= min_rounds and time.perf_counter() - start > budget_s:
            break
        for name in names if r % 2 == 0 else names[::-1]:
            samples[name].append(measure[name](r))
    return {name: Timing(name, statistics.median(v), min(v), len(v)) for name, v in samples.items()}


def time_each(calls: Sequence[Call], before_each: Callable[[], object]) -> float:
    """Mean µs per call, each call timed alone right after an untimed ``before_each()``.

    This is the cold measurement: ``before_each`` empties the caches, so no call can hit one.
    The cost of reading the clock is subtracted.
    """
    clock = time.perf_counter_ns
    total = 0
    gc.disable()
    try:
        for fn, args in calls:
            before_each()
            t0 = clock()
            fn(*args)
            total += clock() - t0
    finally:
        gc.enable()
    return max(total / len(calls) - clock_overhead_ns(), 0.0) / 1000


def time_loop(calls: Sequence[Call], passes: int) -> float:
    """Mean µs per call over ``passes`` passes of ``calls``, timed as one block (warm)."""
    clock = time.perf_counter_ns
    gc.disable()
    try:
        t0 = clock()
        for _ in range(passes):
            for fn, args in calls:
                fn(*args)
        t1 = clock()
    finally:
        gc.enable()
    return (t1 - t0) / 1000 / (passes * len(calls))


@functools.cache
def clock_overhead_ns() -> float:
    """Median cost of one ``t0 = clock(); ...; total += clock() - t0`` with nothing between."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(2000):
        t0 = clock()
        samples.append(clock() - t0)
    return float(statistics.median(samples))


def speedup(theirs_us: float, ours_us: float) -> float:
    """``theirs / ours`` (above 1: ours is faster); NaN if ours measured as 0."""
    return theirs_us / ours_us if ours_us > 0 else float("nan")


def geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

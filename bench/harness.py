"""A small side-by-side timing harness: interleaved rounds, median per-call microseconds.

Absolute times on a shared machine are noise; the ratio of two implementations measured in
the same rounds, alternating which goes first, is the number to report.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    name: str
    median_us: float
    min_us: float


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
            gc.collect()
            gc.disable()
            t0 = time.perf_counter_ns()
            calls = runners[name]()
            t1 = time.perf_counter_ns()
            gc.enable()
            samples[name].append((t1 - t0) / 1000 / calls)
    return {
        name: Timing(name, statistics.median(v), min(v)) for name, v in samples.items()
    }


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                       enumerate(zip(row, widths, strict=True))) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(c: object) -> str:
    if isinstance(c, float):
        return f"{c:.2f}"
    return str(c)

"""The random-mix benchmark: views nobody chose, timed one by one against torch.

A seeded mix of view calls as a new user meets them: 1-4-D shapes (sizes with many divisors,
some odd ones and 1s), a random regrouping of the same elements as the target shape, 1-3-D
meshes up to 8 ranks, and one placement drawn per mesh dim (Shard, _StridedShard, Replicate,
Partial), half of them on one favourite tensor dim, so a dim is often sharded by several mesh
dims and often unevenly. Each view runs in both modes (``strict_view`` True as ``view``, False
as ``reshape``), cold: every cute_shard cache is emptied before each of its calls, and each
side builds its own rule (``cute_shard.rules.view_groups``, torch's ``view_groups``).

Every view is timed alone, side by side, over interleaved rounds (the side that goes first
alternates); a view's time is its median over the rounds. Reported, per mode and overall:

- the **total**: sum of torch's times / sum of cute_shard's (what a program of these views
  feels), beside the geometric mean of the per-view ratios;
- the **tail**: how many views take cute_shard more than 1.5x torch's time, and the worst.

A view where torch's own builder or propagator crashes (not a RuntimeError) is left out and
counted: there is no torch time to compare with.

    python -m bench --suite mix            # 300 views, 15 rounds
    python -m bench --suite mix --quick
"""

from __future__ import annotations

import gc
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch.distributed.tensor._ops import _view_ops as V
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

import cute_shard
import cute_shard.rules as R

from .harness import clock_overhead_ns, geomean, table

__all__ = ["MixCase", "factors", "mix_cases", "regrouping", "run"]

MESHES = ((2,), (3,), (4,), (6,), (8,), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2), (2, 2, 2))
SIZES = (1, 2, 2, 3, 4, 4, 5, 6, 8, 8, 12, 15, 16, 16, 24, 32, 48, 64, 96, 128)
#: A view is slow when cute_shard takes more than this many times torch's time.
TAIL = 1.5


@dataclass(frozen=True)
class MixCase:
    shape: tuple[int, ...]
    target: tuple[int, ...]
    mesh: tuple[int, ...]
    placements: tuple[Placement, ...]

    def __str__(self) -> str:
        return f"{self.shape} -> {self.target} mesh {self.mesh} {list(self.placements)}"


def factors(n: int) -> list[int]:
    """The prime factors of ``n``, smallest first, with repeats."""
    out, d = [], 2
    while d * d <= n:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    return [*out, n] if n > 1 else out


def regrouping(rng: random.Random, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A regrouping of the same elements: keep some dims, merge or split the rest."""
    if rng.random() < 0.4:  # a flatten or an unflatten of part of the shape
        n = len(shape)
        a = rng.randrange(n)
        b = rng.randrange(a, n)
        middle = math.prod(shape[a : b + 1])
        if a == b and middle > 1:
            fs = factors(middle)
            k = rng.randint(2, min(3, len(fs))) if len(fs) > 1 else 1
            parts = [1] * k
            for f in fs:
                parts[rng.randrange(k)] *= f
            return (*shape[:a], *parts, *shape[b + 1 :])
        return (*shape[:a], middle, *shape[b + 1 :])
    fs = factors(math.prod(shape))
    rng.shuffle(fs)
    k = rng.randint(1, 4)
    out = [1] * k
    for f in fs:
        out[rng.randrange(k)] *= f
    return tuple(out)


def _placements(
    rng: random.Random, shape: tuple[int, ...], mesh: tuple[int, ...]
) -> tuple[Placement, ...]:
    favourite = rng.randrange(len(shape))
    out: list[Placement] = []
    for _ in mesh:
        r = rng.random()
        d = favourite if rng.random() < 0.5 else rng.randrange(len(shape))
        if r < 0.15:
            out.append(Replicate())
        elif r < 0.22:
            out.append(Partial())
        elif r < 0.4:
            out.append(_StridedShard(d, split_factor=rng.choice((2, 3, 4, 8))))
        else:
            out.append(Shard(d))
    return tuple(out)


def mix_cases(n: int, seed: int = 0) -> list[MixCase]:
    """``n`` random views (see the module docstring), reproducible from ``seed``."""
    rng = random.Random(seed)
    out: list[MixCase] = []
    while len(out) < n:
        shape = tuple(rng.choice(SIZES) for _ in range(rng.randint(1, 4)))
        if math.prod(shape) > 1 << 22:
            continue
        mesh = rng.choice(MESHES)
        out.append(MixCase(shape, regrouping(rng, shape), mesh, _placements(rng, shape, mesh)))
    return out


# --------------------------------------------------------------------------------------------
# Timing


def _ours(case: MixCase, strict: bool) -> None:
    try:
        cute_shard.propagate_shape_and_sharding(
            case.placements, case.shape, R.view_groups(case.shape, case.target), case.mesh, strict
        )
    except RuntimeError:  # a strict view that must move raises: that is its answer
        pass


def _theirs(case: MixCase, strict: bool) -> None:
    try:
        V.propagate_shape_and_sharding(
            case.placements, case.shape, V.view_groups(case.shape, case.target), case.mesh, strict
        )
    except RuntimeError:
        pass


def _torch_answers(case: MixCase) -> bool:
    """torch's builder and propagator run without crashing (a RuntimeError is an answer)."""
    try:
        _theirs(case, True)
        _theirs(case, False)
    except Exception:
        return False
    return True


def _time(fn: Callable[[MixCase, bool], None], case: MixCase, strict: bool) -> float:
    clock = time.perf_counter_ns
    cute_shard.cache_clear()
    t0 = clock()
    fn(case, strict)
    return max(clock() - t0 - clock_overhead_ns(), 1.0) / 1000


@dataclass(frozen=True)
class Result:
    mode: str
    views: int
    cute_shard_total_us: float
    torch_total_us: float
    total_x: float  # torch total / cute_shard total
    geomean_x: float  # geometric mean of the per-view torch / cute_shard
    slow: int  # views where cute_shard takes more than TAIL x torch's time
    worst: float  # the largest cute_shard / torch
    worst_case: str


def measure(
    cases: Sequence[MixCase], rounds: int
) -> dict[tuple[MixCase, bool], tuple[float, float]]:
    """Per (view, strict): the median µs over ``rounds`` of (cute_shard, torch), side by side."""
    ours: dict[tuple[MixCase, bool], list[float]] = {}
    theirs: dict[tuple[MixCase, bool], list[float]] = {}
    for r in range(rounds):
        gc.disable()
        try:
            for i, case in enumerate(cases):
                for strict in (True, False):
                    key = (case, strict)
                    if (r + i) % 2:
                        ours.setdefault(key, []).append(_time(_ours, case, strict))
                        theirs.setdefault(key, []).append(_time(_theirs, case, strict))
                    else:
                        theirs.setdefault(key, []).append(_time(_theirs, case, strict))
                        ours.setdefault(key, []).append(_time(_ours, case, strict))
        finally:
            gc.enable()
    return {k: (statistics.median(ours[k]), statistics.median(theirs[k])) for k in ours}


def summarise(mode: str, times: dict[Any, tuple[float, float]]) -> Result:
    ours = sum(o for o, _ in times.values())
    theirs = sum(t for _, t in times.values())
    worst_key = max(times, key=lambda k: times[k][0] / times[k][1])
    o, t = times[worst_key]
    return Result(
        mode,
        len(times),
        ours,
        theirs,
        theirs / ours,
        geomean([t / o for o, t in times.values()]),
        sum(1 for o, t in times.values() if o > TAIL * t),
        o / t,
        f"{worst_key[0]} ({'view' if worst_key[1] else 'reshape'}): {o:.1f} µs vs torch {t:.1f}",
    )


def run(n: int = 300, seed: int = 0, rounds: int = 15) -> dict[str, Any]:
    """Time the mix, print the table and return the results (JSON-ready)."""
    drawn = mix_cases(n, seed)
    cases = [c for c in drawn if _torch_answers(c)]
    for c in cases:  # warm the interpreter and both sides' imports, untimed
        _ours(c, True)
        _theirs(c, True)
    times = measure(cases, rounds)
    results = [
        summarise("view (strict)", {k: v for k, v in times.items() if k[1]}),
        summarise("reshape", {k: v for k, v in times.items() if not k[1]}),
        summarise("both", times),
    ]
    print(
        f"random mix: {len(cases)} views (seed {seed}; {n - len(cases)} left out: torch "
        f"crashes on them), cold, rule + propagation, median of {rounds} rounds per view"
    )
    rows = [
        [
            r.mode,
            r.views,
            r.cute_shard_total_us,
            r.torch_total_us,
            f"{r.total_x:.2f}x",
            f"{r.geomean_x:.2f}x",
            r.slow,
            f"{r.worst:.2f}x",
        ]
        for r in results
    ]
    header = [
        "mode",
        "views",
        "cute_shard total µs",
        "torch total µs",
        "total x",
        "geomean x",
        f"> {TAIL}x torch",
        "worst",
    ]
    print(table(rows, header))
    for r in results:
        print(f"  worst, {r.mode}: {r.worst_case}")
    return {
        "seed": seed,
        "views": len(cases),
        "left_out": n - len(cases),
        "rounds": rounds,
        "results": [r.__dict__ for r in results],
    }

"""Layout algebra microbenchmark: cute_shard.layout against torch.distributed._pycute.

Inputs are the layouts the sharding engine builds: row-major tensor layouts of rank 1-4
(sizes from divisor-rich and prime sets) divided by tiles that shard one or two dims, plus
compositions with sub-layouts. Every call in a round gets a distinct input, and cute_shard's
caches are cleared before each round ("cold"); a "warm" row repeats the inputs with caches kept.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from torch.distributed import _pycute as pycute

from cute_shard import layout as cs

from .harness import compare, table

N_CASES = 400


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def make_cases(seed: int = 0) -> list[tuple[tuple[int, ...], tuple[int, ...], int, int]]:
    """(shape, stride, dim, tile): divide mode ``dim`` of a row-major layout by ``tile:1``."""
    rng = random.Random(seed)
    sizes = [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 5, 7, 15, 17]
    cases = []
    seen = set()
    while len(cases) < N_CASES:
        shape = tuple(rng.choice(sizes) for _ in range(rng.randint(1, 4)))
        dim = rng.randrange(len(shape))
        divisors = [d for d in range(1, shape[dim] + 1) if shape[dim] % d == 0]
        tile = rng.choice(divisors)
        key = (shape, dim, tile)
        if key in seen:
            continue
        seen.add(key)
        cases.append((shape, _row_major(shape), dim, tile))
    return cases


def _runners(cases: list, warm: bool) -> dict[str, dict[str, Callable[[], int]]]:
    ours_layouts = [cs.Layout(s, d) for s, d, _, _ in cases]
    py_layouts = [pycute.Layout(s, d) for s, d, _, _ in cases]
    # By-mode tilers: tile only `dim`, keep every other mode whole (tile = its size).
    ours_tilers = [
        tuple(cs.Layout(t if k == dim else s[k], 1) for k in range(len(s)))
        for s, _, dim, t in cases
    ]
    py_tilers = [
        tuple(pycute.Layout(t if k == dim else s[k], 1) for k in range(len(s)))
        for s, _, dim, t in cases
    ]
    # t consecutive coordinates along mode `dim` (colexicographic flat stride of that mode).
    ours_sub = [cs.Layout(t, math.prod(s[:dim])) for s, _, dim, t in cases]
    py_sub = [pycute.Layout(t, math.prod(s[:dim])) for s, _, dim, t in cases]

    def construct_ours() -> int:
        for s, d, _, _ in cases:
            cs.Layout(s, d)
        return len(cases)

    def construct_py() -> int:
        for s, d, _, _ in cases:
            pycute.Layout(s, d)
        return len(cases)

    def divide_ours() -> int:
        for a, t in zip(ours_layouts, ours_tilers, strict=True):
            cs.logical_divide(a, t)
        return len(cases)

    def divide_py() -> int:
        for a, t in zip(py_layouts, py_tilers, strict=True):
            pycute.logical_divide(a, t)
        return len(cases)

    def compose_ours() -> int:
        for a, b in zip(ours_layouts, ours_sub, strict=True):
            cs.composition(a, b)
        return len(cases)

    def compose_py() -> int:
        for a, b in zip(py_layouts, py_sub, strict=True):
            pycute.composition(a, b)
        return len(cases)

    return {
        "construction": {"cute_shard": construct_ours, "pycute": construct_py},
        "logical_divide (by mode)": {"cute_shard": divide_ours, "pycute": divide_py},
        "composition": {"cute_shard": compose_ours, "pycute": compose_py},
    }


def run(rounds: int = 21) -> dict[str, dict[str, float]]:
    cases = make_cases()
    results: dict[str, dict[str, float]] = {}
    rows = []
    for temp in ("cold", "warm"):
        setup = cs.cache_clear if temp == "cold" else None
        for family, runners in _runners(cases, warm=temp == "warm").items():
            t = compare(runners, setup=setup, rounds=rounds)
            ours, theirs = t["cute_shard"].median_us, t["pycute"].median_us
            key = f"{family} [{temp}]"
            results[key] = {"cute_shard_us": ours, "pycute_us": theirs, "ratio": theirs / ours}
            rows.append((key, ours, theirs, f"{theirs / ours:.1f}x"))
    print(table(rows, ["layout op", "cute_shard µs", "pycute µs", "speed-up"]))
    return results

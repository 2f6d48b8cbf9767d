"""Running redistributions: a warm ``DTensor.redistribute`` per call, with and without install().

What a program pays every step for each redistribution it runs once its plan is known: the
DTensor call, the plan's lookup, the local packing and unpacking and the collectives' own
Python, on rank 0 of a fake 8-rank world. A fake process group moves no data, so a call's
time is that work, not the network's; the local tensors are small, so the copies' cost is
small beside it. The cases are the planning suite's (``redistribute_cases.planning_pairs``:
plain, stacked, uneven, strided, view outputs both ways, the named ones; a strided source
as a view's output, as torch reads the shardings views produce), each timed side by side in
interleaved rounds (x = torch µs / cute_shard µs), grouped by category, with the total, the
geometric mean, the worst case and each side's slowest. Cases torch raises on are counted
and left out.

    python -m bench --suite redistribute-execute
"""

from __future__ import annotations

import gc
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

from cute_shard import oracle
from cute_shard.redistribute import dtensor as ours_dtensor

from . import dtensor_bench
from .harness import geomean, interleave, table
from .redistribute_cases import CATEGORIES, Pair, planning_pairs

CALLS = 20  # calls per measurement (their mean is one sample)
ALL = "all"


def _source(pair: Pair, mesh: DeviceMesh) -> DTensor:
    """Rank 0's source shard of ``pair`` as a DTensor (a strided source read by its split
    factors, as a view's output is)."""
    full = torch.arange(1, 1 + torch.Size(pair.shape).numel(), dtype=torch.float32)
    full = full.reshape(pair.shape)
    src = [p.to_torch() for p in pair.src]
    local = oracle.local_shard(full, src, pair.mesh, (0,) * len(pair.mesh)).contiguous()
    spec = DTensorSpec(
        mesh,
        tuple(src),
        tensor_meta=TensorMeta(full.shape, full.stride(), full.dtype),
        use_strided_shard_as_shard_order=False,
    )
    return DTensor(local, spec, requires_grad=False)  # type: ignore[no-untyped-call]


def _measure(x: DTensor, pair: Pair, mesh: DeviceMesh, ours: bool) -> Callable[[int], float]:
    """Mean µs of ``CALLS`` warm calls, cute_shard installed (``ours``) or not."""
    dst = [p.to_torch() for p in pair.dst]

    def measure(_: int) -> float:
        (ours_dtensor.install if ours else ours_dtensor.uninstall)()
        x.redistribute(mesh, dst)  # warm: the plan (or torch's transform infos) cached
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            for _ in range(CALLS):
                x.redistribute(mesh, dst)
            return (time.perf_counter_ns() - t0) / 1000 / CALLS
        finally:
            gc.enable()

    return measure


@dataclass(frozen=True)
class Case:
    pair: Pair
    ours_us: float
    torch_us: float


@dataclass(frozen=True)
class Row:
    category: str
    cases: int
    ours_total_us: float
    torch_total_us: float
    total_x: float
    geomean_x: float
    worst_x: float
    worst_case: str
    ours_slowest_us: float
    ours_slowest_case: str


def _row(category: str, cases: Sequence[Case]) -> Row:
    ratios = [c.torch_us / c.ours_us for c in cases]
    worst = min(range(len(cases)), key=ratios.__getitem__)
    slowest = max(cases, key=lambda c: c.ours_us)
    ours, theirs = sum(c.ours_us for c in cases), sum(c.torch_us for c in cases)
    return Row(
        category,
        len(cases),
        ours,
        theirs,
        theirs / ours,
        geomean(ratios),
        ratios[worst],
        str(cases[worst].pair),
        slowest.ours_us,
        str(slowest.pair),
    )


def run_execute(n: int = 120, rounds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Time every case (``n`` drawn and the named ones) and print the table."""
    reason = dtensor_bench.unavailable()
    if reason:
        print(f"\nredistribute-execute: skipped ({reason})")
        return {"skipped": reason}
    pairs = planning_pairs(n, seed)
    cases: list[Case] = []
    raised: list[str] = []
    try:
        with dtensor_bench.fake_world():
            meshes = {m: init_device_mesh("cpu", m) for m in {p.mesh for p in pairs}}
            for i, pair in enumerate(pairs):
                mesh = meshes[pair.mesh]
                x = _source(pair, mesh)
                sides = {
                    "cute_shard": _measure(x, pair, mesh, True),
                    "torch": _measure(x, pair, mesh, False),
                }
                try:
                    sides["torch"](0)
                except Exception as e:  # counted and reported: torch raises on some
                    raised.append(f"{pair}: {type(e).__name__}: {str(e).strip()[:80]}")
                    continue
                t = interleave(sides, rounds)
                cases.append(Case(pair, t["cute_shard"].median_us, t["torch"].median_us))
                if i % 40 == 39:
                    print(f"  redistribute-execute: {i + 1} cases", file=sys.stderr, flush=True)
    finally:
        ours_dtensor.uninstall()
    rows = [
        _row(c, chosen)
        for c in (*CATEGORIES, ALL)
        if (chosen := [k for k in cases if c in (ALL, k.pair.category)])
    ]
    print(execute_table(rows, rounds, raised))
    return {
        "seed": seed,
        "rounds": rounds,
        "torch_raises": raised,
        "rows": [asdict(r) for r in rows],
        "cases": [
            {"case": str(c.pair), "ours_us": c.ours_us, "torch_us": c.torch_us} for c in cases
        ],
    }


def execute_table(rows: Sequence[Row], rounds: int, raised: Sequence[str]) -> str:
    head = (
        f"redistribute-execute: a warm DTensor.redistribute per call on rank 0 of a fake "
        f"8-rank world, mean of {CALLS} calls, median of {rounds} interleaved rounds per case; "
        "µs = the sum over cases; x = torch / cute_shard (total: of the sums; worst: the "
        "smallest per-case x)"
    )
    body = table(
        [
            (
                r.category,
                r.cases,
                f"{r.ours_total_us:.0f}",
                f"{r.torch_total_us:.0f}",
                f"{r.total_x:.2f}x",
                f"{r.geomean_x:.2f}x",
                f"{r.worst_x:.2f}x",
                f"{r.ours_slowest_us:.0f}",
            )
            for r in rows
        ],
        (
            "category",
            "cases",
            "ours µs",
            "torch µs",
            "total x",
            "geomean x",
            "worst x",
            "ours slowest µs",
        ),
    )
    notes = [f"  worst x, {r.category}: {r.worst_case}" for r in rows]
    notes += [f"  ours slowest, {r.category}: {r.ours_slowest_case}" for r in rows]
    if raised:
        notes.append(f"  torch raised on {len(raised)} case(s), left out:")
        notes += [f"    {line}" for line in itertools.islice(raised, 10)]
    return "\n".join([head, body, *notes])

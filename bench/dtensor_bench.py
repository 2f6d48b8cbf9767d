"""End-to-end benchmark: DTensor dispatch of view ops, with and without ``cute_shard.install()``.

A fake process group (``torch.testing._internal.distributed.fake_pg``) of 8 ranks gives real
DeviceMeshes of shape (8,), (2, 4) and (2, 2, 2) without any communication. Each case is a
DTensor (``DTensor.from_local`` of a small local tensor) and a view-op method call on it
(``view``, ``reshape``, ``flatten``, ``unflatten``, ``permute``, ``transpose``, ``movedim``,
``unsqueeze``, ``squeeze``, ``expand``). The whole ``x.op(...)`` call is timed, in these cells:

- **hit**: the op was called before, so DTensor's sharding-propagation caches answer; with
  install() this must stay within noise of torch. Split into the reshape family (reshape,
  flatten, unflatten: install() sets them as DTensor methods, a Python frame per call) and
  the other view ops, and the reshape family once more with
  ``install(reshape_may_copy="dispatcher")`` (a dispatcher kernel's round trip per call).
- **miss**: DTensor's caches (the C++ fast-path one, the Python one and the tensor-meta one)
  and cute_shard's are emptied before every call, as a new shape would find them. Every call
  is timed in every round; besides the x of the mean call, the geomean and the arithmetic
  mean over calls of each call's x (its median µs over rounds, torch's over ours).

Sides: "torch" runs with ``cute_shard.uninstall()``, "cute_shard" with ``cute_shard.install()``;
the switch happens between rounds, outside the timing. Without ``cute_shard.install`` (the
integration is not written yet) the family is skipped with a note.
"""

from __future__ import annotations

import random
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._sharding_prop import ShardingPropagator
from torch.distributed.tensor.debug import _clear_sharding_prop_cache

import cute_shard
from cute_shard import integration

from .harness import Call, geomean, interleave, speedup, table, time_each, time_loop
from .propagate_cases import _placements

WORLD = 8
MESH_SHAPES = {1: (8,), 2: (2, 4), 3: (2, 2, 2)}
SIZES = (2, 4, 8, 16, 24, 32)


@dataclass(frozen=True)
class E2ERow:
    mesh: str
    cell: str  # a name in CELLS
    cases: int
    cute_shard_us: float
    torch_us: float
    speedup: float  # of the mean call
    case_geomean: float | None = None  # misses: over calls, of each call's x
    case_mean: float | None = None


def unavailable() -> str | None:
    """Why the family cannot run, or None."""
    if not callable(getattr(cute_shard, "install", None)):
        return "cute_shard.install() is not available yet"
    if not callable(getattr(cute_shard, "uninstall", None)):
        return "cute_shard.uninstall() is not available yet"
    if dist.is_initialized() and (dist.get_backend() != "fake" or dist.get_world_size() != WORLD):
        return (
            f"a {dist.get_backend()!r} process group of {dist.get_world_size()} ranks "
            f"is already initialised; this family needs none, or a fake one of {WORLD}"
        )
    return None


@contextmanager
def fake_world(world: int = WORLD) -> Iterator[None]:
    """A fake process group of ``world`` ranks (8) for the duration (reusing one that
    already exists)."""
    ours = not dist.is_initialized()
    if ours:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        yield
    finally:
        if ours:
            dist.destroy_process_group()


def clear_all() -> None:
    """Empty DTensor's sharding-propagation caches and cute_shard's (the engine's and the
    integration's cache of input targets)."""
    _clear_sharding_prop_cache()
    ShardingPropagator._propagate_tensor_meta_cached.cache_clear()
    cute_shard.cache_clear()
    integration.clear_dtensor_caches()


# --------------------------------------------------------------------------------------------
# Cases: (DTensor, method name, args)

Op = tuple[DTensor, str, tuple[Any, ...]]


def _dtensor(mesh: DeviceMesh, shape: tuple[int, ...], placements: tuple[Any, ...]) -> DTensor:
    local = list(shape)
    for p, m in zip(placements, mesh.shape, strict=True):
        if p.is_shard():
            local[p.dim] //= m
    return DTensor.from_local(
        torch.empty(local),
        mesh,
        placements,
        run_check=False,
        shape=torch.Size(shape),
        stride=torch.empty(shape, device="meta").stride(),
    )


def _op(rng: random.Random, shape: tuple[int, ...]) -> tuple[str, tuple[Any, ...]]:
    n = len(shape)
    kind = rng.choice(
        ("view", "reshape", "flatten", "unflatten", "permute", "transpose", "movedim", "unsqueeze")
    )
    if kind in ("view", "reshape"):
        i = rng.randrange(n - 1)
        merged = (*shape[:i], shape[i] * shape[i + 1], *shape[i + 2 :])
        split = (*shape[:i], 2, shape[i] // 2, *shape[i + 1 :]) if shape[i] % 2 == 0 else merged
        return kind, rng.choice((merged, split, (-1,)))
    if kind == "flatten":
        i = rng.randrange(n - 1)
        return kind, (i, rng.randrange(i + 1, n))
    if kind == "unflatten":
        d = rng.choice([d for d in range(n) if shape[d] % 2 == 0])
        return kind, (d, (2, -1))
    if kind == "permute":
        dims = list(range(n))
        rng.shuffle(dims)
        return kind, tuple(dims)
    if kind in ("transpose", "movedim"):
        return kind, tuple(rng.sample(range(n), 2))
    return kind, (rng.randint(0, n),)


def make_ops(mesh: DeviceMesh, n: int, seed: int = 0) -> list[Op]:
    rng = random.Random(f"dtensor/{mesh.ndim}/{seed}")
    ops: list[Op] = []
    for _ in range(n):
        shape = tuple(rng.choice(SIZES) for _ in range(rng.randint(2, 4)))
        if rng.random() < 0.25:  # squeeze / expand need a size-1 dim
            i = rng.randint(0, len(shape))
            shape = (*shape[:i], 1, *shape[i:])
            pl = _placements(
                rng, shape, tuple(mesh.shape), [d for d in range(len(shape)) if d != i]
            )
            x = _dtensor(mesh, shape, pl)
            if rng.random() < 0.5:
                ops.append((x, "squeeze", (i,)))
            else:
                ops.append((x, "expand", (*shape[:i], rng.choice(SIZES), *shape[i + 1 :])))
            continue
        pl = _placements(rng, shape, tuple(mesh.shape), range(len(shape)))
        ops.append((_dtensor(mesh, shape, pl), *_op(rng, shape)))
    return ops


def _call(op: Op) -> Call:
    x, name, args = op
    return getattr(x, name), args


# --------------------------------------------------------------------------------------------
# Screening and timing


def screen(ops: Sequence[Op], may_copy: str = "methods") -> tuple[list[Op], dict[str, int]]:
    """The ops both sides dispatch, with install()ed answers equal cold and from the cache
    (``may_copy``: install's ``reshape_may_copy``)."""
    counts = {"cases": len(ops), "cute_shard_raised": 0, "torch_raised": 0, "inconsistent": 0}
    kept = []
    for op in ops:
        # A method is looked up after each switch: install() sets the reshape family's.
        cute_shard.uninstall()
        clear_all()
        fn, args = _call(op)
        try:
            fn(*args)
        except Exception:
            counts["torch_raised"] += 1
            continue
        cute_shard.install(reshape_may_copy=may_copy)  # type: ignore[arg-type]
        clear_all()
        fn, args = _call(op)
        try:
            cold = fn(*args).placements
            hit = fn(*args).placements
        except Exception:
            counts["cute_shard_raised"] += 1
            continue
        if cold != hit:
            counts["inconsistent"] += 1
            continue
        kept.append(op)
    cute_shard.uninstall()
    return kept, counts


# The reshape family: CompositeImplicitAutograd view ops that may copy. install() sets them as
# DTensor methods (reshape_may_copy="methods", the default) or catches them with dispatcher
# kernels ("dispatcher"); every other op here is unchanged by either.
RESHAPE_FAMILY = ("reshape", "flatten", "unflatten")

# The cells: (name, which ops, install()'s reshape_may_copy for cute_shard's side).
CELLS = (
    ("hit", "all", "methods"),
    ("hit, other view ops", "others", "methods"),
    ("hit, reshape family", "reshape family", "methods"),
    ("hit, reshape family, dispatcher", "reshape family", "dispatcher"),
    ("miss", "all", "methods"),
)


def _subset(ops: Sequence[Op], which: str) -> list[Op]:
    if which == "all":
        return list(ops)
    family = which == "reshape family"
    return [op for op in ops if (op[1] in RESHAPE_FAMILY) == family]


def _measure(
    installed: bool,
    ops: Sequence[Op],
    cell: str,
    batch: int,
    passes: int,
    may_copy: str = "methods",
    per_case: list[list[float]] | None = None,
) -> Callable[[int], float]:
    """A measure for ``interleave``. Hits: ``batch`` calls per round, warm, in ``passes``
    passes. Misses: every call once per round, each after emptying every cache; each call's
    µs is also appended to ``per_case`` (one list per round)."""

    def measure(r: int) -> float:
        if installed:
            cute_shard.install(reshape_may_copy=may_copy)  # type: ignore[arg-type]
        else:
            cute_shard.uninstall()
        if cell == "miss":
            calls = [_call(op) for op in ops]
            times = [time_each([call], clear_all) for call in calls]
            if per_case is not None:
                per_case.append(times)
            return sum(times) / len(times)
        start = (r * batch) % len(ops)
        calls = [_call(ops[(start + i) % len(ops)]) for i in range(min(batch, len(ops)))]
        clear_all()
        for _ in range(2):  # the first pass misses; the second settles what the misses left
            for fn, args in calls:
                fn(*args)
        return time_loop(calls, passes)

    return measure


def _case_ratios(ours: list[list[float]], theirs: list[list[float]]) -> list[float]:
    """Per call: the median over rounds of torch's µs over the median of cute_shard's."""
    return [
        speedup(statistics.median(t), statistics.median(o))
        for o, t in zip(zip(*ours, strict=True), zip(*theirs, strict=True), strict=True)
    ]


def run(rounds: int, n_cases: int, batch: int, passes: int) -> list[E2ERow]:
    """Run the family, print its table and return its rows (empty, with a note, if skipped).

    ``n_cases`` view-op calls per mesh; each side times ``batch`` of them per round for a hit
    (warm: in ``passes`` passes), every one for a miss.
    """
    reason = unavailable()
    if reason:
        print(f"\ndtensor end-to-end: skipped ({reason})")
        return []
    rows: list[E2ERow] = []
    screens: dict[str, dict[str, int]] = {}
    try:
        with fake_world():
            for rank, shape in MESH_SHAPES.items():
                mesh = init_device_mesh("cpu", shape)
                ops, screens[f"{rank}-D"] = screen(make_ops(mesh, n_cases))
                dispatcher_ops = screen(ops, may_copy="dispatcher")[0]
                for cell, which, may_copy in CELLS:
                    cell_ops = _subset(dispatcher_ops if may_copy == "dispatcher" else ops, which)
                    if not cell_ops:
                        continue
                    samples: dict[str, list[list[float]]] = {"cute_shard": [], "torch": []}
                    t = interleave(
                        {
                            "cute_shard": _measure(
                                True, cell_ops, cell, batch, passes, may_copy, samples["cute_shard"]
                            ),
                            "torch": _measure(
                                False, cell_ops, cell, batch, passes, per_case=samples["torch"]
                            ),
                        },
                        rounds,
                    )
                    o, th = t["cute_shard"].median_us, t["torch"].median_us
                    ratios = _case_ratios(samples["cute_shard"], samples["torch"])
                    rows.append(
                        E2ERow(
                            f"{rank}-D",
                            cell,
                            len(cell_ops),
                            o,
                            th,
                            speedup(th, o),
                            geomean(ratios) if ratios else None,
                            statistics.mean(ratios) if ratios else None,
                        )
                    )
                print(f"  dtensor {rank}-D: {screens[f'{rank}-D']}", file=sys.stderr, flush=True)
    finally:
        cute_shard.uninstall()
    print(format_table(rows, rounds, screens))
    return rows


def format_table(rows: Sequence[E2ERow], rounds: int, screens: dict[str, dict[str, int]]) -> str:
    def x(v: float | None) -> str:
        return "" if v is None else f"{v:.2f}x"

    body: list[list[object]] = [
        [r.mesh, r.cell, r.cases, r.cute_shard_us, r.torch_us]
        + [x(v) for v in (r.speedup, r.case_geomean, r.case_mean)]
        for r in rows
    ]
    for cell, _, _ in CELLS:
        g = geomean([r.speedup for r in rows if r.cell == cell])
        body.append(["geomean", cell, "", "", "", f"{g:.2f}x", "", ""])
    out = [
        f"\ndtensor end-to-end ({WORLD}-rank fake process group): median of {rounds} rounds, "
        "µs per view-op call (x = torch µs / cute_shard µs, of the mean call; for a miss also "
        "the geomean and arithmetic mean over calls of each call's x)",
        table(
            body,
            ["mesh", "cache", "cases", "cute_shard µs", "torch µs", "x", "x geomean", "x mean"],
        ),
    ]
    for mesh, c in screens.items():
        if c["cute_shard_raised"] or c["torch_raised"] or c["inconsistent"]:
            out.append(f"  {mesh}: left out {c}")
    return "\n".join(out)

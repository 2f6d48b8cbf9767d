"""Redistributions on real gloo ranks with cute_shard installed (run by
``test_redistribute_gloo.py`` through ``multirank.run_world``, one spawn per world size).

``cases(world_size)`` lists the cases (pure data, so the pytest process can name them): the
design brief's cases, hand-picked ones (uneven, size 0, strided, several mesh dims on one
tensor dim, Partial sources, size-1 mesh dims) and a seeded sample of
``redistribute_sim.random_case`` on meshes of exactly ``world_size`` ranks (so steps over
several mesh dims run in the world group). Targets are never a new Partial
(``DTensor.redistribute`` refuses them) and no Partial is ``avg`` (gloo has no such op).

``run_all()`` runs on every rank. Per case, on every rank:

- the input is ``DTensor.from_local`` of the rank's source shard of a tensor whose values are
  all distinct (a Partial mesh dim: exact integer pieces, ``redistribute_sim.partial_value``;
  the "complex" cases: complex128 data, which gloo moves as real pairs);
- ``x.redistribute(mesh, target)`` under ``CommDebugMode``: the local tensor equals the
  oracle's target shard bit for bit (``expected_locals``); the plan cute_shard ran (seen by
  an observer) is the planner's plan for the case, and the collectives counted are exactly
  its steps' ``collective``s;
- the same with ``async_op=True`` (as TP's parallel styles redistribute): the local tensor,
  possibly still in flight, read, is the same;
- without a Partial source (every hand-picked case, every fourth random one), backward
  through the redistribution and a weighted sum: the input's gradient is on the input's
  placements and each rank's local gradient is its shard of plain torch's.

Then, on the 4-rank world, whole parallel programs (``parallel_programs.py``: torch's
tensor-parallel styles on a block, FSDP2 over TP; outputs, parameters and gradients against
one process), and ``torch.compile(fullgraph=True)`` of a step with ``_StridedShard``
redistributions (x on ``[R, S1]`` -> ``[S0, SS0:2]`` -> sin ->
``[S0, S1]`` -> a weighted sum), with backends "eager" and "aot_eager": one graph over four
calls with new values, each equal to eager; the same step with dynamic shapes over five first
dims (one graph for the four multiples of its unit, one more for the fifth; values and
gradients equal plain torch's); and 12 seeded random pairs, each redistributed in a function
compiled with dynamic shapes at three shapes that are multiples of its units (one graph per
pair, every rank's local tensor the oracle's target shard).

Rank 0 returns every case's verdict (errors from any rank), the programs' and the compile
report.
"""

from __future__ import annotations

import collections
import math
import random
import time
import traceback
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.placement_types import Placement, _StridedShard

from cute_shard import oracle
from property_tests.redistribute_sim import (
    Case,
    World,
    expected_locals,
    full_tensor,
    random_case,
    source_locals,
)

RANDOM_CASES = {4: 24, 8: 24}

HAND_PICKED: dict[int, list[tuple[str, tuple[int, ...], tuple[int, ...], str, str]]] = {
    4: [
        ("brief strided target", (12,), (2, 2), "R,S0", "S0,SS0:2"),
        ("head merge", (8, 12, 4), (2, 2), "S0,SS0:2", "S0,S1"),
        ("fsdp2+tp weight", (16, 8), (2, 2), "SS0:2,S0", "S0,S0"),
        ("fsdp2+tp weight back", (16, 8), (2, 2), "S0,S0", "SS0:2,S0"),
        ("swap", (8, 8), (2, 2), "S0,S1", "S1,S0"),
        ("gather", (6, 5), (4,), "S0", "R"),
        ("chunk", (6, 5), (2, 2), "R,R", "S1,SS0:2"),
        ("uneven", (5, 7), (2, 2), "S0,SS1:2", "R,S0"),
        ("uneven 1-D", (7,), (4,), "S0", "SS0:3"),
        ("empty shards", (3,), (4,), "S0", "S0"),
        ("few rows", (3, 2), (4,), "R", "S0"),
        ("size 0", (0, 6), (2, 2), "S0,S1", "S1,R"),
        ("partial sum", (8, 4), (2, 2), "P,S1", "S0,R"),
        ("partial reduce-scatter", (6, 4), (4,), "P", "SS0:2"),
        ("partial max", (6, 4), (2, 2), "P:max,P:max", "S1,R"),
        ("partial min kept", (6, 4), (2, 2), "P:min,S0", "P:min,S1"),
        ("size-1 mesh dims", (8, 6), (1, 4), "R,S1", "S0,S0"),
        ("3-D mesh", (8, 6), (2, 1, 2), "S0,R,S1", "S1,S0,SS0:2"),
        ("complex exchange", (6, 5), (2, 2), "S0,SS1:2", "S1,S0"),
        ("complex gather", (5, 3), (4,), "S0", "R"),
    ],
    8: [
        ("brief fsdp2+tp weight", (64, 32), (2, 4), "SS0:4,S0", "S0,S0"),
        ("brief fsdp2+tp weight back", (64, 32), (2, 4), "S0,S0", "SS0:4,S0"),
        ("brief head merge", (32, 24, 16), (2, 4), "S0,SS0:2", "S0,S1"),
        ("swap", (8, 8), (2, 4), "S0,S1", "S1,S0"),
        ("stacked", (12, 3), (2, 4), "SS0:3,S0", "S1,R"),
        ("3-D mesh", (9, 4), (2, 2, 2), "S0,S0,S1", "SS0:2,S1,S0"),
        ("3-D mesh all on d0", (16, 3), (2, 2, 2), "S0,S0,S0", "SS0:2,S0,SS0:4"),
        ("1-D strided", (10,), (8,), "S0", "SS0:2"),
        ("uneven", (5, 7), (2, 4), "S0,SS1:2", "R,S0"),
        ("uneven gather", (13, 3), (4, 2), "SS0:3,S0", "R,R"),
        ("empty shards", (3, 5), (8,), "S0", "S1"),
        ("partial sum", (8, 8), (2, 4), "P,S1", "S0,R"),
        ("partial max", (6, 8), (2, 4), "P:max,SS1:2", "S1,S0"),
        ("partial min 3-D", (4, 6), (2, 2, 2), "P:min,S0,P:min", "S1,R,SS0:2"),
        ("complex joint", (8, 6), (2, 4), "S0,S1", "S1,SS0:2"),
    ],
}


def cases(world_size: int) -> list[tuple[str, Case]]:
    """The cases of a world, named (names are unique)."""
    out = [
        (name, Case.parse(shape, mesh, src, dst))
        for name, shape, mesh, src, dst in HAND_PICKED[world_size]
    ]
    rng = random.Random(world_size)
    while len(out) < len(HAND_PICKED[world_size]) + RANDOM_CASES[world_size]:
        case = random_case(rng, world=world_size)
        if math.prod(case.mesh) != world_size or not _legal_for_dtensor(case):
            continue
        # the DTensor path plans with a joint group: the mesh is the world
        joint = Case(case.shape, case.mesh, case.src, case.dst)
        out.append((f"random {len(out)}: {joint}", joint))
    return out


def _legal_for_dtensor(case: Case) -> bool:
    """DTensor.redistribute refuses a new Partial target; gloo has no avg."""
    new_partial = any(t.kind == "P" and s != t for s, t in zip(case.src, case.dst, strict=True))
    avg = any(p.kind == "P" and p.reduce_op == "avg" for p in case.src + case.dst)
    return not new_partial and not avg


# -------------------------------------------------------------------------- on every rank


class _Plans:
    """An observer: the plans cute_shard runs."""

    def __init__(self) -> None:
        self.plans: list[Any] = []

    def redistributed(self, current: Any, target: Any, plan: Any, explicit: bool) -> None:
        self.plans.append(plan)


def _placements(case: Case, which: str) -> list[Placement]:
    return [p.to_torch() for p in (case.src if which == "src" else case.dst)]


def _check(
    case: Case, mesh: DeviceMesh, plans: _Plans, backward: bool, complex_data: bool
) -> dict[str, Any]:
    rank = dist.get_rank()
    full = full_tensor(case.shape)
    if complex_data:
        full = full.to(torch.complex128) * (1 + 2j)
    coord = tuple(mesh.get_coordinate() or ())
    r = World.of(case.mesh).rank(coord)
    local = source_locals(case, full)[r]
    partial_source = any(p.kind == "P" for p in case.src)
    x = DTensor.from_local(
        local, mesh, _placements(case, "src"), shape=full.shape, stride=full.stride()
    )
    if not partial_source:
        x.requires_grad_()
    plans.plans.clear()
    with CommDebugMode() as comm:
        y = x.redistribute(mesh, _placements(case, "dst"))
    problems = []
    want = expected_locals(case, full)[r]
    got = y.to_local()
    if got.shape != want.shape or not torch.equal(got, want):
        problems.append(f"rank {rank} {coord}: local {got} expected {want}")
    plan = case.plan()
    # DTensor.redistribute to the placements a tensor has runs nothing
    ran_expected = [] if plan.src == plan.dst else [str(plan)]
    if [str(p) for p in plans.plans] != ran_expected:
        problems.append(f"ran {[str(p) for p in plans.plans]}, planned {plan}")
    counted = {str(op).rsplit(".", 1)[-1]: n for op, n in comm.get_comm_counts().items()}
    expected = dict(collections.Counter(s.collective for s in plan.steps if s.collective))
    if counted != expected:
        problems.append(f"CommDebugMode counted {counted}, the plan's steps {expected}")
    # async_op (as TP's parallel styles ask): the last collective may still be in flight; the
    # data, read, is the same
    pending = x.redistribute(mesh, _placements(case, "dst"), async_op=True).to_local()
    if pending.shape != want.shape or not torch.equal(pending, want):
        problems.append(f"rank {rank} {coord}: with async_op, local {pending} expected {want}")
    if backward and not partial_source:
        weights = torch.arange(full.numel(), dtype=full.dtype).reshape(full.shape) % 7 + 1
        w = distribute_tensor(weights, mesh, [Replicate()] * mesh.ndim, src_data_rank=None)
        (y * w).sum().backward()
        plain = full.clone().requires_grad_()
        (plain * weights).sum().backward()
        # the gradient comes back on the input's placements: this rank's shard of plain's
        grad = x.grad
        want_grad = oracle.local_shard(plain.grad, _placements(case, "src"), case.mesh, coord)
        if grad is None or tuple(grad.placements) != tuple(x.placements):
            problems.append(f"gradient {grad}, placements {x.placements} expected")
        elif not torch.equal(grad.to_local(), want_grad):
            problems.append(f"rank {rank}: gradient {grad.to_local()} expected {want_grad}")
    return {"ok": not problems, "error": "; ".join(problems)}


def _guarded(check: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    try:
        return check(*args)
    except Exception:
        return {"ok": False, "error": traceback.format_exc(limit=6)}


def run_all() -> dict[str, Any]:
    """On every rank: every case of this world, then (4 ranks) the compiled step."""
    from cute_shard.redistribute import dtensor as rd

    world = dist.get_world_size()
    start = time.perf_counter()
    todo = cases(world)
    meshes: dict[tuple[int, ...], DeviceMesh] = {}
    plans = _Plans()
    previous = rd.set_observer(plans)
    try:
        mine = {}
        for name, case in todo:
            if case.mesh not in meshes:
                meshes[case.mesh] = init_device_mesh("cpu", case.mesh)
            complex_data = name.startswith("complex")
            backward = not complex_data and (not name.startswith("random") or len(mine) % 4 == 0)
            mine[name] = _guarded(_check, case, meshes[case.mesh], plans, backward, complex_data)
    finally:
        rd.set_observer(previous)
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)
    verdicts = {}
    for name, _ in todo:
        errors = [
            f"rank {r}: {v[name]['error']}" for r, v in enumerate(everyone) if not v[name]["ok"]
        ]
        verdicts[name] = {"ok": not errors, "error": "\n".join(errors[:3])}
    checked = time.perf_counter()
    compiled = run_compiled(init_device_mesh("cpu", (2, 2))) if world == 4 else {}
    if world == 4:
        compiled["random, dynamic"] = _compiled_dynamic_random(meshes)
    compiled_at = time.perf_counter()
    programs = _programs() if world == 4 else {}
    seconds = {
        "cases": checked - start,
        "compiled": compiled_at - checked,
        "programs": time.perf_counter() - compiled_at,
    }
    return {"cases": verdicts, "compiled": compiled, "programs": programs, "seconds": seconds}


def _programs() -> dict[str, Any]:
    """``parallel_programs``' checks on this world of 4 (the styles on (4,), FSDP2 + TP on
    (2, 2)), every rank's problems gathered to all."""
    from .parallel_programs import check_fsdp2_tp, check_styles

    out = {}
    for name, check, shape, names in (
        ("styles", check_styles, (4,), None),
        ("fsdp2+tp", check_fsdp2_tp, (2, 2), ("dp", "tp")),
    ):
        try:
            mine = check(init_device_mesh("cpu", shape, mesh_dim_names=names))
        except Exception:
            mine = {"problems": [traceback.format_exc(limit=6)], "runs": 0}
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        problems = [f"rank {r}: {p}" for r, v in enumerate(everyone) for p in v["problems"]]
        out[name] = {"problems": problems[:3], "runs": min(v["runs"] for v in everyone)}
    return out


# ----------------------------------------------------------------------------- compiled

COMPILE_BACKENDS = ("eager", "aot_eager")
CALLS = 4


def strided_step(x: DTensor, w: torch.Tensor) -> torch.Tensor:
    mesh = x.device_mesh
    y = x.redistribute(mesh, [Shard(0), _StridedShard(0, split_factor=2)])
    z = y.sin().redistribute(mesh, [Shard(0), Shard(1)])
    return (z * w).sum()


def _step_inputs(mesh: DeviceMesh, seed: int) -> tuple[DTensor, DTensor, torch.Tensor]:
    """x (8, 6, 4) on [R, S1] and replicated weights, the same on every rank for a seed."""
    g = torch.Generator().manual_seed(seed)
    full = torch.randn(8, 6, 4, generator=g, dtype=torch.float64)
    weights = torch.randn(8, 6, 4, generator=g, dtype=torch.float64)
    x = distribute_tensor(full, mesh, [Replicate(), Shard(1)], src_data_rank=None)
    w = distribute_tensor(weights, mesh, [Shard(0), Shard(1)], src_data_rank=None)
    return x, w, (full.sin() * weights).sum()


def run_compiled(mesh: DeviceMesh) -> dict[str, Any]:
    """Per backend: graphs compiled over ``CALLS`` calls, and whether each call's result
    equals eager's (bit for bit) and plain torch's (to rounding)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    report: dict[str, Any] = {}
    for backend in COMPILE_BACKENDS:
        torch._dynamo.reset()
        counter = CompileCounterWithBackend(backend)
        compiled = torch.compile(strided_step, backend=counter, fullgraph=True)
        problems: list[str] = []
        try:
            for seed in range(CALLS):
                x, w, plain = _step_inputs(mesh, seed)
                got = compiled(x, w).full_tensor()
                want = strided_step(x, w).full_tensor()
                if not torch.equal(got, want):
                    problems.append(f"call {seed}: compiled {got.item()} != eager {want.item()}")
                if not torch.allclose(got, plain, rtol=1e-9, atol=1e-9):
                    problems.append(f"call {seed}: {got.item()} != plain torch {plain.item()}")
        except Exception as e:
            problems.append(f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
        report[backend] = {
            "ok": not problems,
            "frames": counter.frame_count,
            "error": "; ".join(problems),
        }
        report[f"{backend}, dynamic"] = _compiled_dynamic(mesh, backend)
    torch._dynamo.reset()
    return report


#: Random pairs compiled with dynamic shapes on the 4-rank world, and the multiples each runs.
DYNAMIC_RANDOM_CASES = 12
DYNAMIC_MULTIPLES = ((2, 3, 5, 7), (3, 5, 2, 2), (5, 2, 3, 4))


def _compiled_dynamic_random(meshes: dict[tuple[int, ...], DeviceMesh]) -> dict[str, Any]:
    """Seeded random pairs of this world (Partial sources included), each at shapes whose every
    dim is a multiple of its unit (``plan._Pair.units``), redistributed in a function compiled
    with dynamic shapes (backend "eager", fullgraph=True, duck sizing off so that equal sizes
    stay distinct symbols): per pair, the graphs compiled over three such shapes (one is
    expected: every size stays symbolic) and whether every rank's local tensor equals the
    oracle's target shard at each. Every rank's problems are gathered."""
    import torch.fx.experimental._config as fx_config
    from torch._dynamo.testing import CompileCounterWithBackend

    from cute_shard.redistribute import check_placements
    from cute_shard.redistribute import plan as plan_module

    rng = random.Random(41)
    problems: list[str] = []
    frames: dict[str, int] = {}
    done = 0
    while done < DYNAMIC_RANDOM_CASES:
        case = random_case(rng, world=4)
        if math.prod(case.mesh) != 4 or not _legal_for_dtensor(case):
            continue
        done += 1
        ndim = len(case.shape)
        src = check_placements(case.src, ndim, case.mesh, "source")
        dst = check_placements(case.dst, ndim, case.mesh, "target")
        units = plan_module._pair(src, dst, case.mesh, ndim).units
        if case.mesh not in meshes:
            meshes[case.mesh] = init_device_mesh("cpu", case.mesh)
        mesh = meshes[case.mesh]
        target = [p.to_torch() for p in case.dst]

        def step(x: torch.Tensor, mesh: DeviceMesh = mesh, target: Any = target) -> Any:
            return cast(DTensor, x).redistribute(mesh, target)

        torch._dynamo.reset()
        counter = CompileCounterWithBackend("eager")
        compiled = torch.compile(step, backend=counter, dynamic=True, fullgraph=True)
        name = str(case)
        try:
            with fx_config.patch(use_duck_shape=False):
                for multiples in DYNAMIC_MULTIPLES:
                    shape = tuple(u * k for u, k in zip(units, multiples, strict=False))
                    even = Case(shape, case.mesh, case.src, case.dst)
                    full = full_tensor(shape)
                    coord = tuple(mesh.get_coordinate() or ())
                    r = World.of(case.mesh).rank(coord)
                    x = DTensor.from_local(
                        source_locals(even, full)[r],
                        mesh,
                        _placements(even, "src"),
                        shape=full.shape,
                        stride=full.stride(),
                    )
                    got = compiled(x).to_local()
                    want = expected_locals(even, full)[r]
                    if got.shape != want.shape or not torch.equal(got, want):
                        problems.append(f"{even}: rank {coord}: {got} expected {want}")
        except Exception as e:
            problems.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        frames[name] = counter.frame_count
    torch._dynamo.reset()
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, problems)
    gathered = [p for v in everyone for p in v]
    return {"ok": not gathered, "frames": frames, "error": "; ".join(gathered[:3])}


#: First dims for the step with dynamic shapes: multiples of the pairs' unit 8 (``[S0,
#: SS0:2]`` on (2, 2) cuts d0 in 2, each half in 2 pieces of 2 chunks), then one that is not.
DYNAMIC_SIZES = (16, 24, 40, 56, 12)


def _compiled_dynamic(mesh: DeviceMesh, backend: str) -> dict[str, Any]:
    """The step compiled with dynamic shapes: the graphs compiled after each call (one for
    every multiple of the unit, one more for 12, planned at its value), and whether each
    call's result and gradient equal plain torch's (to rounding)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(strided_step, backend=counter, fullgraph=True, dynamic=True)
    problems: list[str] = []
    frames: list[int] = []
    try:
        for n in DYNAMIC_SIZES:
            g = torch.Generator().manual_seed(n)
            full = torch.randn(n, 6, 4, generator=g, dtype=torch.float64)
            weights = torch.randn(n, 6, 4, generator=g, dtype=torch.float64)
            x = distribute_tensor(full, mesh, [Replicate(), Shard(1)], src_data_rank=None)
            w = distribute_tensor(weights, mesh, [Shard(0), Shard(1)], src_data_rank=None)
            x.requires_grad_()
            got = compiled(x, w)
            got.backward()
            frames.append(counter.frame_count)
            value = got.full_tensor()
            plain = (full.sin() * weights).sum()
            if not torch.allclose(value, plain, rtol=1e-9, atol=1e-9):
                problems.append(f"n={n}: {value.item()} != plain torch {plain.item()}")
            grad = cast(DTensor, x.grad).full_tensor()
            if not torch.allclose(grad, full.cos() * weights, rtol=1e-9, atol=1e-9):
                problems.append(f"n={n}: the gradient differs from plain torch's")
    except Exception as e:
        problems.append(f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return {"ok": not problems, "frames": frames, "error": "; ".join(problems)}

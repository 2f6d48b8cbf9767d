"""Every rank of a redistribution plan in one process, with plain tensors: a fast twin of
``execute`` for the property tests.

``execute`` (``cute_shard/redistribute/execute.py``) runs one rank's part of a plan: per step,
rank-dependent pieces that are plain functions of the plan and the rank's mesh coordinate
(``_keep``, ``_pack``, ``_recv_splits``, ``_unpack``, ``_scatter_parts``, ``_own_part``,
``_place``; outside ``LocalTensorMode`` they run once, as written), glued together by one of
torch's functional collectives. ``run_plan`` calls those same pieces for every rank and does
each collective's data movement itself, so what it checks is the executor's code and only
the collectives are re-implemented:

- ``all_to_all_single``: rank r's send buffer is cut into one split per group member (in
  group order, sizes ``in_splits``); rank r receives from every member the split that member
  addressed to r, concatenated in group order. The splits two ranks use for each other must
  agree (a real collective would hang or misread otherwise): ``SimulationError`` if not.
- ``all_gather_into_tensor``: every member's flat buffer, concatenated in group order (equal
  sizes, else ``SimulationError``).
- ``reduce_scatter_tensor``: the members' buffers reduced elementwise, cut into as many equal
  parts as members; member i keeps part i.
- ``all_reduce``: the members' buffers reduced elementwise, every member keeps the result.

Reductions follow torch's in-process collectives (``_local_tensor._c10d``): a fold in group
order, ``avg`` the sum divided by the group size.

Groups, as ``execute`` forms them: a step on one mesh dim m runs in the group of ranks that
share every other coordinate, in the order of their coordinate on m; a step on several mesh
dims runs in the world group (global ranks, i.e. mesh coordinates in row-major order, when
the mesh is the whole world), ranks off the step's mesh dims exchanging nothing. Local steps
(chunk, partition) are ``execute``'s own step functions, given a stand-in mesh that answers
``size``. ``run_plan`` also checks every rank's local shape against the plan before and after
every step, and reports what each rank received from others in each step (``Run``).

The second half holds the cases and their ground truth: ``Case`` (a shape, a mesh, the two
placement lists, ``joint``), ``random_case`` (the generator the property tests and the gloo
sample share), ``source_locals`` (every rank's source shard; a Partial mesh dim cuts the value
into exact integer pieces, ``partial_value``) and ``expected_locals`` (every rank's target
shard by the oracle, pending reductions carried out exactly once).

Worked example::

    case = Case.parse((12,), (3, 2), "R,S0", "S0,SS0:2")
    full = full_tensor(case.shape)                       # 1, 2, ..., 12
    run = run_plan(case.plan(), source_locals(case, full))
    assert all(torch.equal(a, b) for a, b in zip(run.outputs, expected_locals(case, full)))
    run.received    # ((0, 0, 0, 0, 0, 0), (0, 2, 1, 1, 2, 0)): a chunk, then a permutation
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.distributed.tensor.placement_types import Partial, Placement

from cute_shard import oracle
from cute_shard.notation import PlacementSpec, parse_placements, placements_str
from cute_shard.redistribute import execute as ex
from cute_shard.redistribute import plan_redistribution
from cute_shard.redistribute.types import Plan, State, Step

__all__ = [
    "MESHES",
    "Case",
    "Run",
    "SimulationError",
    "Symbols",
    "World",
    "expected_locals",
    "full_tensor",
    "partial_value",
    "random_case",
    "reduce_tensors",
    "run_plan",
    "source_locals",
]

Coord = tuple[int, ...]


class SimulationError(RuntimeError):
    """The ranks could not have run a collective as the plan asks (their sizes disagree)."""


@dataclass(frozen=True, slots=True)
class World:
    """A mesh that is the whole world: global rank r sits at ``coords[r]`` (row-major)."""

    shape: tuple[int, ...]
    coords: tuple[Coord, ...]

    @staticmethod
    def of(shape: Sequence[int]) -> World:
        return _world(tuple(shape))

    def size(self, mesh_dim: int | None = None) -> int:
        """The stand-in for ``DeviceMesh.size`` that the local steps ask."""
        return math.prod(self.shape) if mesh_dim is None else self.shape[mesh_dim]

    def rank(self, coord: Coord) -> int:
        r = 0
        for c, n in zip(coord, self.shape, strict=True):
            r = r * n + c
        return r

    def along(self, coord: Coord, m: int) -> tuple[int, ...]:
        """The global ranks of ``coord``'s group along mesh dim m, in group order."""
        return tuple(
            self.rank(tuple(c if i == m else x for i, x in enumerate(coord)))
            for c in range(self.shape[m])
        )


@functools.cache
def _world(shape: tuple[int, ...]) -> World:
    return World(shape, tuple(itertools.product(*(range(n) for n in shape))))


@dataclass(frozen=True, slots=True)
class Run:
    """What ``run_plan`` saw: each rank's result (global rank order) and, per step, the
    elements each rank received from other ranks (0 for local steps and reductions)."""

    outputs: tuple[torch.Tensor, ...]
    received: tuple[tuple[int, ...], ...]


def run_plan(plan: Plan, local: Sequence[torch.Tensor]) -> Run:
    """Each rank's target shard, given ``local[r]``, the source shard of global rank r (mesh
    coordinates in row-major order). Dispatches on ``step.collective`` as ``execute`` does.

    Also checks, as real ranks would fail to: every local tensor has the shape the plan says
    (``plan.local_shape``) before and after every step, and the collectives' sizes agree
    across ranks; and, as the executor promises: every buffer handed to a collective is
    contiguous, and so is every step's result (the sources given are); ``SimulationError``
    otherwise."""
    world = World.of(plan.mesh)
    if len(local) != len(world.coords):
        raise ValueError(f"{len(local)} local tensors for a mesh {plan.mesh}")
    xs = list(local)
    _check_shapes(plan, plan.start, xs, world, "the source")
    received = []
    for step in plan.steps:
        got = [0] * len(xs)
        if step.collective is None:
            run = ex._LOCAL[step.kind]
            xs = [
                run(x, ex.At(plan, step, world, c, None))  # type: ignore[arg-type]  # (a stand-in mesh)
                for x, c in zip(xs, world.coords, strict=True)
            ]
        else:
            xs = _COLLECTIVES[step.collective](xs, plan, step, world, got)
        _check_shapes(plan, step.after, xs, world, f"after {step}")
        received.append(tuple(got))
    return Run(tuple(xs), tuple(received))


def _check_shapes(
    plan: Plan, state: State, xs: Sequence[torch.Tensor], world: World, when: str
) -> None:
    for x, coord in zip(xs, world.coords, strict=True):
        want = plan.local_shape(state, coord)
        if tuple(x.shape) != want:
            raise SimulationError(f"{when}: rank {coord} holds {tuple(x.shape)}, plan says {want}")
        _check_contiguous(x, f"{when}: rank {coord}'s local tensor")


def _check_contiguous(x: torch.Tensor, what: str) -> None:
    if not x.is_contiguous():
        raise SimulationError(f"{what} is not contiguous: {tuple(x.shape)}, {x.stride()}")


# ------------------------------------------------------------------------------ reductions


def reduce_tensors(op: str, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The elementwise reduction of ``tensors`` (in order) as torch's in-process collectives
    compute it."""
    if op == "avg":
        return functools.reduce(operator.add, tensors) / len(tensors)
    fold: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "sum": operator.add,
        "product": operator.mul,
        "max": torch.maximum,
        "min": torch.minimum,
    }
    return functools.reduce(fold[op], tensors)


def _groups_along(world: World, m: int) -> list[tuple[int, ...]]:
    """The groups along mesh dim m, each in group order; every rank in exactly one."""
    return [world.along(c, m) for c in world.coords if c[m] == 0]


# ----------------------------------------------------------------------------- collectives


def _all_reduce(
    xs: list[torch.Tensor], plan: Plan, step: Step, world: World, got: list[int]
) -> list[torch.Tensor]:
    op = step.reduce_op or "sum"
    out = list(xs)
    for m in step.mesh_dims:
        for group in _groups_along(world, m):
            shapes = {tuple(out[r].shape) for r in group}
            if len(shapes) != 1:
                raise SimulationError(f"{step}: all-reduce of shapes {sorted(shapes)}")
            reduced = reduce_tensors(op, [out[r].contiguous().reshape(-1) for r in group])
            for r in group:
                out[r] = reduced.clone().reshape(out[r].shape)
    return out


def _reduce_scatter(
    xs: list[torch.Tensor], plan: Plan, step: Step, world: World, got: list[int]
) -> list[torch.Tensor]:
    (m,) = step.mesh_dims
    size = world.shape[m]
    out = list(xs)
    for group in _groups_along(world, m):
        bufs = [
            ex._scatter_parts(xs[r], plan.dims, step.before, m, size, *world.coords[r])
            for r in group
        ]
        for r, b in zip(group, bufs, strict=True):
            _check_contiguous(b, f"{step}: rank {world.coords[r]}'s buffer")
        lengths = {b.numel() for b in bufs}
        if len(lengths) != 1 or next(iter(lengths)) % size:
            raise SimulationError(f"{step}: reduce-scatter of buffers of {sorted(lengths)}")
        reduced = reduce_tensors(step.reduce_op or "sum", bufs)
        for i, part in enumerate(reduced.chunk(size)):
            r = group[i]
            out[r] = ex._own_part(part.clone(), plan.dims, step.after, *world.coords[r])
    return out


def _gathered(
    xs: list[torch.Tensor], plan: Plan, step: Step, world: World, got: list[int]
) -> list[torch.Tensor]:
    (m,) = step.mesh_dims
    out = list(xs)
    for group in _groups_along(world, m):
        flats = [xs[r].contiguous().reshape(-1) for r in group]
        if len({f.numel() for f in flats}) != 1:
            sizes = [f.numel() for f in flats]
            raise SimulationError(f"{step}: all-gather of unequal blocks {sizes}")
        gathered = torch.cat(flats)
        for r in group:
            got[r] = gathered.numel() - xs[r].numel()
            coord = world.coords[r]
            peers = ex._along(coord, m, world.shape[m])
            out[r] = ex._place(gathered, xs[r], plan.dims, step.before, step.after, peers, *coord)
    return out


def _exchange(
    xs: list[torch.Tensor], plan: Plan, step: Step, world: World, got: list[int]
) -> list[torch.Tensor]:
    dims, before, after, md = plan.dims, step.before, step.after, step.mesh_dims
    if len(md) == 1:
        groups = _groups_along(world, md[0])
    else:
        groups = [tuple(range(len(world.coords)))]  # the world group, in global rank order
    out = list(xs)
    for group in groups:
        sends: dict[int, list[torch.Tensor]] = {}
        recv_splits: dict[int, tuple[int, ...]] = {}
        for r in group:
            coord = world.coords[r]
            peers = ex._along(coord, md[0], world.shape[md[0]]) if len(md) == 1 else world.coords
            send, *in_splits = ex._pack(xs[r], dims, before, after, md, peers, *coord)
            _check_contiguous(send, f"{step}: rank {coord}'s send buffer")
            if sum(in_splits) != send.numel():
                raise SimulationError(f"{step}: rank {coord} sends {send.numel()} != {in_splits}")
            sends[r] = list(send.split(list(in_splits)))
            recv_splits[r] = tuple(ex._recv_splits(dims, before, after, md, peers, *coord))
        for j, r in enumerate(group):
            coord = world.coords[r]
            parts = [sends[q][j] for q in group]
            sent = tuple(p.numel() for p in parts)
            if sent != recv_splits[r]:
                raise SimulationError(
                    f"{step}: rank {coord} expects splits {recv_splits[r]}, its peers send {sent}"
                )
            recv = torch.cat(parts)
            got[r] = sum(p.numel() for q, p in zip(group, parts, strict=True) if q != r)
            peers = ex._along(coord, md[0], world.shape[md[0]]) if len(md) == 1 else world.coords
            out[r] = ex._unpack(recv, xs[r], dims, before, after, md, peers, *coord)
    return out


_COLLECTIVES: dict[
    str, Callable[[list[torch.Tensor], Plan, Step, World, list[int]], list[torch.Tensor]]
] = {
    "all_reduce": _all_reduce,
    "reduce_scatter_tensor": _reduce_scatter,
    "all_gather_into_tensor": _gathered,
    "all_to_all_single": _exchange,
}


# --------------------------------------------------------------------- cases, ground truth


@dataclass(frozen=True, slots=True)
class Case:
    """One redistribution: a global ``shape`` on ``mesh`` from ``src`` to ``dst``."""

    shape: tuple[int, ...]
    mesh: tuple[int, ...]
    src: tuple[PlacementSpec, ...]
    dst: tuple[PlacementSpec, ...]
    joint: bool = True

    @staticmethod
    def parse(shape: Sequence[int], mesh: Sequence[int], src: str, dst: str) -> Case:
        """``Case.parse((12,), (3, 2), "R,S0", "S0,SS0:2")``."""
        shape_t, mesh_t = tuple(shape), tuple(mesh)
        return Case(
            shape_t,
            mesh_t,
            parse_placements(src, len(shape_t), mesh_t),
            parse_placements(dst, len(shape_t), mesh_t),
        )

    def plan(self) -> Plan:
        return plan_redistribution(self.shape, self.mesh, self.src, self.dst, joint=self.joint)

    def __str__(self) -> str:
        joint = "" if self.joint else " joint=False"
        return (
            f"{self.shape} on {self.mesh}: {placements_str(self.src)} -> "
            f"{placements_str(self.dst)}{joint}"
        )


def full_tensor(shape: Sequence[int], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The global tensor: every value distinct (1, 2, 3, ...), exact in float64."""
    return torch.arange(1, math.prod(shape) + 1, dtype=dtype).reshape(tuple(shape))


def partial_value(
    full: torch.Tensor, src: Sequence[PlacementSpec], mesh: Sequence[int], coord: Coord
) -> torch.Tensor:
    """The global-shaped value the rank at ``coord`` holds before its source placements shard
    it: ``full`` cut into partial values along every Partial mesh dim of ``src``, such that
    reducing them along any set of those mesh dims, in any order, is exact (integers in
    float64) and reducing all of them gives ``full``.

    Each Partial mesh dim m (size M) picks, per element, an owner coordinate that changes from
    element to element; the owner's piece carries the value. ``sum``: the other coordinates
    hold small integers and the owner the rest; ``avg``: every coordinate the value plus an
    offset, the offsets summing to 0; ``max`` / ``min``: the others hold the value minus / plus
    a positive integer. Every piece is the value plus a constant, or a constant, per element
    and coordinate (never a function of the value), so the reductions commute."""
    if not any(p.kind == "P" and mesh[m] > 1 for m, p in enumerate(src)):
        return full
    x = full
    pos = torch.arange(full.numel(), dtype=full.dtype).reshape(full.shape)
    for m, p in enumerate(src):
        size = mesh[m]
        if p.kind != "P" or size == 1:
            continue
        c = coord[m]
        owner_of = (pos + 3 * m) % size
        owner = owner_of == c

        def small(k: int | torch.Tensor, m: int = m) -> torch.Tensor:
            """A small positive integer per element and coordinate k."""
            return (pos * (m + 2) + k) % 5 + 1

        if p.reduce_op == "sum":
            others = sum((small(k) for k in range(size)), torch.zeros_like(pos)) - small(owner_of)
            x = torch.where(owner, x - others, small(c))
        elif p.reduce_op == "avg":
            x = x + (pos % 3 + 1) * (2 * c - (size - 1))
        elif p.reduce_op == "max":
            x = torch.where(owner, x, x - small(c))
        elif p.reduce_op == "min":
            x = torch.where(owner, x, x + small(c))
        else:
            raise ValueError(f"partial_value: no exact pieces for Partial({p.reduce_op})")
    return x


def source_locals(case: Case, full: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's source local tensor (global rank order): its partial value, sharded."""
    world = World.of(case.mesh)
    src = _torch(case.src)
    return [
        oracle.local_shard(partial_value(full, case.src, case.mesh, c), src, case.mesh, c)
        for c in world.coords
    ]


def expected_locals(case: Case, full: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's target local tensor: the source's partial values reduced along the mesh
    dims whose pending reduction the target does not keep, partitioned (torch's
    ``Partial._partition_value``, in mesh-dim order) along the target's new Partial mesh dims,
    then sharded by the target (``oracle.local_shard``; Partial reads as Replicate)."""
    world = World.of(case.mesh)
    values = [partial_value(full, case.src, case.mesh, c) for c in world.coords]
    for m, (a, b) in enumerate(zip(case.src, case.dst, strict=True)):
        if a.kind == "P" and a != b and case.mesh[m] > 1:
            values = [
                reduce_tensors(a.reduce_op, [values[r] for r in world.along(c, m)])
                for c in world.coords
            ]
    for m, (a, b) in enumerate(zip(case.src, case.dst, strict=True)):
        if b.kind == "P" and a != b and case.mesh[m] > 1:
            values = [Partial(b.reduce_op)._partition_value(v, world, m) for v in values]
    dst = _torch(case.dst)
    return [
        oracle.local_shard(v, dst, case.mesh, c) for v, c in zip(values, world.coords, strict=True)
    ]


def _torch(ps: Sequence[PlacementSpec]) -> list[Placement]:
    return [p.to_torch() for p in ps]


# ----------------------------------------------------------------------------- random cases

#: Every mesh of 1-3 dims with at most 8 ranks (size-1 mesh dims included).
MESHES: tuple[tuple[int, ...], ...] = tuple(
    mesh
    for ndim in (1, 2, 3)
    for mesh in itertools.product(range(1, 9), repeat=ndim)
    if math.prod(mesh) <= 8
)
#: Dim sizes, small and uneven ones over-represented; 0 and 1 included.
SIZES = (0, 1, 1, 2, 2, 3, 4, 4, 5, 6, 7, 8, 8, 9, 12, 16)
#: Reduce ops a placement list may mix, as DTensor allows (one op, or sum with avg); each
#: has exact pieces (``partial_value``).
REDUCE_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("sum",),
    ("sum",),
    ("avg",),
    ("max",),
    ("min",),
    ("sum", "avg"),
)
MAX_NUMEL = 4096


def random_case(
    rng: random.Random,
    *,
    world: int = 8,
    partial: bool = True,
    meshes: Sequence[tuple[int, ...]] = MESHES,
    sizes: Sequence[int] = SIZES,
    max_numel: float = MAX_NUMEL,
) -> Case:
    """A random legal case: a mesh of at most ``world`` ranks, 1-4 dims of small sizes,
    placements R / S / SS (split factors that divide or not) / P, several mesh dims on one
    tensor dim likely. Partial: in the source, ops of one family (``REDUCE_FAMILIES``); in the
    target, kept from the source, or new (from R, a shard or another Partial) with ops of the
    family of the Partials the target keeps. (``meshes``, ``sizes`` and ``max_numel`` for
    cases that are planned, not run: larger meshes and tensors.)"""
    chosen = [m for m in meshes if math.prod(m) <= world]
    # more ranks, more to get wrong: weigh a mesh by its rank count
    (mesh,) = rng.choices(chosen, weights=[math.prod(m) for m in chosen])
    while True:
        ndim = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        shape = tuple(rng.choice(sizes) for _ in range(ndim))
        if math.prod(shape) <= max_numel:
            break
    # a few favoured tensor dims, so several mesh dims often shard one dim
    favoured = [rng.randrange(ndim) for _ in range(2)]
    # a third of the cases shard on every mesh dim in both: exchanges over several mesh dims
    dense = rng.random() < 0.35
    ops = rng.choice(REDUCE_FAMILIES) if partial else ()
    src = tuple(_random_placement(rng, ndim, favoured, ops, dense) for _ in mesh)
    keep = [a.kind == "P" and rng.random() < 0.2 for a in src]
    kept_ops = {a.reduce_op for a, k in zip(src, keep, strict=True) if k}
    new_ops = ops if kept_ops else rng.choice(REDUCE_FAMILIES)
    dst = []
    for a, k in zip(src, keep, strict=True):
        if k:
            dst.append(a)  # the pending reduction stays
        elif partial and not dense and rng.random() < 0.12:
            dst.append(PlacementSpec("P", reduce_op=rng.choice(new_ops)))
        else:
            dst.append(_random_placement(rng, ndim, favoured, (), dense))
    return Case(shape, mesh, src, tuple(dst), joint=rng.random() < 0.65)


def _random_placement(
    rng: random.Random, ndim: int, favoured: list[int], ops: tuple[str, ...], dense: bool
) -> PlacementSpec:
    r = rng.uniform(0.32, 1.0) if dense else rng.random()
    d = rng.choice(favoured) if rng.random() < 0.7 else rng.randrange(ndim)
    if rng.random() < 0.15:
        d -= ndim  # a negative shard dim names the same dim
    if r < 0.2:
        return PlacementSpec("R")
    if ops and r < 0.32:
        return PlacementSpec("P", reduce_op=rng.choice(ops))
    if r < 0.66:
        return PlacementSpec("S", d)
    return PlacementSpec("SS", d, rng.choice((1, 2, 2, 3, 4, 5)))


# ------------------------------------------------------------------------- symbolic sizes


@dataclass(frozen=True)
class Symbols:
    """Sizes as a ShapeEnv's symbols with hints, as ``torch.compile`` traces dynamic shapes
    (every comparison of them records a guard in ``env``), and anything made of them read at
    other values (substituted, which records nothing). Sizes 0 and 1 stay ints, as
    torch.compile specialises them."""

    env: object  # torch's ShapeEnv
    sizes: tuple[torch.SymInt | int, ...]
    symbols: tuple[object, ...]  # each size's sympy symbol (None for an int)

    @staticmethod
    def of(hints: Sequence[int]) -> Symbols:
        from torch._dynamo.source import ConstantSource
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        env = ShapeEnv(duck_shape=False)  # (a symbol per size, equal hints or not)
        sizes: list[torch.SymInt | int] = []
        symbols: list[object] = []
        for i, h in enumerate(hints):
            if h > 1:
                symbol = env.create_symbol(h, source=ConstantSource(f"n{i}"))
                sizes.append(env.create_symintnode(symbol, hint=h))
                symbols.append(symbol)
            else:
                sizes.append(h)
                symbols.append(None)
        return Symbols(env, tuple(sizes), tuple(symbols))

    def at(self, x: object, values: Sequence[int]) -> object:
        """``x`` (a SymInt, an int, or nested tuples and lists of them) with the sizes at
        ``values``."""
        if isinstance(x, torch.SymInt):
            return int(x.node.expr.xreplace(self._subs(values)))
        if isinstance(x, (tuple, list)):
            return type(x)(self.at(y, values) for y in x)
        return x

    def guards(self) -> list[object]:
        """The guards recorded so far, as sympy expressions."""
        return [g.expr for g in self.env.guards]  # type: ignore[attr-defined]

    def holds(self, guard: object, values: Sequence[int]) -> bool:
        return bool(guard.xreplace(self._subs(values)))  # type: ignore[attr-defined]

    def _subs(self, values: Sequence[int]) -> dict[object, int]:
        return {s: v for s, v in zip(self.symbols, values, strict=True) if s is not None}

"""DTensor's redistribution, done by the planner: the execution every path uses and the price
op strategies pay, both read off the same plan.

DTensor moves data in one function, ``_redistribute.redistribute_local_tensor(local,
current_spec, target_spec, ...)``: ``DTensor.redistribute`` and ``full_tensor`` call it through
the ``Redistribute`` autograd function (whose backward calls it again, from the target back to
the source, with Partial normalised as torch does), op dispatch calls it to bring inputs to the
chosen strategy, and ``from_local``'s backward. Op strategies price candidates with
``_collective_utils.redistribute_cost(current_spec, target_spec)``. ``install()`` rebinds
both names in every module that bound them at import; ``uninstall()`` puts torch's back.

- ``redistribute_local_tensor``: the plan for the two specs (cached by the specs), checked
  against the local tensor before any collective runs, then ``execute``.
- ``redistribute_cost``: the plan's cost in torch's units (microseconds of its ring model:
  per step, a latency per hop plus the busiest rank's bytes over the mesh dim's bandwidth), so
  strategies keep comparing on one scale; what torch's model refuses (Shard -> Partial, one
  Partial op to another) stays infinite. Cached by the specs; no search.
- Symbolic sizes (``torch.compile`` with dynamic shapes): planned on the SymInts
  (``plan_of_symbols``), uncached, and priced at their hints.

A ``_StridedShard`` means what ``distribute_tensor`` does with it, its split factor. A spec that
reads it as an encoded shard order (``use_strided_shard_as_shard_order``) places the same data
wherever the order decodes and the sizes are even (``tests/redistribute/test_shard_order.py``:
all 540 decodable placement lists of small meshes), so one reading serves both; with uneven
sizes the two can differ (``(13,)`` on mesh (3, 2), ``[_S(0, 2), S(0)]``), and then the data is
``distribute_tensor``'s, which is what every plan here reads and produces. What the planner does
not model is handed to torch's own function: placements other than Replicate, Shard,
``_StridedShard`` and ``Partial`` (``_MaskPartial``), a spec with an explicit non-default shard
order, a size without a hint (unbacked), and two different meshes.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.distributed._local_tensor import maybe_run_for_local_tensor
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import _collective_utils, _dispatch, _redistribute
from torch.distributed.tensor import _utils as _tensor_utils
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._ops import utils as _ops_utils
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard
from torch.fx.experimental.symbolic_shapes import has_guarding_hint, optimization_hint

from ..notation import PlacementSpec
from .execute import Group, execute, laid_out
from .plan import plan_of_symbols, plan_of_tuples
from .types import Kind, Plan, Step

__all__ = [
    "install",
    "is_installed",
    "plan_for_specs",
    "redistribute_cost",
    "redistribute_local_tensor",
    "set_observer",
    "torch_redistribute_local_tensor",
    "uninstall",
]

_MODELLED = frozenset({Replicate, Shard, _StridedShard, Partial})
_INT = frozenset({int})
_REPLICATED = frozenset({Replicate})


def _placements(spec: DTensorSpec) -> tuple[PlacementSpec, ...] | None:
    """``spec``'s placements in the planner's notation, or None where the planner does not
    read them as DTensor places its data (another placement type, or an explicit order).
    Converted, not looked up: a table keyed by torch's placements would hash and compare
    them in Python, which costs more than converting them."""
    placements = spec.placements
    if not set(map(type, placements)) <= _MODELLED:
        return None
    if not spec.use_strided_shard_as_shard_order:  # (else the order is read off the split
        # factors, which it places alike) the default order applies each tensor dim's mesh
        # dims left to right, as placements do
        for entry in spec.shard_order:
            dims = entry.mesh_dims
            if len(dims) > 1 and list(dims) != sorted(dims):
                return None
    return tuple(map(PlacementSpec.of, placements))


@functools.lru_cache(maxsize=256)
def _mesh_shape(mesh: DeviceMesh) -> tuple[int, ...]:
    return tuple(mesh.shape)


def _joint(mesh: DeviceMesh) -> Group | None:
    """The default group, for steps over several mesh dims, when the mesh holds every one of
    its ranks (then every rank runs the same plan, so one collective over all of them is
    safe; ``plan_for_specs`` plans such steps only then); otherwise None."""
    world = dist.group.WORLD  # (None until the default group is initialized)
    return None if world is None else _joint_in(mesh, world)


@functools.lru_cache(maxsize=256)
def _joint_in(mesh: DeviceMesh, world: Any) -> Group | None:
    if mesh.size() != dist.get_world_size(world):
        return None
    with unset_fake_temporarily():  # the mesh's rank table is a real tensor, also under tracing
        ranks: list[int] = mesh.mesh.reshape(-1).tolist()
    coords: list[tuple[int, ...]] = [()] * mesh.size()
    everywhere = itertools.product(*(range(n) for n in tuple(mesh.shape)))
    for rank, coord in zip(ranks, everywhere, strict=True):  # both row-major
        coords[rank] = coord
    return Group(world, tuple(coords))


def plan_for_specs(current: DTensorSpec, target: DTensorSpec) -> Plan:
    """The plan from ``current`` to ``target``, with steps over several mesh dims where the
    mesh has a group for them (``_joint``); ValueError for specs the planner does not model
    (see the module docstring)."""
    plan = _plan_or_none(current, target)
    if plan is None:
        raise ValueError(
            f"cute_shard does not plan {current.placements} -> {target.placements} "
            f"(different meshes, a size without a hint, an explicit shard order or another "
            f"placement type): torch's redistribution handles it"
        )
    return plan


def _plan_or_none(current: DTensorSpec, target: DTensorSpec) -> Plan | None:
    if current.mesh != target.mesh:
        return None
    joint = _spans_world(current.mesh, dist.group.WORLD)
    if _concrete(current) and _concrete(target):
        return _planned(current, target, joint)
    return _symbolic_plan(current, target, joint)


def _symbolic_plan(current: DTensorSpec, target: DTensorSpec, joint: bool) -> Plan | None:
    """The plan of specs with symbolic sizes (``torch.compile`` with dynamic shapes;
    ``plan_of_symbols``), not kept in a table (SymInts cannot key one); None where a size
    has no hint to guard on (an unbacked one: torch's own function handles it)."""
    src, dst = _placements(current), _placements(target)
    if src is None or dst is None or _hints(current) is None:
        return None
    shape = tuple(current.shape)
    return plan_of_symbols(shape, _mesh_shape(current.mesh), src, dst, joint)


def _concrete(spec: DTensorSpec) -> bool:
    """Whether the spec's global shape is ints: a symbolic one (``torch.compile`` with dynamic
    shapes) is planned and priced apart (``_symbolic_plan``, ``_hints``), as its SymInts
    cannot key a cache."""
    meta = spec.tensor_meta
    return meta is not None and set(map(type, meta.shape)) <= _INT


def _spans_world(mesh: DeviceMesh, world: Any) -> bool:
    """Whether the mesh holds every rank of the default group ``world`` (``dist.group.WORLD``,
    None until it is initialized; see ``_joint``)."""
    return world is not None and _spans(mesh, world)


@functools.lru_cache(maxsize=256)
def _spans(mesh: DeviceMesh, world: Any) -> bool:
    return mesh.size() == dist.get_world_size(world)


def _plan_of(
    current: DTensorSpec, target: DTensorSpec, joint: bool, shape: tuple[int, ...] | None = None
) -> Plan | None:
    """The plan of two specs on one mesh (the callers check that) for the global ``shape``
    (default: the specs' own, ints), or None where torch's own function must run (the
    planner's own tables make a size seen before cheap: what is left is reading the specs)."""
    src, dst = _placements(current), _placements(target)
    if src is None or dst is None:
        return None
    mesh = _mesh_shape(current.mesh)
    sizes = tuple(current.shape) if shape is None else shape
    return plan_of_tuples(sizes, mesh, src, dst, joint)


# The plans executions ask for, cached by the two specs (what decides the plan: mesh,
# placements, global shape, are in them). Pricing reads ``_plan_of`` directly: its own table
# keeps the price, and an op's strategies price many pairs for each one that runs.
_planned = functools.lru_cache(maxsize=4096)(_plan_of)


# --------------------------------------------------------------------------------- execution


class Observer:
    """Told of every redistribution cute_shard runs (``tracing`` records them)."""

    def redistributed(
        self, current: DTensorSpec, target: DTensorSpec, plan: Plan, explicit: bool
    ) -> None: ...


_observer: Observer | None = None


def set_observer(observer: Observer | None) -> Observer | None:
    """Install ``observer`` (None: none); returns the previous one."""
    global _observer
    previous, _observer = _observer, observer
    return previous


def redistribute_local_tensor(
    local_tensor: torch.Tensor,
    current_spec: DTensorSpec,
    target_spec: DTensorSpec,
    *,
    async_op: bool = False,
    use_graph_based_transform: bool | None = None,
    is_explicit: bool = False,
) -> torch.Tensor:
    """``local_tensor`` (this rank's shard under ``current_spec``) as its shard under
    ``target_spec``: torch's signature, cute_shard's plan. With ``async_op`` the result may be
    the last collective's pending output, waited where it is first read (``execute``), as
    torch's own; without it every collective has completed."""
    plan = _plan_or_none(current_spec, target_spec)
    if plan is None:
        return torch_redistribute_local_tensor()(
            local_tensor,
            current_spec,
            target_spec,
            async_op=async_op,
            use_graph_based_transform=use_graph_based_transform,
            is_explicit=is_explicit,
        )
    mesh = current_spec.mesh
    if not mesh._is_current_rank_part_of_mesh():
        return local_tensor
    coord = mesh.get_coordinate()
    if coord is None:  # pragma: no cover - part of the mesh always has a coordinate
        return local_tensor
    source = _as_source(local_tensor, plan, *coord)
    world = _joint(mesh) if any(len(s.mesh_dims) > 1 for s in plan.steps) else None
    out = execute(source, plan, mesh, coord, world, async_op=async_op)
    order = _order(target_spec)
    if order is not None:
        out = laid_out(out, order)
    if local_tensor.dim() != len(plan.shape):
        out = _as_given(out, local_tensor, plan, *coord)
    if _observer is not None:
        _observer.redistributed(current_spec, target_spec, plan, is_explicit)
    return out


@maybe_run_for_local_tensor  # each rank's own shapes, also when every rank is simulated
def _as_source(local: torch.Tensor, plan: Plan, *coord: int) -> torch.Tensor:
    """``local`` as this rank's source shard. One that is not (a wrong global shape or mesh)
    raises before any collective runs: with wrong sizes a collective hangs or returns wrong
    data. One that lacks dims of global size 1 (torch's in-place ``squeeze_`` squeezes the
    local tensor but leaves the DTensor's global shape as it was) is viewed with them."""
    want = plan.local_shape(plan.start, tuple(coord))
    if tuple(local.shape) == want:
        return local
    _missing(tuple(local.shape), want, plan, coord)
    return local.reshape(want)


def _order(spec: DTensorSpec) -> tuple[int, ...] | None:
    """The spec's dims from the largest global stride to the smallest (ties in dim order),
    where that is not row-major for the dims of more than one element; None where it is, where
    such a dim is expanded (stride 0: no order), or where the sizes or strides are not ints."""
    meta = spec.tensor_meta
    if meta is None or not set(map(type, (*meta.shape, *meta.stride))) <= _INT:
        return None
    sizes, strides = meta.shape, meta.stride
    if all(map(operator.ge, strides, strides[1:])):  # (the usual case, told in C)
        return None  # non-increasing strides: the order is the dims' own
    order = tuple(sorted(range(len(strides)), key=lambda d: (-strides[d], d)))
    big = [d for d in order if sizes[d] > 1]
    if big == sorted(big) or any(strides[d] == 0 for d in big):
        return None
    return order


@maybe_run_for_local_tensor
def _as_given(out: torch.Tensor, local: torch.Tensor, plan: Plan, *coord: int) -> torch.Tensor:
    """The result squeezed as the given local tensor was (it stays squeezed), but for a dim the
    target shards: most ranks hold none of its one row, and a rank's local tensor keeps the
    global dims where any rank's must (the plan decides, so every rank alike)."""
    want = plan.local_shape(plan.start, tuple(coord))
    missing = _missing(tuple(local.shape), want, plan, coord)
    sharded = {p.dim for p in plan.dst if p.shards}
    drop = [d for d in missing if d not in sharded]
    return out.reshape([n for d, n in enumerate(out.shape) if d not in drop])


def _missing(
    have: tuple[int, ...], want: tuple[int, ...], plan: Plan, coord: Sequence[int]
) -> tuple[int, ...]:
    """The dims of global size 1 that ``have`` lacks to be ``want`` (the first such choice,
    where several fit), or ValueError."""
    ones = [d for d, n in enumerate(plan.shape) if n == 1]
    lacks = len(want) - len(have)  # (negative: more dims than the spec says, never right)
    for missing in itertools.combinations(ones, lacks) if lacks >= 0 else ():
        if tuple(n for d, n in enumerate(want) if d not in missing) == have:
            return missing
    raise ValueError(
        f"rank at mesh coordinate {tuple(coord)}: its local tensor has shape {have}, but "
        f"{_text(plan.src)} of a global {plan.shape} on mesh {plan.mesh} gives it {want}; "
        "the DTensor's global shape or mesh does not match its local data"
    )


def _text(ps: Sequence[PlacementSpec]) -> str:
    return "[" + ", ".join(str(p) for p in ps) + "]"


# ---------------------------------------------------------------------------------- pricing


def redistribute_cost(current_spec: DTensorSpec, target_spec: DTensorSpec) -> float:
    """The plan's cost in torch's units (see the module docstring); torch's own function for
    what the planner does not model. One table lookup when the pair was priced before: the
    default group (None before it is initialized) is part of the key, as it decides whether
    the plan may move several mesh dims in one step (``_joint``). A replicated source costs
    nothing (only local chunks and partitions; torch's model says so too), answered before
    the table: op strategies ask it most, and it is cheaper to see than to look up."""
    if set(map(type, current_spec.placements)) == _REPLICATED and (
        current_spec.mesh == target_spec.mesh
    ):
        return 0.0
    world = dist.group.WORLD
    try:
        cost = _priced(current_spec, target_spec, world)
    except TypeError:  # symbolic sizes cannot key the table: priced at their hints
        if _concrete(current_spec) and _concrete(target_spec):
            raise  # (not that: a defect, reported as it is)
        cost = _cost(current_spec, target_spec, world, _hints(current_spec))
    return _saved_torch_cost()(current_spec, target_spec) if cost is None else cost


@functools.lru_cache(maxsize=4096)
def _priced(current: DTensorSpec, target: DTensorSpec, world: Any) -> float | None:
    concrete = _concrete(current) and _concrete(target)
    return _cost(current, target, world, tuple(current.shape) if concrete else None)


def _hints(spec: DTensorSpec) -> tuple[int, ...] | None:
    """The global sizes at their hints (no guard: a price only ranks strategies, and the
    plan that runs is made from the sizes themselves, ``_symbolic_plan``), or None where one
    has no hint (unbacked)."""
    meta = spec.tensor_meta
    if meta is None or not all(map(has_guarding_hint, meta.shape)):
        return None
    return tuple(map(optimization_hint, meta.shape))


def _cost(
    current: DTensorSpec, target: DTensorSpec, world: Any, shape: tuple[int, ...] | None
) -> float | None:
    """The price of the plan for the global ``shape``; None where torch's function prices
    (``shape`` None: sizes the planner cannot read)."""
    if current.mesh != target.mesh:
        return float("inf")
    if shape is None:
        return None
    try:
        plan = _plan_of(current, target, _spans_world(current.mesh, world), shape)
    except ValueError:
        return float("inf")  # a pair the planner refuses is never the cheaper strategy
    if plan is None:
        return None
    if _torch_bans(plan.src, plan.dst):
        return float("inf")
    if not current.mesh._is_current_rank_part_of_mesh():
        return 0.0
    itemsize = current.tensor_meta.dtype.itemsize if current.tensor_meta is not None else 4
    mesh = current.mesh
    cost = 0.0
    for step in plan.steps:
        cost += _step_cost(step, itemsize, mesh)
    return cost


@functools.lru_cache(maxsize=1024)  # a table of placement-list pairs
def _torch_bans(src: tuple[PlacementSpec, ...], dst: tuple[PlacementSpec, ...]) -> bool:
    """Whether torch's cost model refuses the pair: Shard -> Partial, or one Partial op to
    another (redistribute() itself still carries them out)."""
    return any(t.kind == "P" and s.kind != "R" and s != t for s, t in zip(src, dst, strict=True))


def _step_cost(step: Step, itemsize: int, mesh: DeviceMesh) -> float:
    """One step in torch's ring model: a base latency, the wait on the step's links, and the
    busiest rank's bytes over the slowest mesh dim's bandwidth (``_links``)."""
    kind = step.kind
    if kind is Kind.CHUNK or kind is Kind.PARTITION:
        return 0.0
    if kind is Kind.ALL_REDUCE or kind is Kind.REDUCE_SCATTER:
        passes = 2 if kind is Kind.ALL_REDUCE else 1
        wait, per_byte = _links(mesh, step.mesh_dims, step.peers, passes)
        return float(6.6 + wait + step.reduced * itemsize * per_byte)
    wait, per_byte = _links(mesh, step.mesh_dims, step.peers, 0)
    return float(6.6 + wait + step.received * itemsize * per_byte)


@functools.lru_cache(maxsize=1024)  # a per-mesh table: mesh dims, peers, reduction passes
def _links(mesh: DeviceMesh, dims: tuple[int, ...], peers: int, passes: int) -> tuple[float, float]:
    """A step's wait (hops times latency) and its cost per byte of the busiest rank, from
    torch's ``MeshTopoInfo``. A reduction (``passes``: 1 for a reduce-scatter, 2 for an
    all-reduce, which moves its data twice) waits on its group's hops. An exchange
    (``passes`` 0) over several mesh dims pays, per mesh dim, a hop for each other
    coordinate on it (as the per-mesh-dim collectives it replaces would), or one hop per peer
    at the slowest latency where it has fewer peers than that (a permutation has one)."""
    topo = _collective_utils.MeshTopoInfo.build_from_mesh(mesh)
    sizes = [topo.mesh_dim_devices[m] for m in dims]
    latencies = [topo.mesh_dim_latency[m] for m in dims]
    per_byte = 1e6 / 1024**3 / min(topo.mesh_dim_bandwidth[m] for m in dims)
    if passes:
        group = math.prod(sizes)
        hops = (group - 1) * passes
        return hops * max(latencies), per_byte * hops / group
    ring = sum((n - 1) * latency for n, latency in zip(sizes, latencies, strict=True))
    return min(max(peers, 1) * max(latencies), ring), per_byte


# ------------------------------------------------------------------------ install / uninstall

# Every module that holds torch's functions under these names, bound at its import.
_EXECUTE_HOMES: tuple[Any, ...] = (_redistribute, _dispatch, torch.distributed.tensor._api)
_COST_HOMES: tuple[Any, ...] = (_collective_utils, _ops_utils, _tensor_utils)


@dataclass(frozen=True, slots=True)
class _Saved:
    execute: Callable[..., torch.Tensor]
    cost: Callable[[DTensorSpec, DTensorSpec], float]


_saved: _Saved | None = None
_lock = threading.Lock()


def torch_redistribute_local_tensor() -> Callable[..., torch.Tensor]:
    """torch's own ``redistribute_local_tensor``, installed or not (what cute_shard hands
    the cases it does not model to, and what ``torch_reference`` compares with)."""
    return _redistribute.redistribute_local_tensor if _saved is None else _saved.execute


def _saved_torch_cost() -> Callable[[DTensorSpec, DTensorSpec], float]:
    return _collective_utils.redistribute_cost if _saved is None else _saved.cost


def is_installed() -> bool:
    return _saved is not None


def install() -> None:
    """Make every DTensor redistribution and its pricing cute_shard's. Idempotent."""
    global _saved
    with _lock:
        if _saved is not None:
            return
        _saved = _Saved(
            _redistribute.redistribute_local_tensor, _collective_utils.redistribute_cost
        )
        for home in _homes(_EXECUTE_HOMES, "redistribute_local_tensor"):
            home.redistribute_local_tensor = redistribute_local_tensor
        for home in _homes(_COST_HOMES, "redistribute_cost"):
            home.redistribute_cost = redistribute_cost


def uninstall() -> None:
    """Give DTensor torch's own redistribution and pricing back (the same objects)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        for home in _homes(_EXECUTE_HOMES, "redistribute_local_tensor"):
            home.redistribute_local_tensor = _saved.execute
        for home in _homes(_COST_HOMES, "redistribute_cost"):
            home.redistribute_cost = _saved.cost
        _saved = None
        cache_clear()


def _homes(modules: tuple[Any, ...], name: str) -> list[Any]:
    """The modules that bind ``name`` (torch's tensor-parallel transform too, once loaded)."""
    import sys

    extra = sys.modules.get("torch.distributed.tensor.experimental._tp_transform")
    found = [m for m in (*modules, extra) if m is not None and hasattr(m, name)]
    return found


def cache_clear(tables: bool = True) -> None:
    """Empty the plan and price caches, and (``tables``) the per-mesh and per-placement
    tables beside them."""
    _planned.cache_clear()
    _priced.cache_clear()
    if tables:
        _spans.cache_clear()
        _joint_in.cache_clear()
        _mesh_shape.cache_clear()
        _links.cache_clear()
        _torch_bans.cache_clear()

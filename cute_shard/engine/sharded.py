"""A DTensor sharding as a CuTe layout of the global tensor: each tensor dim split into
(local, gpu) sub-modes.

For a tensor dim of size n, the row-major position ``p`` of an element inside that dim is

    p = local(i) + sum over mesh dims m sharding it of gpu_m(c_m)

where ``i`` is the element's index inside the rank's local tensor and ``c_m`` is the rank's
coordinate on mesh dim m. ``local`` and every ``gpu_m`` are CuTe layouts, and together their
leaves are a bijection onto ``[0, n)``: in stride order a compact mixed radix, each stride the
product of the faster leaves' sizes. A dim is stored as its leaves in stride order, fastest
first, each tagged local or ``(mesh dim, part)``.

DTensor applies placements left to right over mesh dims, each on the local tensor the ones
before it left, so ``placements_to_layout`` starts every dim at ``n:1`` and carves, for every
Shard/_StridedShard, a gpu sub-mode out of the current local layout: CuTe's
``logical_divide(local, tile)`` with tile ``(L/M):1`` for ``Shard`` and
``(L/(sf*M), sf):(1, L/sf)`` for ``_StridedShard``. On the increasing local layout that is two
cuts: the fastest ``L/(sf*M)`` stay local, the next M are the gpu sub-mode. A cut that would
split a leaf other than at a divisor, or a carve that ``sf*M`` does not divide (uneven
shards), has no layout: the function returns None.

This is the layout the engine's router works in (``decide.py``, which takes the same
``logical_divide`` one mesh dim at a time, in local coordinates); here it is written out
whole for the command line and for the property tests that hold the engine to the layout
algebra (``property_tests/test_engine_layout.py``).

Worked example: global shape (8, 16), mesh (2, 4), placements [Shard(0), _StridedShard(1, sf=2)]:

    dim 0: n=8   local 4:1          gpu(mesh 0) 2:4
    dim 1: n=16  local (2,2):(1,8)  gpu(mesh 1) 4:2

so a rank at mesh coordinate c1 holds positions {0,1,8,9} + 2*c1 of dim 1; in CuTe notation
the sharded layout is ``((4,2),((2,2),4)):((16,64),((1,8),2))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch.distributed.tensor.placement_types import Partial, Placement

from ..layout import Layout
from ..layout.inttuple import IntTuple
from .propagate import parse_placements

__all__ = ["LOCAL", "DimSharding", "ShardedLayout", "compose_view", "placements_to_layout"]

# A sub-mode: (size, mesh dim or LOCAL, part). ``part`` numbers a mesh dim's leaves in its
# coordinate's colexicographic order. Sizes are > 1.
Leaf = tuple[int, int, int]
LOCAL = -1


@dataclass(frozen=True, slots=True)
class DimSharding:
    """One tensor dim: its size and its sub-modes in stride order, fastest first."""

    size: int
    leaves: tuple[Leaf, ...]

    def modes(self) -> tuple[tuple[tuple[int, int], ...], dict[int, tuple[tuple[int, int], ...]]]:
        """``(local, {mesh dim: gpu})`` as ``(size, stride)`` leaves with strides in the dim."""
        local: list[tuple[int, int]] = []
        gpu: dict[int, list[tuple[int, int]]] = {}
        stride = 1
        for size, mesh, _ in self.leaves:
            (local if mesh == LOCAL else gpu.setdefault(mesh, [])).append((size, stride))
            stride *= size
        return tuple(local), {m: tuple(v) for m, v in sorted(gpu.items())}

    def to_layout(self) -> Layout:
        """``(local, (gpu_m, ...))`` of this dim as a CuTe layout, strides within the dim."""
        return _dim_layout(self, 1)


@dataclass(frozen=True, slots=True)
class ShardedLayout:
    """The global tensor's layout with every sharded dim divided into (local, gpu) sub-modes."""

    global_shape: tuple[int, ...]
    mesh_shape: tuple[int, ...]
    dims: tuple[DimSharding, ...]
    partial: tuple[tuple[int, Partial], ...]

    def to_layout(self) -> Layout:
        """The CuTe layout: mode d is ``(local, (gpu_m, ...))`` of tensor dim d (just its
        local mode when no mesh dim shards it), strides in elements of the global row-major
        tensor."""
        row = 1
        shapes: list[IntTuple] = []
        strides: list[IntTuple] = []
        for dim in reversed(self.dims):
            mode = _dim_layout(dim, row)
            shapes.append(mode.shape)
            strides.append(mode.stride)
            row *= dim.size
        return Layout(tuple(reversed(shapes)), tuple(reversed(strides)))


def _dim_layout(dim: DimSharding, scale: int) -> Layout:
    local, gpu = dim.modes()
    ls, lt = _mode(local, scale)
    if not gpu:
        return Layout(ls, lt)
    g = [_mode(leaves, scale) for leaves in gpu.values()]
    gs = g[0][0] if len(g) == 1 else tuple(s for s, _ in g)
    gt = g[0][1] if len(g) == 1 else tuple(t for _, t in g)
    return Layout((ls, gs), (lt, gt))


def _mode(leaves: tuple[tuple[int, int], ...], scale: int) -> tuple[IntTuple, IntTuple]:
    if not leaves:
        return 1, 0
    if len(leaves) == 1:
        return leaves[0][0], leaves[0][1] * scale
    return tuple(s for s, _ in leaves), tuple(t * scale for _, t in leaves)


def placements_to_layout(
    global_shape: Sequence[int], placements: Sequence[Placement], mesh_shape: Sequence[int]
) -> ShardedLayout | None:
    """The sharded layout of ``placements``, or None where a layout cannot express it (a carve
    that does not divide evenly, or that cuts a leaf other than at a divisor)."""
    shape = tuple(global_shape)
    mesh = tuple(mesh_shape)
    if not all(type(n) is int for n in shape):
        return None
    norm = parse_placements(placements, len(shape), mesh)
    dims: list[tuple[Leaf, ...]] = [((n, LOCAL, 0),) if n != 1 else () for n in shape]
    partial: list[tuple[int, Partial]] = []
    for m, p in enumerate(norm):
        if p is None:
            continue
        if not isinstance(p, tuple):
            partial.append((m, p))
            continue
        d, sf = p
        if type(sf) is not int:
            return None
        carved = carve(dims[d], m, mesh[m], sf)
        if carved is None:
            return None
        dims[d] = carved
    return ShardedLayout(
        shape,
        mesh,
        tuple(DimSharding(n, leaves) for n, leaves in zip(shape, dims, strict=True)),
        tuple(partial),
    )


def carve(
    leaves: tuple[Leaf, ...], mesh_dim: int, mesh_size: int, split_factor: int
) -> tuple[Leaf, ...] | None:
    """``logical_divide`` of one dim's local sub-modes for one placement on ``mesh_dim``: along
    the local leaves, the fastest ``k = L/(sf*M)`` stay local, the next ``M`` become
    ``mesh_dim``'s gpu leaves, the slowest ``sf`` stay local. None when ``sf*M`` does not
    divide ``L`` or a cut falls inside a leaf other than at a divisor."""
    if mesh_size == 1:
        return leaves
    total = 1
    for s, mesh, _ in leaves:
        if mesh == LOCAL:
            total *= s
    if total % (mesh_size * split_factor):
        return None
    k = total // (mesh_size * split_factor)
    cuts = (k, k * mesh_size)
    out: list[Leaf] = []
    done = 1  # product of the local leaves walked so far
    part = 0
    for size, mesh, p in leaves:
        if mesh != LOCAL:
            out.append((size, mesh, p))
            continue
        start, end = done, done * size
        for c in cuts:  # split the leaf [start, end) at the cuts inside it
            if c % start == 0 and end % c == 0 and start < c < end:
                out.append(_tag(c // start, start, k, mesh_size, mesh_dim, part))
                part += out[-1][1] == mesh_dim
                start = c
            elif start < c < end:
                return None
        out.append(_tag(end // start, start, k, mesh_size, mesh_dim, part))
        part += out[-1][1] == mesh_dim
        done = end
    return _coalesce([leaf for leaf in out if leaf[0] > 1])


def _tag(size: int, lo: int, k: int, m: int, mesh_dim: int, part: int) -> Leaf:
    inside = lo % k == 0 and lo < k * m
    return (size, mesh_dim, part) if inside else (size, LOCAL, 0)


def _coalesce(leaves: list[Leaf]) -> tuple[Leaf, ...]:
    """Merge neighbouring sub-modes that are one mode (two local ones, or consecutive parts of
    one mesh dim: CuTe's coalesce on stride-ordered leaves), then renumber the parts."""
    out: list[Leaf] = []
    for size, mesh, part in leaves:
        if out and out[-1][1] == mesh and (mesh == LOCAL or part == out[-1][2] + 1):
            out[-1] = (out[-1][0] * size, mesh, out[-1][2])
        else:
            out.append((size, mesh, part))
    seen: dict[int, int] = {}
    renumbered = []
    for size, mesh, _ in out:
        part = seen.get(mesh, 0) if mesh != LOCAL else 0
        seen[mesh] = part + 1
        renumbered.append((size, mesh, part))
    return tuple(renumbered)


def compose_view(
    sl: ShardedLayout, rule: Sequence[Any], placements: Sequence[Placement]
) -> ShardedLayout | None:
    """The output's sharded layout of a view of ``sl`` (whose placements are ``placements``),
    or None when some mesh dim cannot stay or the output has no layout. The engine decides the
    output placements; their layout is the input layout composed with the view (the property
    tests check the two are the same function of (local index, rank))."""
    from .plan import make_plan
    from .propagate import propagate_shape_and_sharding

    target, out = propagate_shape_and_sharding(placements, sl.global_shape, rule, sl.mesh_shape)
    if tuple(target) != tuple(placements):
        return None
    out_shape = make_plan(rule, sl.global_shape, None, True).out_shape
    return placements_to_layout(out_shape, out, sl.mesh_shape)

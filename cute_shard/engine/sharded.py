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
algebra (``property_tests/test_engine_layout.py``). ``compose_view`` composes it with a view:
the output's sharded layout, read dim by dim off the rule, without the engine.

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

from torch import SymInt
from torch.distributed.tensor.placement_types import Partial, Placement

from ..layout import Layout
from ..layout.inttuple import IntTuple
from ..rules import Broadcast, ComplexRule, Flatten, InputDim, NewDim, Repeat, Singleton, Split
from .placements import as_sequence, integer_sizes, parse_placements
from .plan import as_rule
from .types import Sharded

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
    that does not divide evenly, or that cuts a leaf other than at a divisor, a sharded dim of
    size 0, or a symbolic size). ValueError for a shape that is not sizes (a negative one, or
    not an integer: numpy's integers are the ints they equal) and for what
    ``parse_placements`` refuses."""
    shape = as_sequence(global_shape, "global_shape")
    mesh = as_sequence(mesh_shape, "mesh_shape")
    if not all(type(n) is int and n >= 0 for n in shape):
        if any(isinstance(n, SymInt) for n in shape):
            return None  # (a layout's sizes are ints)
        ints = integer_sizes(shape)
        if ints is None or min(ints, default=0) < 0:
            d = next(d for d, n in enumerate(shape) if integer_sizes((n,)) is None or n < 0)
            raise ValueError(
                f"global shape {shape}: dim {d} has size {shape[d]!r}; sizes must be ints >= 0"
            )
        shape = ints
    norm = parse_placements(as_sequence(placements, "placements"), len(shape), mesh)
    dims: list[tuple[Leaf, ...]] = [((n, LOCAL, 0),) if n != 1 else () for n in shape]
    partial: list[tuple[int, Partial]] = []
    for m, p in enumerate(norm):
        if p is None:
            continue
        if type(p) is not Sharded:
            partial.append((m, p))  # type: ignore[arg-type]  # a Partial
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
    divide ``L``, a cut falls inside a leaf other than at a divisor, or the dim is empty (its
    shards hold nothing: there is no sub-mode of ``M`` positions to make the gpu's)."""
    if mesh_size == 1:
        return leaves
    total = 1
    for s, mesh, _ in leaves:
        if mesh == LOCAL:
            total *= s
    if not total or total % (mesh_size * split_factor):
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


def compose_view(sl: ShardedLayout, rule: Sequence[Any]) -> ShardedLayout | None:
    """The sharded layout of the view ``rule`` of ``sl``: the composition of the sharded layout
    with the view's reinterpretation of coordinates, read dim by dim. None when the result
    is no DTensor sharding: a sub-mode the view cuts other than at a divisor, or one mesh
    dim's gpu sub-modes landing in two output dims (that mesh dim must move).

    A view keeps the flat index of each group of dims it merges or splits, so its layout is
    the group's leaves, in stride order, cut at the output dims' boundaries:

    - ``InputDim(d)``: dim d's leaves; ``Flatten(d0, .., dk)``: the leaves of dk, then of
      d(k-1), .. (the inner dim is the fastest); ``Split(src, sizes, j)``: the source's
      leaves whose strides fall in piece j's range, cut at its boundaries;
    - ``Repeat(d, t)``: dim d's leaves, then a local mode of the ``t`` copies (every rank
      holds each copy of its rows); ``Broadcast``, ``NewDim``: a local mode; ``Singleton``:
      none; view_as_real's ``(n, 2)``: the complex dim's leaves and a local (real, imag) mode;
      view_as_complex (a ``ComplexRule``): the (real, imag) pair must be local, and is dropped.

    Pre: ``rule`` is a rule for ``sl.global_shape``. Post: where the result is not None, it
    is ``placements_to_layout(out_shape, engine's output placements)`` for the engine's
    answer, and the engine keeps every mesh dim (property_tests/test_engine_layout.py).

    Worked example: ``(8, 16)`` on mesh ``(2, 4)`` with ``[Shard(0), Shard(1)]`` has dims
    ``8 = 4:1 (local) . 2:4 (mesh 0)`` and ``16 = 4:1 (local) . 4:4 (mesh 1)``; viewed as
    ``(128,)`` (``flat(d0, d1)``) the one output dim is ``4:1 . 4:4 (mesh 1) . 4:16 . 2:64
    (mesh 0)``, which is ``[Shard(0), _StridedShard(0, 4)]``'s layout of ``(128,)``.
    """
    shape = sl.global_shape
    complex_view = type(rule) is ComplexRule
    specs = as_rule(tuple(rule))
    leaves_of = [dim.leaves for dim in sl.dims]
    split_pieces: dict[int, list[tuple[Leaf, ...]] | None] = {}
    out: list[DimSharding] = []
    for spec in specs:
        if isinstance(spec, Split):
            key = id(spec.input_dim)
            if key not in split_pieces:
                split_pieces[key] = _pieces(spec, shape, leaves_of)
            pieces = split_pieces[key]
            if pieces is None:
                return None
            leaves: tuple[Leaf, ...] = pieces[spec.split_id]
            size = int(spec.group_shape[spec.split_id])
        else:
            routed = _routed(spec, shape, leaves_of, complex_view)
            if routed is None:
                return None
            size, leaves = routed
        out.append(DimSharding(size, _coalesce(list(leaves))))
    homes: dict[int, int] = {}
    for o, dim in enumerate(out):  # a mesh dim shards one tensor dim
        for _, mesh, _ in dim.leaves:
            if mesh != LOCAL and homes.setdefault(mesh, o) != o:
                return None
    return ShardedLayout(tuple(dim.size for dim in out), sl.mesh_shape, tuple(out), sl.partial)


def _source(spec: Any, leaves_of: list[tuple[Leaf, ...]]) -> list[Leaf]:
    """The leaves of an InputDim or a Flatten, fastest first (a Flatten's inner dim first)."""
    if isinstance(spec, InputDim):
        return list(leaves_of[spec.input_dim])
    out: list[Leaf] = []
    for d in reversed(spec.dims):
        out.extend(leaves_of[d])
    return out


def _routed(
    spec: Any, shape: tuple[int, ...], leaves_of: list[tuple[Leaf, ...]], complex_view: bool
) -> tuple[int, tuple[Leaf, ...]] | None:
    """An output dim that is not a Split piece: its size and leaves (None: no layout)."""
    if isinstance(spec, InputDim):
        return shape[spec.input_dim], leaves_of[spec.input_dim]
    if isinstance(spec, Flatten):
        dims = spec.dims
        if complex_view and dims[-1] == len(shape) - 1:  # view_as_complex: the pair is one element
            pair = leaves_of[dims[-1]]
            if any(mesh != LOCAL for _, mesh, _ in pair):
                return None  # a rank would hold half a (real, imag) pair
            dims = dims[:-1]
        size = 1
        for d in dims:
            size *= shape[d]
        out: list[Leaf] = []
        for d in reversed(dims):
            out.extend(leaves_of[d])
        return size, tuple(out)
    if isinstance(spec, Singleton):
        return 1, ()
    if isinstance(spec, NewDim):
        return _local(int(spec.size))
    if isinstance(spec, Broadcast):
        return _local(int(spec.dim_size))
    if isinstance(spec, Repeat):
        inner, times = spec.input_dim, int(spec.times)
        if isinstance(inner, InputDim):
            d = inner.input_dim
            return shape[d] * times, (*leaves_of[d], *_local(times)[1])
        return _local(times)
    raise ValueError(f"compose_view: unsupported rule entry {spec!r}")


def _local(size: int) -> tuple[int, tuple[Leaf, ...]]:
    """A dim of ``size`` that every rank holds whole: its size and leaves."""
    return size, ((size, LOCAL, 0),) if size > 1 else ()


def _pieces(
    spec: Split, shape: tuple[int, ...], leaves_of: list[tuple[Leaf, ...]]
) -> list[tuple[Leaf, ...]] | None:
    """The leaves of each piece of a Split's source (outer piece first), or None where a
    piece boundary cuts a leaf other than at a divisor."""
    sizes = spec.group_shape
    src = spec.input_dim
    leaves = _coalesce(_source(src, leaves_of))  # (a local run is cut anywhere it divides)
    total = 1
    for leaf in leaves:
        total *= leaf[0]
    if isinstance(src, InputDim) and len(sizes) == 2 and sizes[0] == total and sizes[1] == 2:
        # view_as_real: each complex element becomes a local (real, imag) pair
        return [tuple(leaves), _local(2)[1]]
    bounds = []  # each piece's [lo, hi) of strides, inner piece first
    inner = 1
    for size in map(int, reversed(sizes)):
        bounds.append((inner, inner * size))
        inner *= size
    pieces: list[list[Leaf]] = [[] for _ in sizes]
    start = 1
    for size, mesh, part in leaves:
        end = start * size
        for lo, hi in bounds:
            a, b = max(start, lo), min(end, hi)
            if a >= b:
                continue
            if a % start or end % b or b % a:
                return None  # the boundary cuts this leaf other than at a divisor
            pieces[len(sizes) - 1 - bounds.index((lo, hi))].append((b // a, mesh, part))
        start = end
    return [tuple(leaf for leaf in piece if leaf[0] > 1) for piece in pieces]

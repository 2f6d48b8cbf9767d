"""A DTensor sharding as a CuTe layout: each tensor dim split into (local, gpu) sub-modes.

For a tensor dim of size n, the row-major position ``p`` of an element inside that dim is

    p = local(i) + sum over mesh dims m sharding it of gpu_m(c_m)

where ``i`` is the element's index inside the rank's local tensor and ``c_m`` is the rank's
coordinate on mesh dim m. ``local`` and every ``gpu_m`` are CuTe layouts. Together their leaves
are a bijection onto ``[0, n)``: sorted by stride they are a compact mixed radix, so each
stride is the product of the sizes of the faster leaves. A dim is therefore stored as its
leaves in stride order, fastest first, each tagged local or ``(mesh dim, part)``. Every stride
follows from the order, and the order comes from how the leaves were made, so no stride is
ever compared (strides may be SymInts). The local layout is increasing, because DTensor keeps
elements in global order inside a shard.

DTensor applies placements left to right over mesh dims, each one on the local tensor that the
mesh dims before it left. So ``placements_to_layout`` starts every dim at ``n:1`` and, for
every Shard/_StridedShard, carves a gpu sub-mode out of the current local layout. This is
``logical_divide(local, tile)`` with CuTe's tile for that placement:

- ``Shard``: tile ``(L/M):1``. The local index splits as ``c*(L/M) + j``, so the gpu is the
  slowest factor M of the local index.
- ``_StridedShard(sf)``: tile ``(k, sf):(1, L/sf)`` with ``k = L/(sf*M)``. The gpu is the
  factor M between the fastest k and the slowest sf.

On leaves the divide is two cuts of an increasing layout: the fastest k, then the next M.
A cut that would split a leaf other than by a divisor cannot be a layout. That happens with
uneven sizes (``torch.chunk`` leaves a short tail) and with some stacks of mesh dims on one
tensor dim. ``placements_to_layout`` then returns None, and the engine hands the case to the
fallback.

Worked example: global shape (8, 16), mesh (2, 4), placements [Shard(0), _StridedShard(1, sf=2)]:

    dim 0: n=8   local 4:1          gpu(mesh 0) 2:4
    dim 1: n=16  local (2,2):(1,8)  gpu(mesh 1) 4:2

So in dim 1 a rank at mesh coordinate c1 holds positions {0,1,8,9} + 2*c1. In CuTe notation
the sharded layout is ``((4,2),((2,2),4)):((16,64),((1,8),2))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

from ..layout import Layout
from .sizes import Size, divides, is_one, is_static, prod

# A sub-mode: (size, mesh dim or LOCAL, part). ``part`` numbers a mesh dim's leaves in its
# coordinate's colexicographic order. Sizes are > 1.
Leaf = tuple[Size, int, int]
LOCAL = -1
Mode = tuple[Size, Size]  # (size, stride) of a CuTe leaf

__all__ = [
    "DimSharding",
    "MeshPlacement",
    "ShardedLayout",
    "layout_to_placements",
    "normalize_placements",
    "placements_to_layout",
]


# --------------------------------------------------------------------------------------------
# The placement list, validated and normalised

# One per mesh dim: None for Replicate, (dim, split_factor) for Shard/_StridedShard (a Shard is
# split factor 1), or the Partial object itself.
MeshPlacement = None | tuple[int, Size] | Partial


def normalize_placements(
    placements: Sequence[Placement], ndim: int, mesh_shape: Sequence[int]
) -> tuple[MeshPlacement, ...]:
    """Check ``placements`` against the tensor rank and the mesh (ValueError names the bad one)."""
    if len(placements) != len(mesh_shape):
        raise ValueError(
            f"got {len(placements)} placements for a mesh of {len(mesh_shape)} dims "
            f"{tuple(mesh_shape)}: give exactly one placement per mesh dim"
        )
    out: list[MeshPlacement] = []
    for m, (p, size) in enumerate(zip(placements, mesh_shape, strict=True)):
        if type(size) is not int or size < 1:
            raise ValueError(f"mesh dim {m} has size {size!r}; mesh sizes must be ints >= 1")
        if isinstance(p, _StridedShard):
            sf = p.split_factor
            if is_static(sf) and sf < 1:
                raise ValueError(f"mesh dim {m}: _StridedShard split_factor must be >= 1, got {sf}")
            out.append((_tensor_dim(p.dim, ndim, m), sf))
        elif isinstance(p, Shard):
            out.append((_tensor_dim(p.dim, ndim, m), 1))
        elif isinstance(p, Partial):
            out.append(p)
        elif isinstance(p, Replicate):
            out.append(None)
        else:
            raise ValueError(f"mesh dim {m}: unsupported placement {p!r}")
    return tuple(out)


def _tensor_dim(dim: int, ndim: int, mesh_dim: int) -> int:
    if not -ndim <= dim < ndim:
        raise ValueError(
            f"mesh dim {mesh_dim} shards tensor dim {dim}, out of range for a tensor of "
            f"{ndim} dims (expected -{ndim} <= dim < {ndim})"
        )
    return dim % ndim


def to_torch_placement(p: MeshPlacement) -> Placement:
    if p is None:
        return Replicate()
    if isinstance(p, Partial):
        return p
    dim, sf = p
    return Shard(dim) if is_one(sf) else _StridedShard(dim, split_factor=sf)


# --------------------------------------------------------------------------------------------
# The sharded layout


@dataclass(frozen=True, slots=True)
class DimSharding:
    """One tensor dim: its size and its sub-modes in stride order, fastest first."""

    size: Size
    leaves: tuple[Leaf, ...]

    def modes(
        self,
    ) -> tuple[tuple[tuple[Size, Size], ...], dict[int, tuple[tuple[Size, Size], ...]]]:
        """``(local, {mesh dim: gpu})`` as ``(size, stride)`` leaves with strides in the dim."""
        local: list[tuple[Size, Size]] = []
        gpu: dict[int, list[tuple[Size, Size]]] = {}
        stride: Size = 1
        for size, mesh, _ in self.leaves:
            (local if mesh == LOCAL else gpu.setdefault(mesh, [])).append((size, stride))
            stride = stride * size
        return tuple(local), {m: tuple(v) for m, v in sorted(gpu.items())}


@dataclass(frozen=True, slots=True)
class ShardedLayout:
    """The global tensor's layout with every sharded dim divided into (local, gpu) sub-modes."""

    global_shape: tuple[Size, ...]
    mesh_shape: tuple[int, ...]
    dims: tuple[DimSharding, ...]
    partial: tuple[tuple[int, Partial], ...]

    def to_layout(self) -> Layout:
        """The CuTe layout, for static sizes.

        Mode d is ``(local, (gpu_m, ...))`` of tensor dim d, with strides in elements of the
        global row-major tensor. A dim that is not sharded has just its local mode.
        """
        row = 1
        modes_shape: list[object] = []
        modes_stride: list[object] = []
        for dim in reversed(self.dims):
            local, gpu = dim.modes()
            local_shape, local_stride = _leaf_mode(local, row)
            if gpu:
                g = [_leaf_mode(leaves, row) for leaves in gpu.values()]
                gpu_shape = g[0][0] if len(g) == 1 else tuple(s for s, _ in g)
                gpu_stride = g[0][1] if len(g) == 1 else tuple(d for _, d in g)
                modes_shape.append((local_shape, gpu_shape))
                modes_stride.append((local_stride, gpu_stride))
            else:
                modes_shape.append(local_shape)
                modes_stride.append(local_stride)
            row = row * dim.size
        return Layout(tuple(reversed(modes_shape)), tuple(reversed(modes_stride)))


def _leaf_mode(leaves: tuple[tuple[Size, Size], ...], scale: int) -> tuple[object, object]:
    if not leaves:
        return 1, 0
    if len(leaves) == 1:
        return leaves[0][0], leaves[0][1] * scale
    return tuple(s for s, _ in leaves), tuple(t * scale for _, t in leaves)


def placements_to_layout(
    global_shape: Sequence[Size],
    placements: Sequence[Placement] | tuple[MeshPlacement, ...],
    mesh_shape: Sequence[int],
) -> ShardedLayout | None:
    """The sharded layout of ``placements``, or None where a layout cannot express it.

    None means a carve did not divide evenly (uneven sizes) or cut a leaf other than by a
    divisor. Placements may be torch Placement objects or the normalised form.
    """
    shape = tuple(global_shape)
    norm = _as_normalized(placements, len(shape), mesh_shape)
    dims: list[tuple[Leaf, ...]] = [((n, LOCAL, 0),) if not is_one(n) else () for n in shape]
    partial: list[tuple[int, Partial]] = []
    for m, p in enumerate(norm):
        if p is None:
            continue
        if isinstance(p, Partial):
            partial.append((m, p))
            continue
        d, sf = p
        carved = carve(dims[d], m, mesh_shape[m], sf)
        if carved is None:
            return None
        dims[d] = carved
    return ShardedLayout(
        shape,
        tuple(mesh_shape),
        tuple(DimSharding(n, leaves) for n, leaves in zip(shape, dims, strict=True)),
        tuple(partial),
    )


def _as_normalized(
    placements: Sequence[Placement] | tuple[MeshPlacement, ...],
    ndim: int,
    mesh_shape: Sequence[int],
) -> tuple[MeshPlacement, ...]:
    if all(p is None or isinstance(p, (tuple, Partial)) for p in placements):
        return tuple(placements)  # type: ignore[arg-type]
    return normalize_placements(placements, ndim, mesh_shape)  # type: ignore[arg-type]


def carve(
    leaves: tuple[Leaf, ...], mesh_dim: int, mesh_size: int, split_factor: Size
) -> tuple[Leaf, ...] | None:
    """Divide the local sub-modes of one dim for one placement on ``mesh_dim``.

    ``logical_divide(local, tile)`` with the Shard/_StridedShard tile: along the local leaves
    (the dim's leaves less the gpu leaves of earlier mesh dims), the fastest
    ``k = L/(sf*M)`` stay local, the next ``M`` become ``mesh_dim``'s gpu leaves, and the
    slowest ``sf`` stay local. Returns the dim's new leaves. Returns None when ``sf*M`` does not
    divide ``L`` or a cut falls inside a leaf other than at a divisor.
    """
    if mesh_size == 1:
        return leaves
    total = prod(s for s, mesh, _ in leaves if mesh == LOCAL)
    if not divides(mesh_size * split_factor, total):
        return None
    k = total // (mesh_size * split_factor)
    out: list[Leaf] = []
    done: Size = 1  # product of the local leaves walked so far
    part = 0
    for size, mesh, p in leaves:
        if mesh != LOCAL:
            out.append((size, mesh, p))
            continue
        # Local leaf covering [done, done*size) of the local index: the gpu is [k, k*M).
        pieces = _split_at(size, done, (k, k * mesh_size))
        if pieces is None:
            return None
        for piece_size, lo in pieces:
            inside = divides(k, lo) and not divides(k * mesh_size, lo)
            if inside:
                out.append((piece_size, mesh_dim, part))
                part += 1
            else:
                out.append((piece_size, LOCAL, 0))
        done = done * size
    return coalesce_leaves(out)


def coalesce_leaves(leaves: Sequence[Leaf]) -> tuple[Leaf, ...]:
    """Merge neighbouring sub-modes that are one mode: two local ones, or consecutive parts
    of one mesh dim (CuTe's coalesce, on the stride-ordered leaves)."""
    out: list[Leaf] = []
    for size, mesh, part in leaves:
        if out:
            last_size, last_mesh, last_part = out[-1]
            if mesh == last_mesh and (mesh == LOCAL or part == last_part + 1):
                out[-1] = (last_size * size, mesh, last_part)
                continue
        out.append((size, mesh, part))
    if len(out) == len(leaves):
        return tuple(out)
    # Renumber the parts of each mesh dim after merging.
    seen: dict[int, int] = {}
    renumbered = []
    for size, mesh, _ in out:
        part = seen.get(mesh, 0)
        seen[mesh] = part + 1
        renumbered.append((size, mesh, part if mesh != LOCAL else 0))
    return tuple(renumbered)


def _split_at(size: Size, lo: Size, cuts: tuple[Size, ...]) -> list[tuple[Size, Size]] | None:
    """Split a leaf spanning ``[lo, lo*size)`` (in products) at the cut points inside it.

    Returns ``(piece size, piece start)`` pairs. None when a cut inside the leaf does not
    divide it.
    """
    pieces: list[tuple[Size, Size]] = []
    start = lo
    end = lo * size
    for c in cuts:
        if divides(c, start) or divides(end, c):
            continue  # the cut is at or before the leaf's start, or at or past its end
        if not (divides(start, c) and divides(c // start, end // start)):
            return None
        pieces.append((c // start, start))
        start = c
    pieces.append((end // start, start))
    return [(s, p) for s, p in pieces if not is_one(s)]


# --------------------------------------------------------------------------------------------
# Reading placements back


def layout_to_placements(
    leaves: Sequence[Leaf], out_dim: int
) -> tuple[dict[int, MeshPlacement], dict[int, str]]:
    """Placements of the mesh dims whose gpu leaves lie in output dim ``out_dim``.

    ``leaves`` are the output dim's sub-modes in stride order. Mesh dims are read in order,
    as DTensor applies them. Mesh dim m sees the dim with the gpu leaves of the mesh dims
    before it removed. Its leaves must form one contiguous block there, in coordinate order.
    The product of what is slower than the block is the split factor: 1 means Shard, more
    means _StridedShard. Carving that placement out of the same local leaves gives back the
    same block, which is why the reading is exact. Returns ``(placements, failures)`` by mesh
    dim.
    """
    placements: dict[int, MeshPlacement] = {}
    failures: dict[int, str] = {}
    for m in sorted({mesh for _, mesh, _ in leaves if mesh != LOCAL}):
        current = [leaf for leaf in leaves if leaf[1] == LOCAL or leaf[1] >= m]
        at = [i for i, leaf in enumerate(current) if leaf[1] == m]
        parts = [current[i][2] for i in at]
        if at != list(range(at[0], at[-1] + 1)) or parts != sorted(parts):
            failures[m] = (
                f"its sub-modes would be interleaved with others in output dim {out_dim}, "
                "which no Shard/_StridedShard placement describes"
            )
            continue
        placements[m] = (out_dim, prod(s for s, _, _ in current[at[-1] + 1 :]))
    return placements, failures

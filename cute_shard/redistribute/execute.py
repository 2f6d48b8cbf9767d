"""Running a plan on a rank's local tensor with torch's functional collectives.

Every step is one of: a local chunk (narrow the dims whose constraints it adds), an all-reduce
or a reduce-scatter (a Partial mesh dim), an exchange over one or several mesh dims (each rank
sends each peer the box of its local tensor that the peer needs, and places the boxes it
receives: an all-gather when the boxes are whole local tensors of equal size, otherwise an
all-to-all with the boxes' sizes as splits), or a local partition (torch's own
``Partial._partition_value``).

Where each box sits is read off the ownership labels (``labels.py``): along each tensor dim, a
box is a few ranges of the sender's local index and a few of the receiver's, so packing and
unpacking are ``narrow`` and ``copy_`` on contiguous buffers: no index tensors, which keeps the
same code valid on real ranks, under ``LocalTensorMode`` and under ``torch.compile``. Most
often the boxes of a group, in group order, are a layout of the local tensor (``_layout``):
the tensor itself, its equal pieces along one dim (in rounds, for a ``_StridedShard``), its
uneven pieces, or (sent) the tensor once per member; a buffer is then one op or a few, not a
copy per peer. Example: ``(8, 64, 128)`` on (2, 4), ``[S0, S1] -> [S0, S2]``: each rank's
``(4, 16, 128)`` cut into 4 column blocks of 32 is one strided copy, and the 4 blocks of
``(4, 16, 32)`` received are its new ``(4, 64, 32)`` with one more.

The rank-dependent parts (which boxes, their sizes) are pure functions of the plan and the
rank's mesh coordinate, run through ``maybe_run_for_local_tensor``: on a real rank it calls
them once; under ``LocalTensorMode`` (every rank in one process, coordinates and sizes that
differ per rank) once per simulated rank, combining the results into per-rank tensors and
sizes that the collectives then read.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed._local_tensor import local_tensor_mode
from torch.distributed._local_tensor import maybe_run_for_local_tensor as _per_rank
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.placement_types import Partial

from .._compat import all_gather, reduce_scatter
from .labels import DimLabels, Slot
from .types import Kind, Plan, State, Step

__all__ = ["Group", "execute", "laid_out"]

Coord = tuple[int, ...]
# Per tensor dim, ranges of a local index; a box of a local tensor is one per dim.
Ranges = tuple[tuple[int, int], ...]
Box = tuple[Ranges, ...]


@dataclass(frozen=True, slots=True)
class Group:
    """A process group over several mesh dims at once: the default group, when the mesh holds
    every rank of it. ``coords[r]`` is the mesh coordinate of global rank r."""

    group: Any
    coords: tuple[Coord, ...]


def execute(
    local: torch.Tensor,
    plan: Plan,
    mesh: DeviceMesh,
    coord: Sequence[Any],
    world: Group | None,
    *,
    async_op: bool = False,
) -> torch.Tensor:
    """Run ``plan`` on this rank's ``local`` tensor (its source shard, contiguous or not) and
    return its target shard. ``coord`` is this rank's mesh coordinate (per-rank SymInts under
    ``LocalTensorMode``); ``world`` serves steps over several mesh dims.

    ``async_op``: the result may still be a collective's pending output (an
    ``AsyncCollectiveTensor``, which waits where its data is first read), so the caller's next
    computation overlaps the last collective, as DTensor's own ``async_op`` does. That is the
    case where the last step's collective output is the target shard up to views: an
    all-reduce, a reduce-scatter, an all-gather whose blocks are the target in order.
    Otherwise, and without ``async_op``, every collective has completed on return."""
    x = local
    last = len(plan.steps) - 1
    for i, step in enumerate(plan.steps):
        run = _LOCAL[step.kind] if step.collective is None else _COLLECTIVE[step.collective]
        x = run(x, At(plan, step, mesh, tuple(coord), world, async_op and i == last))
    return x if async_op else _wait(x)


def _real(buf: torch.Tensor) -> torch.Tensor:
    """A buffer as real numbers for a collective (gloo has no complex types): a complex one
    goes flat, each element two reals, so the caller doubles its sizes."""
    return torch.view_as_real(buf).reshape(-1) if buf.is_complex() else buf


def _complex(buf: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``_real`` undone."""
    return torch.view_as_complex(buf.reshape(-1, 2)) if like.is_complex() else buf


def _wait(t: torch.Tensor) -> torch.Tensor:
    """A collective's output, completed, as a plain tensor: waited on the tensor it wraps (the
    wrapper's own dispatch costs several times the wait)."""
    if isinstance(t, funcol.AsyncCollectiveTensor):
        return t.wait()
    return t


def _ready(t: torch.Tensor, pending: bool) -> torch.Tensor:
    """A collective's output as the step's local work reads it: waited, unless ``pending``
    (the last step of an ``async_op`` redistribution) on a rank of its own. A pending one is
    an ``AsyncCollectiveTensor``, which waits on the first op that reads its data, and views
    of it stay pending (what lets the last collective overlap the caller's work); but each op
    on it pays the wrapper's dispatch, several times the op, so anything else is waited at
    once. Under ``LocalTensorMode`` (every rank simulated, the collectives synchronous) it is
    always waited: the per-rank pieces read each rank's tensor out of it."""
    return t if pending and local_tensor_mode() is None else _wait(t)


class At(NamedTuple):
    """Where a step runs: the plan and the step, the mesh, the rank's coordinate, the group
    over several mesh dims (``execute``'s ``world``), and whether its collective's output may
    stay pending (``_ready``). Every step function takes the local tensor and this."""

    plan: Plan
    step: Step
    mesh: DeviceMesh
    coord: Coord
    world: Group | None
    pending: bool = False


# ----------------------------------------------------------------------------- the steps


def _chunk(x: torch.Tensor, at: At) -> torch.Tensor:
    plan, step, coord = at.plan, at.step, at.coord
    return _keep(x, plan.dims, step.before, step.after, *coord)


@_per_rank
def _keep(
    x: torch.Tensor, dims: tuple[DimLabels, ...], before: State, after: State, *coord: int
) -> torch.Tensor:
    """The part of ``x`` (held in ``before``) this rank keeps in ``after``."""
    ranges = tuple(
        d.local_ranges(b, _key(b, coord), a, _key(a, coord))
        for d, b, a in zip(dims, before, after, strict=True)
    )
    return _take(x, ranges)


def _all_reduce(x: torch.Tensor, at: At) -> torch.Tensor:
    step, mesh, pending = at.step, at.mesh, at.pending
    shape = x.shape
    for m in step.mesh_dims:
        reduced = _ready(
            funcol.all_reduce(_real(x.contiguous()), step.reduce_op or "sum", (mesh, m)),
            pending and m == step.mesh_dims[-1],
        )
        # a complex one went flat (an op on a pending output pays its wrapper's dispatch:
        # none where none is needed)
        x = _complex(reduced, x).reshape(shape) if x.is_complex() else reduced
    return x


def _reduce_scatter(x: torch.Tensor, at: At) -> torch.Tensor:
    plan, step, mesh, coord, pending = at.plan, at.step, at.mesh, at.coord, at.pending
    (m,) = step.mesh_dims
    buf = _scatter_parts(x, plan.dims, step.before, m, mesh.size(m), *coord)
    y = _ready(reduce_scatter(_real(buf), step.reduce_op or "sum", 0, (mesh, m)), pending)
    return _own_part(_complex(y, x), plan.dims, step.after, *coord)


_T = TypeVar("_T")


def _kept(of: Callable[..., _T]) -> Callable[..., _T]:
    """``of``, a pure function of a plan's dims, a step's states and a rank's coordinate
    (what one rank does in one step, read off the labels), kept in a bounded table: a program
    runs the same redistributions every step. Symbolic sizes cannot key a table: ``of`` is
    then called anew, told (``concrete=False``) to compare no sizes (see ``_exchange_of``)."""
    table = functools.lru_cache(maxsize=4096)(of)

    def kept(dims: tuple[DimLabels, ...], *args: Any) -> _T:
        if all(type(d.size) is int for d in dims):
            return table(dims, *args)
        return of(dims, *args, concrete=False)

    return kept


@_per_rank
def _scatter_parts(
    x: torch.Tensor, dims: tuple[DimLabels, ...], before: State, m: int, size: int, *coord: int
) -> torch.Tensor:
    """``x`` cut into the parts each coordinate on mesh dim m keeps, each flattened and padded
    to the largest part (ranks along m hold the same ``x``, so the buffers agree)."""
    boxes, tiled = _scattering(dims, before, m, size, coord)
    if tiled is not None:  # equal parts in order: no padding, one copy
        return _blocks_of(x, tiled, size)
    parts = [_take(x, box).reshape(-1) for box in boxes]
    width = max(p.numel() for p in parts)
    padded = [torch.nn.functional.pad(p, (0, width - p.numel())) for p in parts]
    return torch.cat(padded)


def _scattering_of(
    dims: tuple[DimLabels, ...],
    before: State,
    m: int,
    size: int,
    coord: Coord,
    concrete: bool = True,
) -> tuple[tuple[Box, ...], _Tiling | None]:
    """The box of each coordinate's part (``_scatter_parts``), and how they cut the local
    tensor, if into equal pieces in order (``_tiles``)."""
    d = next(i for i, dim in enumerate(dims) if (1, m) in dim.slots)
    dim, slots = dims[d], before[d]
    shape = _shape(dims, before, coord)
    whole: list[Ranges] = [((0, n),) if n else () for n in shape]
    boxes = []
    for c in range(size):
        ranges = list(whole)
        ranges[d] = dim.local_ranges(slots, _key(slots, coord), ((1, m),), (c,))
        boxes.append(tuple(ranges))
    tiled = _tiles(boxes, shape) if concrete else None  # (see ``_exchange_of``)
    even = tiled is not None and tiled.dim == d and not tiled.pieces  # (reduce-scatter's parts)
    return tuple(boxes), tiled if even else None


_scattering = _kept(_scattering_of)


@_per_rank
def _own_part(
    y: torch.Tensor, dims: tuple[DimLabels, ...], after: State, *coord: int
) -> torch.Tensor:
    shape = _shape(dims, after, coord)
    n = math.prod(shape)
    # (each op on a pending output pays its wrapper's dispatch: one where one does; symbolic
    # sizes are not compared, see ``_exchange_of``)
    if type(n) is int and y.numel() == n:
        return y.reshape(shape)
    return y[:n].reshape(shape)


def _exchange(x: torch.Tensor, at: At) -> torch.Tensor:
    plan, step, mesh, coord, world = at.plan, at.step, at.mesh, at.coord, at.world
    if len(step.mesh_dims) == 1:
        (m,) = step.mesh_dims
        group: Any = (mesh, m)
        peers = _along(coord, m, mesh.size(m))
    else:
        if world is None:
            raise RuntimeError(
                f"{step} needs a process group over mesh dims {step.mesh_dims}; plan with "
                "joint=False to move them one at a time"
            )
        group, peers = world.group, world.coords
    dims, before, after, md = plan.dims, step.before, step.after, step.mesh_dims
    send, *in_splits = _pack(x, dims, before, after, md, peers, *coord)
    out_splits = list(_recv_splits(dims, before, after, md, peers, *coord))
    if x.is_complex():
        in_splits, out_splits = [2 * n for n in in_splits], [2 * n for n in out_splits]
    # Waited here: the unpacking copies every block out at once, so nothing could overlap,
    # and a rank that receives nothing (its target is what it holds) would never read, so
    # never wait on, the output (torch warns of the unwaited collective at exit).
    recv = _wait(funcol.all_to_all_single(_real(send), out_splits, list(in_splits), group))
    return _unpack(_complex(recv, x), x, dims, before, after, md, peers, *coord)


def _gathered(x: torch.Tensor, at: At) -> torch.Tensor:
    """An all-gather of equal blocks: every peer's whole local tensor, placed by the labels."""
    plan, step, mesh, coord, pending = at.plan, at.step, at.mesh, at.coord, at.pending
    (m,) = step.mesh_dims
    group, peers = (mesh, m), _along(coord, m, mesh.size(m))
    # flat: ranks may hold blocks of one size but different shapes (a dim of size 0), which
    # a gather of tensors refuses
    flat = _real(x.contiguous().reshape(-1))
    gathered = _complex(_ready(all_gather(flat, 0, group), pending), x)
    return _place(gathered, x, plan.dims, step.before, step.after, peers, *coord)


@_per_rank
def _place(
    gathered: torch.Tensor,
    x: torch.Tensor,
    dims: tuple[DimLabels, ...],
    before: State,
    after: State,
    peers: tuple[Coord, ...],
    *coord: int,
) -> torch.Tensor:
    shape, boxes, tiled = _placing(dims, before, after, peers, coord)
    if boxes is None:
        return gathered.reshape(shape)  # the blocks are the target already: no copy
    # Copied out: waited first, as the first copy would wait anyway, and each op on a
    # pending output pays the wrapper's dispatch (several times the op on a rank).
    if tiled is not None:  # the blocks cut the target evenly along one dim: one copy
        return _from_blocks(_wait(gathered), tiled, len(peers), shape)
    blocks = _wait(gathered).reshape(len(peers), -1)
    out = x.new_empty(shape)
    for i, ranges in enumerate(boxes):
        _put(out, ranges, blocks[i].reshape(_lengths(ranges)))
    return out


_Placing = tuple[tuple[int, ...], tuple["Box", ...] | None, "_Tiling | None"]


def _placing_of(
    dims: tuple[DimLabels, ...],
    before: State,
    after: State,
    peers: tuple[Coord, ...],
    coord: Coord,
    concrete: bool = True,
) -> _Placing:
    """A gather's new local shape, where each peer's block goes in it (None: the blocks, one
    after another, are it) and how they cut it, if they do (``_tiles``)."""
    shape = _shape(dims, after, coord)
    boxes = tuple([_box(dims, after, coord, before, q) for q in peers])
    gathered = len(peers) * math.prod(_shape(dims, before, coord))  # every peer's block
    if _in_order(boxes, shape, gathered):
        return shape, None, None
    return shape, boxes, _tiles(boxes, shape) if concrete else None  # (see ``_exchange_of``)


_placing = _kept(_placing_of)


def _in_order(boxes: Sequence[Box], shape: tuple[int, ...], numel: int) -> bool:
    """Whether ``boxes`` (of a tensor of ``shape``), one after another, hold all of its
    ``numel`` elements in row-major order: each a slab (a dim after its first longer than 1
    whole) starting where the previous one ends. Example: ``(4, 6)`` as rows ``[0, 2)`` then
    ``[2, 4)``, yes; as columns ``[0, 3)`` then ``[3, 6)``, no."""
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    at = 0
    for box in boxes:
        lengths = _lengths(box)
        n = math.prod(lengths)
        if not n:
            continue
        if (
            any(len(r) != 1 for r in box)
            or sum(r[0][0] * s for r, s in zip(box, strides, strict=True)) != at
        ):
            return False
        whole = False  # past the first dim longer than 1: every dim whole
        for length, size in zip(lengths, shape, strict=True):
            if whole and length != size:
                return False
            whole = whole or length > 1
        at += n
    return at == math.prod(shape) == numel


@_per_rank
def _pack(
    x: torch.Tensor,
    dims: tuple[DimLabels, ...],
    before: State,
    after: State,
    mesh_dims: tuple[int, ...],
    peers: tuple[Coord, ...],
    *coord: int,
) -> tuple[Any, ...]:
    """This rank's send buffer (for each peer in group order, the box of ``x`` it needs) and
    the boxes' sizes (``_Exchange``)."""
    ex = _exchanging(dims, before, after, mesh_dims, peers, coord)
    if ex.send_as is not None:
        return (_blocks_of(x, ex.send_as, ex.members), *ex.in_splits)
    if not ex.sends:
        return (x.new_zeros((1,)), *ex.in_splits)
    return (torch.cat([_take(x, box).reshape(-1) for box in ex.sends]), *ex.in_splits)


@_per_rank
def _recv_splits(
    dims: tuple[DimLabels, ...],
    before: State,
    after: State,
    mesh_dims: tuple[int, ...],
    peers: tuple[Coord, ...],
    *coord: int,
) -> tuple[int, ...]:
    return _exchanging(dims, before, after, mesh_dims, peers, coord).out_splits


@_per_rank
def _unpack(
    recv: torch.Tensor,
    x: torch.Tensor,
    dims: tuple[DimLabels, ...],
    before: State,
    after: State,
    mesh_dims: tuple[int, ...],
    peers: tuple[Coord, ...],
    *coord: int,
) -> torch.Tensor:
    """This rank's new local tensor: its own box from ``x``, every peer's from ``recv``."""
    ex = _exchanging(dims, before, after, mesh_dims, peers, coord)
    if ex.recv_as is not None:
        return _from_blocks(recv, ex.recv_as, ex.members, ex.shape)
    out = x.new_empty(ex.shape)
    if ex.own is not None:
        _put(out, ex.own[1], _take(x, ex.own[0]))
    for offset, ranges, lengths in ex.receives:
        _put(out, ranges, recv[offset : offset + math.prod(lengths)].reshape(lengths))
    return out


class _Exchange(NamedTuple):
    """One rank's part in an exchange, read off the labels once per step and rank
    (``_exchanging``): ``sends``, the boxes of its local tensor it sends, in group order;
    ``in_splits`` and ``out_splits``, the elements it sends each peer and receives from each
    (0 for a rank outside its group); ``own``, the box of its local tensor it keeps and where
    that sits in the new one (None if empty, or sent to itself); ``receives``, per peer it
    receives from, where its block starts in the receive buffer, where it goes in the new
    local tensor, and its lengths; ``shape``, the new local shape.

    Its own box stays local, unless one of the buffers is a layout of the tensor it packs or
    unpacks (``send_as``, ``recv_as``; ``_layout`` of the boxes of the ``members`` of its
    group, itself included): the tensor itself in order, repeated, or cut into pieces along
    one dim. Then that buffer is one op or a few (``_blocks_of``, ``_from_blocks``) instead of
    a copy per peer, and the rank sends its own box to itself (counted in both splits), so
    that its block sits in its place in both buffers.

    A rank that sends nothing sends itself one element (counted in both splits): the fake
    process group (dry runs, one rank of a large world) fills what a rank receives from
    what it sends and refuses an empty send buffer."""

    sends: tuple[Box, ...]
    in_splits: tuple[int, ...]
    out_splits: tuple[int, ...]
    own: tuple[Box, Box] | None
    receives: tuple[tuple[int, Box, tuple[int, ...]], ...]
    shape: tuple[int, ...]
    send_as: _Tiling | None = None
    recv_as: _Tiling | None = None
    members: int = 0


def _exchange_of(
    dims: tuple[DimLabels, ...],
    before: State,
    after: State,
    mesh_dims: tuple[int, ...],
    peers: tuple[Coord, ...],
    coord: Coord,
    concrete: bool = True,
) -> _Exchange:
    """``_Exchange`` read off the labels. With symbolic sizes (not ``concrete``) no layout is
    looked for: telling one needs comparing sizes, and under ``torch.compile`` each
    comparison of symbolic sizes with others records a guard that would pin the graph to
    these sizes; the boxes one by one hold for every multiple of the units."""
    shape = _shape(dims, after, coord)
    me = peers.index(coord)
    group = [i for i, m in enumerate(_members(peers, coord, mesh_dims)) if m or i == me]
    sent = {i: _box(dims, before, coord, after, peers[i]) for i in group}  # what i needs of mine
    placed = {i: _box(dims, after, coord, before, peers[i]) for i in group}  # where i's goes
    send_as = _layout(list(sent.values()), _shape(dims, before, coord)) if concrete else None
    recv_as = _layout(list(placed.values()), shape) if concrete else None
    size = {i: math.prod(_lengths(box)) for i, box in sent.items()}
    if (send_as is None and recv_as is None) or not any(size.values()):
        group.remove(me)  # its own box stays local
        send_as = recv_as = None
    in_splits, out_splits = [0] * len(peers), [0] * len(peers)
    sends: list[Box] = []
    blocks: list[tuple[int, Box, tuple[int, ...]]] = []  # (peer index, box, lengths)
    for i in group:
        if size[i]:
            sends.append(sent[i])
            in_splits[i] = size[i]
        lengths = _lengths(placed[i])
        out_splits[i] = math.prod(lengths)
        if out_splits[i]:
            blocks.append((i, placed[i], lengths))
    if not sends:  # the element it sends itself (see ``_Exchange``)
        in_splits[me] = out_splits[me] = 1
    starts = [0, *itertools.accumulate(out_splits)]
    own = None
    if me not in group and size[me]:
        own = (sent[me], placed[me])
    return _Exchange(
        tuple(sends),
        tuple(in_splits),
        tuple(out_splits),
        own,
        tuple([(starts[i], box, lengths) for i, box, lengths in blocks]),
        shape,
        send_as,
        recv_as,
        len(group),
    )


_exchanging = _kept(_exchange_of)


def _layout(boxes: Sequence[Box], shape: tuple[int, ...]) -> _Tiling | None:
    """How boxes (one per member of a group, in group order) lay out a tensor of ``shape``:
    one after another in row-major order (``IN_ORDER``; ``_in_order``), each the whole
    tensor (``REPEATED``: an uneven gather, where every member needs all of it), as pieces
    along one dim (``_tiles``), or none of these (None)."""
    if _in_order(boxes, shape, sum(math.prod(_lengths(box)) for box in boxes)):
        return IN_ORDER
    whole = tuple([((0, size),) for size in shape])
    if len(boxes) > 1 and all(shape) and all(box == whole for box in boxes):
        return REPEATED
    return _tiles(boxes, shape)


class _Tiling(NamedTuple):
    """How boxes, one per peer in group order, cut a tensor (``_tiles``): along ``dim``, in
    ``rounds`` rounds of one equal piece per peer (1: consecutive pieces; more: the pieces of
    a strided shard, a peer's ranges one round apart), every other dim whole; or, with
    ``pieces``, in one round of consecutive pieces of those lengths (torch.chunk's uneven
    ones; empty ones too). ``IN_ORDER`` (dim -1): the boxes one after another are the tensor
    in row-major order. ``REPEATED`` (dim -2): each box is the whole tensor (only what a
    rank sends can be: the blocks it receives are disjoint)."""

    dim: int
    rounds: int
    pieces: tuple[int, ...] = ()


IN_ORDER = _Tiling(-1, 0)
REPEATED = _Tiling(-2, 0)


def _tiles(boxes: Sequence[Box], shape: tuple[int, ...]) -> _Tiling | None:
    """How ``boxes`` (one per peer, in group order) cut a tensor of ``shape`` into pieces
    along one dim (``_Tiling``), or None. Examples, ``(4, 6)``: as columns ``[0, 3)`` then
    ``[3, 6)``, dim 1 in one round; as ``[0, 1) + [2, 3) + [4, 5)`` then ``[1, 2) + [3, 4) +
    [5, 6)``, dim 1 in three rounds; as ``[0, 4)`` then ``[4, 6)``, dim 1 in pieces 4, 2."""
    n = len(boxes)
    if n < 2 or not all(shape):
        return None
    whole = [((0, size),) for size in shape]
    cut = {d for box in boxes for d, r in enumerate(box) if r != whole[d]}
    if len(cut) != 1:
        return None
    (d,) = cut
    cuts = [box[d] for box in boxes]
    rounds = len(cuts[0])
    if rounds and all(len(c) == rounds for c in cuts):  # equal pieces, dealt in rounds?
        piece = cuts[0][0][1] - cuts[0][0][0]
        if rounds * n * piece == shape[d]:
            step = n * piece
            for i, c in enumerate(cuts):
                starts = range(i * piece, shape[d], step)
                if c != tuple(
                    zip(starts, range(i * piece + piece, shape[d] + 1, step), strict=True)
                ):
                    break
            else:
                return _Tiling(d, rounds)
    at, pieces = 0, []  # consecutive pieces of any lengths?
    for c in cuts:
        if len(c) > 1 or (c and c[0][0] != at):
            return None
        pieces.append(c[0][1] - at if c else 0)
        at += pieces[-1]
    return _Tiling(d, 1, tuple(pieces)) if at == shape[d] else None


def _blocks_of(x: torch.Tensor, t: _Tiling, n: int) -> torch.Tensor:
    """``x`` cut as ``t`` into ``n`` pieces, the pieces one after another, each row-major:
    one flat buffer (a strided copy, or none where the pieces are ``x`` in order; unequal
    pieces, one copy each)."""
    if t == IN_ORDER:
        return x.contiguous().view(-1)
    if t == REPEATED:
        return x.reshape(-1).repeat(n)
    d, shape = t.dim, x.shape
    if t.pieces:
        return torch.cat([p.reshape(-1) for p in x.split_with_sizes(list(t.pieces), dim=d)])
    grid = x.reshape(*shape[:d], t.rounds, n, shape[d] // (t.rounds * n), *shape[d + 1 :])
    return grid.movedim(d + 1, 0).contiguous().view(-1)  # (the reshape is a view)


def _from_blocks(buf: torch.Tensor, t: _Tiling, n: int, shape: tuple[int, ...]) -> torch.Tensor:
    """``_blocks_of`` undone: ``n`` row-major pieces one after another in ``buf``, put back
    as ``t`` cuts a new contiguous tensor of ``shape`` (one copy, or none where the pieces
    are it in order)."""
    if t == IN_ORDER:
        return buf.view(shape)
    d = t.dim
    if t.pieces:  # each piece viewed in its shape, all concatenated along d: one copy
        rest = math.prod(shape) // shape[d]
        flat = buf.split_with_sizes([length * rest for length in t.pieces])
        return torch.cat(
            [v.view(*shape[:d], k, *shape[d + 1 :]) for v, k in zip(flat, t.pieces, strict=True)],
            dim=d,
        )
    grid = buf.view(n, *shape[:d], t.rounds, shape[d] // (t.rounds * n), *shape[d + 1 :])
    return grid.movedim(0, d + 1).contiguous().view(shape)


def _partition(x: torch.Tensor, at: At) -> torch.Tensor:
    step, mesh = at.step, at.mesh
    for m in step.mesh_dims:
        x = Partial(step.reduce_op or "sum")._partition_value(x, mesh, m)
    return x


# Each step runs as its ``collective`` says (``Step.collective`` decides), or locally.
_COLLECTIVE: dict[str, Callable[..., torch.Tensor]] = {
    "all_reduce": _all_reduce,
    "reduce_scatter_tensor": _reduce_scatter,
    "all_gather_into_tensor": _gathered,
    "all_to_all_single": _exchange,
}
_LOCAL: dict[Kind, Callable[..., torch.Tensor]] = {Kind.CHUNK: _chunk, Kind.PARTITION: _partition}


# ------------------------------------------------------------------ boxes of local tensors


def _key(slots: tuple[Slot, ...], coord: Sequence[int]) -> tuple[int, ...]:
    return tuple(coord[m] for _, m in slots)


def _shape(dims: tuple[DimLabels, ...], state: State, coord: Sequence[int]) -> tuple[int, ...]:
    return tuple(
        d.counts(slots).get(_key(slots, coord), 0) if slots else d.size
        for d, slots in zip(dims, state, strict=True)
    )


def _box(
    dims: tuple[DimLabels, ...], held: State, holder: Sequence[int], other: State, by: Sequence[int]
) -> Box:
    """Per dim, the ranges of ``holder``'s local index (state ``held``) at positions that the
    rank ``by`` holds in state ``other``: where one rank's part of another's sits."""
    return tuple(
        d.local_ranges(h, _key(h, holder), o, _key(o, by))
        for d, h, o in zip(dims, held, other, strict=True)
    )


def _members(peers: tuple[Coord, ...], coord: Coord, mesh_dims: tuple[int, ...]) -> list[bool]:
    """For each of ``peers``, whether it is another rank of this rank's group: the same
    coordinate off ``mesh_dims``, not ``coord`` itself. Once per step: a step over several
    mesh dims lists every rank of the world as a peer."""
    off = [m for m in range(len(coord)) if m not in mesh_dims]
    if not off:
        return [q != coord for q in peers]
    get = operator.itemgetter(*off)
    mine = get(coord)
    return [get(q) == mine and q != coord for q in peers]


def _along(coord: Coord, m: int, size: int) -> tuple[Coord, ...]:
    """The ranks of ``coord``'s group along mesh dim m, in group order (under
    ``LocalTensorMode`` the other coordinates stay per-rank values)."""
    return tuple(tuple(c if i == m else x for i, x in enumerate(coord)) for c in range(size))


def _lengths(ranges: Box) -> tuple[int, ...]:
    return tuple(sum(b - a for a, b in r) for r in ranges)


def _take(x: torch.Tensor, ranges: Box) -> torch.Tensor:
    """The box of ``x`` at ``ranges`` (per dim), as a new tensor dense in ``x``'s order of
    dims (contiguous for a contiguous ``x``), as torch's chunk clones a shard. The DTensor's
    global strides keep that order, and a later local ``view`` (a reshape torch decides by
    the global strides) needs the local tensor to follow them: a row-major box of a
    transposed ``x`` is not viewable where the global tensor is."""
    lengths = _lengths(ranges)
    if lengths == tuple(x.shape):
        return _dense(x)
    if not math.prod(lengths):
        return x.new_empty(lengths)
    for d, r in enumerate(ranges):
        if len(r) == 1:
            x = x.narrow(d, r[0][0], r[0][1] - r[0][0])
    if all(len(r) <= 1 for r in ranges):
        return _dense(x)
    if x.is_contiguous():
        out = x.new_empty(lengths)
    else:  # dense in x's order of dims
        strides = x.stride()
        out = _empty_in_order(x, lengths, sorted(range(x.dim()), key=lambda d: -strides[d]))
    _put_from(out, x, ranges)
    return out


def _empty_in_order(like: torch.Tensor, shape: Sequence[int], order: Sequence[int]) -> torch.Tensor:
    """A new tensor of ``shape`` dense in the order of dims ``order`` (outermost first):
    allocated in that order, then viewed back."""
    back = sorted(range(len(order)), key=order.__getitem__)  # the inverse permutation
    return like.new_empty([shape[d] for d in order]).permute(back)


@_per_rank
def laid_out(out: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """``out`` dense in the order of dims ``order`` (outermost first), copied only if it is
    not: what a DTensor whose global strides are in that order needs of its local tensor (a
    collective's output is row-major; torch decides a view by the global strides, and a later
    view the global tensor allows must be one of the local tensor too)."""
    strides, sizes = out.stride(), out.shape
    kept = [d for d in order if sizes[d] > 1]  # a dim of one element has no place in memory
    if all(strides[a] >= strides[b] for a, b in itertools.pairwise(kept)) and _fills(out):
        return out
    res = _empty_in_order(out, sizes, order)
    res.copy_(out)
    return res


def _fills(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill its storage span without gaps or overlaps."""
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True) if n)
    return t.numel() == 0 or span == t.numel()


def _dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` if contiguous, else a copy dense in its order of dims (``preserve_format``)."""
    return x if x.is_contiguous() else x.clone(memory_format=torch.preserve_format)


def _put_from(out: torch.Tensor, x: torch.Tensor, ranges: Box) -> None:
    """Copy the multi-range dims of box ``ranges`` of ``x`` (single ranges already narrowed)
    into ``out``, piece by piece."""
    d = next((i for i, r in enumerate(ranges) if len(r) > 1), None)
    if d is None:
        out.copy_(x)
        return
    at = 0
    for a, b in ranges[d]:
        sub: list[Ranges] = list(ranges)
        sub[d] = ((0, b - a),)
        _put_from(out.narrow(d, at, b - a), x.narrow(d, a, b - a), tuple(sub))
        at += b - a


def _put(out: torch.Tensor, ranges: Box, block: torch.Tensor) -> None:
    """Copy ``block`` into the box of ``out`` at ``ranges``."""
    d = next((i for i, r in enumerate(ranges) if len(r) != 1), None)
    if d is None:
        for i, r in enumerate(ranges):
            out = out.narrow(i, r[0][0], r[0][1] - r[0][0])
        out.copy_(block)
        return
    at = 0
    for a, b in ranges[d]:
        sub: list[Ranges] = list(ranges)
        sub[d] = ((a, b),)
        _put(out, tuple(sub), block.narrow(d, at, b - a))
        at += b - a

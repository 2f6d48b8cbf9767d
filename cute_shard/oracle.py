"""An exact, brute-force DTensor rank simulator used as ground truth for view-op sharding.

This module knows nothing about layouts or DimMap rules: it decides whether an
output sharding is valid for a view op by *running* the op on every rank of a
simulated device mesh, with integer ``arange`` data so every element is
identifiable, and comparing against the sharded global result.

DTensor semantics simulated here
--------------------------------
A DTensor has a global shape, a device mesh of shape ``(M0, M1, ...)`` and one
placement per mesh dim.  Placements apply left to right; each one acts on the
local tensor produced by the mesh dims before it.  For the rank whose coordinate
on mesh dim ``i`` is ``c``:

* ``Shard(d)``: dim ``d`` (current local length ``L``) is chunked like
  ``torch.chunk``: chunk size ``k = ceil(L / M)``, the rank keeps positions
  ``[c*k, min((c+1)*k, L))`` - possibly none (uneven sharding).
* ``_StridedShard(d, split_factor=sf)``: dim ``d`` is chunked into ``sf`` pieces
  (same chunk rule), every piece is chunked into ``M``, and the rank keeps the
  ``c``-th chunk of every piece, concatenated in piece order.  ``sf == 1`` is
  ``Shard(d)``.
* ``Replicate()`` and ``Partial(op)``: the rank keeps everything.  For index
  purposes ``Partial`` is ``Replicate``; view ops carry it through unchanged.

These rules agree with ``Shard._split_tensor`` / ``_StridedShard._split_tensor``
(``with_padding=False``) and with
``torch.distributed.tensor._utils._compute_local_shape_and_global_offset``, and the
local-op conventions below agree with real DTensor view ops run under
``LocalTensorMode``; ``property_tests/test_oracle_vs_torch.py`` checks all three.

Because every placement touches exactly one tensor dim, a rank's local tensor is
always an outer product of per-dim index lists: ``global[np.ix_(i0, i1, ...)]``.
:func:`local_indices` computes those lists (vectorised, one ``numpy`` mask per
placement), which makes simulating all ranks cheap.

How validity is decided
-----------------------
DTensor runs a view op by computing each rank's local *output* shape from the
global output shape and the output placements, then running the op on the local
tensor (``local.view(local_out_shape)`` for view/reshape/expand, the same
arguments as the global call for permute, transpose, ...).  So output placements
are valid for an op and input placements iff, on every rank, the local op

1. does not raise, and
2. returns exactly (shape, dtype and every value) the rank's local shard of the
   globally-op'd tensor under the output placements,

and, in addition, every mesh dim is ``Partial`` in the input iff it is the same
``Partial`` (same reduce op) in the output.

Worked example
--------------
``(24,) -> (2, 12)`` on mesh ``(2, 3)`` with input ``[Shard(0), Shard(0)]``: the
rank at ``(1, 2)`` holds global elements ``[20, 24)``; its local output shape
under ``[Shard(0), Shard(1)]`` is ``(1, 4)``; ``local.view(1, 4)`` is
``[[20, 21, 22, 23]]``, which is exactly row 1, columns ``[8, 12)`` of the
reshaped global tensor.  The same holds on the other five ranks, so::

    >>> from torch.distributed.tensor.placement_types import Shard
    >>> check_reshape((24,), (2, 12), [Shard(0), Shard(0)], [Shard(0), Shard(1)], (2, 3)).ok
    True
    >>> find_zero_comm_answer((24,), [Shard(0), Shard(0)], (2, 3), "view", ((2, 12),))
    (Shard(dim=0), Shard(dim=1))

Local op conventions
--------------------
Local input tensors are contiguous (what ``distribute_tensor`` produces), so a
local ``view`` only fails when the element count does not match and
``strict_view`` (``view`` or ``reshape`` as the local call of ``reshape``,
``flatten`` and ``unflatten``) gives the same verdicts here; it matters only for
callers of :func:`check_view` that build non-contiguous local inputs themselves.

* ``view``/``reshape``/``expand``: the shape argument is the LOCAL output shape
  (DTensor rewrites it in ``ShardingPropagator._adjust_shape_and_stride_args``).
* ``flatten``/``unflatten``: CompositeImplicit ops, so DTensor only ever sees the
  ``view``/``reshape`` they decompose to; the local op is therefore a view to the
  local output shape, not a local flatten/unflatten with the global arguments.
* ``squeeze``: DTensor rewrites it to ``squeeze.dims`` over the dims that are
  size 1 *globally* (``_adjust_squeeze_to_global_singletons``); the local op does
  the same, so a sharded dim whose local length happens to be 1 is not squeezed.
* ``permute``/``transpose``/``unsqueeze``/``movedim``/``repeat``/
  ``view_as_real``/``view_as_complex``: the same arguments as the global op.

Identifiable data: ``int64`` ``arange`` for most ops, ``float64`` ``arange`` for
``view_as_complex`` and ``complex128`` with real part ``2i`` and imaginary part
``2i + 1`` for ``view_as_real`` (exact in float64 for any realistic size).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

__all__ = [
    "DEFAULT_EXHAUSTIVE_SF_LIMIT",
    "DEFAULT_MAX_NODES",
    "SUPPORTED_OPS",
    "CommCost",
    "SearchLimitExceeded",
    "SearchResult",
    "Verdict",
    "canonicalize",
    "check_op",
    "check_reshape",
    "check_view",
    "communication_cost",
    "find_zero_comm_answer",
    "identifiable_tensor",
    "is_canonical",
    "local_indices",
    "local_shape",
    "local_shard",
    "mesh_coords",
    "search_zero_comm",
    "zero_comm_answers",
]

#: Split factors ``2..L`` are tried exhaustively for an output dim whose current
#: local length ``L`` is at most this; above it the search tries ``2..limit`` plus
#: every divisor of ``L`` and of the dim's global size (see :func:`search_zero_comm`).
DEFAULT_EXHAUSTIVE_SF_LIMIT = 256

#: Upper bound on (mesh dim, candidate placement) evaluations in one search.
DEFAULT_MAX_NODES = 200_000

SUPPORTED_OPS = (
    "view",
    "reshape",
    "expand",
    "permute",
    "transpose",
    "unsqueeze",
    "squeeze",
    "repeat",
    "movedim",
    "flatten",
    "unflatten",
    "view_as_real",
    "view_as_complex",
)

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)
LocalOp = Callable[[torch.Tensor, tuple[int, ...]], torch.Tensor]
GlobalOp = Callable[[torch.Tensor], torch.Tensor]
# prefix mesh coordinate -> per-dim global index lists held by the ranks with that prefix
_State = dict[tuple[int, ...], tuple[np.ndarray, ...]]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Verdict:
    """Whether an output sharding is valid; ``reason`` names the failing rank and the difference."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class SearchResult:
    """Outcome of :func:`search_zero_comm`.

    ``answers`` are the valid output placement lists found (in enumeration order).
    ``exhausted`` is False when the node cap stopped the search (or ``stop_at_first``
    stopped it after an answer), in which case an empty ``answers`` proves nothing.
    """

    answers: tuple[tuple[Placement, ...], ...]
    exhausted: bool
    nodes: int


class SearchLimitExceeded(RuntimeError):
    """The brute-force search hit ``max_nodes`` before it could give a complete answer."""


@dataclass(frozen=True)
class CommCost:
    """A rough, documented communication measure between two placement lists of one tensor.

    * ``changed_mesh_dims``: mesh dims whose placement differs.
    * ``sharded_to_replicate``: of those, the ones going from ``Shard``/``_StridedShard``
      to ``Replicate`` (all-gathers).
    * ``partial_resolved``: mesh dims that are ``Partial`` in the original and not (with
      the same reduce op) in the proposal (reductions).
    * ``elements_received`` / ``max_elements_received``: summed over / maximised over
      ranks, the number of elements of the proposed local tensor that the rank does not
      already hold in its original local tensor.  If any mesh dim is in
      ``partial_resolved`` the whole proposed local tensor counts, because every value
      has to be reduced across ranks.  Turning a non-Partial dim into ``Partial`` is a
      local operation and costs nothing here.
    """

    changed_mesh_dims: tuple[int, ...]
    sharded_to_replicate: tuple[int, ...]
    partial_resolved: tuple[int, ...]
    elements_received: int
    max_elements_received: int

    @property
    def num_changed(self) -> int:
        return len(self.changed_mesh_dims)

    def bytes_received(self, itemsize: int) -> int:
        """Total bytes received over all ranks for elements of ``itemsize`` bytes."""
        return self.elements_received * itemsize


# --------------------------------------------------------------------------- validation


def _check_shape(shape: Sequence[int], name: str) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in shape)
    except TypeError as exc:
        raise ValueError(f"{name} must be a sequence of ints, got {shape!r}") from exc
    if any(s < 0 for s in out):
        raise ValueError(f"{name} must have non-negative sizes, got {out}")
    return out


def _check_mesh(mesh_shape: Sequence[int]) -> tuple[int, ...]:
    mesh = _check_shape(mesh_shape, "mesh_shape")
    if len(mesh) == 0 or any(m < 1 for m in mesh):
        raise ValueError(f"mesh_shape must be a non-empty sequence of positive ints, got {mesh}")
    return mesh


def _check_coord(coord: Sequence[int], mesh: tuple[int, ...]) -> tuple[int, ...]:
    c = tuple(int(x) for x in coord)
    if len(c) != len(mesh) or any(not 0 <= x < m for x, m in zip(c, mesh, strict=True)):
        raise ValueError(f"coord {c} is not a coordinate of mesh {mesh}")
    return c


def _check_placements(
    placements: Sequence[Placement], ndim: int, mesh: tuple[int, ...], name: str
) -> tuple[Placement, ...]:
    """Validate placements against a tensor rank and mesh; normalise negative shard dims."""
    ps = tuple(placements)
    if len(ps) != len(mesh):
        raise ValueError(f"{name} has {len(ps)} placements but the mesh has {len(mesh)} dims")
    out: list[Placement] = []
    for i, p in enumerate(ps):
        if isinstance(p, (Shard, _StridedShard)):
            d = p.dim + ndim if p.dim < 0 else p.dim
            if not 0 <= d < ndim:
                raise ValueError(f"{name}[{i}] = {p!r} shards dim {p.dim} of a {ndim}-d tensor")
            if isinstance(p, _StridedShard):
                sf = int(p.split_factor)
                if sf < 1:
                    raise ValueError(f"{name}[{i}] = {p!r} has split_factor < 1")
                out.append(p if d == p.dim else _StridedShard(d, split_factor=sf))
            else:
                out.append(p if d == p.dim else Shard(d))
        elif isinstance(p, (Replicate, Partial)):
            out.append(p)
        else:
            raise ValueError(f"{name}[{i}] = {p!r} is not Shard/_StridedShard/Replicate/Partial")
    return tuple(out)


# --------------------------------------------------------------------------- simulator


def mesh_coords(mesh_shape: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every coordinate of the mesh, in row-major (global rank) order."""
    return itertools.product(*(range(m) for m in _check_mesh(mesh_shape)))


@functools.lru_cache(maxsize=4096)
def _owner(length: int, mesh_size: int, split_factor: int) -> np.ndarray:
    """``owner[p]`` = coordinate on the mesh dim that keeps position ``p`` of a dim.

    ``split_factor == 1`` is ``Shard``; larger values are ``_StridedShard``.  Every
    position has exactly one owner, so the chunks partition the dim (this is what
    lets the search compare element *sets* per mesh-dim prefix).
    """
    pos = np.arange(length, dtype=np.int64)
    if length == 0:
        pos.setflags(write=False)
        return pos
    k1 = -(-length // split_factor)  # torch.chunk piece size
    piece = pos // k1
    offset = pos - piece * k1
    piece_len = np.minimum(k1, length - piece * k1)  # >= 1 for every existing position
    k2 = -(-piece_len // mesh_size)
    owner: np.ndarray = offset // k2
    owner.setflags(write=False)  # cached: must never be mutated by a caller
    return owner


def _split_factor(p: Placement) -> int:
    return int(p.split_factor) if isinstance(p, _StridedShard) else 1


def _apply(
    idx: tuple[np.ndarray, ...], p: Placement, mesh_size: int, c: int
) -> tuple[np.ndarray, ...]:
    """Restrict per-dim index lists by one placement for mesh coordinate ``c``."""
    if not isinstance(p, (Shard, _StridedShard)):
        return idx
    d = p.dim
    owner = _owner(len(idx[d]), mesh_size, _split_factor(p))
    return (*idx[:d], idx[d][owner == c], *idx[d + 1 :])


def local_indices(
    global_shape: Sequence[int],
    placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    coord: Sequence[int],
) -> tuple[np.ndarray, ...]:
    """Per tensor dim, the ascending global indices held by the rank at ``coord``.

    The rank's local tensor is ``global[np.ix_(*local_indices(...))]``.
    """
    shape = _check_shape(global_shape, "global_shape")
    mesh = _check_mesh(mesh_shape)
    ps = _check_placements(placements, len(shape), mesh, "placements")
    c = _check_coord(coord, mesh)
    idx = tuple(np.arange(n, dtype=np.int64) for n in shape)
    for p, m, ci in zip(ps, mesh, c, strict=True):
        idx = _apply(idx, p, m, ci)
    return idx


def local_shape(
    global_shape: Sequence[int],
    placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    coord: Sequence[int],
) -> tuple[int, ...]:
    """Shape of the local tensor of the rank at ``coord`` (no padding)."""
    return tuple(len(i) for i in local_indices(global_shape, placements, mesh_shape, coord))


def _take(array: ArrayT, idx: tuple[np.ndarray, ...]) -> ArrayT:
    """``array[np.ix_(*idx)]`` for numpy or torch; trailing dims not in ``idx`` are kept."""
    if len(idx) == 0:
        return array.copy() if isinstance(array, np.ndarray) else array.clone()
    grids = np.ix_(*idx)
    if isinstance(array, np.ndarray):
        taken: np.ndarray = array[grids]
        return taken
    return array[tuple(torch.from_numpy(g) for g in grids)]


def local_shard(
    global_array: ArrayT,
    placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    coord: Sequence[int],
) -> ArrayT:
    """The (contiguous, copied) local tensor of the rank at ``coord``.

    ``global_array`` is a ``numpy.ndarray`` or ``torch.Tensor``; the result has the
    same type.  ``Partial`` is treated like ``Replicate``.
    """
    if not isinstance(global_array, (np.ndarray, torch.Tensor)):
        raise ValueError(
            f"global_array must be a numpy array or torch tensor, got {type(global_array)}"
        )
    idx = local_indices(tuple(global_array.shape), placements, mesh_shape, coord)
    return _take(global_array, idx)


def identifiable_tensor(
    global_shape: Sequence[int], dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """A tensor whose every scalar is distinct: ``arange``, or ``2i + (2i+1)j`` for complex."""
    shape = _check_shape(global_shape, "global_shape")
    n = math.prod(shape)
    if dtype.is_complex:
        base = torch.arange(n, dtype=torch.float64) * 2
        return torch.complex(base, base + 1).to(dtype).reshape(shape)
    if dtype in (torch.int64, torch.float64):
        return torch.arange(n, dtype=dtype).reshape(shape)
    raise ValueError(f"dtype must be int64, float64 or complex, got {dtype}")


def _scalar_ids(t: torch.Tensor) -> np.ndarray:
    """Scalar identities as int64 numpy; a complex tensor gains a trailing (real, imag) dim."""
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.detach().to(torch.int64).contiguous().numpy()


# --------------------------------------------------------------------------- ops


@dataclass(frozen=True)
class _OpSpec:
    name: str
    global_fn: GlobalOp
    local_fn: LocalOp
    dtype: torch.dtype
    # True when the op is a bijection on scalars (every op except expand/repeat);
    # lets the search demand set *equality* per mesh-dim prefix instead of inclusion.
    bijective: bool = field(default=True)


def _as_int_tuple(x: object, name: str) -> tuple[int, ...]:
    if isinstance(x, int):
        return (x,)
    if isinstance(x, (tuple, list, torch.Size)):
        return tuple(int(v) for v in x)
    raise ValueError(f"{name} must be an int or a sequence of ints, got {x!r}")


def _make_op(
    op: str, args: Sequence[object], global_shape: tuple[int, ...], strict_view: bool
) -> _OpSpec:
    """Global and local callables for a named op (see the module docstring for the local args)."""
    a = tuple(args)

    def arity(*allowed: int) -> None:
        if len(a) not in allowed:
            raise ValueError(f"args for {op!r} must have length in {allowed}, got {a!r}")

    def local_view(t: torch.Tensor, s: tuple[int, ...]) -> torch.Tensor:
        return t.view(s) if strict_view else t.reshape(s)

    def global_same_args(fn: Callable[..., torch.Tensor]) -> GlobalOp:
        return lambda t: fn(t, *a)

    def same_args(fn: Callable[..., torch.Tensor]) -> LocalOp:
        return lambda t, _s: fn(t, *a)

    if op in ("view", "reshape"):
        arity(1)
        shape = _as_int_tuple(a[0], "args[0]")
        gfn: GlobalOp = (lambda t: t.view(shape)) if op == "view" else (lambda t: t.reshape(shape))
        return _OpSpec(op, gfn, local_view, torch.int64)
    if op == "expand":
        arity(1)
        shape = _as_int_tuple(a[0], "args[0]")
        return _OpSpec(op, lambda t: t.expand(shape), lambda t, s: t.expand(s), torch.int64, False)
    if op == "repeat":
        arity(1)
        reps = _as_int_tuple(a[0], "args[0]")
        return _OpSpec(
            op, lambda t: t.repeat(reps), lambda t, _s: t.repeat(reps), torch.int64, False
        )
    if op == "permute":
        arity(1)
        dims = _as_int_tuple(a[0], "args[0]")
        return _OpSpec(op, lambda t: t.permute(dims), lambda t, _s: t.permute(dims), torch.int64)
    if op == "transpose":
        arity(2)
        return _OpSpec(
            op, global_same_args(torch.transpose), same_args(torch.transpose), torch.int64
        )
    if op == "movedim":
        arity(2)
        return _OpSpec(op, global_same_args(torch.movedim), same_args(torch.movedim), torch.int64)
    if op == "unsqueeze":
        arity(1)
        return _OpSpec(
            op, global_same_args(torch.unsqueeze), same_args(torch.unsqueeze), torch.int64
        )
    if op == "squeeze":
        arity(0, 1)
        nd = len(global_shape)
        wanted = range(nd) if not a else _as_int_tuple(a[0], "args[0]")
        # DTensor squeezes only the dims that are size 1 globally (see module docstring).
        target = tuple(sorted({d % nd for d in wanted if -nd <= d < nd and global_shape[d] == 1}))
        sq: GlobalOp = lambda t: t.squeeze(target)  # noqa: E731
        return _OpSpec(op, sq, lambda t, _s: sq(t), torch.int64)
    if op == "flatten":
        arity(0, 1, 2)
        return _OpSpec(op, global_same_args(torch.flatten), local_view, torch.int64)
    if op == "unflatten":
        arity(2)
        dim, sizes = int(a[0]), _as_int_tuple(a[1], "args[1]")  # type: ignore[call-overload]
        return _OpSpec(
            op,
            lambda t: t.unflatten(dim, sizes),  # type: ignore[no-untyped-call]
            local_view,
            torch.int64,
        )
    if op == "view_as_real":
        arity(0)
        return _OpSpec(
            op, torch.view_as_real, lambda t, _s: torch.view_as_real(t), torch.complex128
        )
    if op == "view_as_complex":
        arity(0)
        return _OpSpec(
            op, torch.view_as_complex, lambda t, _s: torch.view_as_complex(t), torch.float64
        )
    raise ValueError(f"op must be one of {SUPPORTED_OPS}, got {op!r}")


# --------------------------------------------------------------------------- checking


def _partial_mismatch(ins: tuple[Placement, ...], outs: tuple[Placement, ...]) -> str | None:
    for i, (p, q) in enumerate(zip(ins, outs, strict=True)):
        if isinstance(p, Partial) or isinstance(q, Partial):
            if p != q:
                return (
                    f"mesh dim {i}: input {p} and output {q} must be the same Partial "
                    "(view ops keep Partial)"
                )
    return None


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    diff = (got != want).reshape(-1).nonzero()
    flat = int(diff[0]) if len(diff) else 0
    pos = tuple(int(i) for i in np.unravel_index(flat, tuple(want.shape))) if want.numel() else ()
    return f"at local index {pos}: got {got[pos].item()}, expected {want[pos].item()}"


def _check_rank(
    coord: tuple[int, ...],
    local_in: torch.Tensor,
    out_shape: tuple[int, ...],
    global_out: torch.Tensor,
    out_p: tuple[Placement, ...],
    mesh: tuple[int, ...],
    local_op: LocalOp,
) -> str | None:
    """None if the rank matches, else a description of the first difference."""
    out_idx = tuple(np.arange(n, dtype=np.int64) for n in out_shape)
    for p, m, ci in zip(out_p, mesh, coord, strict=True):
        out_idx = _apply(out_idx, p, m, ci)
    want_shape = tuple(len(i) for i in out_idx)
    try:
        got = local_op(local_in, want_shape)
    except (RuntimeError, ValueError, IndexError) as exc:
        # A local op that raises is exactly what DTensor would hit at run time.
        return (
            f"rank {coord}: local op raised {type(exc).__name__}: {exc} "
            f"(local input shape {tuple(local_in.shape)}, local output shape {want_shape})"
        )
    want = _take(global_out, out_idx)
    if tuple(got.shape) != tuple(want.shape):
        return (
            f"rank {coord}: local result has shape {tuple(got.shape)}, expected the local shard "
            f"shape {tuple(want.shape)} (local input shape {tuple(local_in.shape)})"
        )
    if got.dtype != want.dtype:
        return f"rank {coord}: local result dtype {got.dtype}, expected {want.dtype}"
    if not torch.equal(got, want):
        return f"rank {coord}: values differ {_first_difference(got, want)}"
    return None


def check_view(
    global_shape: Sequence[int],
    in_placements: Sequence[Placement],
    out_placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    global_op: GlobalOp,
    local_op: LocalOp,
    *,
    dtype: torch.dtype = torch.int64,
) -> Verdict:
    """Decide whether ``out_placements`` is valid for an op, by simulating every rank.

    ``global_op(global)`` gives the global result; ``local_op(local_input,
    local_out_shape)`` is what each rank runs (``local_out_shape`` is computed from the
    global output shape and ``out_placements``; ops that ignore it take the same
    arguments as the global call).  The global input is :func:`identifiable_tensor`
    of ``dtype``.  Valid iff Partial mesh dims agree (see module docstring) and on
    every rank the local op succeeds and equals the rank's local shard of the global
    result exactly.  A global op that raises is a caller error (``ValueError``).
    """
    shape = _check_shape(global_shape, "global_shape")
    mesh = _check_mesh(mesh_shape)
    in_p = _check_placements(in_placements, len(shape), mesh, "in_placements")
    g = identifiable_tensor(shape, dtype)
    try:
        global_out = global_op(g)
    except (RuntimeError, ValueError, IndexError, TypeError) as exc:
        raise ValueError(f"global_op fails on a tensor of shape {shape}: {exc}") from exc
    out_shape = tuple(global_out.shape)
    out_p = _check_placements(out_placements, len(out_shape), mesh, "out_placements")
    mismatch = _partial_mismatch(in_p, out_p)
    if mismatch is not None:
        return Verdict(False, mismatch)
    global_out = global_out.contiguous()
    for coord in mesh_coords(mesh):
        local_in = local_shard(g, in_p, mesh, coord)
        problem = _check_rank(coord, local_in, out_shape, global_out, out_p, mesh, local_op)
        if problem is not None:
            return Verdict(False, problem)
    return Verdict(True, f"all {math.prod(mesh)} ranks match (global output shape {out_shape})")


def check_op(
    global_shape: Sequence[int],
    op: str,
    args: Sequence[object],
    in_placements: Sequence[Placement],
    out_placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    *,
    strict_view: bool = True,
) -> Verdict:
    """:func:`check_view` for a named op; ``args`` are the global call's positional args.

    E.g. ``check_op((4, 6), "transpose", (0, 1), ...)`` or ``check_op(s, "view", ((2, 12),), ...)``.
    """
    shape = _check_shape(global_shape, "global_shape")
    spec = _make_op(op, args, shape, strict_view)
    return check_view(
        shape,
        in_placements,
        out_placements,
        mesh_shape,
        spec.global_fn,
        spec.local_fn,
        dtype=spec.dtype,
    )


def check_reshape(
    global_shape: Sequence[int],
    out_shape: Sequence[int],
    in_placements: Sequence[Placement],
    out_placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    *,
    strict_view: bool = True,
) -> Verdict:
    """Validity of ``out_placements`` for ``global.reshape(out_shape)``.

    Each rank runs ``local.view(local_out_shape)`` (``strict_view=True``) or
    ``local.reshape(local_out_shape)``.
    """
    return check_op(
        global_shape,
        "reshape",
        (tuple(out_shape),),
        in_placements,
        out_placements,
        mesh_shape,
        strict_view=strict_view,
    )


# --------------------------------------------------------------------------- search


def _divisors(n: int) -> set[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0] if n > 0 else []
    return set(small) | {n // d for d in small}


def _sf_candidates(lengths: set[int], global_size: int, limit: int) -> list[int]:
    """Split factors worth trying for a dim whose current local lengths are ``lengths``.

    ``_StridedShard`` with ``sf >= L`` cuts a length-``L`` dim into single elements, so
    every ``sf > max(lengths)`` behaves exactly like ``sf = max(lengths)`` on every rank
    and ``2..max(lengths)`` covers every distinct behaviour.  Past ``limit`` we keep
    ``2..limit`` plus the divisors of each length and of the global size: the split
    factors that flatten-style views produce (products of outer sizes) divide them.
    """
    top = max(lengths, default=0)
    if top <= limit:
        return list(range(2, top + 1))
    extra: set[int] = _divisors(global_size)
    for length in lengths:
        extra |= _divisors(length)
    return sorted(set(range(2, limit + 1)) | {s for s in extra if 2 <= s <= top})


def search_zero_comm(
    global_shape: Sequence[int],
    in_placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    op: str,
    args: Sequence[object] = (),
    *,
    strict_view: bool = True,
    exhaustive_sf_limit: int = DEFAULT_EXHAUSTIVE_SF_LIMIT,
    max_nodes: int = DEFAULT_MAX_NODES,
    stop_at_first: bool = False,
) -> SearchResult:
    """Enumerate output placement lists that make ``op`` valid with the input left unchanged.

    Candidates per mesh dim ``i``: if the input is ``Partial`` there, only that same
    ``Partial``; otherwise ``Replicate()``, ``Shard(d)`` for every output dim ``d``,
    and ``_StridedShard(d, sf)`` for ``sf`` in :func:`_sf_candidates` (every
    ``2..L`` for current local lengths ``L <= exhaustive_sf_limit``).  Split factors
    above the largest current local length ``L`` of the dim act exactly like ``sf = L``
    (and like ``Shard`` when ``L <= 1``), so they are not listed separately: the
    answers hold one representative of each distinct behaviour.

    The search is a depth-first walk over mesh dims with pruning: after fixing the
    output placements of mesh dims ``0..i``, the ranks sharing a prefix coordinate
    ``(c0..ci)`` jointly hold exactly the prefix-local input (later placements only
    partition it), so a valid list needs every prefix-local output to hold the same
    set of input scalars (for ``expand``/``repeat``, which duplicate values, only
    inclusion is required).  Only complete lists that pass this are run through the
    full per-rank check of :func:`check_view`.  ``max_nodes`` caps the number of
    (mesh dim, candidate) evaluations; hitting it sets ``exhausted=False``.
    """
    shape = _check_shape(global_shape, "global_shape")
    mesh = _check_mesh(mesh_shape)
    in_p = _check_placements(in_placements, len(shape), mesh, "in_placements")
    if exhaustive_sf_limit < 1:
        raise ValueError(f"exhaustive_sf_limit must be >= 1, got {exhaustive_sf_limit}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    spec = _make_op(op, args, shape, strict_view)
    g = identifiable_tensor(shape, spec.dtype)
    try:
        global_out = spec.global_fn(g).contiguous()
    except (RuntimeError, ValueError, IndexError, TypeError) as exc:
        raise ValueError(f"{op}{tuple(args)} fails on a tensor of shape {shape}: {exc}") from exc
    out_shape = tuple(global_out.shape)
    in_ids = _scalar_ids(g)
    out_ids = _scalar_ids(global_out)
    n_ids = in_ids.size

    # Input side, computed once: per prefix coordinate, a membership mask and count.
    in_masks: dict[tuple[int, ...], tuple[np.ndarray, int]] = {}
    in_states: dict[tuple[int, ...], tuple[np.ndarray, ...]] = {
        (): tuple(np.arange(n, dtype=np.int64) for n in shape)
    }
    for p, m in zip(in_p, mesh, strict=True):
        nxt: dict[tuple[int, ...], tuple[np.ndarray, ...]] = {}
        for prefix, idx in in_states.items():
            for c in range(m):
                nidx = _apply(idx, p, m, c)
                nxt[(*prefix, c)] = nidx
                vals = _take(in_ids, nidx).reshape(-1)
                mask = np.zeros(n_ids, dtype=bool)
                mask[vals] = True
                in_masks[(*prefix, c)] = (mask, vals.size)
        in_states = nxt
    local_inputs = {coord: _take(g, idx) for coord, idx in in_states.items()}

    answers: list[tuple[Placement, ...]] = []
    nodes = 0
    stopped = False  # set by the node cap or by stop_at_first

    def candidates(level: int, state: _State) -> list[Placement]:
        if isinstance(in_p[level], Partial):
            return [in_p[level]]
        out: list[Placement] = [Replicate()]
        out += [Shard(d) for d in range(len(out_shape))]
        for d in range(len(out_shape)):
            lengths = {len(idx[d]) for idx in state.values()}
            out += [
                _StridedShard(d, split_factor=sf)
                for sf in _sf_candidates(lengths, out_shape[d], exhaustive_sf_limit)
            ]
        return out

    def prefix_ok(mask_count: tuple[np.ndarray, int], idx: tuple[np.ndarray, ...]) -> bool:
        mask, count = mask_count
        vals = _take(out_ids, idx).reshape(-1)
        if spec.bijective and vals.size != count:
            return False
        return bool(mask[vals].all())

    def full_ok(out_p: tuple[Placement, ...]) -> bool:
        return all(
            _check_rank(c, x, out_shape, global_out, out_p, mesh, spec.local_fn) is None
            for c, x in local_inputs.items()
        )

    def dfs(level: int, chosen: tuple[Placement, ...], state: _State) -> None:
        nonlocal nodes, stopped
        m = mesh[level]
        for p in candidates(level, state):
            if stopped:
                return
            if nodes >= max_nodes:
                stopped = True
                return
            nodes += 1
            nstate: _State = {}
            ok = True
            for prefix, idx in state.items():
                for c in range(m):
                    nidx = _apply(idx, p, m, c)
                    if not prefix_ok(in_masks[(*prefix, c)], nidx):
                        ok = False
                        break
                    nstate[(*prefix, c)] = nidx
                if not ok:
                    break
            if not ok:
                continue
            if level + 1 < len(mesh):
                dfs(level + 1, (*chosen, p), nstate)
            elif full_ok((*chosen, p)):
                answers.append((*chosen, p))
                if stop_at_first:
                    stopped = True
                    return

    dfs(0, (), {(): tuple(np.arange(n, dtype=np.int64) for n in out_shape)})
    # Stopping at the first answer settles existence but does not give the complete list.
    return SearchResult(tuple(answers), not stopped, nodes)


def zero_comm_answers(
    global_shape: Sequence[int],
    in_placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    op: str,
    args: Sequence[object] = (),
    *,
    strict_view: bool = True,
    exhaustive_sf_limit: int = DEFAULT_EXHAUSTIVE_SF_LIMIT,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> list[tuple[Placement, ...]]:
    """All valid output placement lists (within the candidate set); raises
    :class:`SearchLimitExceeded` rather than return a possibly incomplete list."""
    res = search_zero_comm(
        global_shape,
        in_placements,
        mesh_shape,
        op,
        args,
        strict_view=strict_view,
        exhaustive_sf_limit=exhaustive_sf_limit,
        max_nodes=max_nodes,
    )
    if not res.exhausted:
        raise SearchLimitExceeded(f"search stopped after {res.nodes} nodes (max_nodes={max_nodes})")
    return list(res.answers)


def find_zero_comm_answer(
    global_shape: Sequence[int],
    in_placements: Sequence[Placement],
    mesh_shape: Sequence[int],
    op: str,
    args: Sequence[object] = (),
    *,
    strict_view: bool = True,
    exhaustive_sf_limit: int = DEFAULT_EXHAUSTIVE_SF_LIMIT,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> tuple[Placement, ...] | None:
    """The first valid output placement list found, or None if there is none in the
    candidate set; raises :class:`SearchLimitExceeded` if the cap hit before either."""
    res = search_zero_comm(
        global_shape,
        in_placements,
        mesh_shape,
        op,
        args,
        strict_view=strict_view,
        exhaustive_sf_limit=exhaustive_sf_limit,
        max_nodes=max_nodes,
        stop_at_first=True,
    )
    if res.answers:
        return res.answers[0]
    if not res.exhausted:
        raise SearchLimitExceeded(f"search stopped after {res.nodes} nodes (max_nodes={max_nodes})")
    return None


# --------------------------------------------------------------------------- canonical form


def is_canonical(placements: Sequence[Placement], ndim: int | None = None) -> bool:
    """True iff no ``_StridedShard`` has ``split_factor == 1`` (that is ``Shard``), every
    shard dim is non-negative (and ``< ndim`` when given), and every entry is one of
    ``Shard``/``_StridedShard``/``Replicate``/``Partial``."""
    for p in placements:
        if isinstance(p, _StridedShard):
            if int(p.split_factor) == 1 or p.dim < 0 or (ndim is not None and p.dim >= ndim):
                return False
        elif isinstance(p, Shard):
            if p.dim < 0 or (ndim is not None and p.dim >= ndim):
                return False
        elif not isinstance(p, (Replicate, Partial)):
            return False
    return True


def canonicalize(placements: Sequence[Placement], ndim: int) -> tuple[Placement, ...]:
    """Canonical equivalent: negative dims normalised, ``_StridedShard(d, 1)`` -> ``Shard(d)``."""
    if ndim < 0:
        raise ValueError(f"ndim must be >= 0, got {ndim}")
    out: list[Placement] = []
    for i, p in enumerate(placements):
        if isinstance(p, (Shard, _StridedShard)):
            d = p.dim + ndim if p.dim < 0 else p.dim
            if not 0 <= d < ndim:
                raise ValueError(f"placements[{i}] = {p!r} shards dim {p.dim} of a {ndim}-d tensor")
            sf = _split_factor(p)
            if sf < 1:
                raise ValueError(f"placements[{i}] = {p!r} has split_factor < 1")
            out.append(Shard(d) if sf == 1 else _StridedShard(d, split_factor=sf))
        elif isinstance(p, (Replicate, Partial)):
            out.append(p)
        else:
            raise ValueError(
                f"placements[{i}] = {p!r} is not Shard/_StridedShard/Replicate/Partial"
            )
    return tuple(out)


# --------------------------------------------------------------------------- communication


def communication_cost(
    original: Sequence[Placement],
    proposed: Sequence[Placement],
    global_shape: Sequence[int],
    mesh_shape: Sequence[int],
) -> CommCost:
    """What redistributing a tensor from ``original`` to ``proposed`` moves; see :class:`CommCost`.

    Used to check "the propagated input placements move no more than torch's": compare
    ``elements_received`` first, then ``num_changed``.
    """
    shape = _check_shape(global_shape, "global_shape")
    mesh = _check_mesh(mesh_shape)
    orig = _check_placements(original, len(shape), mesh, "original")
    prop = _check_placements(proposed, len(shape), mesh, "proposed")
    changed = tuple(i for i, (a, b) in enumerate(zip(orig, prop, strict=True)) if a != b)
    to_rep = tuple(
        i
        for i in changed
        if isinstance(orig[i], (Shard, _StridedShard)) and isinstance(prop[i], Replicate)
    )
    resolved = tuple(i for i in changed if isinstance(orig[i], Partial))
    total = 0
    worst = 0
    n = math.prod(shape)
    ids = np.arange(n, dtype=np.int64).reshape(shape)
    for coord in mesh_coords(mesh):
        want = _take(ids, local_indices(shape, prop, mesh, coord)).reshape(-1)
        if resolved:
            received = want.size
        else:
            have = np.zeros(n, dtype=bool)
            have[_take(ids, local_indices(shape, orig, mesh, coord)).reshape(-1)] = True
            received = int((~have[want]).sum())
        total += received
        worst = max(worst, received)
    return CommCost(changed, to_rep, resolved, total, worst)

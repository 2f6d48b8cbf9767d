"""The uneven-size fallback of view propagation: propose output placements, then prove them.

The layout engine handles every sharding whose chunks divide their dims evenly. When some mesh
dim shards a dim unevenly (``torch.chunk`` leaves a short or empty tail), it calls
:func:`propagate_uneven`, which decides with exact integer arithmetic instead of layouts.

How it decides
--------------
1. **Groups.** The rule is cut into independent groups: a source (one input dim, or the
   input dims of a ``Flatten``) together with the output dims it becomes (the pieces of a
   ``Split``, the ``Flatten`` itself, an ``InputDim``, a ``Repeat`` or the ``Broadcast`` of a
   size-1 dim). Inside a group the data is the *flat index* of the source, row-major over its
   input dims, and equally row-major over its output pieces (a ``Repeat`` adds a slowest input
   digit of the copies, which every rank holds whole). Input dims the rule drops (squeezed
   size-1 dims) are *pinned*: every rank must hold them whole.
2. **Exact rank sets.** A rank's local tensor is an outer product of one index set per dim,
   so within a group it holds a set of flat indices. Each per-dim set is a short list of
   *families* ``(start, width, stride, count)`` = ``count`` intervals of ``width`` indices every
   ``stride``, built by replaying ``torch.chunk`` placement by placement; a group's flat set is
   the product of its dims' sets in mixed radix. Two sets are compared through a canonical
   run-length form of their maximal intervals, so nothing is ever materialised and the work per
   rank does not grow with the sizes (only with how ragged the sets are, capped by
   :data:`MAX_FAMILIES`).
3. **Validity.** Output placements are valid when, on every rank and in every group, the flat
   indices the rank holds before the view equal those the output placements assign it. Both
   sides are increasing in the flat index, so the local view (or permute, repeat,
   view_as_real) then produces exactly the rank's output shard. A broadcast size-1 dim only
   needs: a rank without its element is assigned none of the output dim. One relaxation: when
   only view-family ops have the rule (it has a ``Flatten`` or a size-keeping ``Split``), each
   rank runs ``local.view(shape)``, so a rank whose whole input is empty is also right when its
   whole output is empty, whatever the groups say. Rules of only ``InputDim``s and ``1``s are
   shared with squeeze/unsqueeze/permute, whose local ops check every dim, so there the
   relaxation would be wrong.
4. **Mesh dims in order.** Placements apply left to right, so mesh dim ``i`` is decided after
   mesh dims ``0..i-1``: candidate output placements (first the ones the rule's structure
   predicts, then, when it is cheap enough, one split factor of every distinct chunking
   behaviour of each output dim of the group, then, for a view, of the other output dims) are
   checked on every rank over the mesh dims ``0..i`` that touch the group (every sharded one
   for a view). The first valid one is kept. A valid prefix stays valid (later mesh dims only
   partition it), and every valid candidate leaves the ranks the same sets, hence later mesh
   dims the same choices, so keeping the first loses nothing. If none is valid the mesh dim
   is replicated and a :class:`Blocked` says why.

Worked example: ``(4, 15, 128) -> (60, 128)`` on mesh ``(4,)`` with ``[Shard(1)]``. The rule is
``(flat(d0,d1), d2)``; the group ``flat(d0,d1)`` has flat index ``15*i0 + i1``. Chunks of 15 over
4 ranks are ``ceil(15/4) = 4``: rank 3 holds ``i1`` in ``[12, 15)``, i.e. flat
``[12,15) + 15k`` for ``k < 4`` (one family ``(12, 3, 15, 4)``). The structure predicts
``_StridedShard(0, split_factor=4)`` (four rows outside the sharded dim): 60 in 4 pieces of 15,
each chunked into 4, gives rank 3 again ``(12, 3, 15, 4)``. All four ranks agree, so the answer
is ``[_StridedShard(0, split_factor=4)]`` with no communication, although 15 % 4 != 0.

``(6, 256) -> (1536,)`` on mesh ``(8,)`` with ``[Shard(0)]`` has no such answer: rank 1 holds
flat ``[256, 512)``, ``Shard(0)`` of 1536 would give it ``[192, 384)``, and no split factor
produces one 256-run per rank for ranks 0-5 and nothing for ranks 6-7; mesh dim 0 is
replicated.

``view_as_complex`` has the rule of a flatten of the last two dims (``(..., m, 2)``), but its
output dim has ``m`` complex elements, not ``2m`` reals. That rule is therefore checked under
both readings unless the caller says which op it is (``complex_view``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

from ..rules import Broadcast, DimSpec, Flatten, InputDim, Repeat, Singleton, Split
from .errors import Blocked

__all__ = ["MAX_FAMILIES", "MAX_SEARCH_CHECKS", "propagate_uneven"]

#: A per-dim or flat set with more families than this is not decided (the mesh dim is
#: replicated instead): it bounds the work per rank on pathological split factors.
MAX_FAMILIES = 4096

#: Bound on (candidate x rank) checks for the exhaustive split-factor stage of one mesh dim;
#: above it only the candidates the rule's structure predicts are tried.
MAX_SEARCH_CHECKS = 20_000

# (start, width, stride, count): `count` intervals [start + t*stride, ... + width). Normalised:
# width >= 1, count >= 1, stride == 0 iff count == 1, and stride > width otherwise.
Family = tuple[int, int, int, int]
IntSet = tuple[Family, ...]
# One placement replayed on one dim: (split factor, 1 for Shard; mesh dim size; coordinate).
Step = tuple[int, int, int]


# ============================================================================ exact sets


class _Unprovable(Exception):
    """A set grew past :data:`MAX_FAMILIES`; the candidate is treated as not proven."""


def _fam(start: int, width: int, stride: int, count: int) -> IntSet:
    """The normalised family (empty, one interval, or a strided run of intervals)."""
    if width <= 0 or count <= 0:
        return ()
    if count == 1 or stride == width:
        return ((start, width * count, 0, 1),)
    return ((start, width, stride, count),)


def _full(size: int) -> IntSet:
    return _fam(0, size, 0, 1)


def _count(s: IntSet) -> int:
    return sum(w * c for _, w, _, c in s)


def _chunk(length: int, parts: int, index: int) -> tuple[int, int]:
    """``torch.chunk``: chunk ``index`` of ``length`` into ``parts`` is ``[lo, hi)``."""
    k = -(-length // parts)
    return min(index * k, length), min((index + 1) * k, length)


def _maximal(s: IntSet) -> list[Family]:
    """``s`` with touching intervals merged: families whose intervals are maximal."""
    out: list[Family] = []
    for f in s:
        if out:
            ls, lw, lst, lc = out[-1]
            last = ls + (lc - 1) * lst
            if last + lw == f[0]:  # the previous family's last interval touches this one
                out.pop()
                out.extend(_fam(ls, lw, lst, lc - 1))
                out.append((last, f[0] + f[1] - last, 0, 1))
                out.extend(_fam(f[0] + f[2], f[1], f[2], f[3] - 1))
                continue
        out.append(f)
    return out


def _canonical(s: IntSet) -> IntSet:
    """The greedy run-length form of the maximal intervals: equal sets, equal forms."""
    runs: list[Family] = []
    run: Family | None = None
    for f in _maximal(s):
        if run is None:
            run = f
            continue
        rs, rw, rst, rc = run
        stride = rst if rc > 1 else f[0] - rs
        if f[1] == rw and f[0] == rs + rc * stride:
            if f[3] == 1 or f[2] == stride:
                run = (rs, rw, stride, rc + f[3])
            else:  # only the first interval continues the run; the rest starts a new one
                runs.append((rs, rw, stride, rc + 1))
                run = _fam(f[0] + f[2], f[1], f[2], f[3] - 1)[0]
        else:
            runs.append(run)
            run = f
    if run is not None:
        runs.append(run)
    return tuple(runs)


def _take_in_family(f: Family, lo: int, hi: int) -> IntSet:
    """Elements ``[lo, hi)`` (positions within the family) of one family."""
    start, w, stride, _ = f
    t0, o0 = divmod(lo, w)
    t1, o1 = divmod(hi - 1, w)
    if t0 == t1:
        return _fam(start + t0 * stride + o0, o1 - o0 + 1, 0, 1)
    head = _fam(start + t0 * stride + o0, w - o0, 0, 1) if o0 else ()
    tail = _fam(start + t1 * stride, o1 + 1, 0, 1) if o1 < w - 1 else ()
    first = t0 + (1 if o0 else 0)
    last = t1 - (1 if o1 < w - 1 else 0)
    return head + _fam(start + first * stride, w, stride, last - first + 1) + tail


def _take(s: IntSet, ends: Sequence[int], lo: int, hi: int) -> IntSet:
    """The elements at positions ``[lo, hi)`` of ``s``; ``ends[k]`` = positions in ``s[:k+1]``."""
    out: list[Family] = []
    k = bisect.bisect_right(ends, lo)
    while k < len(s) and lo < hi:
        pos = ends[k] - s[k][1] * s[k][3]
        b = min(hi, ends[k]) - pos
        out.extend(_take_in_family(s[k], lo - pos, b))
        lo = pos + b
        k += 1
    return tuple(out)


def _restrict(s: IntSet, sf: int, mesh_size: int, coord: int) -> IntSet:
    """What the rank at ``coord`` keeps of ``s`` under ``_StridedShard(sf)`` (sf 1 = Shard)."""
    length = _count(s)
    if length == 0:
        return ()
    k1 = -(-length // sf)  # torch.chunk piece size; the last piece may be shorter
    whole = length // k1
    lo, hi = _chunk(k1, mesh_size, coord)
    tail_lo, tail_hi = _chunk(length - whole * k1, mesh_size, coord)
    if len(s) == 1 and s[0][3] == 1:
        # The common case (first placement on the dim): one interval, so the positions map
        # to indices by a shift and the kept chunks of the whole pieces form one family.
        x = s[0][0]
        tail = _fam(x + whole * k1 + tail_lo, tail_hi - tail_lo, 0, 1)
        return _fam(x + lo, hi - lo, k1, whole) + tail
    ends = list(itertools.accumulate(w * c for _, w, _, c in s))
    out: list[Family] = []
    if lo < hi:
        for p in range(whole):
            out.extend(_take(s, ends, p * k1 + lo, p * k1 + hi))
            if len(out) > MAX_FAMILIES:
                raise _Unprovable
    out.extend(_take(s, ends, whole * k1 + tail_lo, whole * k1 + tail_hi))
    return tuple(out)


@lru_cache(maxsize=65536)
def _dim_set(size: int, steps: tuple[Step, ...]) -> IntSet:
    """The indices of a dim of ``size`` a rank keeps after the placements ``steps``."""
    s = _full(size)
    for sf, mesh_size, coord in steps:
        # Canonical after every step, so that a whole dim is recognised as one interval.
        s = _canonical(_restrict(s, sf, mesh_size, coord))
    return s


def _product(outer: IntSet, inner: IntSet, inner_size: int) -> IntSet:
    """``{i * inner_size + g : i in outer, g in inner}`` (row-major, ``inner`` fastest)."""
    b = inner_size
    if not outer or not inner:
        return ()
    if inner == _full(b):
        return tuple(f for s, w, st, c in outer for f in _fam(s * b, w * b, st * b, c))
    out: list[Family] = []
    for s, w, st, c in outer:
        if len(inner) == 1 and inner[0][3] == 1 and w == 1:
            # Single outer indices every `st`, one inner interval: one family.
            out.extend(_fam(s * b + inner[0][0], inner[0][1], st * b, c))
            continue
        for t in range(c):
            _extend_run(out, s + t * st, w, inner, b)
            if len(out) > MAX_FAMILIES:
                raise _Unprovable
    return tuple(out)


def _extend_run(out: list[Family], a: int, w: int, inner: IntSet, b: int) -> None:
    """Append ``inner`` shifted by ``i * b`` for the outer indices ``a <= i < a + w``."""
    if len(inner) == 1:
        gs, gw, gst, gc = inner[0]
        if gc == 1:  # copies of one interval, every b
            out.extend(_fam(a * b + gs, gw, b, w))
            return
        if gc * gst == b:  # the copies continue the inner stride across the boundary
            out.extend(_fam(a * b + gs, gw, gst, gc * w))
            return
    if w * len(inner) > MAX_FAMILIES:
        raise _Unprovable
    for i in range(a, a + w):
        out.extend((gs + i * b, gw, gst, gc) for gs, gw, gst, gc in inner)


def _flat(factors: Sequence[tuple[IntSet, int]]) -> IntSet:
    """The flat (row-major) indices of the product of per-dim sets, outermost dim first."""
    acc: IntSet = _full(1)
    size = 1
    for s, n in reversed(factors):
        acc = _canonical(_product(s, acc, size))
        size *= n
    return acc


def _describe(s: IntSet, limit: int = 3) -> str:
    """``[a, b), [c, d), ...`` for a message (the first ``limit`` intervals)."""
    if not s:
        return "nothing"
    shown: list[str] = []
    for start, w, st, c in s:
        for t in range(c):
            if len(shown) == limit:
                return f"{', '.join(shown)}, ... ({_count(s)} elements)"
            shown.append(f"[{start + t * st}, {start + t * st + w})")
    return ", ".join(shown)


# ============================================================================ rule groups


@dataclass(frozen=True)
class _Factor:
    """One radix digit of a group's input side: an input dim, or ``dim=None`` for a digit
    every rank holds whole (the copies of a ``Repeat``). ``pinned`` digits are not part of the
    flat index: every rank must hold them whole."""

    dim: int | None
    size: int
    pinned: bool = False


@dataclass(frozen=True)
class _Piece:
    """One output dim of a group (a shardable one) and its size in this reading."""

    dim: int
    size: int


@dataclass(frozen=True)
class _Reading:
    """How a group's input digits line up with its output pieces (both row-major).

    ``broadcast``: a size-1 input dim expanded into the piece. Every value of the piece is
    that one element, so a rank holding it may hold any part of the piece, and a rank
    without it must hold none (expanding an empty dim fails).
    """

    factors: tuple[_Factor, ...]
    pieces: tuple[_Piece, ...]
    broadcast: bool = False


@dataclass(frozen=True)
class _Group:
    """Input ``dims``, one or more readings that must all hold, and what the view does."""

    dims: tuple[int, ...]
    readings: tuple[_Reading, ...]
    what: str


@dataclass(frozen=True, eq=False)
class _View:
    """The rule cut into groups, plus what the checks need to know about the whole op.

    ``local_view``: only view-family ops (view, reshape, flatten, unflatten) have this rule,
    so each rank runs ``local.view(shape)``, which accepts an empty local tensor for any
    output shape of numel 0. Other ops (squeeze, permute, expand, ...) check shapes per dim.
    """

    group_of: dict[int, _Group]
    shape: tuple[int, ...]
    out_ndim: int
    out_sizes: dict[int, int]
    local_view: bool

    @property
    def empty(self) -> bool:
        return math.prod(self.shape) == 0


def _source_dims(spec: DimSpec) -> tuple[int, ...] | None:
    if isinstance(spec, InputDim):
        return (spec.input_dim,)
    if isinstance(spec, Flatten):
        return tuple(d.input_dim for d in spec.input_dims)
    return None


def _all_input_dims(spec: DimSpec) -> tuple[int, ...]:
    if isinstance(spec, InputDim):
        return (spec.input_dim,)
    return tuple(d for inner in spec.inputs() for d in _all_input_dims(inner))


def _pinned(dims: Sequence[int], shape: tuple[int, ...], what: str) -> _Group:
    factors = tuple(_Factor(d, shape[d], pinned=True) for d in dims)
    return _Group(tuple(dims), (_Reading(factors, ()),), what)


# A claim of one output dim on a source: (kind, group shape or size, out dim, piece id).
_Claim = tuple[str, object, int, int]


def _claims(
    rule: Sequence[DimSpec],
) -> tuple[dict[tuple[int, ...], list[_Claim]], dict[int, str]]:
    """Which source each output dim comes from; input dims that carry no output sharding."""
    claims: dict[tuple[int, ...], list[_Claim]] = {}
    pinned: dict[int, str] = {}
    for o, spec in enumerate(rule):
        src = _source_dims(spec)
        if src is not None:
            claims.setdefault(src, []).append(("view", None, o, 0))
            continue
        if isinstance(spec, Split):
            inner = _source_dims(spec.input_dim)
            if inner is not None:
                claims.setdefault(inner, []).append(
                    ("split", tuple(spec.group_shape), o, spec.split_id)
                )
                continue
        if isinstance(spec, Repeat) and isinstance(spec.input_dim, InputDim):
            claims.setdefault((spec.input_dim.input_dim,), []).append(("repeat", spec.times, o, 0))
            continue
        if isinstance(spec, Broadcast) and isinstance(spec.dim, InputDim):
            claims.setdefault((spec.dim.input_dim,), []).append(("bcast", spec.dim_size, o, 0))
            continue
        for d in _all_input_dims(spec):
            pinned[d] = f"the view's output dim {o} = {spec} carries no sharding of it"
    return claims, pinned


def _reading(
    dims: tuple[int, ...], claims: list[_Claim], shape: tuple[int, ...]
) -> tuple[_Reading, str] | None:
    """The reading of one source's claims, or None if they are not a view of it."""
    sizes = tuple(shape[d] for d in dims)
    total = math.prod(sizes)
    factors = tuple(_Factor(d, shape[d]) for d in dims)
    kind, arg, o, _ = claims[0]
    if total == 0:
        return None  # nothing to shard; pinned keeps every mesh dim without a guess
    if len(claims) == 1 and kind != "split":
        return _single_reading(dims, factors, kind, arg, o, total)
    if kind != "split" or any(c[0] != "split" or c[1] != arg for c in claims):
        return None
    group: tuple[int, ...] = arg  # type: ignore[assignment]
    outs = {c[3]: c[2] for c in claims}
    if len(outs) != len(claims) or sorted(outs) != list(range(len(group))):
        return None
    src = f"dim {dims[0]}" if len(dims) == 1 else f"flat(dims {dims}, sizes {sizes})"
    what = f"the split {group} of {src} (size {total})"
    if math.prod(group) == total:
        return _Reading(factors, tuple(_Piece(outs[j], n) for j, n in enumerate(group))), what
    if len(dims) == 1 and group == (total, 2):
        # view_as_real: piece 0 is the complex dim itself; the (real, imag) piece is new and
        # never sharded, so it is left out of the flat index on both sides.
        return _Reading(factors, (_Piece(outs[0], total),)), f"view_as_real of dim {dims[0]}"
    return None


def _single_reading(
    dims: tuple[int, ...], factors: tuple[_Factor, ...], kind: str, arg: object, o: int, total: int
) -> tuple[_Reading, str] | None:
    """The reading of a source that becomes exactly one output dim."""
    if kind == "view":
        if len(dims) == 1:
            return _Reading(factors, (_Piece(o, total),)), f"output dim {o} is tensor dim {dims[0]}"
        sizes = tuple(f.size for f in factors)
        what = f"the view flattens dims {dims} (sizes {sizes}) into output dim {o} (size {total})"
        return _Reading(factors, (_Piece(o, total),)), what
    if kind == "repeat" and isinstance(arg, int):
        copies = _Factor(None, arg)
        what = f"repeat({arg}) tiles it into output dim {o}"
        return _Reading((copies, *factors), (_Piece(o, arg * total),)), what
    if kind == "bcast" and isinstance(arg, int) and total == 1:
        what = f"expand broadcasts it (size 1) to output dim {o} (size {arg})"
        return _Reading(factors, (_Piece(o, arg),), broadcast=True), what
    return None


def _complex_reading(rule: Sequence[DimSpec], shape: tuple[int, ...]) -> _Reading | None:
    """The view_as_complex reading of ``(d0, .., flat(d[n-2], d[n-1]))`` with ``shape[-1] == 2``."""
    n = len(shape)
    if n < 2 or shape[-1] != 2 or len(rule) != n - 1:
        return None
    if any(spec != InputDim(d) for d, spec in enumerate(rule[:-1])):
        return None
    if rule[-1] != Flatten((InputDim(n - 2), InputDim(n - 1))):
        return None
    factors = (_Factor(n - 2, shape[n - 2]), _Factor(n - 1, 2, pinned=True))
    return _Reading(factors, (_Piece(n - 2, shape[n - 2]),))


def _is_local_view(
    rule: Sequence[DimSpec], shape: tuple[int, ...], complex_view: bool | None
) -> bool:
    """Whether only view-family ops have ``rule``: it has a Split that keeps the size (not
    view_as_real's), a Flatten (not one view_as_complex may have), or it both drops an input
    dim and adds a ``Singleton`` (squeeze only drops, unsqueeze and expand only add)."""
    used = {d for spec in rule for d in _all_input_dims(spec)}
    if len(used) < len(shape) and any(isinstance(s, Singleton) for s in rule):
        return True
    for spec in rule:
        src = _source_dims(spec.input_dim) if isinstance(spec, Split) else None
        total = math.prod(shape[d] for d in src) if src is not None else 0
        if total > 0 and math.prod(spec.group_shape) == total:  # type: ignore[union-attr]
            return True
    has_flatten = any(isinstance(s, Flatten) for s in rule)
    maybe_complex = complex_view is not False and _complex_reading(rule, shape) is not None
    return has_flatten and not maybe_complex


def _analyse(rule: Sequence[DimSpec], shape: tuple[int, ...], complex_view: bool | None) -> _View:
    """Cut ``rule`` into groups (see the module docstring)."""
    claims, pinned = _claims(rule)
    owners: dict[int, int] = {}
    for dims in claims:
        for d in dims:
            owners[d] = owners.get(d, 0) + 1
    alt = _complex_reading(rule, shape) if complex_view is not False else None
    group_of: dict[int, _Group] = {}
    for dims, cl in claims.items():
        found = None
        if all(owners[d] == 1 and d not in pinned for d in dims):
            found = _reading(dims, cl, shape)
        if found is None:
            specs = ", ".join(str(rule[c[2]]) for c in cl)
            group = _pinned(dims, shape, f"the rule's output dims ({specs}) are not a view of it")
        else:
            reading, what = found
            readings = (reading,)
            if alt is not None and dims == (len(shape) - 2, len(shape) - 1):
                readings = (alt,) if complex_view else (reading, alt)
                what += " (or, as view_as_complex, into complex pairs)"
            group = _Group(dims, readings, what)
        group_of.update(dict.fromkeys(dims, group))
    for d, n in enumerate(shape):
        if d not in group_of:
            why = pinned.get(d, f"the view drops it (size {n})")
            group_of[d] = _pinned((d,), shape, why)
    out_sizes = {p.dim: p.size for g in group_of.values() for p in g.readings[0].pieces}
    return _View(group_of, shape, len(rule), out_sizes, _is_local_view(rule, shape, complex_view))


# ============================================================================ checking


def _sharded_dim(p: Placement, ndim: int) -> int | None:
    if isinstance(p, (Shard, _StridedShard)):
        return p.dim % ndim if ndim else None
    return None


def _split_factor(p: Placement) -> int:
    return int(p.split_factor) if isinstance(p, _StridedShard) else 1


def _placement(dim: int, sf: int) -> Placement:
    """Canonical: a split factor of 1 is ``Shard``."""
    return Shard(dim) if sf == 1 else _StridedShard(dim, split_factor=sf)


Coords = tuple[tuple[int, int], ...]  # (mesh dim, coordinate) pairs
Digits = tuple[tuple[IntSet, int], ...]  # per radix digit: (indices held, digit size)


@dataclass(frozen=True)
class _Mismatch:
    """The first rank a candidate fails on: what it holds and what it would be assigned."""

    coords: Coords
    holds: Digits = ()
    assigned: Digits = ()
    pinned_dim: int | None = None
    unprovable: bool = False
    empty: str = ""  # a local-view rank with an empty tensor on one side only


def _steps(
    ps: Sequence[Placement], mesh: tuple[int, ...], coords: Coords, dim: int, ndim: int
) -> tuple[Step, ...]:
    return tuple(
        (_split_factor(ps[j]), mesh[j], c) for j, c in coords if _sharded_dim(ps[j], ndim) == dim
    )


@dataclass(frozen=True, eq=False)
class _Problem:
    """Placements of mesh dims ``0..len(outs)-1`` to check for ``group``. ``ins`` may hold one
    more placement than ``outs``: the mesh dim being decided (see :func:`_with_output`)."""

    view: _View
    group: _Group
    ins: tuple[Placement, ...]
    outs: tuple[Placement, ...]
    mesh: tuple[int, ...]

    @property
    def in_ndim(self) -> int:
        return len(self.view.shape)

    @property
    def out_ndim(self) -> int:
        return self.view.out_ndim

    def sharding(self) -> list[tuple[int, int | None, int | None]]:
        """(mesh dim, input dim, output dim) sharded by each decided mesh dim."""
        return [
            (j, _sharded_dim(p, self.in_ndim), _sharded_dim(q, self.out_ndim))
            for j, (p, q) in enumerate(zip(self.ins[: len(self.outs)], self.outs, strict=True))
        ]

    def checked_mesh_dims(self) -> list[int]:
        """The mesh dims whose coordinates a check enumerates: those touching the group, or,
        for a local view (where an empty rank couples the groups), every sharding one."""
        in_dims = set(self.group.dims)
        out_dims = {p.dim for r in self.group.readings for p in r.pieces}
        if self.view.local_view:
            return [j for j, d, o in self.sharding() if d is not None or o is not None]
        return [j for j, d, o in self.sharding() if d in in_dims or o in out_dims]

    def checked_groups(self) -> list[_Group]:
        if not self.view.local_view:
            return [self.group]
        found = {self.group.dims: self.group}
        for _, d, o in self.sharding():
            for g in self.view.group_of.values():
                pieces = {p.dim for r in g.readings for p in r.pieces}
                if d in g.dims or o in pieces:
                    found.setdefault(g.dims, g)
        return list(found.values())


def _with_output(pb: _Problem, cand: Placement) -> _Problem:
    return _Problem(pb.view, pb.group, pb.ins, (*pb.outs, cand), pb.mesh)


def _mismatch(pb: _Problem) -> _Mismatch | None:
    """None if every rank holds, in every reading, exactly the flat indices it is assigned."""
    dims = pb.checked_mesh_dims()
    groups = pb.checked_groups()
    for coord in itertools.product(*(range(pb.mesh[j]) for j in dims)):
        coords = tuple(zip(dims, coord, strict=True))
        if pb.view.local_view:
            empty_in, empty_out = _emptiness(pb, coords)
            if empty_in and empty_out:
                continue  # local.view of an empty tensor to an empty shape is exact
            if empty_in != empty_out:
                side = "holds nothing but would be assigned elements"
                if empty_out:
                    side = "holds elements but would be assigned none"
                return _Mismatch(coords, empty=side)
        for g in groups:
            for reading in g.readings:
                found = _rank_mismatch(pb, reading, coords)
                if found is not None:
                    return found
    return None


def _emptiness(pb: _Problem, coords: Coords) -> tuple[bool, bool]:
    """Whether the rank's whole local input, and its whole local output, are empty."""
    empty_in = empty_out = pb.view.empty
    for _, d, o in pb.sharding():
        if d is not None and not empty_in:
            steps = _steps(pb.ins, pb.mesh, coords, d, pb.in_ndim)
            empty_in = _count(_dim_set(pb.view.shape[d], steps)) == 0
        if o is not None and o in pb.view.out_sizes and not empty_out:
            steps = _steps(pb.outs, pb.mesh, coords, o, pb.out_ndim)
            empty_out = _count(_dim_set(pb.view.out_sizes[o], steps)) == 0
    return empty_in, empty_out


def _rank_mismatch(pb: _Problem, reading: _Reading, coords: Coords) -> _Mismatch | None:
    try:
        held: list[tuple[IntSet, int]] = []
        for f in reading.factors:
            s = _full(f.size)
            if f.dim is not None:
                s = _dim_set(f.size, _steps(pb.ins, pb.mesh, coords, f.dim, pb.in_ndim))
            if f.pinned and s != _full(f.size):
                return _Mismatch(coords, ((s, f.size),), ((_full(f.size), f.size),), f.dim)
            if not f.pinned:
                held.append((s, f.size))
        assigned = tuple(
            (_dim_set(p.size, _steps(pb.outs, pb.mesh, coords, p.dim, pb.out_ndim)), p.size)
            for p in reading.pieces
        )
        n_held = math.prod(_count(s) for s, _ in held)
        n_assigned = math.prod(_count(s) for s, _ in assigned)
        if reading.broadcast:
            ok = n_held > 0 or n_assigned == 0
        else:
            ok = n_held == n_assigned and _canonical(_flat(held)) == _canonical(_flat(assigned))
    except _Unprovable:
        return _Mismatch(coords, unprovable=True)
    return None if ok else _Mismatch(coords, tuple(held), assigned)


# ============================================================================ candidates


def _sf_classes(length: int) -> list[int]:
    """Split factors with every distinct ``ceil(length / sf)``, i.e. chunking behaviour."""
    r = math.isqrt(length)
    return sorted({*range(1, r + 2), *(-(-length // k) for k in range(1, r + 1))})


def _outer_counts(pb: _Problem, i: int, dim: int) -> tuple[int, int, int]:
    """Digits outside the mesh dim's sub-mode, evenly: (the factors before ``dim`` times the
    input split factor, that times the earlier mesh dims on ``dim``, the earlier mesh dims on
    those outer factors)."""
    reading = pb.group.readings[0]
    dims = [f.dim for f in reading.factors]
    at = dims.index(dim) if dim in dims else 0
    base = math.prod(f.size for f in reading.factors[:at]) * _split_factor(pb.ins[i])
    same = ahead = 1
    for j, d, _ in pb.sharding():
        if d == dim:
            same *= pb.mesh[j]
        elif d is not None and d in dims[:at]:
            ahead *= pb.mesh[j]
    return base, base * same, ahead


def _ordered_pieces(pb: _Problem, i: int, dim: int) -> list[tuple[int, _Piece]]:
    """The group's pieces (with their outer product), the one the structure predicts first:
    evenly, the shard lands in the piece whose outer product brackets the digits outside it."""
    _, outer, ahead = _outer_counts(pb, i, dim)
    out: list[tuple[int, _Piece]] = []
    op = 1
    for piece in pb.group.readings[0].pieces:
        out.append((op, piece))
        op *= piece.size
    return sorted(out, key=lambda e: not (e[0] * ahead <= outer < e[0] * e[1].size * ahead))


def _structural(pb: _Problem, i: int, dim: int) -> Iterator[Placement]:
    """Candidates the rule's structure predicts (the even-case split factors)."""
    base, full, ahead = _outer_counts(pb, i, dim)
    for op, piece in _ordered_pieces(pb, i, dim):
        if pb.group.readings[0].broadcast:
            # Pieces of one element: the rank holding the size-1 dim gets all of them.
            yield _placement(piece.dim, piece.size)
        for num, den in itertools.product((full, base), (op * ahead, op)):
            if num % den == 0:
                yield _placement(piece.dim, num // den)
        for j, _, o in pb.sharding():
            if o == piece.dim:  # an earlier mesh dim's split factor on the same piece
                yield _placement(piece.dim, _split_factor(pb.outs[j]))
        yield _placement(piece.dim, 1)


def _exhaustive(pb: _Problem, i: int, pieces: Sequence[_Piece]) -> Iterator[Placement]:
    """One split factor per distinct chunking of each piece, if the work stays bounded."""
    ranks = math.prod(pb.mesh[j] for j in pb.checked_mesh_dims()) * pb.mesh[i]
    per_piece = [
        (piece, sorted({sf for n in _local_lengths(pb, piece) for sf in _sf_classes(n)}))
        for piece in pieces
    ]
    if sum(len(sfs) for _, sfs in per_piece) * ranks > MAX_SEARCH_CHECKS:
        return
    for piece, sfs in per_piece:
        for sf in sfs:
            yield _placement(piece.dim, sf)


def _local_lengths(pb: _Problem, piece: _Piece) -> set[int]:
    """The piece's local lengths over the ranks, before the mesh dim being decided."""
    on = [j for j, _, o in pb.sharding() if o == piece.dim]
    lengths = set()
    for coord in itertools.product(*(range(pb.mesh[j]) for j in on)):
        coords = tuple(zip(on, coord, strict=True))
        steps = _steps(pb.outs, pb.mesh, coords, piece.dim, pb.out_ndim)
        lengths.add(_count(_dim_set(piece.size, steps)))
    return lengths


def _candidates(pb: _Problem, i: int, dim: int) -> Iterator[Placement]:
    """Structural candidates, then every chunking of the group's pieces, then (for a local
    view, where an empty rank may move its emptiness to any output dim) of the other pieces."""
    own = [piece for _, piece in _ordered_pieces(pb, i, dim)]
    others = sorted(set(pb.view.out_sizes) - {p.dim for p in own}) if pb.view.local_view else []
    other_pieces = [_Piece(o, pb.view.out_sizes[o]) for o in others]
    seen: set[Placement] = set()
    for cand in itertools.chain(
        _structural(pb, i, dim), _exhaustive(pb, i, own), _exhaustive(pb, i, other_pieces)
    ):
        if cand not in seen:
            seen.add(cand)
            yield cand


# ============================================================================ the fallback


@dataclass(frozen=True)
class _Failure:
    mismatch: _Mismatch
    candidate: Placement


def _decide(pb: _Problem, i: int, dim: int) -> tuple[Placement | None, _Failure | None]:
    """The first candidate output placement of mesh dim ``i`` that every rank proves, else
    the first failure (of the candidate the structure predicts)."""
    first: _Failure | None = None
    for cand in _candidates(pb, i, dim):
        found = _mismatch(_with_output(pb, cand))
        if found is None:
            return cand, None
        first = first or _Failure(found, cand)
    # Keeping the input sharded with a replicated output is exact only if every rank holds
    # the whole dim anyway (a mesh dim of size 1).
    found = _mismatch(_with_output(pb, Replicate()))
    if found is None:
        return Replicate(), None
    return None, first or _Failure(found, Replicate())


def _describe_digits(digits: Digits) -> str:
    try:
        return _describe(_canonical(_flat(digits)))
    except _Unprovable:
        return "a very irregular set"


def _reason(pb: _Problem, i: int, dim: int, failure: _Failure | None) -> str:
    """Why mesh dim ``i`` cannot stay: what the view does and the first rank that disagrees."""
    p, m = pb.ins[i], pb.mesh[i]
    coords = tuple((j, 0) for j in range(i))
    steps = _steps(pb.ins, pb.mesh, coords, dim, pb.in_ndim)
    length = _count(_dim_set(pb.view.shape[dim], steps))
    sf = _split_factor(p)
    if sf == 1:
        chunks = f"ceil({length}/{m})={-(-length // m)} per rank"
    else:
        piece = -(-length // sf)
        chunks = f"ceil({piece}/{m})={-(-piece // m)} per rank in each of {sf} pieces"
    head = f"{pb.group.what}, and its {m} uneven chunks ({chunks})"
    if failure is None:
        return f"{head} cannot be expressed on the output"
    mm = failure.mismatch
    at = ", ".join(str(c) for _, c in mm.coords)
    where = f"the rank at coordinate ({at}) of mesh dims {tuple(j for j, _ in mm.coords)}"
    if mm.unprovable:
        return f"{head} are too irregular to prove exactly (more than {MAX_FAMILIES} runs)"
    if mm.empty:
        return f"{head} cannot be expressed on the output: e.g. {where} {mm.empty}"
    if mm.pinned_dim is not None:
        return (
            f"{head} leave some rank without all of it ({where} holds "
            f"{_describe_digits(mm.holds)} of dim {mm.pinned_dim})"
        )
    return (
        f"{head} do not line up with any sharding of the output: e.g. {where} holds flat "
        f"elements {_describe_digits(mm.holds)} but {failure.candidate} would give it "
        f"{_describe_digits(mm.assigned)}"
    )


def propagate_uneven(
    placements: tuple[Placement, ...],
    global_shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh_shape: tuple[int, ...],
    *,
    complex_view: bool | None = None,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...], tuple[Blocked, ...]]:
    """Return ``(input_target_placements, output_placements, blocked)`` for a view ``rule``.

    ``input_target`` is ``placements`` with the mesh dims that must move set to
    ``Replicate()`` (only those; ``Partial`` stays and is carried to the output on the same
    mesh dim). ``blocked`` has one :class:`Blocked` per replaced mesh dim, saying why. The
    output placements are valid on every rank for the input target (proven with exact integer
    sets; see the module docstring) and canonical (no ``_StridedShard`` with split factor 1).

    ``complex_view``: whether ``rule`` is ``view_as_complex``'s (True), a real flatten (False),
    or unknown (None: the answer must be valid for both, as they share the rule).
    """
    shape = tuple(int(n) for n in global_shape)
    mesh = tuple(int(m) for m in mesh_shape)
    view = _analyse(rule, shape, complex_view)
    target: tuple[Placement, ...] = ()
    out: tuple[Placement, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    for i, p in enumerate(placements):
        dim = _sharded_dim(p, len(shape))
        if dim is None:
            target += (p,)
            out += (p if isinstance(p, Partial) else Replicate(),)
            continue
        pb = _Problem(view, view.group_of[dim], (*target, p), out, mesh)
        try:
            choice, failure = _decide(pb, i, dim)
        except _Unprovable:  # a set grew too ragged to compare: not proven, so it moves
            choice, failure = None, None
        if choice is not None:
            target += (p,)
            out += (choice,)
            continue
        target += (Replicate(),)
        out += (Replicate(),)
        try:
            reason = _reason(pb, i, dim, failure)
        except _Unprovable:
            reason = (
                f"its shards are too irregular to prove exactly (more than {MAX_FAMILIES} "
                "runs per rank), so it is not kept"
            )
        blocked += (Blocked(i, dim, reason),)
    return target, out, blocked

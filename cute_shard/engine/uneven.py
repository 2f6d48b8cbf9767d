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
   run-length form of their maximal intervals, so nothing is ever materialised (the work grows
   only with how ragged the sets are, capped by :data:`MAX_FAMILIES`). The decision itself
   needs them only through the positions of step 4; the message of a mesh dim that moves shows
   them.
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
   checked for validity on every rank over the mesh dims ``0..i`` that touch the group (every
   sharded one for a view). The first valid one is kept. A valid prefix stays valid (later
   mesh dims only partition it), and every valid candidate leaves the ranks the same sets,
   hence later mesh dims the same choices, so keeping the first loses nothing. If none is
   valid the mesh dim is replicated and a :class:`Blocked` says why (its text is written when
   first read: only a strict view that raises reads it).

   The check is by induction (:class:`_Check`): as the prefix is valid, every rank holds what
   it is assigned, one sorted set in the same order on both sides, so only the step has to
   agree: the *positions* mesh dim ``i``'s chunk keeps along the input dim and those the
   candidate's chunk keeps along the output dim. Those depend only on the rank's local
   lengths and its coordinate on mesh dim ``i``, so the ranks reduce to a few distinct
   states; a candidate is checked on each by chunk arithmetic (counts, for whole runs of
   split factors at once), then by its positions. Where the input side's positions have a
   period that the output dim's cannot have, whatever the split factor, every candidate on
   that output dim is rejected at once.

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
import operator
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np
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

#: A set with more families than this is not built: a candidate whose positions would need it
#: is not proven (so it is not kept), and the reason of a mesh dim that moves says so.
MAX_FAMILIES = 4096

#: Bound on (candidate x rank) for the exhaustive split-factor stage of one mesh dim; above it
#: only the candidates the rule's structure predicts are tried. (A candidate now costs one
#: check per distinct rank state, but the bound still decides which candidates exist.)
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
    if len(s) == 1 and s[0][1] == k1:
        # One family whose intervals are exactly the pieces (a second _StridedShard with the
        # same split factor): the chunk of every interval, one family again.
        x, _, stride, count = s[0]
        return _fam(x + lo, hi - lo, stride, count)
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
        if sf == 1 and len(s) == 1 and s[0][3] == 1:  # a Shard of one interval: its chunk
            lo, hi = _chunk(s[0][1], mesh_size, coord)
            s = _fam(s[0][0] + lo, hi - lo, 0, 1)
            continue
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


def _first_runs(digits: Sequence[tuple[IntSet, int]], n: int) -> list[list[int]]:
    """The first ``n`` maximal intervals ``[a, b]`` of ``_flat(digits)``, in order, the last
    one possibly cut short: a message needs only the first few, and the whole set may be
    large and ragged, so the product is walked only that far."""
    if any(not s for s, _ in digits):
        return []
    if not digits:
        return [[0, 1]]
    strides = [1] * len(digits)  # of each digit in the flat index
    for k in range(len(digits) - 2, -1, -1):
        strides[k] = strides[k + 1] * digits[k + 1][1]
    whole_from = len(digits)  # digits[whole_from:] are held whole
    while whole_from and digits[whole_from - 1][0] == _full(digits[whole_from - 1][1]):
        whole_from -= 1
    runs: list[list[int]] = []
    _walk(digits, strides, whole_from, 0, 0, runs, n)
    return runs


def _walk(
    digits: Sequence[tuple[IntSet, int]],
    strides: list[int],
    whole_from: int,
    k: int,
    base: int,
    runs: list[list[int]],
    n: int,
) -> bool:
    """Append the intervals of digit ``k`` on (at offset ``base``) to ``runs``, merging
    touching ones; True once ``runs`` has ``n`` of them (the walk stops)."""
    stride = strides[k]
    for start, w, st, c in digits[k][0]:
        for t in range(c):
            a = start + t * st
            if k + 1 >= whole_from:  # all inside is whole: one interval per interval of s
                lo, hi = base + a * stride, base + (a + w) * stride
                if runs and runs[-1][1] == lo:
                    runs[-1][1] = hi
                    continue
                runs.append([lo, hi])
                if len(runs) == n:
                    return True
            else:
                for x in range(a, a + w):
                    if _walk(digits, strides, whole_from, k + 1, base + x * stride, runs, n):
                        return True
    return False


def _describe_digits(digits: Sequence[tuple[IntSet, int]], limit: int = 3) -> str:
    """``_describe(_canonical(_flat(digits)))``, from the first intervals only."""
    runs = _first_runs(digits, limit + 1)
    shown = ", ".join([f"[{a}, {b})" for a, b in runs[:limit]])
    if len(runs) > limit:
        count = math.prod(_count(s) for s, _ in digits)
        return f"{shown}, ... ({count} elements)"
    return shown or "nothing"


# ============================================================================ rule groups


# The group values are NamedTuples, not frozen dataclasses: every cold call builds a few dozen,
# and a NamedTuple is several times cheaper to build. Groups are told apart by identity.


class _Factor(NamedTuple):
    """One radix digit of a group's input side: an input dim, or ``dim=None`` for a digit
    every rank holds whole (the copies of a ``Repeat``). ``pinned`` digits are not part of the
    flat index: every rank must hold them whole."""

    dim: int | None
    size: int
    pinned: bool = False


class _Piece(NamedTuple):
    """One output dim of a group (a shardable one) and its size in this reading."""

    dim: int
    size: int


class _Reading(NamedTuple):
    """How a group's input digits line up with its output pieces (both row-major).

    ``broadcast``: a size-1 input dim expanded into the piece. Every value of the piece is
    that one element, so a rank holding it may hold any part of the piece, and a rank
    without it must hold none (expanding an empty dim fails).
    """

    factors: tuple[_Factor, ...]
    pieces: tuple[_Piece, ...]
    broadcast: bool = False


#: A message with its values: ``template.format(*values)``, formatted only if a reason shows it.
Text = tuple[str, tuple[object, ...]]


class _Group(NamedTuple):
    """Input ``dims``, one or more readings that must all hold, and what the view does."""

    dims: tuple[int, ...]
    readings: tuple[_Reading, ...]
    what: Text


def _text(text: Text) -> str:
    template, values = text
    return template.format(*values)


class _View:
    """The rule cut into groups, plus what the checks need to know about the whole op.

    ``local_view``: only view-family ops (view, reshape, flatten, unflatten) have this rule,
    so each rank runs ``local.view(shape)``, which accepts an empty local tensor for any
    output shape of numel 0. Other ops (squeeze, permute, expand, ...) check shapes per dim.

    ``groups``: each group once, in the order of ``group_of``; ``out_sizes``: each output
    piece's size (in its group's first reading); ``piece_group``: the group of each output
    piece.
    """

    __slots__ = (
        "_group_order",
        "_piece_sizes",
        "empty",
        "group_of",
        "groups",
        "local_view",
        "out_ndim",
        "out_sizes",
        "piece_group",
        "shape",
    )

    def __init__(
        self, group_of: dict[int, _Group], shape: tuple[int, ...], out_ndim: int, local_view: bool
    ) -> None:
        self.group_of = group_of
        self.shape = shape
        self.out_ndim = out_ndim
        self.local_view = local_view
        self.empty = 0 in shape
        self.groups = groups = list({id(g): g for g in group_of.values()}.values())
        self.out_sizes = {p.dim: p.size for g in groups for p in g.readings[0].pieces}
        self.piece_group = {p.dim: g for g in groups for r in g.readings for p in r.pieces}
        self._group_order: dict[int, int] | None = None
        self._piece_sizes: dict[int, set[int]] | None = None

    def group_order(self) -> dict[int, int]:
        """Each group's place in :attr:`groups`, by ``id``."""
        if self._group_order is None:
            self._group_order = {id(g): k for k, g in enumerate(self.groups)}
        return self._group_order

    def piece_sizes(self) -> dict[int, set[int]]:
        """The sizes each output piece has, in every reading and in ``out_sizes`` (two for
        the flatten that may be view_as_complex)."""
        if self._piece_sizes is None:
            sizes = {o: {n} for o, n in self.out_sizes.items()}
            for g in self.groups:
                for r in g.readings:
                    for p in r.pieces:
                        sizes.setdefault(p.dim, set()).add(p.size)
            self._piece_sizes = sizes
        return self._piece_sizes


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


def _pinned(dims: Sequence[int], shape: tuple[int, ...], what: Text) -> _Group:
    factors = tuple([_Factor(d, shape[d], True) for d in dims])
    return _Group(tuple(dims), (_Reading(factors, ()),), what)


# A claim of one output dim on a source: (kind, group shape or size, out dim, piece id).
_Claim = tuple[str, object, int, int]


def _claims(
    rule: Sequence[DimSpec],
) -> tuple[dict[tuple[int, ...], list[_Claim]], dict[int, Text]]:
    """Which source each output dim comes from; input dims that carry no output sharding."""
    claims: dict[tuple[int, ...], list[_Claim]] = {}
    pinned: dict[int, Text] = {}
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
            pinned[d] = ("the view's output dim {} = {} carries no sharding of it", (o, spec))
    return claims, pinned


def _reading(
    dims: tuple[int, ...], claims: list[_Claim], shape: tuple[int, ...]
) -> tuple[_Reading, Text] | None:
    """The reading of one source's claims, or None if they are not a view of it."""
    sizes = tuple([shape[d] for d in dims])
    total = math.prod(sizes)
    if total == 0:
        return None  # nothing to shard; pinned keeps every mesh dim without a guess
    factors = tuple([_Factor(d, n) for d, n in zip(dims, sizes, strict=True)])
    kind, arg, o, _ = claims[0]
    if len(claims) == 1 and kind != "split":
        return _single_reading(dims, factors, kind, arg, o, total)
    if kind != "split" or any(c[0] != "split" or c[1] != arg for c in claims):
        return None
    group: tuple[int, ...] = arg  # type: ignore[assignment]
    outs = {c[3]: c[2] for c in claims}
    if len(outs) != len(claims) or sorted(outs) != list(range(len(group))):
        return None
    if len(dims) == 1:
        what: Text = ("the split {} of dim {} (size {})", (group, dims[0], total))
    else:
        what = ("the split {} of flat(dims {}, sizes {}) (size {})", (group, dims, sizes, total))
    if math.prod(group) == total:
        return _Reading(factors, tuple([_Piece(outs[j], n) for j, n in enumerate(group)])), what
    if len(dims) == 1 and group == (total, 2):
        # view_as_real: piece 0 is the complex dim itself; the (real, imag) piece is new and
        # never sharded, so it is left out of the flat index on both sides.
        return _Reading(factors, (_Piece(outs[0], total),)), ("view_as_real of dim {}", dims)
    return None


def _single_reading(
    dims: tuple[int, ...], factors: tuple[_Factor, ...], kind: str, arg: object, o: int, total: int
) -> tuple[_Reading, Text] | None:
    """The reading of a source that becomes exactly one output dim."""
    if kind == "view":
        if len(dims) == 1:
            return _Reading(factors, (_Piece(o, total),)), (
                "output dim {} is tensor dim {}",
                (o, dims[0]),
            )
        sizes = tuple([f.size for f in factors])
        what = (
            "the view flattens dims {} (sizes {}) into output dim {} (size {})",
            (dims, sizes, o, total),
        )
        return _Reading(factors, (_Piece(o, total),)), what
    if kind == "repeat" and isinstance(arg, int):
        copies = _Factor(None, arg)
        what = ("repeat({}) tiles it into output dim {}", (arg, o))
        return _Reading((copies, *factors), (_Piece(o, arg * total),)), what
    if kind == "bcast" and isinstance(arg, int) and total == 1:
        what = ("expand broadcasts it (size 1) to output dim {} (size {})", (o, arg))
        return _Reading(factors, (_Piece(o, arg),), True), what
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


def _is_local_view(rule: Sequence[DimSpec], shape: tuple[int, ...], maybe_complex: bool) -> bool:
    """Whether only view-family ops have ``rule``: it has a Split that keeps the size (not
    view_as_real's), a Flatten (not one view_as_complex may have: ``maybe_complex``, the
    rule has a view_as_complex reading that the caller did not rule out), or it both drops
    an input dim and adds a ``Singleton`` (squeeze only drops, unsqueeze and expand only add)."""
    if any(isinstance(s, Singleton) for s in rule):
        used = {d for spec in rule for d in _all_input_dims(spec)}
        if len(used) < len(shape):
            return True
    for spec in rule:
        src = _source_dims(spec.input_dim) if isinstance(spec, Split) else None
        total = math.prod(shape[d] for d in src) if src is not None else 0
        if total > 0 and math.prod(spec.group_shape) == total:  # type: ignore[union-attr]
            return True
    return not maybe_complex and any(isinstance(s, Flatten) for s in rule)


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
        for d in dims:
            if owners[d] != 1 or d in pinned:
                break
        else:
            found = _reading(dims, cl, shape)
        if found is None:
            specs = ", ".join([str(rule[c[2]]) for c in cl])
            why = ("the rule's output dims ({}) are not a view of it", (specs,))
            group = _pinned(dims, shape, why)
        else:
            reading, what = found
            readings = (reading,)
            if alt is not None and dims == (len(shape) - 2, len(shape) - 1):
                readings = (alt,) if complex_view else (reading, alt)
                what = (what[0] + " (or, as view_as_complex, into complex pairs)", what[1])
            group = _Group(dims, readings, what)
        for d in dims:
            group_of[d] = group
    for d, n in enumerate(shape):
        if d not in group_of:
            why = pinned.get(d) or ("the view drops it (size {})", (n,))
            group_of[d] = _pinned((d,), shape, why)
    return _View(group_of, shape, len(rule), _is_local_view(rule, shape, alt is not None))


# ============================================================================ checking

#: A placement as the checks see it: ``(tensor dim, split factor)`` (1 for ``Shard``), or None
#: for one that shards nothing (``Replicate``, ``Partial``).
Sharding = tuple[int, int] | None

#: A placement replayed on one dim, on every rank: (index of its mesh dim in the rank's
#: coordinate tuple, split factor, mesh dim size).
Slot = tuple[int, int, int]


def _sharding(p: Placement, ndim: int) -> Sharding:
    # type() before isinstance: isinstance on torch placements goes through a slow metaclass
    # hook. _StridedShard is not a subclass of Shard; subclasses of either are still read.
    kind = type(p)
    if kind is Replicate or kind is Partial:
        return None
    if kind is Shard:
        sf = 1
    elif kind is _StridedShard or isinstance(p, _StridedShard):
        sf = int(p.split_factor)
    elif isinstance(p, Shard):
        sf = 1
    else:
        return None
    return (p.dim % ndim, sf) if ndim else None


def _placement(s: Sharding) -> Placement:
    """Canonical: a split factor of 1 is ``Shard``; None is ``Replicate``."""
    if s is None:
        return Replicate()
    dim, sf = s
    return Shard(dim) if sf == 1 else _StridedShard(dim, split_factor=sf)


def _chunk_len(length: int, sf: int, mesh_size: int, coord: int) -> int:
    """How many of ``length`` positions the rank at ``coord`` keeps under
    ``_StridedShard(sf)`` (sf 1 = Shard): ``_count(_restrict(s, ...))`` for any ``s`` of that
    length, by the chunk arithmetic of :func:`_restrict` alone (without min/max, which cost
    more than the arithmetic in this hot loop)."""
    if length == 0:
        return 0
    k1 = -(-length // sf)  # the pieces, the last one maybe shorter
    whole = length // k1
    k = -(-k1 // mesh_size)  # chunks of a whole piece
    tail = length - whole * k1
    kt = -(-tail // mesh_size)  # and of the short last piece
    a = k1 - coord * k  # what the chunk at coord has left of each
    b = tail - coord * kt
    return whole * (k if a >= k else a if a > 0 else 0) + (kt if b >= kt else b if b > 0 else 0)


def _chunk_lens(length: int, sfs: Sequence[int], mesh_size: int, coord: int) -> list[int]:
    """``[_chunk_len(length, sf, mesh_size, coord) for sf in sfs]``, inlined: the count pass
    runs it over a whole run of split factors at once."""
    if length == 0:
        return [0] * len(sfs)
    out = []
    if coord == 0:  # the first chunk of each piece is a full one (or the whole piece)
        for sf in sfs:
            k1 = -(-length // sf)
            whole = length // k1
            out.append(whole * -(-k1 // mesh_size) + -(-(length - whole * k1) // mesh_size))
        return out
    for sf in sfs:
        k1 = -(-length // sf)
        whole = length // k1
        k = -(-k1 // mesh_size)
        tail = length - whole * k1
        kt = -(-tail // mesh_size)
        a = k1 - coord * k
        b = tail - coord * kt
        out.append(
            whole * (k if a >= k else a if a > 0 else 0) + (kt if b >= kt else b if b > 0 else 0)
        )
    return out


#: Runs of at least this many split factors are counted with numpy (the exhaustive stage can
#: try thousands on a large dim); at coordinate 0, where the count is simpler, from
#: ``_VECTOR_FIRST`` on.
_VECTOR = 128
_VECTOR_FIRST = 40


def _keep(
    sfs: Sequence[int], length: int, mesh_size: int, coord: int, want: int | None
) -> list[int]:
    """The split factors in ``sfs`` (in order; a list, or an int64 array of values below
    ``2**62``) whose chunk at ``coord`` of a dim of local length ``length`` has ``want``
    elements (None: at least one), as a list of ints."""
    if isinstance(sfs, np.ndarray):
        sf = sfs
        if length >= 2**62:  # int64 would overflow
            return _keep(sfs.tolist(), length, mesh_size, coord, want)
    elif len(sfs) < (_VECTOR_FIRST if coord == 0 else _VECTOR) or max(length, *sfs) >= 2**62:
        # (short runs are cheaper in Python; and beyond 2**62 int64 would overflow)
        xs = _chunk_lens(length, sfs, mesh_size, coord)
        if want is None:
            return [sf for sf, x in zip(sfs, xs, strict=True) if x]
        return [sf for sf, x in zip(sfs, xs, strict=True) if x == want]
    else:
        sf = np.array(sfs, dtype=np.int64)
    if length == 0:
        x = np.zeros_like(sf)
    else:  # _chunk_len, elementwise
        k1 = -(-length // sf)
        whole = length // k1
        k = -(-k1 // mesh_size)
        tail = length - whole * k1
        kt = -(-tail // mesh_size)
        if coord == 0:  # the first chunk of each piece is a full one (or the whole piece)
            x = whole * k + kt
        else:
            head = np.minimum(np.maximum(k1 - coord * k, 0), k)
            x = whole * head + np.minimum(np.maximum(tail - coord * kt, 0), kt)
    return sf[x != 0 if want is None else x == want].tolist()


def _length(size: int, steps: Sequence[Step]) -> int:
    """``_count(_dim_set(size, steps))``, by chunk arithmetic."""
    for sf, mesh_size, coord in steps:
        size = _chunk_len(size, sf, mesh_size, coord)
    return size


def _lengths(size: int, slots: Sequence[Slot], coords: Sequence[tuple[int, ...]]) -> list[int]:
    """The local length of a dim of ``size`` on every rank of ``coords``. Each distinct
    sub-coordinate of the slots' mesh dims is computed once."""
    if not slots:
        return [size] * len(coords)
    if len(slots) == 1:
        at, sf, m = slots[0]
        row = [_chunk_len(size, sf, m, c) for c in range(m)]
        return [row[c[at]] for c in coords]
    table: dict[tuple[int, ...], int] = {(): size}
    for _, sf, m in slots:
        table = {(*key, c): _chunk_len(n, sf, m, c) for key, n in table.items() for c in range(m)}
    ats = [at for at, _, _ in slots]
    return [table[tuple(c[at] for at in ats)] for c in coords]


Coords = tuple[tuple[int, int], ...]  # (mesh dim, coordinate) pairs
Digits = tuple[tuple[IntSet, int], ...]  # per radix digit: (indices held, digit size)


class _Problem:
    """Mesh dim ``i = len(outs)`` of ``group`` to decide. ``ins`` holds the input placements of
    mesh dims ``0..i`` (the input target so far, then mesh dim ``i``'s own), ``outs`` the output
    placements decided for ``0..i-1``.

    ``decided``: (mesh dim, input dim, output dim) sharded by each decided mesh dim ``j < i``.
    ``checked_mesh_dims``: the mesh dims whose coordinates a check enumerates: those touching
    the group, or, for a local view (where an empty rank couples the groups), every sharding
    one. Mesh dim ``i`` shards a dim of the group, so it is always the last.
    """

    __slots__ = ("checked_mesh_dims", "decided", "group", "i", "ins", "mesh", "outs", "view")

    def __init__(
        self,
        view: _View,
        group: _Group,
        ins: tuple[Sharding, ...],
        outs: tuple[Sharding, ...],
        mesh: tuple[int, ...],
    ) -> None:
        self.view = view
        self.group = group
        self.ins = ins
        self.outs = outs
        self.mesh = mesh
        self.i = i = len(outs)
        self.decided = decided = tuple(
            (j, p[0] if p else None, q[0] if q else None)
            for j, (p, q) in enumerate(zip(ins[:i], outs, strict=True))
        )
        if view.local_view:
            touching = [j for j, d, o in decided if d is not None or o is not None]
        elif decided:
            in_dims = set(group.dims)
            out_dims = {p.dim for r in group.readings for p in r.pieces}
            touching = [j for j, d, o in decided if d in in_dims or o in out_dims]
        else:
            touching = []
        self.checked_mesh_dims = (*touching, i)

    def sharding(self, cand: Sharding) -> list[tuple[int, int | None, int | None]]:
        """:attr:`decided`, then mesh dim ``i`` with output placement ``cand``."""
        p = self.ins[-1]
        return [*self.decided, (self.i, p[0] if p else None, cand[0] if cand else None)]

    def checked_groups(self, cand: Sharding) -> list[_Group]:
        if not self.view.local_view:
            return [self.group]
        view = self.view
        found = {self.group.dims: self.group}
        for _, d, o in self.sharding(cand):
            touched = [view.group_of[d]] if d is not None else []
            if o is not None and o in view.piece_group:
                touched.append(view.piece_group[o])
            for g in sorted(touched, key=lambda g: view.group_order()[id(g)]):
                found.setdefault(g.dims, g)
        return list(found.values())


class _Row(NamedTuple):
    """How mesh dim ``i`` (input dim ``d``) and a candidate on output dim ``o`` meet one
    reading: ``d_at`` is ``d``'s place among its flat (not pinned) digits and ``o_at`` is
    ``o``'s among its pieces (None where absent); ``d_pinned``: ``d`` is a pinned digit."""

    reading: _Reading
    d_at: int | None
    d_pinned: bool
    o_at: int | None


class _Demand(NamedTuple):
    """What a candidate must do on the ranks of one state at one coordinate of mesh dim
    ``i``. ``counts``: ``(length, want)``, its chunk of an output dim of that local length has
    ``want`` elements (None: at least one). ``places``: ``(n, I, n', I')`` whose positions
    must agree (see :class:`_Check`). ``dead``: no candidate can."""

    dead: bool
    counts: tuple[tuple[int, int | None], ...] = ()
    places: tuple[tuple[int, int, int, int], ...] = ()


#: The pattern of positions that are all there: every index, period 1.
_ALL = (1, ((0, 1, 0, 1),))
_UNKNOWN = object()  # a cache miss (None is a value)
_PASS = _Demand(False)
_DEAD = _Demand(True)

#: A state: (empty input, empty output, d's length, o's length, then per row (digits before
#: d, after d, pieces before o, after o, o's length in that reading)), the local lengths and
#: their products on one rank before mesh dim ``i`` (``d``/``o`` absent: all digits are
#: "before" and the length is 0).
State = tuple[bool, bool, int, int, tuple[tuple[int, int, int, int, int], ...]]


class _Check:
    """The candidate output placements of mesh dim ``i``, checked on every rank.

    **Only the step is checked.** Mesh dims ``0..i-1`` are decided, and each kept one was
    proven on every rank, so before mesh dim ``i`` every rank that a local view does not skip
    holds, in every group, exactly the flat indices it is assigned: one sorted set ``X``,
    which its local input lists in row-major order over the local input lengths and its
    local output over the local output lengths. Mesh dim ``i`` then keeps, of ``X``, the
    positions whose local index along input dim ``d`` is in its chunk ``Q`` (chunk ``c`` of
    each of ``sf`` pieces), and the candidate assigns the positions whose local index along
    output dim ``o`` is in its chunk ``Q'``. As ``X`` is sorted, the two sets are equal iff
    the positions are: ``O x Q x I == O' x Q' x I'`` in mixed radix, where ``O``/``I`` are
    the products of the local lengths before/after ``d`` (``O'``/``I'`` around ``o``). The
    groups mesh dim ``i`` does not touch are unchanged and stay exact; in a group only one
    side touches, the other side keeps all of ``X``, so equal counts suffice.

    So a rank's verdict depends only on its **state**, the local lengths before mesh dim
    ``i`` (and, for a local view, whether its whole input and output are empty), and on its
    coordinate on mesh dim ``i``. The ranks (coordinates over the checked mesh dims before
    ``i``, in product order) are reduced to their distinct states, usually one to three
    (full, short and empty chunks), and a candidate is checked on each state and each
    coordinate of mesh dim ``i``:

    1. **Counts** (:meth:`survivors`), for a run of split factors on one output dim at once:
       a local view's emptiness rule, the pinned dims held whole, ``|held| == |assigned|``
       (for a broadcast: held, or assigned nothing). Most candidates fail here.
    2. **Positions** (:meth:`placed`): ``O x Q x I == O' x Q' x I'`` where both sides
       change (:meth:`_same_positions`).

    What a candidate on ``o`` must meet on a state at a coordinate is its :meth:`demand`,
    built when first asked (the counts depend on the coordinate only through ``d``'s chunk
    there, so equal chunks share them). A demand is dead when no candidate on ``o`` can meet
    it; that includes positions no split factor can give, found from the input side's
    smallest period alone, so one dead demand rejects every split factor of ``o`` at once
    (:meth:`hopeless`), before any is listed.
    """

    def __init__(self, pb: _Problem) -> None:
        view = pb.view
        self.pb = pb
        self.d, self.sf = pb.ins[pb.i]  # type: ignore[misc]
        self.m = pb.mesh[pb.i]
        self.local_view = view.local_view
        self.dims = pb.checked_mesh_dims  # mesh dim i is the last
        # The lengths that vary over the ranks: dims sharded by a checked mesh dim before i.
        # A rank's prefix state is its empty input, empty output, then those lengths.
        self.index: dict[tuple[bool, int, int], int] = {}
        if len(self.dims) == 1:  # no mesh dim before i is checked: one rank, one state
            self.coords: list[tuple[int, ...]] = [()]
            empty = self.local_view and view.empty
            self.prefix: list[tuple[int, ...]] = [(empty, empty)]
            self.distinct = self.prefix
        else:
            self._prefix_states(pb)
        self._rows_of: dict[int | None, list[_Row]] = {}
        self._states: dict[int | None, dict[tuple[int, ...], State]] = {}
        self._demands: dict[tuple[int | None, tuple[int, ...]], list[_Demand | None]] = {}
        self._chunks: dict[int, list[int]] = {}
        self._patterns: dict[tuple[int, int, int, int], tuple[int, IntSet] | None] = {}
        self._periods: dict[tuple[int, int], list[int | None]] = {}
        self._reading_places: dict[int, tuple[int | None, bool, dict[int, int]]] = {}
        self._lengths_of: dict[
            tuple[int, tuple[int, ...]], tuple[int, int, list[int], list[int], list[int]]
        ] = {}
        self._positions: dict[tuple[int, int, int, int, int], IntSet] = {}

    def _prefix_states(self, pb: _Problem) -> None:
        """Every rank's prefix state (over the checked mesh dims before ``i``, in product
        order), and the distinct ones."""
        view = pb.view
        at = {j: k for k, j in enumerate(self.dims[:-1])}
        coords = list(itertools.product(*(range(pb.mesh[j]) for j in self.dims[:-1])))
        self.coords = coords
        columns: list[list[int]] = [[False] * len(coords), [False] * len(coords)]
        for is_input, ps in ((True, pb.ins[: pb.i]), (False, pb.outs)):
            slots: dict[int, list[Slot]] = {}
            for j, s in enumerate(ps):
                if s is not None and j in at:
                    slots.setdefault(s[0], []).append((at[j], s[1], pb.mesh[j]))
            for dim, dim_slots in slots.items():
                for size in {view.shape[dim]} if is_input else view.piece_sizes()[dim]:
                    self.index[(is_input, dim, size)] = len(columns)
                    columns.append(_lengths(size, dim_slots, coords))
        if self.local_view:  # a rank whose whole input (output) is empty before mesh dim i
            for (is_input, dim, size), k in self.index.items():
                if size == (view.shape[dim] if is_input else view.out_sizes.get(dim)):
                    e = 0 if is_input else 1
                    columns[e] = [a or x == 0 for a, x in zip(columns[e], columns[k], strict=True)]
            if view.empty:
                columns[0] = columns[1] = [True] * len(coords)
        self.prefix = list(zip(*columns, strict=True))  # per rank, in product order
        self.distinct = list(dict.fromkeys(self.prefix))

    # ------------------------------------------------------------------ states and demands

    def _length(self, prefix: tuple[int, ...], is_input: bool, dim: int | None, size: int) -> int:
        k = self.index.get((is_input, dim, size)) if dim is not None and self.index else None
        return size if k is None else prefix[k]

    def _rows(self, o: int | None) -> list[_Row]:
        """The readings a candidate on output dim ``o`` (None: Replicate) touches: those of
        the group of ``d``, and of ``o``'s group if that is another one (a local view)."""
        view = self.pb.view
        groups = [self.pb.group]
        if o is not None and view.piece_group[o] is not groups[0]:
            groups.append(view.piece_group[o])
        rows = []
        for g in groups:
            for reading in g.readings:
                d_at, d_pinned, o_at = self._places(reading)
                rows.append(_Row(reading, d_at, d_pinned, o_at.get(o)))  # type: ignore[arg-type]
        return rows

    def _places(self, reading: _Reading) -> tuple[int | None, bool, dict[int, int]]:
        """``d``'s place among the reading's flat digits, whether it is pinned there, and
        each piece's place."""
        found = self._reading_places.get(id(reading))
        if found is None:
            flat = [f.dim for f in reading.factors if not f.pinned]
            found = (
                flat.index(self.d) if self.d in flat else None,
                any(f.pinned and f.dim == self.d for f in reading.factors),
                {p.dim: k for k, p in enumerate(reading.pieces)},
            )
            self._reading_places[id(reading)] = found
        return found

    def _reading_lengths(
        self, reading: _Reading, d_at: int | None, prefix: tuple[int, ...]
    ) -> tuple[int, int, list[int], list[int], list[int]]:
        """On a rank with this prefix state, before mesh dim ``i``: the products of the local
        lengths of the reading's flat digits before and after ``d`` (at ``d_at``), and of its
        pieces, the products before and after each piece, and the pieces' lengths."""
        key = (id(reading), prefix)
        found = self._lengths_of.get(key)
        if found is None:
            if self.index:
                ins = [
                    self._length(prefix, True, f.dim, f.size)
                    for f in reading.factors
                    if not f.pinned
                ]
                outs = [self._length(prefix, False, q.dim, q.size) for q in reading.pieces]
            else:  # no length varies: all are the global sizes
                ins = [f.size for f in reading.factors if not f.pinned]
                outs = [q.size for q in reading.pieces]
            if d_at is None:
                o_in, i_in = math.prod(ins), 1
            else:
                o_in, i_in = math.prod(ins[:d_at]), math.prod(ins[d_at + 1 :])
            before = list(itertools.accumulate(outs[:-1], operator.mul, initial=1))
            after = list(itertools.accumulate(outs[:0:-1], operator.mul, initial=1))[::-1]
            found = self._lengths_of[key] = (o_in, i_in, before, after, outs)
        return found

    def _state(self, prefix: tuple[int, ...], o: int | None, rows: list[_Row]) -> State:
        """The state (see :data:`State`) of a candidate on ``o`` on a rank with this prefix
        state."""
        view = self.pb.view
        per_row = []
        for row in rows:
            o_in, i_in, before, after, outs = self._reading_lengths(row.reading, row.d_at, prefix)
            at = row.o_at
            if at is None:
                per_row.append((o_in, i_in, math.prod(outs), 1, 0))
            else:
                per_row.append((o_in, i_in, before[at], after[at], outs[at]))
        return (
            prefix[0],
            prefix[1],
            self._length(prefix, True, self.d, view.shape[self.d]),
            self._length(prefix, False, o, view.out_sizes[o]) if o is not None else 0,
            tuple(per_row),
        )

    def rows(self, o: int | None) -> list[_Row]:
        found = self._rows_of.get(o)
        if found is None:
            found = self._rows_of[o] = self._rows(o)
        return found

    def state(self, o: int | None, prefix: tuple[int, ...]) -> State:
        """The state, for a candidate on output dim ``o``, of ranks with this prefix state."""
        by_prefix = self._states.get(o)
        if by_prefix is None:
            by_prefix = self._states[o] = {}
        found = by_prefix.get(prefix)
        if found is None:
            found = by_prefix[prefix] = self._state(prefix, o, self.rows(o))
        return found

    def chunks(self, length: int) -> list[int]:
        """Mesh dim ``i``'s chunk of a local length ``length`` of ``d``, per coordinate."""
        found = self._chunks.get(length)
        if found is None:
            sf, m = self.sf, self.m
            k = -(-length // m)
            if sf == 1 and k:  # torch.chunk: full chunks of k, maybe a short one, then empty
                whole, short = divmod(length, k)
                found = [k] * whole + [short] * (short > 0)
                found += [0] * (m - len(found))
            else:
                found = [_chunk_len(length, sf, m, c) for c in range(m)]
            self._chunks[length] = found
        return found

    def demand(self, o: int | None, prefix: tuple[int, ...], c: int) -> _Demand:
        """What a candidate on ``o`` must do on ranks with this prefix state at coordinate
        ``c`` of mesh dim ``i`` (built when first asked: most candidates fail on the first).

        The counts depend on the coordinate only through ``d``'s chunk there, so coordinates
        with equal chunks (all the full ones) share them. A demand whose positions no split
        factor can meet is dead too: the input side's smallest period (where :meth:`pattern`
        knows it) must divide the output side's period ``n' * I'``, which does not depend on
        the split factor (see :meth:`_same_positions`). This decides most candidates that
        pass the counts but not the positions, for all their split factors at once."""
        return self.per_coordinate(o, prefix)[c] or self._fill(o, prefix, c)

    def per_coordinate(self, o: int | None, prefix: tuple[int, ...]) -> list[_Demand | None]:
        """The demands at each coordinate of mesh dim ``i`` built so far (None: not yet; see
        :meth:`demand`), for loops over the coordinates."""
        per_c = self._demands.get((o, prefix))
        if per_c is None:
            per_c = self._demands[(o, prefix)] = [None] * self.m
        return per_c

    def _fill(self, o: int | None, prefix: tuple[int, ...], c: int) -> _Demand:
        """Build :meth:`demand`'s answer at ``c`` and at every coordinate with the same chunk
        (one pass: they are usually all asked for), and keep them in :meth:`per_coordinate`."""
        per_c = self.per_coordinate(o, prefix)
        state = self.state(o, prefix)
        chunks = self.chunks(state[2])
        ld2 = chunks[c]
        found = self._demand(state, self.rows(o), o, ld2)
        for c2, x in enumerate(chunks):
            if x != ld2:
                continue
            dem = found
            for ld, i_in, lo, i_out in found.places:
                period = self.periods(ld, i_in)[c2]
                if period is not None and lo * i_out % period:
                    dem = _DEAD
                    break
            per_c[c2] = dem
        return per_c[c]  # type: ignore[return-value]

    def periods(self, n: int, inner: int) -> list[int | None]:
        """Per coordinate of mesh dim ``i``: the smallest period that :meth:`pattern` gives
        for mesh dim ``i``'s own side ``(n, inner, sf)``, or None where it gives None."""
        key = (n, inner)
        found = self._periods.get(key)
        if found is None:
            sf = self.sf
            found = [p and p[0] for p in [self.pattern(n, inner, sf, c) for c in range(self.m)]]
            self._periods[key] = found
        return found

    def _demand(self, state: State, rows: list[_Row], o: int | None, ld2: int) -> _Demand:
        """The demand on ranks in ``state`` whose chunk of ``d`` (of local length ``ld``) on
        mesh dim ``i`` has ``ld2`` elements."""
        empty_in, empty_out, ld, lo_e, per_row = state
        counts: list[tuple[int, int | None]] = []
        if self.local_view:
            now_empty = empty_in or ld2 == 0
            if empty_out:  # the output is empty whatever the candidate
                # local.view of an empty tensor to an empty shape is exact
                return _PASS if now_empty else _DEAD
            if now_empty:  # exact only if the candidate leaves the output empty
                return _DEAD if o is None else _Demand(False, ((lo_e, 0),))
            if o is not None:  # and a non-empty input needs a non-empty output
                counts.append((lo_e, None))
        places = []
        for row, (o_in, i_in, o_out, i_out, lo) in zip(rows, per_row, strict=True):
            if row.d_pinned and ld2 != ld:
                return _DEAD
            held = o_in * i_in * (ld2 if row.d_at is not None else 1)
            rest = o_out * i_out  # assigned = rest * (the candidate's chunk of o)
            if row.o_at is None:
                if (held == 0 and rest != 0) if row.reading.broadcast else held != rest:
                    return _DEAD
            elif row.reading.broadcast:
                if held == 0 and rest != 0:
                    counts.append((lo, 0))
            elif rest == 0:
                if held != 0:
                    return _DEAD
            elif held % rest:
                return _DEAD
            else:
                counts.append((lo, held // rest))
                if row.d_at is not None and held:
                    places.append((ld, i_in, lo, i_out))
        if len(counts) == 2 and counts[0][1] is None and counts[1][1] is not None:
            # The usual pair (a local view's "not empty", then the count), as below.
            (lo_a, _), (lo_b, want_b) = counts
            if lo_a != lo_b:
                return _Demand(False, tuple(counts), tuple(places))
            return _DEAD if want_b == 0 else _Demand(False, (counts[1],), tuple(places))
        if len(counts) > 1:
            wants = {lo: want for lo, want in counts if want is not None}
            if any(want == 0 for lo, want in wants.items() if (lo, None) in counts):
                return _DEAD  # an output that must be both empty and not
            # "at least one" is implied by a positive count on the same length
            counts = [*dict.fromkeys(c for c in counts if c[1] is not None or c[0] not in wants)]
        return _Demand(False, tuple(counts), tuple(places))

    def _ranks(
        self, only: tuple[tuple[int, ...], int] | None
    ) -> tuple[Sequence[tuple[int, ...]], Sequence[int]]:
        """The prefix states and coordinates of mesh dim ``i`` to check: every rank, or only
        those of ``only``, a (prefix state, coordinate) pair."""
        if only is None:
            return self.distinct, range(self.m)
        return (only[0],), (only[1],)

    def elsewhere_hopeless(self) -> bool:
        """Whether every candidate on an output dim of another group than ``d``'s fails: such
        a candidate leaves ``d``'s group with its input cut and its output whole, which the
        Replicate output does too, so where that fails on a rank that keeps some of ``d``
        (no emptiness to excuse it), they all do."""
        for prefix in self.distinct:
            chunks = self.chunks(self.state(None, prefix)[2])
            for c, ld2 in enumerate(chunks):
                if self.demand(None, prefix, c).dead and not (prefix[0] or ld2 == 0):
                    return True
        return False

    def hopeless(self, o: int) -> bool:
        """Whether some rank fails every candidate on output dim ``o``."""
        for p in self.distinct:
            per_c = self.per_coordinate(o, p)
            for c in range(self.m):
                if (per_c[c] or self._fill(o, p, c)).dead:
                    return True
        return False

    # ------------------------------------------------------------------ the two passes

    def survivors(
        self, o: int | None, sfs: Sequence[int], only: tuple[tuple[int, ...], int] | None = None
    ) -> list[int]:
        """The split factors in ``sfs`` (in order; a list, or a long int64 array from
        :func:`_split_factors`) whose candidate on output dim ``o`` has the right counts on
        every rank (or only on the ranks of ``only``), as a list of ints."""
        m = self.m
        if isinstance(sfs, np.ndarray) and len(sfs) < 2:
            sfs = sfs.tolist()
        prefixes, cs = self._ranks(only)
        for prefix in prefixes:
            per_c = self.per_coordinate(o, prefix)
            for c in cs:
                dead, counts, _ = per_c[c] or self._fill(o, prefix, c)
                if dead:
                    return []
                for lo, want in counts:
                    if len(sfs) == 1:
                        x = _chunk_len(lo, sfs[0], m, c)
                        if x == 0 if want is None else x != want:
                            return []
                        continue
                    sfs = _keep(sfs, lo, m, c, want)
                    if not sfs:
                        return []
        return sfs.tolist() if isinstance(sfs, np.ndarray) else list(sfs)

    def placed(
        self, cand: tuple[int, int], only: tuple[tuple[int, ...], int] | None = None
    ) -> bool:
        """Whether a candidate with the right counts also puts every rank's elements at the
        right positions (or only on the ranks of ``only``)."""
        o, sf_out = cand
        prefixes, cs = self._ranks(only)
        try:
            for prefix in prefixes:
                per_c = self.per_coordinate(o, prefix)
                for c in cs:
                    for ld, i_in, lo, i_out in (per_c[c] or self._fill(o, prefix, c)).places:
                        if not self._same_positions(ld, i_in, self.sf, lo, i_out, sf_out, c):
                            return False
        except _Unprovable:
            return False
        return True

    def _same_positions(
        self, ld: int, i_in: int, sf_in: int, lo: int, i_out: int, sf_out: int, c: int
    ) -> bool:
        """``O x Q x I == O' x Q' x I'`` (see the class docstring). Each side is periodic,
        with period ``ld * i_in`` and ``lo * i_out``, both dividing the rank's count ``N``.
        The periods of a subset of ``Z_N`` are the multiples of its smallest one, so equal
        sets have equal smallest periods, and each divides the other side's period. Where
        :meth:`pattern` knows a side's smallest period and what one period holds, that
        decides; otherwise both sides are compared on one common period."""
        p_in, p_out = ld * i_in, lo * i_out
        a = self.pattern(ld, i_in, sf_in, c)
        b = self.pattern(lo, i_out, sf_out, c)
        if a is not None and b is not None:
            return a == b
        if (a is not None and p_out % a[0]) or (b is not None and p_in % b[0]):
            return False
        span = math.lcm(p_in, p_out)
        return self.positions(span // p_in, ld, i_in, sf_in, c) == self.positions(
            span // p_out, lo, i_out, sf_out, c
        )

    def pattern(self, n: int, inner: int, sf: int, c: int) -> tuple[int, IntSet] | None:
        """``(smallest period, what one period holds)`` of ``outer x Q x inner`` (any outer),
        where ``Q`` is the chunk at ``c`` of ``[0, n)`` under ``_StridedShard(sf)``, or None
        when the short last piece has a chunk too (not worked out here). ``Q`` is chunk
        ``[lo, hi)`` of each of ``whole`` pieces of ``k1``: with no short piece, one interval
        every ``k1 * inner``; with one, the pieces' intervals then a gap, every ``n *
        inner``, and no smaller period, as exactly one gap differs. ``(1, [0, 1))`` is all."""
        key = (n, inner, sf, c)
        found = self._patterns.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            k1 = -(-n // sf)
            whole = n // k1
            tail = n - whole * k1
            k = -(-k1 // self.m)
            kt = -(-tail // self.m)
            # the chunks [lo, hi) and [tlo, thi) of _chunk, inlined
            lo = c * k if c * k < k1 else k1
            hi = lo + k if lo + k < k1 else k1
            tlo = c * kt if c * kt < tail else tail
            if (tlo + kt if tlo + kt < tail else tail) > tlo or hi == lo:
                found = None
            elif tail == 0 and hi - lo == k1:
                found = _ALL
            elif tail == 0:
                found = (k1 * inner, ((lo * inner, (hi - lo) * inner, 0, 1),))
            else:
                found = (n * inner, _fam(lo * inner, (hi - lo) * inner, k1 * inner, whole))
            self._patterns[key] = found
        return found  # type: ignore[return-value]

    def positions(self, copies: int, n: int, inner: int, sf: int, c: int) -> IntSet:
        """``copies x Q x inner`` in mixed radix, canonical, where ``Q`` is the chunk at ``c``
        of ``[0, n)`` under ``_StridedShard(sf)`` (sf 1 = Shard) on mesh dim ``i``: chunk
        ``[lo, hi)`` of each of ``whole`` pieces of ``k1``, and ``[tlo, thi)`` of the short
        last piece (the arithmetic of :func:`_restrict`)."""
        key = (copies, n, inner, sf, c)
        found = self._positions.get(key)
        if found is not None:
            return found
        k1 = -(-n // sf)
        whole = n // k1
        tail = n - whole * k1
        lo, hi = _chunk(k1, self.m, c)
        tlo, thi = _chunk(tail, self.m, c)
        if thi == tlo and (tail == 0 or whole == 1):
            # One family: with no short piece the copies continue it; with one piece, the
            # copies repeat its single interval every n * inner.
            stride = k1 * inner if tail == 0 else n * inner
            found = _fam(
                lo * inner, (hi - lo) * inner, stride, whole * copies if tail == 0 else copies
            )
        else:
            if 2 * copies > MAX_FAMILIES:
                raise _Unprovable
            runs: list[Family] = []
            for t in range(copies):
                base = t * n * inner
                runs.extend(_fam(base + lo * inner, (hi - lo) * inner, k1 * inner, whole))
                runs.extend(_fam(base + (whole * k1 + tlo) * inner, (thi - tlo) * inner, 0, 1))
            found = _canonical(tuple(runs))
        self._positions[key] = found
        return found


# ============================================================================ the first mismatch


class _Mismatch(NamedTuple):
    """The first rank a candidate fails on: what it holds and what it would be assigned."""

    coords: Coords
    holds: Digits = ()
    assigned: Digits = ()
    pinned_dim: int | None = None
    unprovable: bool = False
    empty: str = ""  # a local-view rank with an empty tensor on one side only
    flats: tuple[IntSet, IntSet] | None = None  # holds and assigned as flat sets, if known


def _steps(
    ps: Sequence[Sharding], mesh: tuple[int, ...], coords: Coords, dim: int
) -> tuple[Step, ...]:
    return tuple([(ps[j][1], mesh[j], c) for j, c in coords if ps[j] and ps[j][0] == dim])  # type: ignore[index]


def _first_failure(check: _Check, cand: Sharding) -> _Mismatch | None:
    """The first rank, in product order over the checked mesh dims, on which ``cand`` fails,
    and how (what the reason shows). The ranks are scanned by their states; only the failing
    one is replayed with sets."""
    o, sf = cand if cand is not None else (None, 1)
    failing: dict[tuple[int, ...], int | None] = {}  # per prefix state, its first failing c
    for prefix in check.distinct:
        failing[prefix] = None
        for c in range(check.m):
            only = (prefix, c)
            if not check.survivors(o, [sf], only) or (
                cand is not None and not check.placed(cand, only)
            ):
                failing[prefix] = c
                break
    for coord, prefix in zip(check.coords, check.prefix, strict=True):
        c = failing[prefix]
        if c is not None:
            coords = tuple(zip(check.dims, (*coord, c), strict=True))
            # No mismatch in the sets: the positions were too irregular to compare.
            return _mismatch_at(check.pb, cand, coords) or _Mismatch(coords, unprovable=True)
    return None


def _mismatch_at(pb: _Problem, cand: Sharding, coords: Coords) -> _Mismatch | None:
    """How ``cand`` fails on the rank at ``coords``, from its exact sets."""
    outs = (*pb.outs, cand)
    in_steps = _rank_steps(pb.ins, pb.mesh, coords)
    out_steps = _rank_steps(outs, pb.mesh, coords)
    view = pb.view
    if view.local_view:  # whether the rank's whole local input, and output, are empty
        empty_in = view.empty or any(_length(view.shape[d], s) == 0 for d, s in in_steps.items())
        empty_out = view.empty or any(
            _length(view.out_sizes[o], s) == 0 for o, s in out_steps.items() if o in view.out_sizes
        )
        if empty_in and empty_out:
            return None
        if empty_in != empty_out:
            side = "holds nothing but would be assigned elements"
            if empty_out:
                side = "holds elements but would be assigned none"
            return _Mismatch(coords, empty=side)
    for g in pb.checked_groups(cand):
        for reading in g.readings:
            found = _rank_mismatch(reading, in_steps, out_steps, coords)
            if found is not None:
                return found
    return None


def _rank_steps(
    ps: Sequence[Sharding], mesh: tuple[int, ...], coords: Coords
) -> dict[int, tuple[Step, ...]]:
    """Per tensor dim that ``ps`` shards on the mesh dims of ``coords``, its steps on the
    rank at ``coords`` (as :func:`_steps` lists them)."""
    found: dict[int, list[Step]] = {}
    for j, c in coords:
        p = ps[j]
        if p:
            found.setdefault(p[0], []).append((p[1], mesh[j], c))
    return {d: tuple(steps) for d, steps in found.items()}


def _rank_mismatch(
    reading: _Reading,
    in_steps: dict[int, tuple[Step, ...]],
    out_steps: dict[int, tuple[Step, ...]],
    coords: Coords,
) -> _Mismatch | None:
    """How one reading fails on the rank at ``coords`` (whose steps are given), if it does."""
    try:
        held: list[tuple[IntSet, int]] = []
        for f in reading.factors:
            full = _full(f.size)
            steps = in_steps.get(f.dim) if f.dim is not None else None  # type: ignore[arg-type]
            s = _dim_set(f.size, steps) if steps else full
            if f.pinned and s != full:
                return _Mismatch(coords, ((s, f.size),), ((full, f.size),), f.dim)
            if not f.pinned:
                held.append((s, f.size))
        assigned = []
        for p in reading.pieces:
            steps = out_steps.get(p.dim)
            assigned.append((_dim_set(p.size, steps) if steps else _full(p.size), p.size))
        n_held = math.prod([_count(s) for s, _ in held])
        n_assigned = math.prod([_count(s) for s, _ in assigned])
        flats = None
        if reading.broadcast:
            ok = n_held > 0 or n_assigned == 0
        else:
            ok = n_held == n_assigned
            if ok:
                flats = (_canonical(_flat(held)), _canonical(_flat(assigned)))
                ok = flats[0] == flats[1]
    except _Unprovable:
        return _Mismatch(coords, unprovable=True)
    return None if ok else _Mismatch(coords, tuple(held), tuple(assigned), flats=flats)


# ============================================================================ candidates


def _sf_classes(length: int) -> set[int]:
    """Split factors with every distinct ``ceil(length / sf)``, i.e. chunking behaviour."""
    r = math.isqrt(length)
    return {*range(1, r + 2), *[-(-length // k) for k in range(1, r + 1)]}


def _outer_counts(pb: _Problem, dim: int) -> tuple[int, int, int]:
    """Digits outside the mesh dim's sub-mode, evenly: (the factors before ``dim`` times the
    input split factor, that times the earlier mesh dims on ``dim``, the earlier mesh dims on
    those outer factors)."""
    reading = pb.group.readings[0]
    dims = [f.dim for f in reading.factors]
    at = dims.index(dim) if dim in dims else 0
    base = math.prod(f.size for f in reading.factors[:at]) * pb.ins[-1][1]  # type: ignore[index]
    same = ahead = 1
    for j, d, _ in pb.decided:
        if d == dim:
            same *= pb.mesh[j]
        elif d is not None and d in dims[:at]:
            ahead *= pb.mesh[j]
    return base, base * same, ahead


def _ordered_pieces(
    pb: _Problem, dim: int, counts: tuple[int, int, int] | None = None
) -> list[tuple[int, _Piece]]:
    """The group's pieces (with their outer product), the one the structure predicts first:
    evenly, the shard lands in the piece whose outer product brackets the digits outside it.
    ``counts``: :func:`_outer_counts`, if known."""
    _, outer, ahead = counts or _outer_counts(pb, dim)
    out: list[tuple[int, _Piece]] = []
    op = 1
    for piece in pb.group.readings[0].pieces:
        out.append((op, piece))
        op *= piece.size
    return sorted(out, key=lambda e: not (e[0] * ahead <= outer < e[0] * e[1].size * ahead))


def _structural(
    pb: _Problem,
    dim: int,
    counts: tuple[int, int, int] | None = None,
    ordered: list[tuple[int, _Piece]] | None = None,
) -> Iterator[tuple[int, int]]:
    """Candidates the rule's structure predicts (the even-case split factors). ``counts``
    and ``ordered``: :func:`_outer_counts` and :func:`_ordered_pieces`, if known."""
    counts = counts or _outer_counts(pb, dim)
    base, full, ahead = counts
    broadcast = pb.group.readings[0].broadcast
    for op, piece in ordered if ordered is not None else _ordered_pieces(pb, dim, counts):
        if broadcast:
            # Pieces of one element: the rank holding the size-1 dim gets all of them.
            yield piece.dim, piece.size
        for num, den in itertools.product((full, base), (op * ahead, op)):
            if num % den == 0:
                yield piece.dim, num // den
        for j, _, o in pb.decided:
            if o == piece.dim:  # an earlier mesh dim's split factor on the same piece
                yield piece.dim, pb.outs[j][1]  # type: ignore[index]
        yield piece.dim, 1


def _exhaustive(pb: _Problem, pieces: Sequence[_Piece]) -> list[tuple[int, Sequence[int]]]:
    """One split factor per distinct chunking of each piece, if the work stays bounded:
    ``(output dim, split factors)`` per piece, in the order they are tried (each piece's
    split factors in increasing order, see :func:`_split_factors`)."""
    ranks = math.prod(pb.mesh[j] for j in pb.checked_mesh_dims)
    per_piece = [(piece.dim, _split_factors(_local_lengths(pb, piece))) for piece in pieces]
    if sum(len(sfs) for _, sfs in per_piece) * ranks > MAX_SEARCH_CHECKS:
        return []
    return per_piece


def _split_factors(lengths: set[int]) -> Sequence[int]:
    """The union of :func:`_sf_classes` over ``lengths``, increasing: a list, or for one
    long length an int64 array (built and counted without a Python int per element)."""
    if len(lengths) == 1:
        (n,) = lengths
        r = math.isqrt(n)
        if 2 * r >= _VECTOR_FIRST and n < 2**62:
            # ceil(n/k) for k = r, ..., 1 increases strictly (consecutive ones differ by
            # n / (k (k+1)) > 1), and only values up to r + 1 can repeat 1..r+1.
            big = -(-n // np.arange(r, 0, -1, dtype=np.int64))
            return np.concatenate((np.arange(1, r + 2, dtype=np.int64), big[big > r + 1]))
    sfs: set[int] = set()
    for n in lengths:
        sfs |= _sf_classes(n)
    return sorted(sfs)


def _local_lengths(pb: _Problem, piece: _Piece) -> set[int]:
    """The piece's local lengths over the ranks, before the mesh dim being decided."""
    on = [j for j, _, o in pb.decided if o == piece.dim]
    if not on:
        return {piece.size}
    lengths = set()
    for coord in itertools.product(*(range(pb.mesh[j]) for j in on)):
        steps = _steps(pb.outs, pb.mesh, tuple(zip(on, coord, strict=True)), piece.dim)
        lengths.add(_length(piece.size, steps))
    return lengths


# ============================================================================ the fallback


def _decide(pb: _Problem, dim: int) -> tuple[bool, Sharding, _Check]:
    """``(True, output placement, _)`` for the first candidate of mesh dim ``i`` that every
    rank proves, else ``(False, the first candidate tried, _)``, whose failure the reason
    shows.

    The candidates, in order: the structural ones, then every chunking of the group's pieces,
    then (for a local view, where an empty rank may move its emptiness to any output dim) of
    the other pieces. The count pass only drops candidates that fail somewhere, so the first
    survivor whose positions agree is the first valid candidate; and a candidate tried again
    fails again, so the later stages need not leave out the earlier ones."""
    check = _Check(pb)
    counts = _outer_counts(pb, dim)
    ordered = _ordered_pieces(pb, dim, counts)
    structural = list(dict.fromkeys(_structural(pb, dim, counts, ordered)))
    runs: dict[int, list[int]] = {}
    for o, sf in structural:
        runs.setdefault(o, []).append(sf)
    alive: dict[int, set[int]] = {}
    for o, sf in structural:
        if o not in alive:  # the count pass for all of o's structural split factors
            alive[o] = set(check.survivors(o, runs[o]))
        if sf in alive[o] and check.placed((o, sf)):
            return True, (o, sf), check
    first = structural[0] if structural else None
    own = [piece for _, piece in ordered]
    for stage in range(2):
        if stage == 0:
            pieces = own
        elif pb.view.local_view:
            others = sorted(set(pb.view.out_sizes) - {p.dim for p in own})
            pieces = [_Piece(o, pb.view.out_sizes[o]) for o in others]
        else:
            break
        if not pieces:
            continue  # (nothing to list)
        if first is not None and (
            (stage == 1 and check.elsewhere_hopeless())
            or all(check.hopeless(p.dim) for p in pieces)
        ):
            continue  # nothing on these pieces can pass: no need to list their chunkings
        for o, sfs in _exhaustive(pb, pieces):
            if first is None and len(sfs):
                first = (o, int(sfs[0]))
            if check.hopeless(o):
                continue  # (the count pass would drop every split factor)
            for sf in check.survivors(o, sfs):
                if check.placed((o, sf)):
                    return True, (o, sf), check
    # Keeping the input sharded with a replicated output is exact only if every rank holds
    # the whole dim anyway (a mesh dim of size 1).
    if check.survivors(None, [1]):
        return True, None, check
    return False, first, check


def _reason(check: _Check, dim: int, failed: Sharding) -> str:
    """Why mesh dim ``i`` cannot stay: what the view does and the first rank that disagrees
    with the first candidate (``failed``, None for Replicate)."""
    pb, i = check.pb, check.pb.i
    m, sf = pb.mesh[i], pb.ins[i][1]  # type: ignore[index]
    # d's length on the rank at coordinate 0 of mesh dims 0..i-1
    steps = [(p[1], pb.mesh[j], 0) for j, p in enumerate(pb.ins[:i]) if p and p[0] == dim]
    length = _length(pb.view.shape[dim], steps)
    if sf == 1:
        chunks = f"ceil({length}/{m})={-(-length // m)} per rank"
    else:
        piece = -(-length // sf)
        chunks = f"ceil({piece}/{m})={-(-piece // m)} per rank in each of {sf} pieces"
    head = f"{_text(pb.group.what)}, and its {m} uneven chunks ({chunks})"
    mm = _first_failure(check, failed)
    if mm is None:
        return f"{head} cannot be expressed on the output"
    at = ", ".join([str(c) for _, c in mm.coords])
    where = f"the rank at coordinate ({at}) of mesh dims {tuple([j for j, _ in mm.coords])}"
    if mm.unprovable:
        return f"{head} are too irregular to prove exactly (more than {MAX_FAMILIES} runs)"
    if mm.empty:
        return f"{head} cannot be expressed on the output: e.g. {where} {mm.empty}"
    if mm.pinned_dim is not None:
        return (
            f"{head} leave some rank without all of it ({where} holds "
            f"{_describe_digits(mm.holds)} of dim {mm.pinned_dim})"
        )
    holds, assigned = (
        (_describe(mm.flats[0]), _describe(mm.flats[1]))
        if mm.flats
        else (_describe_digits(mm.holds), _describe_digits(mm.assigned))
    )
    return (
        f"{head} do not line up with any sharding of the output: e.g. {where} holds flat "
        f"elements {holds} but {_placement(failed)} would give it {assigned}"
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
    output placements are valid on every rank for the input target (proven exactly, with
    integer arithmetic; see the module docstring) and canonical (no ``_StridedShard`` with
    split factor 1).

    ``complex_view``: whether ``rule`` is ``view_as_complex``'s (True), a real flatten (False),
    or unknown (None: the answer must be valid for both, as they share the rule).
    """
    shape = tuple([int(n) for n in global_shape])
    mesh = tuple([int(m) for m in mesh_shape])
    view = _analyse(rule, shape, complex_view)
    target: tuple[Placement, ...] = ()
    out: tuple[Placement, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    ins: tuple[Sharding, ...] = ()  # the input target and the output, as the checks see them
    outs: tuple[Sharding, ...] = ()
    for i, p in enumerate(placements):
        s = _sharding(p, len(shape))
        if s is None:
            target += (p,)
            out += (p if type(p) is not Replicate and isinstance(p, Partial) else Replicate(),)
            ins += (None,)
            outs += (None,)
            continue
        pb = _Problem(view, view.group_of[s[0]], (*ins, s), outs, mesh)
        kept, choice, _ = _decide(pb, s[0])
        if kept:
            target += (p,)
            out += (_placement(choice),)
            ins += (s,)
            outs += (choice,)
            continue
        target += (Replicate(),)
        out += (Replicate(),)
        ins += (None,)
        outs += (None,)
        blocked += (_LazyBlocked(i, s[0], pb, choice),)
    return target, out, blocked


#: The ``reason`` slot of :class:`Blocked`, which :class:`_LazyBlocked` fills when it is read.
_REASON_SLOT = Blocked.__dict__["reason"]


class _LazyBlocked(Blocked):
    """A :class:`Blocked` whose reason is written when it is first read.

    Writing a reason replays the first rank that fails with exact sets, about a quarter of a
    cold call, and only a strict view that raises reads one (a reshape drops them). The text
    is :func:`_reason`'s, from the same problem, so the object reads, compares, hashes, prints
    and pickles as the plain :class:`Blocked` with that reason would.
    """

    __slots__ = ("_failed", "_problem")

    def __init__(self, mesh_dim: int, tensor_dim: int, pb: _Problem, failed: Sharding) -> None:
        object.__setattr__(self, "mesh_dim", mesh_dim)
        object.__setattr__(self, "tensor_dim", tensor_dim)
        object.__setattr__(self, "_problem", pb)
        object.__setattr__(self, "_failed", failed)

    @property  # type: ignore[override]
    def reason(self) -> str:
        try:
            return _REASON_SLOT.__get__(self, Blocked)  # type: ignore[no-any-return]
        except AttributeError:
            text = _reason(_Check(self._problem), self.tensor_dim, self._failed)
            _REASON_SLOT.__set__(self, text)
            object.__setattr__(self, "_problem", None)  # (the problem is no longer needed)
            return text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Blocked):
            return NotImplemented
        return (self.mesh_dim, self.tensor_dim, self.reason) == (
            other.mesh_dim,
            other.tensor_dim,
            other.reason,
        )

    __hash__ = Blocked.__hash__

    def __repr__(self) -> str:
        return repr(self._plain())

    def __reduce__(self) -> tuple[type[Blocked], tuple[int, int, str]]:
        return Blocked, (self.mesh_dim, self.tensor_dim, self.reason)

    def _plain(self) -> Blocked:
        return Blocked(self.mesh_dim, self.tensor_dim, self.reason)

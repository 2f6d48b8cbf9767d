"""Who holds each position of a tensor dim: the ownership labelling a redistribution reads.

A sharding's CuTe layout says, for every mesh dim m sharding tensor dim d, which coordinate
``c_m`` holds each position p of d: read the other way, the gpu sub-mode is a function
``owner_m(p)``. With even sizes it is a digit of p in the layout's mixed radix
(``(p // stride) % M``); with torch.chunk's uneven tails it is the same walk with shorter
last pieces. This module writes that function out as **runs**: the positions of d cut into
intervals on which every owner is constant, each labelled with the owner coordinates.

``dim_runs(n, levels)`` follows DTensor's left-to-right semantics (``Shard``: torch.chunk of
the local positions into M; ``_StridedShard(sf)``: torch.chunk into sf pieces, each chunked
into M, rank c keeping the c-th chunk of every piece, in piece order) on interval lists, so
its cost is the number of runs, not n. A rank's local positions along d are exactly the runs
whose labels are its coordinates, in increasing order (a local tensor keeps global order).

``DimLabels`` is one tensor dim of a redistribution: the source's and the target's runs cut
at each other's boundaries, so every **segment** carries both labellings. A *slot* names one
constraint, ``(side, mesh dim)`` with side ``SRC`` or ``DST``; a state of the redistribution
is a set of slots per dim, and a rank holds the positions whose labels at those slots are its
coordinates. Everything the planner asks (how many positions a rank holds, how many two
states share) is a count of positions keyed by labels (``counts``): one side's follow from its
levels alone (``_tally``), and only a state holding both sides' slots sums segment lengths, so
the segments are cut when first needed.

Worked example: (12,) on mesh (3, 2), ``[R, S(0)] -> [S(0), _S(0, sf=2)]``::

    >>> dim_runs(12, ((2, 1),))              # source: mesh dim 1 halves the dim
    ((0, 6, (0,)), (6, 12, (1,)))
    >>> dim_runs(12, ((3, 1), (2, 2)))[:5]   # target: thirds, then each third cut in 2x2
    ((0, 1, (0, 0)), (1, 2, (0, 1)), (2, 3, (0, 0)), (3, 4, (0, 1)), (4, 5, (1, 0)))

so the rank at (0, 1) holds positions 6-11 and needs 1 and 3: it receives 2 elements.
"""

from __future__ import annotations

import bisect
import collections
import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from ..chunks import chunk_lens, chunk_size

__all__ = [
    "DST",
    "SRC",
    "DimLabels",
    "Ranks",
    "Run",
    "Slot",
    "chunk",
    "dim_labels",
    "dim_runs",
    "is_one",
    "mesh_ranks",
    "rank_classes",
    "side",
]

# A run of a dim: [start, stop) and the owner coordinate on each mesh dim sharding the dim,
# in mesh-dim order.
Run = tuple[int, int, tuple[int, ...]]
# One constraint: (side, mesh dim). SRC is the source placements' owner, DST the target's.
Slot = tuple[int, int]
SRC = 0
DST = 1


def chunk(length: int, parts: int) -> tuple[tuple[int, int], ...]:
    """torch.chunk's pieces of ``range(length)`` into ``parts`` (the chunk model,
    ``cute_shard.chunks``), padded with empty pieces: the tail shorter or empty."""
    if not length:
        return ((0, 0),) * parts
    starts = range(0, length, chunk_size(length, parts))
    pieces = tuple(zip(starts, [*starts[1:], length], strict=True))
    return pieces + ((length, length),) * (parts - len(pieces))


@functools.lru_cache(maxsize=4096)
def dim_runs(n: int, levels: tuple[tuple[int, int], ...]) -> tuple[Run, ...]:
    """The runs of a dim of size ``n`` sharded by ``levels``, one ``(mesh size, split
    factor)`` per mesh dim sharding it, in mesh-dim order (split factor 1 is ``Shard``).

    Post: the runs are sorted, disjoint and cover ``[0, n)``; the positions labelled with
    coordinates ``c`` are the rank's local positions under DTensor's semantics, in order.
    """
    if not levels or not n:
        return ((0, n, ()),) if n else ()
    sizes, factors = zip(*levels, strict=True)
    if len(levels) == 1 and factors[0] == 1:  # one Shard: torch.chunk's pieces, in order
        piece = chunk_size(n, sizes[0])
        starts = range(0, n, piece)
        return tuple(zip(starts, [*starts[1:], n], zip(range(len(starts))), strict=True))
    if max(factors) == 1:
        # Shards only: every rank's positions are one interval, torch.chunk's piece of its
        # parent's, so the runs come out in order; with even pieces, in coordinate order.
        parts = math.prod(sizes)
        if n % parts == 0:
            step = n // parts
            ends = range(step, n + step, step)
            return tuple(
                zip(range(0, n, step), ends, itertools.product(*map(range, sizes)), strict=True)
            )
        runs: list[Run] = [(0, n, ())]
        for size, _ in levels:
            # each length's pieces once: a level's runs have a few lengths (full and tail)
            cut = {length: chunk(length, size) for length in {b - a for a, b, _ in runs}}
            runs = [
                (a + x, a + y, (*c, k))
                for a, b, c in runs
                for k, (x, y) in enumerate(cut[b - a])
                if y > x
            ]
        return tuple(runs)
    # Each rank's positions as intervals in order, ranks in coordinate order.
    ranks: list[tuple[tuple[int, ...], list[tuple[int, int]]]] = [((), [(0, n)] if n else [])]
    for size, split_factor in levels:
        nxt: list[tuple[tuple[int, ...], list[tuple[int, int]]]] = []
        for coords, intervals in ranks:
            for c, mine in enumerate(_cut(intervals, size, split_factor)):
                nxt.append(((*coords, c), mine))
        ranks = nxt
    out: list[Run] = []
    for coords, intervals in ranks:
        out += map(operator.add, intervals, itertools.repeat((coords,)))
    out.sort()
    return tuple(out)


def _cut(
    intervals: list[tuple[int, int]], size: int, split_factor: int
) -> list[list[tuple[int, int]]]:
    """One rank's positions (``intervals``, in order) cut by one more placement: the
    positions each coordinate on the new mesh dim keeps, as intervals in order.

    torch.chunk cuts the rank's ``length`` local positions into ``full`` pieces of ``piece``
    and a shorter ``tail``; every full piece is cut alike, so a coordinate's ranges in them
    are one range repeated at a stride of ``piece`` (written with ``range``, not a loop)."""
    length = sum(map(operator.sub, map(_STOP, intervals), map(_START, intervals)))
    piece = chunk_size(length, split_factor)
    full = length // piece if piece else 0
    span = full * piece
    local: list[list[tuple[int, int]]] = []
    for a, b in chunk(piece, size):
        if b <= a:
            local.append([])
        elif b - a == piece:  # all of every piece: one range
            local.append([(0, span)])
        else:
            local.append(list(zip(range(a, span, piece), range(b, span + 1, piece), strict=True)))
    if length > span:  # the tail piece
        for c, (a, b) in enumerate(chunk(length - span, size)):
            if b > a:
                ranges = local[c]
                if ranges and ranges[-1][1] == span + a:
                    ranges[-1] = (ranges[-1][0], span + b)
                else:
                    ranges.append((span + a, span + b))
    if len(intervals) == 1:  # local index i is position start + i
        start = intervals[0][0]
        if not start:
            return local
        shift = start.__add__
        return [
            list(zip(map(shift, map(_START, ranges)), map(shift, map(_STOP, ranges)), strict=True))
            for ranges in local
        ]
    return [_positions(intervals, ranges) for ranges in local]


def _positions(
    intervals: list[tuple[int, int]], ranges: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The positions at local ranges ``ranges`` of a rank holding ``intervals``, in order."""
    if len(ranges) > 3:  # many ranges: find each one's interval in one C-level pass
        # where each interval starts in the local index, and the interval each range starts in
        lengths = map(operator.sub, map(_STOP, intervals), map(_START, intervals))
        offsets = [0, *itertools.accumulate(lengths)]
        los, his = list(map(_START, ranges)), list(map(_STOP, ranges))
        at = list(map((-1).__add__, map(bisect.bisect_right, itertools.repeat(offsets), los)))
        if all(map(operator.le, his, map(offsets.__getitem__, map((1).__add__, at)))):
            # every range inside one interval (a fine cut of a coarse one): shift each by
            # its interval's offset
            starts = map(_START, map(intervals.__getitem__, at))
            shift = list(map(operator.sub, starts, map(offsets.__getitem__, at)))
            moved = map(operator.add, los, shift), map(operator.add, his, shift)
            return list(zip(*moved, strict=True))
    out: list[tuple[int, int]] = []
    i, seen = 0, 0  # the interval holding local index ``seen``
    for lo, hi in ranges:
        while seen + intervals[i][1] - intervals[i][0] <= lo:
            seen += intervals[i][1] - intervals[i][0]
            i += 1
        while lo < hi:
            a, b = intervals[i]
            stop = min(hi, seen + b - a)
            piece = (a + lo - seen, a + stop - seen)
            if out and out[-1][1] == piece[0]:
                out[-1] = (out[-1][0], piece[1])
            else:
                out.append(piece)
            lo = stop
            if lo == seen + b - a:
                seen += b - a
                i += 1
    return out


_START, _STOP, _LABEL = map(operator.itemgetter, range(3))  # a run's or a segment's fields
_FIRST = _START
_FEW = 16  # more items than this are counted by a Counter (``senders``)


_ZEROS = itertools.repeat(0)
_UNIT = "unit"  # a scaled dim's memo key for the dim it scales (``DimLabels.scaled``)


def _lengths(runs: Sequence[tuple[int, int, tuple[int, ...]]]) -> dict[tuple[int, ...], int]:
    """For each label of ``runs`` (runs or segments), the total length carrying it."""
    lengths = list(map(operator.sub, map(_STOP, runs), map(_START, runs)))
    out = dict(zip(map(_LABEL, runs), lengths, strict=True))
    if len(out) < len(runs):  # labels that recur: sum their runs
        if min(lengths) == max(lengths):  # runs of one length (a strided cut): count them
            return _counted(map(_LABEL, runs), lengths[0])
        out = {}
        for key, group in itertools.groupby(sorted(runs, key=_LABEL), _LABEL):
            same = list(group)
            out[key] = sum(map(operator.sub, map(_STOP, same), map(_START, same)))
    return out


def _counted(labels: Iterable[tuple[int, ...]], length: int) -> dict[tuple[int, ...], int]:
    """For each of ``labels``, ``length`` times how often it occurs (a tally in C)."""
    seen = collections.Counter(labels)
    return dict(zip(seen, map(operator.mul, seen.values(), itertools.repeat(length)), strict=True))


def _times(runs: tuple[Run, ...], k: int) -> tuple[Run, ...]:
    return tuple([(a * k, b * k, label) for a, b, label in runs])


def is_one(k: object) -> bool:
    """Whether ``k`` is the int 1. A symbolic size (``plan.plan_of_symbols``) is never
    compared: the comparison would record a guard pinning it."""
    return type(k) is int and k == 1


def getter(at: Sequence[int]) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    """A function reading the items at positions ``at`` out of a tuple, as a tuple (one item
    too, and none), without a Python frame per call."""
    if len(at) == 1:
        return operator.itemgetter(slice(at[0], at[0] + 1))
    if not at:
        return operator.itemgetter(slice(0, 0))
    return operator.itemgetter(*at)


def _entry(i: int) -> Callable[[tuple[int, ...]], int]:
    return operator.itemgetter(i)


def _without(width: int, *at: int) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    """A function writing a tuple of ``width`` items without the items at ``at``."""
    return getter([k for k in range(width) if k not in at])


def _file(lists: list[list[object]], at: Iterable[int], items: Iterable[object]) -> None:
    """Append each of ``items`` to ``lists[a]``, ``a`` the matching item of ``at``: one
    C-level pass (``list.append`` mapped over both, the results dropped)."""
    collections.deque(map(list.append, map(lists.__getitem__, at), items), maxlen=0)


@dataclass(slots=True, unsafe_hash=True)
class DimLabels:
    """One tensor dim of a redistribution: its size, the slots that constrain it (source mesh
    dims sharding it, then target ones) and the ``(mesh size, split factor)`` levels of each
    side, which decide everything else. Its segments ``(start, stop, labels)`` (the labels
    aligned with ``slots``) are cut when first asked for: the planner mostly asks only how
    many positions carry each label, and one side's counts follow from the levels alone
    (``_tally``), so a plan that never executes never cuts a dim that only one side shards.
    A value: nothing assigns to its fields after construction (not frozen only because a
    frozen dataclass is several times slower to make, and one is made per tensor dim of
    every plan)."""

    size: int
    slots: tuple[Slot, ...]
    source: tuple[Slot, ...] = ()  # the slots of ``SRC``: a rank's part in the source
    target: tuple[Slot, ...] = ()  # the slots of ``DST``: its part in the target
    levels: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]] = ((), ())
    # Pure results computed from the fields above, keyed by their arguments (the segments,
    # and at most one entry per subset of ``slots``, so bounded); not part of the value.
    _memo: dict[object, object] = field(default_factory=dict, compare=False, repr=False)

    @property
    def segments(self) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
        """The source's and the target's runs (``dim_runs``) cut at each other's boundaries:
        every position once, with both labellings."""
        memo = self._memo.get(None)
        if memo is None:
            unit = self._memo.get(_UNIT)  # a unit dim's scaled (``scaled``): its cuts, further
            if unit is not None:
                of, k = cast("tuple[DimLabels, int]", unit)
                memo = _times(of.segments, k)
            else:
                memo = _segments(self.size, *self.levels)
            self._memo[None] = memo
        return memo  # type: ignore[return-value]

    def index(self, slots: Sequence[Slot]) -> tuple[int, ...]:
        """Where each of ``slots`` sits in this dim's labels."""
        return tuple(map(self.slots.index, slots))

    def counts(self, slots: tuple[Slot, ...]) -> dict[tuple[int, ...], int]:
        """For each combination of labels at ``slots``, how many positions carry it: the
        length of a rank's part of this dim in a state constrained by exactly ``slots``."""
        memo = self._memo.get(slots)
        if memo is None:
            unit = self._memo.get(_UNIT)
            if unit is not None:  # a unit dim's scaled: its counts, k times each
                of, k = cast("tuple[DimLabels, int]", unit)
                out = {lab: n * k for lab, n in of.counts(slots).items()}
            elif slots == self.source:  # one side's: from its levels alone
                out = _tally(self.size, self.levels[0])
            elif slots == self.target:
                out = _tally(self.size, self.levels[1])
            elif slots == self.slots:  # both sides': one pass over the segments
                out = _lengths(self.segments)
            else:  # a projection of the segments: one entry per combination, not per run
                get = getter(self.index(slots))
                full = self.counts(self.slots)
                sizes = set(full.values())
                if len(sizes) == 1:  # every combination equally long: count them
                    out = _counted(map(get, full), sizes.pop())
                else:
                    out = {}
                    for lab, n in full.items():
                        key = get(lab)
                        out[key] = out.get(key, 0) + n
            self._memo[slots] = memo = out
        return memo  # type: ignore[return-value]

    def per_rank(self, slots: tuple[Slot, ...], ranks: Ranks) -> int | tuple[int, ...]:
        """Each rank's length of this dim in a state constrained by ``slots``, in the order of
        ``ranks``; one int when every rank's is the same (even shards: the common case, which
        then costs nothing per rank)."""
        key = (slots, ranks.key)
        memo = self._memo.get(key)
        if memo is None:
            unit = self._memo.get(_UNIT)
            if not slots:
                memo = self.size
            elif unit is not None:  # a unit dim's scaled: its lengths, k times each
                of, k = cast("tuple[DimLabels, int]", unit)
                lengths = of.per_rank(slots, ranks)
                if not isinstance(lengths, tuple):
                    memo = lengths * k
                else:
                    memo = tuple([n * k for n in lengths])
            else:
                each = tuple(map(self.counts(slots).get, ranks.keys(slots), _ZEROS))
                memo = each[0] if each.count(each[0]) == len(each) else each
            self._memo[key] = memo
        return memo  # type: ignore[return-value]

    def local_ranges(
        self,
        slots: tuple[Slot, ...],
        key: tuple[int, ...],
        where: tuple[Slot, ...] = (),
        where_key: tuple[int, ...] = (),
    ) -> tuple[tuple[int, int], ...]:
        """Of the positions a rank holds (labels ``key`` at ``slots``), those whose labels at
        ``where`` are ``where_key``, as ranges of the rank's local index, merged."""
        return self._ranges(slots, where).get((key, where_key), ())

    def _ranges(
        self, slots: tuple[Slot, ...], where: tuple[Slot, ...]
    ) -> dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, int], ...]]:
        """``local_ranges`` for every holder and every labelling at ``where`` at once: one
        pass over the segments, each holder's local index counted as its segments come (a
        rank asks for one range per peer, so answering each alone would pass once per peer)."""
        memo_key = ("ranges", slots, where)
        memo = self._memo.get(memo_key)
        if memo is None:
            unit = self._memo.get(_UNIT)
            if unit is not None:  # a unit dim's scaled: its ranges, k times
                of, k = cast("tuple[DimLabels, int]", unit)
                memo = {
                    q: tuple([(a * k, b * k) for a, b in ranges])
                    for q, ranges in of._ranges(slots, where).items()
                }
            else:
                at, wat = getter(self.index(slots)), getter(self.index(where))
                seen: dict[tuple[int, ...], int] = {}  # each holder's local index so far
                out: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[int, int]]] = {}
                for a, b, lab in self.segments:
                    holder = at(lab)
                    start = seen.get(holder, 0)
                    stop = seen[holder] = start + b - a
                    ranges = out.setdefault((holder, wat(lab)), [])
                    if ranges and ranges[-1][1] == start:
                        ranges[-1] = (ranges[-1][0], stop)
                    else:
                        ranges.append((start, stop))
                memo = {q: tuple(ranges) for q, ranges in out.items()}
            self._memo[memo_key] = memo
        return memo  # type: ignore[return-value]

    def senders(
        self, slots: tuple[Slot, ...], sources: tuple[Slot, ...], ranks: Ranks
    ) -> tuple[int, bool] | tuple[tuple[int, bool], ...]:
        """Whose data a rank holds in a state constrained by ``slots``, along this dim: the
        number of combinations of labels at ``sources`` among its positions, and whether its
        own coordinates are one of them; per rank, or one pair when every rank's is the same."""
        key = ("senders", slots, sources, ranks.key)
        memo = self._memo.get(key)
        if memo is None and _UNIT in self._memo:  # a unit dim's scaled: the same labels meet
            of, _ = cast("tuple[DimLabels, int]", self._memo[_UNIT])
            memo = self._memo[key] = of.senders(slots, sources, ranks)
        if memo is None:
            at, src = getter(self.index(slots)), getter(self.index(sources))
            full = self.counts(self.slots)
            # the (labels at slots, labels at sources) that occur: per holder, its senders
            pairs = set(zip(map(at, full), map(src, full), strict=True))
            # per holder, how many senders (one holder, the whole dim, when slots is empty;
            # counted in a loop where there are a handful of pairs, for which a Counter
            # costs more to make, and by a Counter, in C, where a large mesh makes many)
            many: dict[tuple[int, ...], int] = {}
            if not slots:
                many[()] = len(pairs)
            elif len(pairs) > _FEW:
                many = collections.Counter(map(_FIRST, pairs))
            else:
                for holder, _ in pairs:
                    many[holder] = many.get(holder, 0) + 1
            mine = map(pairs.__contains__, zip(ranks.keys(slots), ranks.keys(sources), strict=True))
            each = list(
                zip(map(many.get, ranks.keys(slots), itertools.repeat(0)), mine, strict=True)
            )
            memo = each[0] if each.count(each[0]) == len(each) else tuple(each)
            self._memo[key] = memo
        return memo  # type: ignore[return-value]

    def classes(self, at: tuple[int, ...], size: int) -> tuple[int, ...]:
        """Per coordinate c of the ``size`` coordinates of the mesh dim whose slots are at
        ``at`` in the labels, the least coordinate this dim treats alike (``rank_classes``):
        whose slice is c's. A slice is the labels carrying c at one of those slots, each with
        the entries that are c written -1, and their counts (the count alone where c is the
        whole label). Kept per dim, and a unit dim's scaled answers with its unit's (every
        count times one factor: equal slices stay equal, and symbolic counts are never
        compared), so a dim of a multiple of its unit finds its classes once for every size."""
        unit = self._memo.get(_UNIT)
        if unit is not None:
            return cast("tuple[DimLabels, int]", unit)[0].classes(at, size)
        key = ("classes", at, size)
        memo = self._memo.get(key)
        if memo is None:
            slices = self._slices(at, size)
            # each slice's least coordinate: written from the last coordinate down, the least
            # is written last (a dict keeps a key where it was first put, with the last value)
            least = dict(zip(reversed(slices), range(size - 1, -1, -1), strict=True))
            self._memo[key] = memo = tuple(map(least.__getitem__, slices))
        return memo  # type: ignore[return-value]

    def _slices(self, at: tuple[int, ...], size: int) -> tuple[object, ...]:
        """Each coordinate's slice (``classes``). A label is written without the entries that
        are the coordinate, tagged with which those are (the same as writing them as a mark),
        and the slices are filled in C-level passes (``_file``): a dim that a large mesh dim
        cuts has many labels."""
        full = self.counts(self.slots)
        width = len(self.slots)
        if width == 1:  # the labels are the coordinates: a slice is a count
            return tuple(map(full.get, zip(range(size)), _ZEROS))
        parts: list[list[object]] = [[] for _ in range(size)]
        if len(at) == 1:
            (i,) = at
            _file(
                parts,
                map(_entry(i), full),
                zip(map(_without(width, i), full), full.values(), strict=True),
            )
            return tuple(map(frozenset, parts))
        # a source and a target slot (a dim has at most one of each per mesh dim)
        i, j = at
        same = list(map(operator.eq, map(_entry(i), full), map(_entry(j), full)))
        both = list(itertools.compress(full, same))
        differ = list(itertools.compress(full, map(operator.not_, same)))
        count = full.__getitem__
        # a label carrying the coordinate at both slots, written without either (tag -1)
        entries = zip(map(_without(width, i, j), both), map(count, both), itertools.repeat(-1))
        _file(parts, map(_entry(i), both), entries)
        for k in at:  # carrying it at slot k only: written without k, tagged k
            entries = zip(map(_without(width, k), differ), map(count, differ), itertools.repeat(k))
            _file(parts, map(_entry(k), differ), entries)
        return tuple(map(frozenset, parts))

    def scaled(self, k: int) -> DimLabels:
        """This dim at ``k`` times its size, every cut ``k`` times further along: the labels
        of a size on which every torch.chunk is exact, at a multiple of it (``k >= 1``). What
        it is asked is read off this dim's answers, computed once for every multiple: its
        segments and counts scaled, the same labels meeting (``senders``)."""
        if is_one(k):
            return self
        out = DimLabels(self.size * k, self.slots, self.source, self.target, self.levels)
        out._memo[_UNIT] = (self, k)  # its segments, when asked for, are this dim's scaled
        return out

    def positions(
        self, slots: tuple[Slot, ...], key: tuple[int, ...]
    ) -> list[tuple[int, int, tuple[int, ...]]]:
        """The segments whose labels at ``slots`` are ``key``, in order: a rank's positions."""
        at = self.index(slots)
        return [s for s in self.segments if tuple(s[2][i] for i in at) == key]


@dataclass(frozen=True, slots=True)
class Ranks:
    """The mesh coordinates a plan counts, in row-major order: every one (``mesh_ranks``), or
    one per class of ranks that every count treats alike (``rank_classes``)."""

    mesh: tuple[int, ...]
    coords: tuple[tuple[int, ...], ...]
    # what a dim's per-rank answers are kept under: the mesh for every coordinate, the mesh
    # and each mesh dim's representatives for classes (small either way, unlike ``coords``)
    key: object = field(compare=False)
    # each slot tuple's keys, one per rank (a per-mesh table: one entry per slot tuple)
    _keys: dict[tuple[Slot, ...], tuple[tuple[int, ...], ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def keys(self, slots: tuple[Slot, ...]) -> tuple[tuple[int, ...], ...]:
        """Each rank's coordinates on the mesh dims of ``slots``, in rank order: the labels
        it holds at those slots."""
        out = self._keys.get(slots)
        if out is None:
            out = self._keys[slots] = tuple(map(getter([m for _, m in slots]), self.coords))
        return out


@functools.lru_cache(maxsize=256)
def mesh_ranks(mesh: tuple[int, ...]) -> Ranks:
    return Ranks(mesh, tuple(itertools.product(*(range(size) for size in mesh))), mesh)


def rank_classes(dims: Sequence[DimLabels], mesh: tuple[int, ...], above: int = 1) -> Ranks:
    """One rank per class of ranks that hold, need and send alike in every state of the dims'
    labellings: what the planner counts, so that its cost follows the shardings' structure,
    not the number of ranks (a (128, 8) mesh with every shard even is one class).

    Two coordinates a, b of mesh dim m are alike when swapping them at m's slots maps every
    dim's labelling onto itself: then each count keyed by labels (``counts``), and whose data
    a rank holds (``senders``), are the same for a rank at a as for the rank at b with
    everything else equal. It does when, in every dim, the labels carrying a at m's slots,
    with a written as a mark, are those carrying b, with b so written, with the same counts
    (``DimLabels.classes``): a label carrying both would be written with b in a's slice and
    could not be in b's, so none does, and the swap maps each label to one of the same
    count. The swaps of different mesh dims compose, so the classes are products of each
    mesh dim's, and every rank's counts are those of the representative of its class.
    Example: (12, 11) on mesh (8,), ``[S0] -> [S1]``: the source's chunks of dim 0 are
    2, 2, 2, 2, 2, 2, 0, 0 and the target's of dim 1 are 2, 2, 2, 2, 2, 1, 0, 0, so the
    classes are ranks 0-4, rank 5 and ranks 6-7: three ranks counted for eight.

    Only mesh dims of more than ``above`` coordinates are searched; each coordinate of a
    smaller one is its own class (finer classes count the same: for a dim of few coordinates,
    counting every one costs less than comparing them).
    """
    reps = tuple(
        [
            _representatives(dims, m, size) if size > above else tuple(range(size))
            for m, size in enumerate(mesh)
        ]
    )
    if all(map(operator.eq, map(len, reps), mesh)):
        return mesh_ranks(mesh)
    return _class_ranks(mesh, reps)


@functools.lru_cache(maxsize=1024)  # a table: few class structures per mesh
def _class_ranks(mesh: tuple[int, ...], reps: tuple[tuple[int, ...], ...]) -> Ranks:
    return Ranks(mesh, tuple(itertools.product(*reps)), (mesh, reps))


def _representatives(dims: Sequence[DimLabels], m: int, size: int) -> tuple[int, ...]:
    """The least coordinate of each class of mesh dim m's coordinates (``rank_classes``):
    alike in every dim, so the classes are the dims' (``DimLabels.classes``) intersected."""
    if size == 1:
        return (0,)
    parts: list[tuple[int, ...]] = []
    for d in dims:
        at = tuple([i for i, slot in enumerate(d.slots) if slot[1] == m])
        if at:
            part = d.classes(at, size)
            if any(part):  # (a dim whose coordinates are all alike divides none)
                parts.append(part)
    if not parts:
        return (0,)  # every dim treats m's coordinates alike
    if len(parts) == 1:
        return tuple(sorted(set(parts[0])))
    # coordinates alike in every dim: their tuples of least coordinates are equal
    signatures = tuple(zip(*parts, strict=True))
    least = dict(zip(reversed(signatures), range(size - 1, -1, -1), strict=True))
    return tuple(sorted(least.values()))


@functools.lru_cache(maxsize=1024)  # a table: placements and the mesh alone decide levels
def side(
    levels: tuple[tuple[int, int, int], ...], side: int
) -> tuple[tuple[Slot, ...], tuple[tuple[int, int], ...]]:
    """One side's slots and its ``(mesh size, split factor)`` levels (``dim_runs``' input)."""
    return tuple([(side, m) for m, _, _ in levels]), tuple([lv[1:] for lv in levels])


@functools.lru_cache(maxsize=4096)
def dim_labels(
    n: int,
    src: tuple[tuple[int, int, int], ...],
    dst: tuple[tuple[int, int, int], ...],
) -> DimLabels:
    """The labels of a dim of size ``n``: ``src`` and ``dst`` list ``(mesh dim, mesh size,
    split factor)`` for the mesh dims sharding the dim, in mesh-dim order."""
    source, src_levels = side(src, SRC)
    target, dst_levels = side(dst, DST)
    return DimLabels(n, source + target, source, target, (src_levels, dst_levels))


def _segments(
    n: int, src: tuple[tuple[int, int], ...], dst: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """The runs of both sides' levels (``dim_runs``) cut at each other's boundaries, each
    segment labelled with the source's owners, then the target's."""
    if not dst:
        return dim_runs(n, src)
    b = dim_runs(n, dst)
    if not src:
        return b
    a = dim_runs(n, src)
    if a is b:  # the same levels: the same cuts, each run once
        return tuple([(x, y, c + c) for x, y, c in a])
    # Cut at both runs' starts; each segment carries the labels of the runs holding it.
    starts_a, starts_b = set(map(_START, a)), set(map(_START, b))
    cuts = sorted(starts_a | starts_b)
    # the run of each side holding a cut: how many of its runs start at or before it, less
    # one (a running count over the cuts, every start being one; in C, not a search per cut)
    in_a = map((-1).__add__, itertools.accumulate(map(starts_a.__contains__, cuts)))
    in_b = map((-1).__add__, itertools.accumulate(map(starts_b.__contains__, cuts)))
    labels = list(
        map(
            operator.add,
            map(_LABEL, map(a.__getitem__, in_a)),
            map(_LABEL, map(b.__getitem__, in_b)),
        )
    )
    segments = list(zip(cuts, [*cuts[1:], n], labels, strict=True))
    if any(map(operator.eq, labels, labels[1:])):  # a run's cut that changes no label
        merged: list[tuple[int, int, tuple[int, ...]]] = []
        for seg in segments:
            if merged and merged[-1][2] == seg[2]:
                merged[-1] = (merged[-1][0], seg[1], seg[2])
            else:
                merged.append(seg)
        segments = merged
    return tuple(segments)


def _tally(n: int, levels: tuple[tuple[int, int], ...]) -> dict[tuple[int, ...], int]:
    """For each label of ``dim_runs(n, levels)``, how many positions carry it, without the
    runs: a level cuts each rank's local positions by their count alone (the chunk model's
    ``chunk_lens``), so a label's count is its parent's cut, level by level, and the cost is
    the number of labels, not of runs. Labels no position carries are left out, as the runs
    have none.

    >>> _tally(12, ((3, 1), (2, 2)))    # thirds of 4, each two pieces of 2 cut in halves
    {(0, 0): 2, (0, 1): 2, (1, 0): 2, (1, 1): 2, (2, 0): 2, (2, 1): 2}
    """
    out: dict[tuple[int, ...], int] = {(): n} if n else {}
    for size, split_factor in levels:
        shares: dict[int, list[int]] = {}  # each count's cut: labels often share counts
        nxt: dict[tuple[int, ...], int] = {}
        for label, length in out.items():
            cut = shares.get(length)
            if cut is None:
                cut = shares[length] = chunk_lens(length, split_factor, size)
            for c, k in enumerate(cut):
                if k:
                    nxt[(*label, c)] = k
        out = nxt
    return out

"""The redistribution planner: what moves, along which mesh dims, read off the two shardings.

Each mesh dim m of the source and of the target is a gpu sub-mode of one tensor dim (or none:
Replicate, Partial). Read as a function, the sub-mode is ``owner_m(p)``, the coordinate on m
that holds position p of its dim (``labels.py``). A rank holds exactly the positions whose
owners are its coordinates, so what it holds and what it needs are sets of constraints, and
a redistribution replaces the source's constraints by the target's. Per mesh dim:

- the same owner function in both (same dim, same sub-mode): nothing moves;
- Replicate -> a shard: a new constraint, so each rank keeps part of what it holds (a local
  chunk, done first, so every later step moves less);
- Partial -> Replicate / a shard: all-reduce / reduce-scatter, after the chunks;
- a shard -> a different shard (another dim, or the same dim at another stride): the
  constraint is replaced, an all-to-all over m; all such mesh dims move in **one** exchange,
  so mesh dims whose sub-modes are interleaved (and any others that exchange) move together;
- a shard -> Replicate: the constraint is dropped, an all-gather over m, done last;
- -> Partial: a local step at the end (torch's own ``_partition_value``).

Why this order is at the physical limit: a rank ends holding T and starts holding S; a chunk
receives nothing, the exchange receives ``X \\ S`` for its result X, and the gathers then
receive ``T \\ X``. Since ``X`` is inside ``T`` and ``X ∩ S == T ∩ S`` (the gathers only drop
constraints S already satisfies), the total is ``|T| - |T ∩ S|``: exactly what the rank lacks.
Two exchanges in a row would not be (the second would re-send what the first brought), which
is why the exchanges are one step.

An even shape plans once per pair of placement lists. At a dim's *unit* (``_Pair.units``)
every torch.chunk of both shardings is exact, and at any multiple of it every cut and every
rank's count of elements is the unit's scaled; so the plan of a shape that is a multiple of
its units dim by dim is the unit shape's plan (kept with the pair's other tables, ``_pair``)
with its counts scaled (``_scaled``). A new even sequence length costs a lookup and a product;
other shapes are built, and in them a dim that is a multiple of its unit reads the labels of
its unit dim (``_Pair.unit_dims``) scaled, so only the dims some chunk cuts unevenly are
labelled afresh.

The exchange is one collective over several mesh dims when the caller has a process group for
them (``joint=True``; the DTensor integration asks the mesh); without one, it moves one mesh
dim at a time in the order that moves least, and the plan says so (``split``).

Worked example: the FSDP2 + TP weight, (64, 32) on mesh (2, 4), ``[_S(0, 4), S(0)] ->
[S(0), S(0)]``. Both mesh dims shard d0 in both, with other owners: rank (c0, c1) holds rows
``16*c1 + 8*c0 + [0, 8)`` and needs ``32*c0 + 8*c1 + [0, 8)``, so each rank's target comes
whole from one peer (ranks (0, 0) and (1, 3) keep theirs): one permutation over both mesh
dims, 8 rows per rank, at the limit (torch all-gathers all 64 rows).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from ..notation import REDUCE_OPS, PlacementSpec
from .labels import (
    DST,
    SRC,
    DimLabels,
    Ranks,
    Slot,
    dim_labels,
    is_one,
    mesh_ranks,
    rank_classes,
    side,
)
from .types import Kind, Move, Plan, State, Step

__all__ = [
    "check_placements",
    "physical_limit",
    "plan_of_symbols",
    "plan_of_tuples",
    "plan_redistribution",
]


def plan_redistribution(
    shape: Sequence[int],
    mesh: Sequence[int],
    src: Sequence[PlacementSpec],
    dst: Sequence[PlacementSpec],
    *,
    joint: bool = True,
) -> Plan:
    """The plan that redistributes a tensor of global ``shape`` on a mesh of ``mesh`` from the
    ``src`` placements to ``dst`` (one per mesh dim; ``_StridedShard`` read by its split
    factor, as ``distribute_tensor`` places it).

    Pre: ``shape`` ints >= 0, ``mesh`` ints >= 1, each placement list one per mesh dim with its
    shard dims in range and split factors >= 1; otherwise ValueError naming the mesh dim, the
    placement and why. ``dst`` may hold Partial only where the reduction it leaves pending is
    well defined (any op from Replicate, the same op from Partial).
    Post: every rank's local tensor after the steps is its ``dst`` shard; ``received`` ==
    ``physical_limit(plan)`` unless ``split``.
    """
    shape_t = _shape(shape)
    mesh_t = _mesh(mesh)
    both = (
        _tuple(src, "source placements", _PLACEMENTS),
        _tuple(dst, "target placements", _PLACEMENTS),
    )
    if _plain(both[0] + both[1]):
        return plan_of_tuples(shape_t, mesh_t, *both, joint)
    # (not ints where ints belong: checked, not looked up, as ``check_placements``)
    return _plan(shape_t, _checked_pair.__wrapped__(*both, mesh_t, len(shape_t)), joint)


def plan_of_tuples(
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    src: tuple[PlacementSpec, ...],
    dst: tuple[PlacementSpec, ...],
    joint: bool,
) -> Plan:
    """``plan_redistribution`` for a caller whose arguments are already what it checks the
    types of: the DTensor side, which reads them off torch's specs (a shape of ints >= 0, a
    mesh of ints >= 1, PlacementSpecs whose dims and split factors are ints). The placements
    themselves are still checked (a dim the tensor lacks, a split factor < 1, a Partial
    target that cannot start), by the pair's table."""
    return _plan(shape, _checked_pair(src, dst, mesh, len(shape)), joint)


def plan_of_symbols(
    shape: tuple[Any, ...],
    mesh: tuple[int, ...],
    src: tuple[PlacementSpec, ...],
    dst: tuple[PlacementSpec, ...],
    joint: bool,
) -> Plan:
    """``plan_of_tuples`` for sizes that may be SymInts with hints, as ``torch.compile`` traces
    them with dynamic shapes (where the SymInts' comparisons record guards).

    A dim whose size is a multiple of its unit (``_Pair.units``; a guard says so) stays
    symbolic: its labels are its unit dim's scaled by the factor ``n // unit``, so every
    count, cut and local shape along it is an int times that factor, whatever the multiple.
    Any other dim is planned at its size's value (guarded: a new value traces anew). So the
    plan, and the graph that runs it, hold for every multiple of the units of the dims kept
    symbolic, and what is compared is only such products (guards that hold for every
    multiple). Example: ``(s0, 6)`` on mesh (2, 4), ``[S0, SS0:2] -> [S0, S1]``: d0's unit
    is 16, d1's 4; for every ``s0`` divisible by 16 the plan is the one of ``(16, 6)`` with
    d0's counts times ``s0 // 16``, and d1 is 6.
    """
    pair = _checked_pair(src, dst, mesh, len(shape))
    units = pair.units
    sizes = tuple([n if _multiple(n, u) else int(n) for n, u in zip(shape, units, strict=True)])
    if set(map(type, sizes)) <= _INT:
        return _plan(sizes, pair, joint)
    return _plan.__wrapped__(sizes, pair, joint)  # (SymInts cannot key the table)


_PLACEMENTS = "a sequence of PlacementSpec, one per mesh dim"


@functools.lru_cache(maxsize=1024)  # a table of placement-list pairs, as ``_checked``
def _checked_pair(
    src: tuple[PlacementSpec, ...], dst: tuple[PlacementSpec, ...], mesh: tuple[int, ...], ndim: int
) -> _Pair:
    """The pair of placement lists, each checked and canonical (``check_placements``), and
    the Partial targets checked against the sources: one lookup for the lists as given."""
    src_t = check_placements(src, ndim, mesh, "source")
    dst_t = check_placements(dst, ndim, mesh, "target")
    _check_partials(src_t, dst_t)
    return _pair(src_t, dst_t, mesh, ndim)


# A pending reduction a target can start from a value every rank holds (torch's
# ``Partial._partition_value``): a product has no such split.
_PARTITIONABLE = ("sum", "avg", "max", "min")


_KIND = operator.attrgetter("kind")
_SLOTS, _SOURCE = operator.attrgetter("slots"), operator.attrgetter("source")


def _check_partials(src: tuple[PlacementSpec, ...], dst: tuple[PlacementSpec, ...]) -> None:
    if "P" not in map(_KIND, dst):
        return
    for m, (s, t) in enumerate(zip(src, dst, strict=True)):
        if t.kind == "P" and not (s == t or t.reduce_op in _PARTITIONABLE):
            raise ValueError(
                f"target placement {t} on mesh dim {m}: a pending {t.reduce_op} can only be "
                f"kept from a source {t}, not started from {s} (a value cannot be split into "
                f"factors; {', '.join(_PARTITIONABLE)} can)"
            )


_INT = frozenset({int})
_DIM, _SPLIT = operator.attrgetter("dim"), operator.attrgetter("split_factor")


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    out = _tuple(shape, "global shape", "a sequence of ints, one size per tensor dim")
    if set(map(type, out)) <= _INT and min(out, default=0) >= 0:
        return out
    out = tuple(map(_integer, out))  # (numpy's ints, as torch takes them)
    for d, n in enumerate(out):
        if type(n) is not int or n < 0:
            raise ValueError(f"global shape {out}: dim {d} has size {n!r}; sizes must be ints >= 0")
    return out


def _mesh(mesh: Sequence[int]) -> tuple[int, ...]:
    out = _tuple(mesh, "mesh", "a sequence of ints, one size per mesh dim")
    if out and set(map(type, out)) <= _INT and min(out) >= 1:
        return out
    if not out:
        raise ValueError("the mesh has no dims: give at least one mesh size")
    out = tuple(map(_integer, out))
    for m, size in enumerate(out):
        if type(size) is not int or size < 1:
            raise ValueError(f"mesh {out}: mesh dim {m} has size {size!r}; sizes must be ints >= 1")
    return out


def _tuple(values: Any, what: str, expected: str) -> tuple[Any, ...]:
    """``values`` as a tuple, or ValueError naming ``what`` was given."""
    if type(values) is tuple:
        return values
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"{what}: expected {expected}, got {values!r}")
    return tuple(values)


def _integer(n: Any) -> Any:
    """An integer that is not a Python int (``numpy.int64``) as one; anything else (a float,
    a bool) unchanged, for the caller to refuse."""
    if type(n) is int or isinstance(n, bool) or not hasattr(type(n), "__index__"):
        return n
    return operator.index(n)


def check_placements(
    ps: Sequence[PlacementSpec], ndim: int, mesh: tuple[int, ...], what: str
) -> tuple[PlacementSpec, ...]:
    """``ps`` canonical (shard dims non-negative, ``SS<d>:1`` as ``S<d>``), or ValueError
    naming the mesh dim, the placement and why."""
    ps = _tuple(ps, f"{what} placements", _PLACEMENTS)
    if _plain(ps):
        return _checked(ps, ndim, mesh, what)
    # not ints (2.0 equals 2, so the table would answer for it): checked, not looked up
    return _checked.__wrapped__(ps, ndim, mesh, what)


def _plain(ps: tuple[Any, ...]) -> bool:
    """Whether every placement's dim and split factor is an int, so that a table keyed by
    the placements answers only for equal ones (``2.0 == 2``); False for what is not a
    PlacementSpec, which the checks then name."""
    try:
        return set(map(type, map(_DIM, ps))) | set(map(type, map(_SPLIT, ps))) <= _INT
    except AttributeError:
        return False


# A table of placement lists (a program has a few dozen): what a list is, canonically, does
# not depend on the tensor's sizes, only on how many dims it has.
@functools.lru_cache(maxsize=1024)
def _checked(
    ps: tuple[PlacementSpec, ...], ndim: int, mesh: tuple[int, ...], what: str
) -> tuple[PlacementSpec, ...]:
    if len(ps) != len(mesh):
        raise ValueError(
            f"{what} placements: got {len(ps)} for a mesh of {len(mesh)} dims {mesh}; give "
            "exactly one placement per mesh dim"
        )
    out: list[PlacementSpec] = []
    for m, p in enumerate(ps):
        if not isinstance(p, PlacementSpec):
            raise ValueError(
                f"{what} placement {p!r} on mesh dim {m}: expected a PlacementSpec "
                "(cute_shard.notation: parse_placements reads 'S0,R', PlacementSpec.of converts "
                f"a torch placement), got {type(p).__name__}"
            )
        kind = p.kind
        if kind == "R":
            out.append(p)
        elif kind == "S" or kind == "SS":
            dim, sf = p.dim, p.split_factor
            if type(dim) is not int:
                raise ValueError(
                    f"{what} placement {p} on mesh dim {m}: the tensor dim it shards must be "
                    f"an int, got {dim!r}"
                )
            if not -ndim <= dim < ndim:
                raise ValueError(
                    f"{what} placement {p} on mesh dim {m} shards tensor dim {dim}, which a "
                    f"tensor of {ndim} dims does not have (expected {-ndim} <= dim < {ndim})"
                )
            if type(sf) is not int or sf < 1:
                raise ValueError(
                    f"{what} placement {p} on mesh dim {m}: a _StridedShard's split factor "
                    f"chunks the dim into that many pieces, so it must be an int >= 1, got {sf!r}"
                )
            strided = kind == "SS" and sf > 1
            if dim >= 0 and (strided or (kind == "S" and sf == 1)):
                out.append(p)  # already canonical
            else:
                out.append(
                    PlacementSpec("SS" if strided else "S", dim % ndim, sf if strided else 1)
                )
        elif kind == "P":
            if p.reduce_op not in REDUCE_OPS:
                raise ValueError(
                    f"{what} placement {p} on mesh dim {m}: unknown reduce op "
                    f"{p.reduce_op!r}; expected one of {', '.join(REDUCE_OPS)}"
                )
            out.append(p)
        else:
            raise ValueError(f"{what} placement {p!r} on mesh dim {m}: unknown kind {kind!r}")
    return tuple(out)


# ------------------------------------------------------------------------------ the plan


@functools.lru_cache(maxsize=4096)
def _plan(shape: tuple[int, ...], pair: _Pair, joint: bool) -> Plan:
    """The plan, once per shape: an even shape's is its unit plan scaled (``_Pair.units``),
    any other's is built. (Keyed by the pair's table entry, which hashes by identity.)"""
    if all(map(_multiple, shape, pair.units)):
        return _scaled(pair.unit_plan(joint), shape)
    return _build(shape, pair, joint, _labelled(shape, pair))


def _multiple(n: int, unit: int) -> bool:
    return n > 0 and n % unit == 0


class _Pair:
    """What a pair of placement lists on a mesh decides for every tensor of ``ndim`` dims,
    whatever its sizes: each tensor dim's levels on both sides, what each mesh dim does, the
    units and each dim's labels at its unit (``unit_dims``), and (filled as the sizes ask for
    them) the plan's shapes and the unit plans. One
    table entry per pair (``_pair``): a program has a few dozen, and a plan looks its pair
    up once.

    ``units``: per tensor dim, the least size on which every torch.chunk of both shardings
    is exact. A level ``(M, sf)`` after mesh dims of sizes ``M_1 .. M_k`` on the dim chunks
    each rank's ``n / (M_1 ... M_k)`` positions into ``sf`` pieces of ``M`` parts, so it is
    exact iff ``M_1 ... M_k * M * sf`` divides n; the unit is the lcm over levels.
    Post: for n a positive multiple of the unit, every cut of ``dim_runs(n, levels)`` is the
    unit's scaled by ``n // unit``; so is each rank's count of elements in any state, and the
    plan of such a shape is the unit shape's with its counts scaled (``_scaled``).
    Example: ``[S0, R, SS0:18] -> [S0, S0, S1]`` on mesh (2, 2, 2): d0's units are lcm(2,
    4 * 18) = 72 (source) and 4 (target), so 72; d1, sharded by the target's m2 alone, 2.
    """

    __slots__ = (
        "_shapes",
        "_unit_plans",
        "dst",
        "kinds",
        "levels",
        "mesh",
        "src",
        "unit_dims",
        "units",
    )

    def __init__(
        self,
        src: tuple[PlacementSpec, ...],
        dst: tuple[PlacementSpec, ...],
        mesh: tuple[int, ...],
        ndim: int,
    ) -> None:
        self.src, self.dst, self.mesh = src, dst, mesh
        self.levels = (_levels(src, mesh, ndim), _levels(dst, mesh, ndim))
        self.kinds = _kinds(src, dst, mesh)
        self.units = tuple(map(math.lcm, map(_unit, self.levels[0]), map(_unit, self.levels[1])))
        # each dim's labels at its unit: a dim of a multiple of it is these scaled, whatever
        # the other dims' sizes (their answers are computed once, as the sizes ask)
        self.unit_dims = tuple(map(dim_labels, self.units, *self.levels))
        self._shapes: dict[tuple[tuple[int, ...], bool], _Shape] = {}
        self._unit_plans: dict[bool, Plan] = {}

    def skeleton(self, keep: tuple[int, ...], joint: bool) -> _Shape:
        """The plan's shape (``_skeleton``), the same-dim mesh dims in ``keep`` keeping their
        owners: it depends on the sizes only through ``keep``."""
        out = self._shapes.get((keep, joint))
        if out is None:
            out = self._shapes[keep, joint] = _skeleton(self, keep, joint)
        return out

    def unit_plan(self, joint: bool) -> Plan:
        """The plan of the unit shape, which every even shape's plan scales."""
        out = self._unit_plans.get(joint)
        if out is None:
            out = self._unit_plans[joint] = _build(self.units, self, joint, self.unit_dims)
        return out


@functools.lru_cache(maxsize=1024)  # a table of placement-list pairs, as ``_checked``
def _pair(
    src: tuple[PlacementSpec, ...], dst: tuple[PlacementSpec, ...], mesh: tuple[int, ...], ndim: int
) -> _Pair:
    return _Pair(src, dst, mesh, ndim)


def _unit(levels: tuple[tuple[int, int, int], ...]) -> int:
    unit = parts = 1
    for _, size, split_factor in levels:
        parts *= size  # the dim is cut into ``parts`` per-rank pieces after this level
        unit = math.lcm(unit, parts * split_factor)
    return unit


def _scaled(unit: Plan, shape: tuple[int, ...]) -> Plan:
    """The plan of ``shape``, a multiple of ``unit``'s shape dim by dim (``_Pair.units``):
    the unit's steps, states and peers, every dim's cuts scaled by its factor, every count
    of elements by their product. (Made with the constructors, which take a third of
    ``_replace``'s time: this is all an even shape's plan costs.)"""
    factors = tuple(map(operator.floordiv, shape, unit.shape))
    k = math.prod(factors)
    if is_one(k):
        return unit
    steps = tuple(
        [
            Step(
                s.kind,
                s.mesh_dims,
                s.before,
                s.after,
                s.received * k,
                s.reduced * k,
                s.peers,
                s.reduce_op,
                s.even,
                s.uniform,
            )
            for s in unit.steps
        ]
    )
    return Plan(
        shape,
        unit.mesh,
        unit.src,
        unit.dst,
        tuple(map(DimLabels.scaled, unit.dims, factors)),
        unit.start,
        unit.final,
        unit.moves,
        steps,
        unit.received * k,
        unit.reduced * k,
        unit.split,
    )


def _labelled(shape: tuple[int, ...], pair: _Pair) -> tuple[DimLabels, ...]:
    """Each dim's labels: a dim of a multiple of its unit is its unit dim scaled
    (``_Pair.unit_dims``, whose answers serve every multiple), so only the dims some chunk
    cuts unevenly are labelled afresh."""
    return tuple(
        [
            unit.scaled(n // u) if _multiple(n, u) else dim_labels(n, a, b)
            for n, u, unit, a, b in zip(
                shape, pair.units, pair.unit_dims, *pair.levels, strict=True
            )
        ]
    )


def _build(shape: tuple[int, ...], pair: _Pair, joint: bool, dims: tuple[DimLabels, ...]) -> Plan:
    """The plan, built from each dim's labels (``dims``) and the plan's shape
    (``_Pair.skeleton``)."""
    src, mesh = pair.src, pair.mesh
    # which shards of one dim to another of the same dim keep their owners: that alone
    # depends on the sizes; the rest of the plan's shape is a table of the placements
    keep = tuple([m for m in pair.kinds.same_dim if _same_owner(dims[src[m].dim], m)])
    shape_of = pair.skeleton(keep, joint)
    builder = _Builder(dims, mesh, shape_of.start)
    for bone in shape_of.bones:
        if bone.kind is Kind.ALL_TO_ALL and shape_of.split:
            builder.exchange_one_by_one(bone.mesh_dims)
        else:
            builder.add(bone)
    steps = tuple(builder.steps)
    return Plan(
        shape,
        mesh,
        src,
        pair.dst,
        dims,
        shape_of.start,
        shape_of.final,
        _moves(shape_of, steps),
        steps,
        _most(builder.received),
        _most(builder.reduced),
        shape_of.split,
    )


class _Kinds(NamedTuple):
    """What each mesh dim that may move does, in mesh order, and which of them shard a
    tensor dim to the same tensor dim (an exchange only if the owners differ)."""

    moves: tuple[tuple[int, Kind], ...]
    same_dim: tuple[int, ...]


class _Bone(NamedTuple):
    """One step of a plan's shape: what it does, over which mesh dims, from and to which
    state, and the state of both (the positions that meet both states' constraints)."""

    kind: Kind
    mesh_dims: tuple[int, ...]
    before: State
    after: State
    both: State
    reduce_op: str | None = None
    # the tensor dims a data step's senders are read on: (dim, its source slots on mesh_dims)
    senders: tuple[tuple[int, tuple[Slot, ...]], ...] = ()


class _Shape(NamedTuple):
    """A plan without its sizes: the moves, the start and final states and the steps
    (``split``: the exchange moves one mesh dim at a time, in an order the sizes decide).
    ``exchanges``: where the exchanging moves are in ``moves`` (named once the sizes say which
    collective their step is)."""

    moves: tuple[Move, ...]
    start: State
    final: State
    bones: tuple[_Bone, ...]
    split: bool
    exchanges: tuple[int, ...]


def _skeleton(pair: _Pair, keep: tuple[int, ...], joint: bool) -> _Shape:
    """The plan's steps and states for the pair's placements, the same-dim mesh dims in
    ``keep`` keeping their owners: they depend on the sizes only through ``keep``."""
    src, dst = pair.src, pair.dst
    # The mesh dims of each kind of step, in the order the plan takes them (mesh order).
    chunks, scatters, reduces, exchange, gathers, partitions = [], [], [], [], [], []
    moves = []
    for m, kind in pair.kinds.moves:
        if kind is Kind.ALL_TO_ALL:
            if m in keep:
                continue  # the same sub-mode, read two ways
            exchange.append(m)
        elif kind is Kind.CHUNK:
            chunks.append(m)
        elif kind is Kind.ALL_GATHER:
            gathers.append(m)
        elif kind is Kind.REDUCE_SCATTER:
            scatters.append(m)
        elif kind is Kind.ALL_REDUCE:
            reduces.append(m)
        else:  # -> Partial: a shard is gathered first, a pending reduction reduced first
            if src[m].kind == "P":
                reduces.append(m)
            elif src[m].kind != "R":
                gathers.append(m)
            partitions.append(m)
        moves.append((m, kind))
    start = tuple([side(levels, SRC)[0] for levels in pair.levels[0]])
    final = tuple([side(levels, DST)[0] for levels in pair.levels[1]])
    slots = tuple(map(operator.add, start, final))  # every dim's, as its DimLabels has them
    # The steps in the order the plan takes them: (kind, mesh dims, slots added, dropped, op).
    # Reduce-scatters before all-reduces: each one shrinks what the later reductions move.
    order: list[tuple[Kind, tuple[int, ...], int | None, int | None, str | None]] = []
    if chunks:
        order.append((Kind.CHUNK, tuple(chunks), DST, None, None))
    order += [(Kind.REDUCE_SCATTER, (m,), DST, None, src[m].reduce_op) for m in scatters]
    order += [(Kind.ALL_REDUCE, (m,), None, None, src[m].reduce_op) for m in reduces]
    if exchange:
        order.append((Kind.ALL_TO_ALL, tuple(exchange), DST, SRC, None))
    order += [(Kind.ALL_GATHER, (m,), None, SRC, None) for m in reversed(gathers)]
    order += [(Kind.PARTITION, (m,), None, None, dst[m].reduce_op) for m in partitions]
    bones: list[_Bone] = []
    state = start
    for kind, dims, add, drop, op in order:
        bones.append(_bone(kind, slots, start, state, dims, add, drop, op))
        state = bones[-1].after
    split = len(exchange) > 1 and not joint
    together = () if split else tuple(exchange)
    out = tuple(
        Move(m, src[m], dst[m], kind, tuple([o for o in together if o != m]))
        if kind is Kind.ALL_TO_ALL
        else Move(m, src[m], dst[m], kind)
        for m, kind in moves
    )
    exchanges = tuple([i for i, (_, kind) in enumerate(moves) if kind is Kind.ALL_TO_ALL])
    return _Shape(out, start, final, tuple(bones), split, exchanges)


def _bone(
    kind: Kind,
    slots: tuple[tuple[Slot, ...], ...],
    start: State,
    state: State,
    mesh_dims: tuple[int, ...],
    add: int | None,
    drop: int | None,
    reduce_op: str | None = None,
) -> _Bone:
    """The step ``kind`` over ``mesh_dims`` from ``state``: it adds the slots ``(add, m)``
    and drops ``(drop, m)`` for each of them (``_next_state``); ``slots`` lists every tensor
    dim's slots and ``start`` the source's."""
    after = _next_state(slots, state, mesh_dims, add, drop)
    return _Bone(
        kind, mesh_dims, state, after, _union(state, after), reduce_op, _senders(start, mesh_dims)
    )


def _senders(start: State, mesh_dims: Sequence[int]) -> tuple[tuple[int, tuple[Slot, ...]], ...]:
    """Per tensor dim a source mesh dim of ``mesh_dims`` shards, that dim and those slots:
    where a step over ``mesh_dims`` reads whose data a rank receives."""
    out = []
    for i, held in enumerate(start):
        on = tuple([s for s in held if s[1] in mesh_dims])
        if on:
            out.append((i, on))
    return tuple(out)


def _next_state(
    slots: tuple[tuple[Slot, ...], ...],
    state: State,
    mesh_dims: Sequence[int],
    add: int | None,
    drop: int | None,
) -> State:
    """``state`` with the slots ``(add, m)`` added and ``(drop, m)`` dropped for each mesh
    dim m of ``mesh_dims``; ``slots`` lists every tensor dim's slots, in order."""
    out = []
    for every, held in zip(slots, state, strict=True):
        if not every:
            out.append(held)
            continue
        # one pass over the dim's slots, which are in order: the state's, less the dropped
        # ones, and the added ones
        out.append(
            tuple(
                [
                    s
                    for s in every
                    if (s[1] in mesh_dims and s[0] == add)
                    or (s in held and not (s[1] in mesh_dims and s[0] == drop))
                ]
            )
        )
    return tuple(out)


def physical_limit(plan: Plan) -> int:
    """The least any plan can make its busiest rank receive: the most elements of its target
    shard a rank does not hold in the source (Partial counted as held), computed from the two
    shardings alone."""
    dims = plan.dims
    ranks = _ranks(dims, plan.mesh)
    need = _sizes(dims, plan.final, ranks)
    held = _sizes(dims, _union(plan.final, plan.start), ranks)
    return _most(_minus(need, held, ranks))


def _levels(
    ps: tuple[PlacementSpec, ...], mesh: tuple[int, ...], ndim: int
) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Per tensor dim, ``(mesh dim, mesh size, split factor)`` of each mesh dim sharding it,
    in mesh order; a mesh dim of size 1 holds everything and constrains nothing."""
    out: list[tuple[tuple[int, int, int], ...]] = [()] * ndim
    for m, p in enumerate(ps):
        if (p.kind == "S" or p.kind == "SS") and mesh[m] > 1:
            out[p.dim] += ((m, mesh[m], p.split_factor),)
    return tuple(out)


def _kinds(
    src: tuple[PlacementSpec, ...], dst: tuple[PlacementSpec, ...], mesh: tuple[int, ...]
) -> _Kinds:
    """What each mesh dim does that may move, in mesh order: a mesh dim of size 1, or
    Replicate or a pending reduction kept, is left out. A shard -> a shard of the same dim
    (the same placement too: the mesh dims before it may change what it chunks) is an
    all-to-all unless its sub-mode turns out the same in both (``_same_owner``: that depends
    on the dim's size and the other levels, so the plan asks)."""
    out, same_dim = [], []
    for m, (s, t) in enumerate(zip(src, dst, strict=True)):
        if mesh[m] == 1:
            continue
        if s.kind == "S" or s.kind == "SS":
            if t.kind == "S" or t.kind == "SS":
                if s == t and _before(src, mesh, s.dim, m) == _before(dst, mesh, s.dim, m):
                    continue  # the same chunking of the same positions: the same owners
                kind = Kind.ALL_TO_ALL
                if s.dim == t.dim:
                    same_dim.append(m)
            else:
                kind = Kind.PARTITION if t.kind == "P" else Kind.ALL_GATHER
        elif s == t:  # Replicate, or the same pending reduction
            continue
        elif s.kind == "R":
            kind = Kind.PARTITION if t.kind == "P" else Kind.CHUNK
        elif t.kind == "P":  # a Partial source, another pending reduction
            kind = Kind.PARTITION
        else:
            kind = Kind.ALL_REDUCE if t.kind == "R" else Kind.REDUCE_SCATTER
        out.append((m, kind))
    return _Kinds(tuple(out), tuple(same_dim))


def _before(
    ps: tuple[PlacementSpec, ...], mesh: tuple[int, ...], dim: int, m: int
) -> list[tuple[int, PlacementSpec]]:
    """The mesh dims before m that shard tensor dim ``dim`` (and their placements): they
    decide which positions m's placement chunks."""
    return [(k, p) for k, p in enumerate(ps[:m]) if p.dim == dim and p.shards and mesh[k] > 1]


def _same_owner(labels: DimLabels, m: int) -> bool:
    """Whether mesh dim m's sub-mode gives every position the same owner in both."""
    a, b = labels.index(((SRC, m), (DST, m)))
    return all(lab[a] == lab[b] for lab in labels.counts(labels.slots))


def _moves(shape_of: _Shape, steps: tuple[Step, ...]) -> tuple[Move, ...]:
    """The plan's moves: an exchanging one named by the collective its step became (a
    permutation or an all-to-all: that depends on the sizes), the others as the shape has
    them."""
    if not shape_of.exchanges:
        return shape_of.moves
    out = list(shape_of.moves)
    for i in shape_of.exchanges:
        move = out[i]
        for step in steps:
            if move.mesh_dim in step.mesh_dims:
                out[i] = Move(move.mesh_dim, move.src, move.dst, step.kind, move.together)
                break
    return tuple(out)


# ------------------------------------------------------------------------ sizes per rank

# A mesh of more ranks than this counts one rank per class (``labels.rank_classes``), a
# smaller one every rank: finding the classes costs about what counting 64 ranks does.
# (Measured, cold plans: on meshes of 8-32 ranks the classes cost 15-25 % more; on 64, the
# same; on (16, 8) 1.4x less for activations (b, 4001, 4096), 6 % more for random small
# shapes; on meshes of 1,024 ranks 6-12x less for activations, where a plan counting every
# rank costs 0.25-0.8 ms, and 1.75x less for random shapes.)
_CLASSES_ABOVE = 64
# Of such a mesh, only mesh dims of more than this many coordinates have their classes
# found; each coordinate of a smaller one is counted (the same plan): comparing a few
# coordinates' labels costs more than counting them. (Measured, cold plan + price of the
# planning bench's 1,024-rank rows: 3.2 -> 2.7 ms in all; the uneven exchanges on (16, 8, 8)
# 1.2x less, two gathers there 1.3x more.)
_CLASSES_OF_MESH_DIMS_ABOVE = 8


def _ranks(dims: tuple[DimLabels, ...], mesh: tuple[int, ...]) -> Ranks:
    """The ranks a plan counts: one per class where the mesh has many, every one otherwise
    (the same plan either way; see ``_CLASSES_ABOVE`` and ``_CLASSES_OF_MESH_DIMS_ABOVE``)."""
    if math.prod(mesh) > _CLASSES_ABOVE:
        return rank_classes(dims, mesh, _CLASSES_OF_MESH_DIMS_ABOVE)
    return mesh_ranks(mesh)


# A quantity per rank: one number when every rank's is the same (even shards, the common case,
# which then costs nothing per rank), otherwise a tuple, one per rank in the order of ``Ranks``.
# (A number is an int, or under symbolic sizes an int times their factors: ``plan_of_symbols``.)
PerRank = int | tuple[int, ...]


def _sizes(dims: tuple[DimLabels, ...], state: State, ranks: Ranks) -> PerRank:
    """How many elements each rank holds in ``state``."""
    whole = 1  # the factor every rank shares
    out: tuple[int, ...] | None = None
    for d, slots in zip(dims, state, strict=True):
        n = d.per_rank(slots, ranks) if slots else d.size
        if not isinstance(n, tuple):
            whole *= n
        elif out is None:
            out = n
        else:
            out = tuple(map(operator.mul, out, n))
    if out is None:
        return whole
    if is_one(whole):
        return out
    return tuple(map(operator.mul, out, itertools.repeat(whole)))


def _each(x: PerRank, ranks: Ranks) -> tuple[int, ...]:
    return x if isinstance(x, tuple) else (x,) * len(ranks.coords)


def _minus(a: PerRank, b: PerRank, ranks: Ranks) -> PerRank:
    if not isinstance(a, tuple) and not isinstance(b, tuple):
        return a - b
    return tuple(map(operator.sub, _each(a, ranks), _each(b, ranks)))


def _plus(a: PerRank, b: PerRank, ranks: Ranks) -> PerRank:
    if not isinstance(a, tuple) and not isinstance(b, tuple):
        return a + b
    return tuple(map(operator.add, _each(a, ranks), _each(b, ranks)))


def _most(x: PerRank) -> int:
    return max(x, default=0) if isinstance(x, tuple) else x


def _flat(x: PerRank) -> bool:
    return not isinstance(x, tuple) or bool(min(x, default=0) == max(x, default=0))


def _union(a: State, b: State) -> State:
    return tuple(x if x == y else tuple(sorted(set(x) | set(y))) for x, y in zip(a, b, strict=True))


class _Builder:
    """Appends steps from the current state, keeping each rank's running totals (of the
    ranks ``_ranks`` counts, found when a data step first asks: a plan of local steps counts
    none)."""

    def __init__(self, dims: tuple[DimLabels, ...], mesh: tuple[int, ...], start: State) -> None:
        self.dims = dims
        self.mesh = mesh
        self.state = start
        self.steps: list[Step] = []
        self.received: PerRank = 0
        self.reduced: PerRank = 0
        self._sizes: dict[State, PerRank] = {}

    @functools.cached_property
    def ranks(self) -> Ranks:
        return _ranks(self.dims, self.mesh)

    def sizes(self, state: State) -> PerRank:
        """``_sizes`` of ``state``, once per state (a step's result is the next one's start)."""
        out = self._sizes.get(state)
        if out is None:
            out = self._sizes[state] = _sizes(self.dims, state, self.ranks)
        return out

    def add(self, bone: _Bone) -> None:
        """Append the step ``bone`` (from the current state): its sizes, what the busiest
        rank receives (or reduces), and its name, read off its states."""
        kind, mesh_dims, before, after = bone.kind, bone.mesh_dims, bone.before, bone.after
        received = reduced = peers = 0
        even = uniform = True  # a local step receives nothing: both hold trivially
        if kind is Kind.ALL_REDUCE or kind is Kind.REDUCE_SCATTER:
            sizes = self.sizes(before)
            self.reduced = _plus(self.reduced, sizes, self.ranks)
            reduced = _most(sizes)
            even = uniform = _flat(sizes)
        elif kind is not Kind.CHUNK and kind is not Kind.PARTITION:
            had, need = self.sizes(before), self.sizes(after)
            kept = self.sizes(bone.both)
            if not isinstance(need, tuple) and not isinstance(kept, tuple):  # every rank alike: one
                got: PerRank = need - kept
                received = need - kept
                uniform = True
            else:
                got = tuple(map(operator.sub, _each(need, self.ranks), _each(kept, self.ranks)))
                received = max(got)
                uniform = bool(min(got) == received)  # (a flag, symbolic sizes or not)
            self.received = _plus(self.received, got, self.ranks)
            peers = self._peers(bone.senders, after, got) if received else 0
            even = _flat(had) and _flat(need)
            # An all-gather where every rank keeps what it held, a permutation where each
            # rank's new part comes from one peer, otherwise an all-to-all.
            if (
                kind is Kind.ALL_GATHER
                or kept == had
                or _each(kept, self.ranks) == _each(had, self.ranks)
            ):
                kind = Kind.ALL_GATHER
            else:
                kind = Kind.PERMUTE if peers <= 1 else Kind.ALL_TO_ALL
        self.steps.append(
            Step(
                kind,
                mesh_dims,
                before,
                after,
                received,
                reduced,
                peers,
                bone.reduce_op,
                even,
                uniform,
            )
        )
        self.state = after

    def _peers(
        self, senders: tuple[tuple[int, tuple[Slot, ...]], ...], after: State, got: PerRank
    ) -> int:
        """The most peers a rank receives from: an element's sender is the rank whose source
        owners on the step's mesh dims (``senders``: per tensor dim, their slots) hold it, so
        a rank's senders are the combinations of those owners among the positions it needs,
        less itself."""
        # per rank, the product of each dim's sender counts and whether every dim's senders
        # include the rank itself (a dim whose senders are the same on every rank: one pair)
        counts: Iterator[int] = itertools.repeat(1)
        selves: Iterator[bool] = itertools.repeat(True)
        for i, sources in senders:
            per = self.dims[i].senders(after[i], sources, self.ranks)
            if type(per[0]) is int:
                many, own = itertools.repeat(per[0]), itertools.repeat(per[1])
            else:
                many, own = zip(*per, strict=True)  # type: ignore[assignment]
            counts = map(operator.mul, counts, many)
            selves = map(operator.and_, selves, own)
        peers = map(operator.sub, counts, selves)
        return max(itertools.compress(peers, _each(got, self.ranks)), default=0)

    def exchange_one_by_one(self, mesh_dims: tuple[int, ...]) -> None:
        """Without a collective over several mesh dims, replace one constraint at a time, in
        the order whose busiest rank receives least."""
        slots = tuple(map(_SLOTS, self.dims))
        start = tuple(map(_SOURCE, self.dims))

        def exchange(builder: _Builder, m: int) -> None:
            builder.add(_bone(Kind.ALL_TO_ALL, slots, start, builder.state, (m,), DST, SRC))

        def worst(order: tuple[int, ...]) -> int:
            trial = _Builder(self.dims, self.mesh, self.state)
            trial.ranks = self.ranks
            trial.received = self.received
            trial._sizes = self._sizes
            for m in order:
                exchange(trial, m)
            return _most(trial.received)

        for m in min(itertools.permutations(mesh_dims), key=worst):
            exchange(self, m)


def transfers(plan: Plan, step: Step) -> tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]:
    """Who sends what to whom in a data step: ``(receiver, sender, elements)`` for every pair
    of distinct ranks of a group that exchange something, receivers in rank order."""
    if step.kind.local or step.kind.reduces:
        return ()
    ranks = mesh_ranks(plan.mesh)
    out = []
    for to in ranks.coords:
        for frm in ranks.coords:
            if frm == to or any(
                a != b
                for m, (a, b) in enumerate(zip(to, frm, strict=True))
                if m not in step.mesh_dims
            ):
                continue
            n = _block(plan.dims, step.before, step.after, to, frm)
            if n:
                out.append((to, frm, n))
    return tuple(out)


def _block(
    dims: tuple[DimLabels, ...],
    before: State,
    after: State,
    to: tuple[int, ...],
    frm: tuple[int, ...],
) -> int:
    """How many elements rank ``frm`` holds (``before``) that rank ``to`` needs (``after``)."""
    size = 1
    for d, b, a in zip(dims, before, after, strict=True):
        slots = tuple(sorted(set(a) | set(b)))
        if not slots:
            size *= d.size
            continue
        key = tuple(to[m] if (side, m) in a else frm[m] for side, m in slots)
        size *= d.counts(slots).get(key, 0)
        if not size:
            return 0
    return size

"""Deciding the mesh dims in order: each keeps its shard on the output dim where its gpu
sub-mode lands, or moves (is replicated) with the reason.

DTensor applies mesh dims left to right, so mesh dim i is decided in the local shapes the
mesh dims before it leave, the moved ones not applied. A mesh dim moves only when no output
placement keeps it given those before it. That moves exactly the failing ones when they are
independent (the common case, as torch does), and where an earlier mesh dim of the same
tensor dim moves, the later ones are decided on the whole dim it leaves (``(12,)`` as
``(2, 6)`` on mesh ``(3, 2)`` with ``[S(0), S(0)]``: mesh dim 0 cannot stay, mesh dim 1 then
shards all 12 rows: ``[R, S(0)]``).

A plan may hold several readings of the rule (an op that is not known); a mesh dim stays only
where every reading keeps it on the same output dim with a split factor in every reading's
range. ``symbolic.py`` runs this same function on coded sizes.

Worked example: ``(8, 16, 32) -> (128, 32)`` on mesh ``(2, 4)`` with ``[Shard(0),
Shard(1)]``: mesh dim 0 is kept on output dim 0 with split factor 1, cutting the view group's
state to ``([4, 16, 32], [64, 32])``; mesh dim 1 then is kept on output dim 0 with split
factor 4: ``[Shard(0), _StridedShard(0, 4)]``, nothing moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .decide import place, split_states
from .types import (
    SHARDS,
    Cut,
    Fail,
    FailKind,
    Group,
    MeshPlacement,
    Moved,
    NotStatic,
    Placed,
    Plan,
    Reading,
    Sharded,
    State,
    SymbolicStep,
)

__all__ = ["solve"]


# A group's states, None once a symbolic uneven step left them unknown.
States = dict[Group, list[State] | None]


def solve(
    plan: Plan,
    norm: Sequence[MeshPlacement],
    mesh: tuple[int, ...],
    facts: Any = None,
    stop: bool = False,
) -> tuple[list[MeshPlacement], list[Moved]]:
    """The output placement of every mesh dim, in order, and those that move (their output is
    Replicate). ``stop``: return at the first that moves (a strict view needs no more to
    refuse). ``facts``: the symbolic sizes' ``SymFacts``; the facts asked for a mesh dim that
    then moves are dropped (moving is valid whatever they are).

    Each group's states (its ranks' local lengths) are computed when a placement first asks
    about the group: until then the cuts of the mesh dims kept on its dims are only noted
    (``pending``), so a view that carries every sharded dim whole computes none."""
    rest = plan.others
    readings = (plan, *rest) if rest else (plan,)
    states: States = {}
    pending: dict[Group, list[Cut]] = {}
    out: list[MeshPlacement] = list(norm)
    moved: list[Moved] = []
    last = len(norm) - 1  # the last sharded mesh dim: no mesh dim after it reads the states
    while last >= 0 and type(norm[last]) is not Sharded:
        last -= 1
    for m, p in enumerate(norm):
        if type(p) is not Sharded:
            continue  # Replicate or Partial: carried as it is
        d, sf = p
        if facts is None and type(sf) is not int:
            raise NotStatic  # a symbolic split factor
        size = mesh[m]
        if size == 1:  # every rank holds everything: any placement reads it back
            out[m] = _unit(plan, d, sf)
            continue
        o = plan.carry.get(d)
        if o is not None and not rest:  # the dim moves whole: its placement carries verbatim
            found, sf_out = o, sf
        else:
            mark = 0 if facts is None else facts.mark()
            hit = _keep(plan, states, pending, d, sf, size)
            for reading in rest:
                if type(hit) is not Placed:
                    break
                hit = _meet(hit, _keep(reading, states, pending, d, sf, size))
            if type(hit) is not Placed:
                if facts is not None:
                    facts.drop(mark)
                moved.append(Moved(m, d, hit))  # type: ignore[arg-type]  # (a Fail)
                if stop:
                    return out, moved
                out[m] = None
                continue
            found, sf_out = hit.axis, hit.lo  # (the smallest split factor in range)
        made = SHARDS.get((found, sf_out)) if type(sf_out) is int else None
        out[m] = Sharded(found, sf_out) if made is None else made
        if m == last:
            break
        for reading in readings:  # the groups' ranks split by the kept mesh dim
            group = reading.group(d)
            if group is None:
                continue
            cut = Cut(group.in_axis(d), sf, group.out_axis(found), sf_out, size)
            st = states.get(group, ())
            if st:  # cut the group's states, or note the cut until a placement asks
                try:
                    states[group] = split_states(st, cut)
                except SymbolicStep:
                    states[group] = None  # later mesh dims of this group cannot decide
            elif st is not None:
                if group in pending:
                    pending[group].append(cut)
                else:
                    pending[group] = [cut]
    return out, moved


def _keep(
    reading: Reading,
    states: States,
    pending: dict[Group, list[Cut]],
    d: int,
    sf: Any,
    size: int,
) -> Placed | Fail:
    """Where mesh dim (size ``size``) sharding input dim ``d`` by ``sf`` stays in one
    reading: a :class:`Placed` whose ``axis`` is the reading's output dim, or why it cannot."""
    o = reading.carry.get(d)
    if o is not None:  # the dim moves whole: its placement carries verbatim
        return Placed(o, sf, sf)
    group = reading.group(d)
    if group is None:
        return Fail(FailKind.NOWHERE)
    if group in states:
        st = states[group]
        if st is None:
            return Fail(FailKind.SYMBOLIC)
    else:  # the first placement asked about in this group: its one state before any mesh dim
        # (the global sizes, as lists: an even step divides them in place), cut by the kept
        # mesh dims noted so far
        st = [State(list(group.in_sizes), list(group.out_sizes), 0 in group.in_sizes)]
        try:
            for cut in pending.pop(group, ()):
                st = split_states(st, cut)
        except SymbolicStep:
            states[group] = None
            return Fail(FailKind.SYMBOLIC)
        states[group] = st
    placed = place(group, st, d, sf, size)
    if type(placed) is Placed and group.out_dims is not None:  # (a view's axes are its dims)
        return Placed(group.out_dims[placed.axis], placed.lo, placed.hi)
    return placed


def _meet(a: Placed, b: Placed | Fail) -> Placed | Fail:
    """A placement both readings accept (the same output dim, split factors in both ranges),
    or a Fail."""
    if type(b) is not Placed:
        return b
    try:
        if a.axis != b.axis:
            return Fail(FailKind.SPLIT)
        lo = b.lo if b.lo > a.lo else a.lo
        hi = a.hi if b.hi is None else b.hi if a.hi is None or a.hi > b.hi else a.hi
        if hi is not None and lo > hi:
            return Fail(FailKind.SPLIT)
    except SymbolicStep:  # readings to reconcile over symbolic split factors
        return Fail(FailKind.SYMBOLIC)
    return Placed(a.axis, lo, hi)


def _unit(plan: Plan, d: int, sf: Any) -> MeshPlacement:
    """The output of a mesh dim of size 1 (every rank holds everything)."""
    carried = plan.carry.get(d)
    if carried is not None:
        return Sharded(carried, sf)
    group = plan.group(d)
    if group is None:
        return None  # a dim the view drops
    k = group.home_axis(d, hinted=True)  # (any axis is valid: the symbols' hints pick one)
    return None if k < 0 else Sharded(group.out_dim(k), 1)

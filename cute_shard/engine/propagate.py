"""``propagate_shape_and_sharding``: the drop-in for DTensor's view propagator.

One pass, each step short:

1. read the placements (``parse_placements``: one ``(dim, split factor)``, ``None`` or Partial
   per mesh dim, checked against the tensor and the mesh);
2. read the rule into a plan (``plan.make_plan``: the groups of the view, once);
3. decide the mesh dims in order (``solve``): each keeps its shard on the output dim where its
   gpu sub-mode lands (``decide.place``), or moves (is replicated) and says why;
4. a strict view that must move raises ``RedistributionRequired``; otherwise return the input
   target (the input with the moved mesh dims replicated, the caller's own objects kept) and
   the output placements.

Choosing what moves: DTensor applies mesh dims left to right, so mesh dim i is decided in the
local shapes the mesh dims before it leave, the moved ones not applied. A mesh dim moves only
when no output placement keeps it given those before it. That moves exactly the failing ones
when they are independent (the common case, as torch does), and where an earlier mesh dim of
the same tensor dim moves, the later ones are decided on the whole dim it leaves (``(12,)``
as ``(2, 6)`` on mesh ``(3, 2)`` with ``[S(0), S(0)]``: mesh dim 0 cannot stay, mesh dim 1
then shards all 12 rows: ``[R, S(0)]``). Symbolic sizes go through ``symbolic.py``, the same
steps on coded sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

from ..rules import DimSpec, ViewRule
from ..rules.torch_compat import torch_refusal
from .decide import Fail, State, _place_one, _Symbolic, place, split_states
from .errors import Blocked, Details, RedistributionRequired, reason
from .plan import NotStatic, Plan, make_plan

__all__ = ["cache_clear", "parse_placements", "propagate_shape_and_sharding", "solve"]

# One per mesh dim: None for Replicate, (dim, split_factor) for Shard/_StridedShard (a Shard
# is split factor 1), or the Partial object itself.
MeshPlacement = None | tuple[int, Any] | Partial

REPLICATE = Replicate()
# The output placements most views give, made once: placements are immutable values, and
# constructing a _StridedShard costs more than deciding it. Others are made when first given
# (a bounded cache, emptied by cache_clear).
_MADE: dict[tuple[int, int], Placement] = {(d, 1): Shard(d) for d in range(64)}
_MADE.update({(d, sf): _StridedShard(d, split_factor=sf) for d in range(8) for sf in range(2, 65)})
_STRIDED: dict[tuple[int, Any], Placement] = {}
_STRIDED_LIMIT = 4096


def propagate_shape_and_sharding(
    placements: Sequence[Placement],
    global_shape: Sequence[Any],
    rule: Sequence[object],
    mesh_shape: Sequence[int],
    strict_view: bool = False,
    *,
    complex_view: bool | None = None,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    """``(input_target_placements, output_placements)`` for a view op with DimMap ``rule``.

    Same inputs and outputs as torch's ``propagate_shape_and_sharding``. ``rule`` may hold
    torch's DimSpecs or ``cute_shard.rules`` ones. With ``strict_view`` a view that needs
    communication raises ``RedistributionRequired`` naming the tensor dim, the mesh dim and
    the reason. Bad input raises ValueError.

    ``view_as_complex`` has the same rule as a view that flattens a trailing size-2 dim, but
    it needs whole (real, imag) pairs on every rank. ``complex_view`` says which op it is:
    True for view_as_complex, False for a real view. None: the rule says (a
    ``cute_shard.rules`` builder's rule knows its op), else the answer is valid for both.
    """
    shape = global_shape if type(global_shape) is tuple else tuple(global_shape)
    mesh = mesh_shape if type(mesh_shape) is tuple else tuple(mesh_shape)
    norm = parse_placements(placements, len(shape), mesh)
    if type(rule) is not ViewRule:  # (a rule of any other type keeps its type: it may say its op)
        rule = _as_rule(rule if isinstance(rule, tuple) else tuple(rule))
    ours = rule
    try:
        plan = make_plan(ours, shape, complex_view, True)
        out, fails = solve(plan, norm, mesh, None, strict_view)
        every = not strict_view  # (a strict view stops at its first failure)
    except NotStatic:
        from .symbolic import propagate_symbolic

        plan, out, fails = propagate_symbolic(norm, shape, ours, mesh, complex_view)
        every = True
    if fails and strict_view:
        raise _refused(plan, norm, shape, ours, mesh, placements, fails if every else None)
    outs = []
    p: Any  # (read by ``type(p)``, which mypy narrows only where it is a tuple)
    for p in out:  # the canonical torch placements (Shard(d) and Replicate shared)
        if type(p) is tuple:
            made = _MADE.get(p) if type(p[1]) is int else None
            outs.append(_torch(p) if made is None else made)
        else:
            outs.append(REPLICATE if p is None else p)
    if not fails:
        return placements if type(placements) is tuple else tuple(placements), tuple(outs)
    return _target(placements, fails), tuple(outs)


def _target(placements: Sequence[Placement], fails: list[Any]) -> tuple[Placement, ...]:
    """The input target: ``placements`` with the mesh dims that move replicated."""
    target = list(placements)
    for m, _, _ in fails:
        target[m] = REPLICATE
    return tuple(target)


def _refused(
    plan: Plan,
    norm: Sequence[MeshPlacement],
    shape: tuple[Any, ...],
    rule: Sequence[DimSpec],
    mesh: tuple[int, ...],
    placements: Sequence[Placement],
    fails: list[Any] | None,
) -> RedistributionRequired:
    """A strict view's error; what it says is worked out when it is read (:func:`_refusal`)."""
    return RedistributionRequired(
        later=lambda: _refusal(plan, norm, shape, rule, mesh, placements, fails)
    )


def _refusal(
    plan: Plan,
    norm: Sequence[MeshPlacement],
    shape: tuple[Any, ...],
    rule: Sequence[DimSpec],
    mesh: tuple[int, ...],
    placements: Sequence[Placement],
    fails: list[Any] | None,
) -> Details:
    """A strict view's ``(blocked, suggestion, torch_words)``: every mesh dim that moves with
    its reason written out, the input target, and the sentence torch's own propagator refuses
    the view with, or None where it does not refuse it (asked of int sizes only: asking
    about SymInts would add guards on them). ``fails``: ``solve``'s failures, or None if it
    stopped at the first (it is run again to the end)."""
    if fails is None:
        fails = solve(plan, norm, mesh)[1]
    blocked = tuple(
        Blocked(m, d, reason(fail, m, d, norm[m][1], mesh[m], plan.pair))  # type: ignore[index]
        for m, d, fail in fails
    )
    words = None
    if all(type(n) is int for n in shape):
        words = torch_refusal(placements, shape, rule, mesh)
    return blocked, _target(placements, fails), words


def solve(
    plan: Plan,
    norm: Sequence[MeshPlacement],
    mesh: tuple[int, ...],
    facts: Any = None,
    stop: bool = False,
) -> tuple[list[MeshPlacement], list[tuple[int, int, Fail]]]:
    """The output placement of every mesh dim, in order, and the failures
    ``(mesh dim, tensor dim, Fail)`` of those that move (their output is Replicate). ``stop``:
    return at the first failure (a strict view needs no more to refuse).

    A mesh dim's output holds in every reading of the plan: the same output dim, a split
    factor in every reading's range (a carried dim's own). ``facts``: the symbolic sizes'
    ``SymFacts``; the facts asked for a mesh dim that then moves are dropped (moving is
    valid whatever they are).

    Each group's states (its ranks' local lengths) are computed when a placement first asks
    about the group: until then the mesh dims kept on its dims are only noted (``pending``),
    so a view that carries every sharded dim whole computes none."""
    first = plan
    rest = plan.others
    readings = (plan, *rest) if rest else (plan,)
    states: dict[Any, list[State] | None] = {}
    pending: dict[Any, list[Any]] = {}
    out: list[MeshPlacement] = list(norm)
    fails: list[tuple[int, int, Fail]] = []
    last = len(norm) - 1  # the last sharded mesh dim: no mesh dim after it reads the states
    while last >= 0 and type(norm[last]) is not tuple:
        last -= 1
    for m, p in enumerate(norm):
        if type(p) is not tuple:
            continue  # Replicate or Partial: carried as it is
        d, sf = p
        if facts is None and type(sf) is not int:
            raise NotStatic  # a symbolic split factor
        size = mesh[m]
        if size == 1:  # every rank holds everything: any placement reads it back
            out[m] = _unit(plan, d, sf)
            continue
        o = first.carry.get(d)
        if o is not None and not rest:  # the dim moves whole: its placement carries verbatim
            found, sf_out = o, sf
        else:
            mark = 0 if facts is None else facts.mark()
            hit = (o, sf, sf, sf) if o is not None else _decide(first, states, pending, d, sf, size)
            for reading in rest:
                if type(hit) is Fail:
                    break
                hit = _meet(hit, _decide(reading, states, pending, d, sf, size))
            if type(hit) is Fail:
                if facts is not None:
                    facts.drop(mark)
                fails.append((m, d, hit))
                if stop:
                    return out, fails
                out[m] = None
                continue
            found = hit[0]
            sf_out = hit[1] if hit[3] is None else hit[3]
        out[m] = (found, sf_out)
        if m == last:
            break
        for reading in readings:  # the groups' ranks split by the kept mesh dim
            group = reading.view or reading.group_of.get(d)
            if group is None:
                continue
            if group.axis is None:
                step = (d, sf, found, sf_out, size)
            else:
                step = (group.axis[d], sf, group.out_axis(found), sf_out, size)
            st = states.get(group, ())
            if st:
                try:
                    states[group] = split_states(st, *step)
                except _Symbolic:
                    states[group] = None  # later mesh dims of this group cannot decide
            elif st is not None:
                if group in pending:
                    pending[group].append(step)
                else:
                    pending[group] = [step]
    return out, fails


def _decide(
    reading: Any, states: dict[Any, Any], pending: dict[Any, Any], d: int, sf: Any, size: int
) -> Any:
    """In one reading: ``(output dim, lo, hi, fixed)`` (``fixed``: a carried dim's own split
    factor, else None) or a Fail."""
    o = reading.carry.get(d)
    if o is not None:  # the dim moves whole: its placement carries verbatim
        return o, sf, sf, sf
    group = reading.view or reading.group_of.get(d)
    if group is None:
        return Fail("nowhere")
    if group in states:
        st = states[group]
        if st is None:
            return Fail("symbolic")
    else:  # the first placement asked about in this group: its one state before any mesh dim
        # (the global sizes, as lists: an even step divides them in place), then the kept
        # mesh dims noted so far
        st = [(list(group.in_sizes), list(group.out_sizes), 0 in group.in_sizes)]
        try:
            for step in pending.pop(group, ()):
                st = split_states(st, *step)
        except _Symbolic:
            states[group] = None
            return Fail("symbolic")
        states[group] = st
    placed = None
    if len(st) == 1:  # (place's own first step, without its call)
        try:
            placed = _place_one(group, st[0], d if group.axis is None else group.axis[d], sf, size)
        except _Symbolic:
            placed = None  # place says why
    if type(placed) is not tuple and type(placed) is not Fail:
        placed = place(group, st, d, sf, size)  # several states, or no run to place by
    if type(placed) is Fail:
        return placed
    k, lo, hi = placed  # type: ignore[misc]
    return (k if group.out_dims is None else group.out_dims[k]), lo, hi, None


def _meet(a: Any, b: Any) -> Any:
    """A placement both readings accept, or a Fail."""
    if type(b) is Fail:
        return b
    try:
        if a[0] != b[0]:
            return Fail("split")
        lo = b[1] if b[1] > a[1] else a[1]
        hi = a[2] if b[2] is None else b[2] if a[2] is None or a[2] > b[2] else a[2]
        fixed = a[3] if a[3] is not None else b[3]
        if (hi is not None and lo > hi) or (fixed is not None and not lo <= fixed):
            return Fail("split")
    except _Symbolic:  # readings to reconcile over symbolic split factors
        return Fail("symbolic")
    return a[0], lo, hi, fixed


def _unit(plan: Plan, d: int, sf: Any) -> MeshPlacement:
    """The output of a mesh dim of size 1 (every rank holds everything)."""
    reading = plan
    carried = reading.carry.get(d)
    if carried is not None:
        return (carried, sf)
    group = reading.view or reading.group_of.get(d)
    if group is None:
        return None  # a dim the view drops
    k = group.home_axis(d, hinted=True)  # (any axis is valid: the symbols' hints pick one)
    return None if k < 0 else (group.out_dim(k), 1)


def parse_placements(
    placements: Sequence[Placement], ndim: int, mesh: tuple[int, ...]
) -> tuple[MeshPlacement, ...]:
    """Check ``placements`` against the tensor rank and the mesh (ValueError names the bad
    one) and read each as ``None``, ``(dim, split factor)`` or the Partial."""
    if len(placements) != len(mesh):
        raise ValueError(
            f"got {len(placements)} placements for a mesh of {len(mesh)} dims "
            f"{tuple(mesh)}: give exactly one placement per mesh dim"
        )
    out: list[MeshPlacement] = []
    p: Any  # (dispatched on ``type(p)`` first, which mypy does not narrow)
    for m, p in enumerate(placements):
        size = mesh[m]
        if type(size) is not int or size < 1:
            raise ValueError(f"mesh dim {m} has size {size!r}; mesh sizes must be ints >= 1")
        # type() first: isinstance on torch's placements goes through a slow metaclass hook
        kind = type(p)
        if kind is Shard:
            sf: Any = 1
        elif kind is Replicate:
            out.append(None)
            continue
        elif kind is Partial:
            out.append(p)
            continue
        elif kind is _StridedShard or isinstance(p, _StridedShard):
            sf = p.split_factor
            if type(sf) is int and sf < 1:
                raise ValueError(f"mesh dim {m}: _StridedShard split_factor must be >= 1, got {sf}")
        elif isinstance(p, Shard):
            sf = 1
        elif isinstance(p, Partial):
            out.append(p)
            continue
        elif isinstance(p, Replicate):
            out.append(None)
            continue
        else:
            raise ValueError(f"mesh dim {m}: unsupported placement {p!r}")
        dim = p.dim
        if dim < 0 or dim >= ndim:
            if not -ndim <= dim < ndim:
                raise ValueError(
                    f"mesh dim {m} shards tensor dim {dim}, out of range for a tensor of "
                    f"{ndim} dims (expected -{ndim} <= dim < {ndim})"
                )
            dim += ndim
        out.append((dim, sf))
    return tuple(out)


def _torch(p: MeshPlacement) -> Placement:
    """The canonical torch placement (shared: placements are immutable)."""
    if p is None:
        return REPLICATE
    if type(p) is not tuple:
        return p  # type: ignore[return-value]  # a Partial, as the caller gave it
    dim, sf = p
    if type(sf) is not int:
        return _StridedShard(dim, split_factor=sf)  # a SymInt split factor
    placement = _MADE.get(p)
    if placement is not None:
        return placement
    if sf == 1:
        return Shard(dim)
    placement = _STRIDED.get(p)
    if placement is None:
        if len(_STRIDED) >= _STRIDED_LIMIT:
            _STRIDED.clear()
        placement = _STRIDED[p] = _StridedShard(dim, split_factor=sf)
    return placement


def _as_rule(rule: tuple[Any, ...]) -> tuple[DimSpec, ...]:
    """``rule`` as ``cute_shard.rules`` DimSpecs (torch's are converted; anything else is a
    ValueError)."""
    for spec in rule:
        if not isinstance(spec, DimSpec):
            break
    else:
        return rule
    from ..rules.torch_compat import from_torch

    try:
        return tuple(from_torch(rule))
    except (TypeError, AttributeError) as e:
        raise ValueError(
            f"rule {rule!r} is neither cute_shard.rules DimSpecs nor torch DimSpecs: {e}"
        ) from None


def cache_clear() -> None:
    """Empty every cache the engine and the layers below it keep."""
    from .. import layout, rules

    _STRIDED.clear()
    rules.cache_clear()
    layout.cache_clear()

"""The view decision, and ``propagate_shape_and_sharding``: the drop-in for DTensor's view
propagator.

One pass, each step short:

1. read the placements (``placements.parse_placements``: ``None``, ``Sharded(dim, split
   factor)`` or the Partial per mesh dim, checked against the tensor and the mesh);
2. read the rule into a plan (``plan.make_plan``: the groups of the view, once);
3. decide the mesh dims in order (``solve.solve``): each keeps its shard on the output dim
   where its gpu sub-mode lands (``decide.place``), or moves (is replicated) and says why;
4. return the decision: the input target (the input with the moved mesh dims replicated, the
   caller's own objects kept), the output placements, and each mesh dim that moves with its
   reason (:class:`ViewDecision`, from :func:`decide_view`).

``propagate_shape_and_sharding`` is that decision in torch's shape: the pair (input target,
output placements), raising ``RedistributionRequired`` for a strict view that must move.
Symbolic sizes go through ``symbolic.py``, the same steps on coded sizes.

Worked example: ``decide_view([Shard(0), Shard(1)], (8, 16, 32), view_groups((8, 16, 32),
(128, 32)), (2, 4))`` keeps both mesh dims: output ``(Shard(0), _StridedShard(0, 4))``, target
the input, ``moved`` empty. With ``(12,)`` viewed as ``(2, 6)`` on mesh ``(3,)`` and
``[Shard(0)]``, each rank's 4 rows straddle the two output rows: the target is
``(Replicate(),)``, and ``blocked`` says so for mesh dim 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.distributed.tensor.placement_types import Placement

from .. import layout, rules
from ..rules import DimSpec, ViewRule
from ..rules.torch_compat import torch_refusal
from .errors import Blocked, Details, RedistributionRequired, reason
from .placements import REPLICATE, as_sequence, integer_sizes, parse_placements, to_torch
from .placements import cache_clear as clear_placements
from .plan import as_rule, make_plan
from .solve import solve
from .symbolic import propagate_symbolic
from .types import MeshPlacement, Moved, NotStatic, Plan

__all__ = ["ViewDecision", "cache_clear", "decide_view", "propagate_shape_and_sharding"]


class ViewDecision:
    """What a view does to a sharding: ``target``, the input placements it needs (the
    caller's, with the mesh dims that move replicated; the caller's own objects where
    nothing moves); ``output``, the output placements; ``moved``, each mesh dim that moves
    with the tensor dim it shards and why (:attr:`blocked` writes the reasons out, when read).
    """

    __slots__ = ("_question", "moved", "output", "target")

    def __init__(
        self,
        target: tuple[Placement, ...],
        output: tuple[Placement, ...],
        moved: tuple[Moved, ...],
        question: _Question | None,
    ) -> None:
        self.target = target
        self.output = output
        self.moved = moved
        self._question = question

    @property
    def blocked(self) -> tuple[Blocked, ...]:
        """Each mesh dim that moves, with its reason written out."""
        return () if self._question is None else self._question.blocked(self.moved)

    def refusal(self) -> RedistributionRequired | None:
        """The error a strict view of this decision raises (None if nothing moves)."""
        if self._question is None:
            return None
        return self._question.refusal(self.moved)

    def __repr__(self) -> str:
        moved = ", ".join(f"mesh dim {m.mesh_dim}" for m in self.moved) or "nothing"
        return f"ViewDecision(target={self.target}, output={self.output}, moves {moved})"


class _Question:
    """One view question as the engine read it: what the reasons of a decision are written
    from (only a caller that reads them pays for them)."""

    __slots__ = ("mesh", "norm", "placements", "plan", "rule", "shape", "stopped")

    def __init__(
        self,
        plan: Plan,
        norm: tuple[MeshPlacement, ...],
        shape: tuple[Any, ...],
        rule: Sequence[DimSpec],
        mesh: tuple[int, ...],
        placements: Sequence[Placement],
        stopped: bool,
    ) -> None:
        self.stopped = stopped  # the decision stopped at the first mesh dim that moves
        self.plan = plan
        self.norm = norm
        self.shape = shape
        self.rule = rule
        self.mesh = mesh
        self.placements = placements

    def blocked(self, moved: Sequence[Moved]) -> tuple[Blocked, ...]:
        norm, mesh, pair = self.norm, self.mesh, self.plan.pair
        return tuple(
            Blocked(
                m.mesh_dim,
                m.tensor_dim,
                reason(
                    m.fail,
                    m.mesh_dim,
                    m.tensor_dim,
                    norm[m.mesh_dim].split_factor,  # type: ignore[union-attr]
                    mesh[m.mesh_dim],
                    pair,
                ),
            )
            for m in moved
        )

    def refusal(self, moved: Sequence[Moved]) -> RedistributionRequired:
        """A strict view's error; what it says is worked out when it is read (a decision
        that stopped at the first mesh dim that moves is then run to the end)."""
        return RedistributionRequired(later=lambda: self._details(moved))

    def _details(self, moved: Sequence[Moved]) -> Details:
        """``(blocked, suggestion, torch_words)``: the sentence torch's own propagator refuses
        the view with, or None where it does not refuse it (asked of int sizes only: asking
        about SymInts would add guards on them)."""
        if self.stopped:
            moved = solve(self.plan, self.norm, self.mesh)[1]
        target = _target(self.placements, moved)
        words = None
        if all(type(n) is int for n in self.shape):
            words = torch_refusal(self.placements, self.shape, self.rule, self.mesh)
        return self.blocked(moved), target, words


def decide_view(
    placements: Sequence[Placement],
    global_shape: Sequence[Any],
    rule: Sequence[object],
    mesh_shape: Sequence[int],
    *,
    complex_view: bool | None = None,
) -> ViewDecision:
    """The view decision for a tensor of ``global_shape`` sharded by ``placements`` over a
    mesh of ``mesh_shape``, viewed by DimMap ``rule`` (torch's DimSpecs or
    ``cute_shard.rules`` ones). Never raises for a view that must move: the decision says
    which mesh dims move and why. Bad input raises ValueError. ``complex_view``: as for
    :func:`propagate_shape_and_sharding`."""
    target, output, moved, question = _decide(
        placements, global_shape, rule, mesh_shape, complex_view, False
    )
    return ViewDecision(target, output, tuple(moved), question)


def propagate_shape_and_sharding(
    placements: Sequence[Placement],
    global_shape: Sequence[Any],
    rule: Sequence[object],
    mesh_shape: Sequence[int],
    strict_view: bool = False,
    *,
    complex_view: bool | None = None,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    """``(input_target_placements, output_placements)`` for a view op with DimMap ``rule``:
    :func:`decide_view` in the shape of torch's ``propagate_shape_and_sharding``.

    With ``strict_view`` a view that needs communication raises ``RedistributionRequired``
    naming the tensor dim, the mesh dim and the reason. Bad input raises ValueError.

    ``view_as_complex`` has the same rule as a view that flattens a trailing size-2 dim, but
    it needs whole (real, imag) pairs on every rank. ``complex_view`` says which op it is:
    True for view_as_complex, False for a real view. None: the rule says (a
    ``cute_shard.rules`` builder's rule knows its op), else the answer is valid for both.
    """
    target, output, moved, question = _decide(
        placements, global_shape, rule, mesh_shape, complex_view, strict_view
    )
    if question is not None and strict_view:
        raise question.refusal(moved)
    return target, output


def _decide(
    placements: Sequence[Placement],
    global_shape: Sequence[Any],
    rule: Sequence[object],
    mesh_shape: Sequence[int],
    complex_view: bool | None,
    stop: bool,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...], list[Moved], _Question | None]:
    """The one decision: ``(target, output, moved, question)``, the question (what reasons
    are written from) only where a mesh dim moves. ``stop``: stop at the first mesh dim that
    moves (a strict view needs no more to refuse; the target and ``moved`` are then
    partial)."""
    try:
        shape = global_shape if type(global_shape) is tuple else tuple(global_shape)
        mesh = mesh_shape if type(mesh_shape) is tuple else tuple(mesh_shape)
        norm = parse_placements(placements, len(shape), mesh)
        ours: tuple[DimSpec, ...] = rule  # type: ignore[assignment]  # (checked just below)
        if type(rule) is not ViewRule:  # (a rule of another type keeps it: it may say its op)
            ours = as_rule(rule if isinstance(rule, tuple) else tuple(rule))
    except TypeError:  # an argument that is not a sequence (None, an int): say which
        names = ("placements", "global_shape", "rule", "mesh_shape")
        args = (placements, global_shape, rule, mesh_shape)
        for name, value in zip(names, args, strict=True):
            as_sequence(value, name)
        raise
    try:
        plan = make_plan(ours, shape, complex_view, True)
        out, moved = solve(plan, norm, mesh, None, stop)
    except NotStatic:
        # integers of another type (numpy's) are no symbols: decided as the ints they are
        ints = None if all(type(n) is int for n in shape) else integer_sizes(shape)
        if ints is not None:
            return _decide(placements, ints, rule, mesh, complex_view, stop)
        plan, out, moved = propagate_symbolic(norm, shape, ours, mesh, complex_view)
        stop = False  # (the symbolic engine decides every mesh dim)
    outs = to_torch(out)  # the canonical torch placements, shared
    given = placements if type(placements) is tuple else tuple(placements)
    if not moved:
        return given, outs, moved, None
    question = _Question(plan, norm, shape, ours, mesh, given, stop)
    return _target(given, moved), outs, moved, question


def _target(placements: Sequence[Placement], moved: Sequence[Moved]) -> tuple[Placement, ...]:
    """The input target: ``placements`` with the mesh dims that move replicated."""
    target = list(placements)
    for m in moved:
        target[m.mesh_dim] = REPLICATE
    return tuple(target)


def cache_clear() -> None:
    """Empty every cache the engine and the layers below it keep."""
    clear_placements()
    rules.cache_clear()
    layout.cache_clear()

"""The values a redistribution plan is made of: kinds of step, states, steps, moves, the plan.

Named tuples (a plan is built once per redistribution, its steps and moves with it: they are
made in a fraction of a frozen dataclass's time). Torch-free and below every algorithm that
reads them: the planner (``plan.py``) builds them,
the executor (``execute.py``) runs them, the DTensor integration prices them, and the command
line, ``explain`` and ``trace`` print them.

A **state** says what every rank holds between two steps: per tensor dim, the slots (see
``labels.py``) that constrain it. The plan starts at the source placements' slots and ends at
the target's; each step changes the slots of its mesh dims only.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from ..notation import PlacementSpec
from .labels import DimLabels, Slot

__all__ = ["Kind", "Move", "Plan", "State", "Step"]

# Per tensor dim, the slots that constrain it, sorted.
State = tuple[tuple[Slot, ...], ...]


class Kind(enum.Enum):
    """What a step does. The values are what the command line and ``trace`` print."""

    CHUNK = "chunk"  # local: each rank keeps part of what it holds
    ALL_REDUCE = "all-reduce"  # Partial -> Replicate
    REDUCE_SCATTER = "reduce-scatter"  # Partial -> a shard, reduced and chunked at once
    ALL_TO_ALL = "all-to-all"  # each rank sends each peer the part it needs
    PERMUTE = "permutation"  # each rank's target comes whole from one peer
    ALL_GATHER = "all-gather"  # each rank receives everything its peers hold
    PARTITION = "partition"  # local: Replicate -> Partial

    @property
    def local(self) -> bool:
        return self in (Kind.CHUNK, Kind.PARTITION)

    @property
    def reduces(self) -> bool:
        return self in (Kind.ALL_REDUCE, Kind.REDUCE_SCATTER)


class Move(NamedTuple):
    """One mesh dim that changes: its source and target placement, how, and the other mesh
    dims its exchange moves together with (``reason`` says why, in words)."""

    mesh_dim: int
    src: PlacementSpec
    dst: PlacementSpec
    kind: Kind
    together: tuple[int, ...] = ()

    @property
    def reason(self) -> str:
        m, s, t = self.mesh_dim, self.src, self.dst
        if s.shards and t.shards:
            where = (
                f"changes position within d{s.dim}"
                if s.dim == t.dim
                else (f"moves from d{s.dim} to d{t.dim}")
            )
            text = f"m{m}'s sub-mode {where}"
            if self.together:
                text += "; it moves together with " + ", ".join(f"m{o}" for o in self.together)
            return text
        if s.shards:
            text = f"each rank needs all of d{s.dim} along m{m}"
            return text + f", then a pending {t.reduce_op}" if t.kind == "P" else text
        if s.kind == "R":
            if t.shards:
                return (
                    f"every rank already holds its part of d{t.dim} along m{m}: it keeps that part"
                )
            return f"the value becomes a pending {t.reduce_op}"
        if t.shards:
            return f"the pending {s.reduce_op} is reduced and each rank keeps its part of d{t.dim}"
        if t.kind == "P":
            return f"the pending {s.reduce_op} is reduced, then a pending {t.reduce_op}"
        return f"the pending {s.reduce_op} is reduced"


class Step(NamedTuple):
    """One collective on ``mesh_dims`` (or a local step), from state ``before`` to ``after``.

    ``received``: the elements the busiest rank receives in this step (data steps; 0 for
    local steps and reductions). ``reduced``: the elements the busiest rank hands to a
    reduction (reductions only). ``peers``: the most peers any rank receives from. ``even``
    (data steps and reductions; True for local ones): every rank holds as many elements as
    every other, before and after (so a gather's blocks are equal and it can be a plain
    all-gather). ``uniform``: every rank receives (or reduces) as much as the busiest.
    """

    kind: Kind
    mesh_dims: tuple[int, ...]
    before: State
    after: State
    received: int
    reduced: int = 0
    peers: int = 0
    reduce_op: str | None = None
    even: bool = True
    uniform: bool = True

    @property
    def collective(self) -> str | None:
        """The functional collective that runs the step (torch's op name, as ``CommDebugMode``
        counts it), or None for a local step: a gather of equal blocks on one mesh dim is an
        all-gather; any other exchange is an all-to-all with the blocks' sizes as splits."""
        if self.kind.local:
            return None
        if self.kind is Kind.ALL_REDUCE:
            return "all_reduce"
        if self.kind is Kind.REDUCE_SCATTER:
            return "reduce_scatter_tensor"
        if self.kind is Kind.ALL_GATHER and self.even and len(self.mesh_dims) == 1:
            return "all_gather_into_tensor"
        return "all_to_all_single"

    def __str__(self) -> str:
        dims = ",".join(f"m{m}" for m in self.mesh_dims)
        return f"{self.kind.value} on {dims}"


class Plan(NamedTuple):
    """A redistribution of a tensor of ``shape`` on ``mesh`` from ``src`` to ``dst``: the
    ranks hold ``start`` (the source's slots) and end holding ``final`` (the target's).

    ``received`` is the most elements any rank receives over all data steps; it is the
    physical limit (``plan.physical_limit``: the most elements of its target shard a rank does
    not already hold) unless ``split`` is set: several mesh dims had to move together and no
    collective over them was available (``joint=False``), so they moved one at a time.
    ``reduced`` is the most elements a rank hands to reductions.
    """

    shape: tuple[int, ...]
    mesh: tuple[int, ...]
    src: tuple[PlacementSpec, ...]
    dst: tuple[PlacementSpec, ...]
    dims: tuple[DimLabels, ...]
    start: State
    final: State
    moves: tuple[Move, ...]
    steps: tuple[Step, ...]
    received: int
    reduced: int
    split: bool = False

    def local_shape(self, state: State, coord: tuple[int, ...]) -> tuple[int, ...]:
        """The local tensor's shape on the rank at ``coord`` in ``state``."""
        return tuple(
            d.counts(slots).get(tuple(coord[m] for _, m in slots), 0) if slots else d.size
            for d, slots in zip(self.dims, state, strict=True)
        )

    def __str__(self) -> str:
        steps = "; ".join(str(s) for s in self.steps) or "nothing moves"
        return f"{_specs(self.src)} -> {_specs(self.dst)}: {steps}"


def _specs(ps: tuple[PlacementSpec, ...]) -> str:
    return "[" + ", ".join(str(p) for p in ps) + "]"

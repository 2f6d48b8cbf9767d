"""Redistribution by layout algebra: a DTensor's source and target shardings, read as
ownership functions of their gpu sub-modes, say what each rank holds and needs, so what moves,
along which mesh dims, is read off rather than searched for.

- ``plan_redistribution(shape, mesh, src, dst)``: the plan (``Plan``: its ``Step``s, each
  mesh dim's ``Move`` and why, the busiest rank's elements received), torch-free; placements
  are ``notation.PlacementSpec`` (``PlacementSpec.of(torch_placement)`` converts).
- ``physical_limit(plan)``: the least any plan can receive on its busiest rank.
- ``transfers(plan, step)``: who sends how many elements to whom in a step.
- ``execute(local, plan, mesh, coord, world)``: run a plan on a rank's local tensor with
  torch's functional collectives (real ranks, ``LocalTensorMode``, ``torch.compile``).

Modules: ``labels`` (who owns each position of a dim), ``types`` (the plan's values),
``plan`` (the planner), ``execute`` (the executor; imports torch).
"""

from .labels import DimLabels
from .plan import check_placements, physical_limit, plan_redistribution, transfers
from .types import Kind, Move, Plan, State, Step

__all__ = [
    "DimLabels",
    "Kind",
    "Move",
    "Plan",
    "State",
    "Step",
    "check_placements",
    "physical_limit",
    "plan_redistribution",
    "transfers",
]

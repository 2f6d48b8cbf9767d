"""The propagation engine: placements -> the view's plan -> each mesh dim's gpu sub-mode routed
to an output dim, in order -> output placements, or what must move.

``decide_view`` is the decision (the input target, the output placements, and each mesh dim
that moves with its reason) and ``propagate_shape_and_sharding`` the same decision in torch's
shape (a drop-in for torch's; both in ``propagate.py``). Its steps: ``placements.py`` reads
the placements; ``plan.py`` reads the rule and the input shape once; ``solve.py`` decides the
mesh dims in order; ``decide.py`` places each mesh dim's sub-mode in a group, even or uneven
sizes alike; ``symbolic.py`` runs the same steps on SymInt sizes; ``errors.py`` says why a
mesh dim moves. ``types.py`` names the data these steps hand each other. ``sharded.py``
writes a sharding out as a CuTe layout of the global tensor (``placements_to_layout``) and
the output's layout after a view (``compose_view``).
"""

from .errors import Blocked, RedistributionRequired
from .propagate import ViewDecision, cache_clear, decide_view, propagate_shape_and_sharding
from .sharded import DimSharding, ShardedLayout, compose_view, placements_to_layout

__all__ = [
    "Blocked",
    "DimSharding",
    "RedistributionRequired",
    "ShardedLayout",
    "ViewDecision",
    "cache_clear",
    "compose_view",
    "decide_view",
    "placements_to_layout",
    "propagate_shape_and_sharding",
]

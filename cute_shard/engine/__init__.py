"""The propagation engine: placements -> the view's plan -> each mesh dim's gpu sub-mode routed
to an output dim, in order -> output placements, or what must move.

``propagate_shape_and_sharding`` is the entry point (a drop-in for torch's, ``propagate.py``).
Its steps: ``plan.py`` reads the rule and the input shape once; ``decide.py`` places each mesh
dim's sub-mode, even or uneven sizes alike; ``symbolic.py`` runs the same steps on SymInt sizes;
``errors.py`` says why a mesh dim moves. ``sharded.py`` writes a sharding out as a CuTe layout
of the global tensor (``placements_to_layout``) and the output's layout after a view
(``compose_view``).
"""

from .errors import Blocked, RedistributionRequired
from .propagate import cache_clear, propagate_shape_and_sharding
from .sharded import DimSharding, ShardedLayout, compose_view, placements_to_layout

__all__ = [
    "Blocked",
    "DimSharding",
    "RedistributionRequired",
    "ShardedLayout",
    "cache_clear",
    "compose_view",
    "placements_to_layout",
    "propagate_shape_and_sharding",
]

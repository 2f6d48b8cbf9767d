"""The propagation engine: placements ⇄ sharded layout, compose_view, rule-tracing fallback.

``propagate_shape_and_sharding`` is the entry point (a drop-in for torch's). The pieces are
public too: ``placements_to_layout`` (``sharded.py``), ``compose_view`` (``compose.py``),
``layout_to_placements`` (``sharded.py``) and the fallback for what a layout cannot express
(``uneven.py``).
"""

from .compose import Routed, compose_view
from .errors import Blocked, RedistributionRequired
from .propagate import cache_clear, propagate_shape_and_sharding
from .sharded import DimSharding, ShardedLayout, layout_to_placements, placements_to_layout

__all__ = [
    "Blocked",
    "DimSharding",
    "RedistributionRequired",
    "Routed",
    "ShardedLayout",
    "cache_clear",
    "compose_view",
    "layout_to_placements",
    "placements_to_layout",
    "propagate_shape_and_sharding",
]

"""What the engine says when a mesh dim cannot stay as it is.

``Blocked`` records one mesh dim that a view forces to move: which tensor dim it shards, and why.
``RedistributionRequired`` (a RuntimeError, as DTensor raises for views that need communication)
carries the list and names the first in its message.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Blocked:
    """Mesh dim ``mesh_dim`` shards input tensor dim ``tensor_dim`` and cannot stay: ``reason``."""

    mesh_dim: int
    tensor_dim: int
    reason: str

    def __str__(self) -> str:
        return f"mesh dim {self.mesh_dim} (sharding tensor dim {self.tensor_dim}): {self.reason}"


class RedistributionRequired(RuntimeError):
    """A strict view (``view``, ``_unsafe_view``, ``squeeze``) would need communication.

    ``blocked`` lists every mesh dim that would have to move; ``suggestion`` is the input
    placement list that would make the view valid without further communication.
    """

    def __init__(self, blocked: tuple[Blocked, ...], suggestion: tuple[object, ...] | None = None):
        self.blocked = blocked
        self.suggestion = suggestion
        first = blocked[0]
        more = f" (and {len(blocked) - 1} more mesh dims)" if len(blocked) > 1 else ""
        hint = ""
        if suggestion is not None:
            hint = f"; redistribute the input to {list(suggestion)} first, or use reshape"
        super().__init__(
            f"view needs communication: tensor dim {first.tensor_dim} is sharded on mesh dim "
            f"{first.mesh_dim} and {first.reason}{more}{hint}"
        )

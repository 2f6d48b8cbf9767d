"""DTensor placements in and out of the engine.

``parse_placements`` checks torch's placements against the tensor and the mesh and reads each
as a :data:`~cute_shard.engine.types.MeshPlacement` (``None``, a ``Sharded(dim, split
factor)``, or the Partial); ``to_torch`` writes them back as the canonical torch placements,
shared where it can be (placements are immutable values, and constructing a
``_StridedShard`` costs more than deciding it).

Worked example: on mesh ``(2, 4)`` a 3-D tensor's ``[Shard(-1), _StridedShard(0,
split_factor=2)]`` reads as ``(Sharded(2, 1), Sharded(0, 2))``; ``to_torch([Sharded(0, 1),
None])`` is ``(Shard(0), Replicate())``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

from torch import SymInt
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

from .types import SHARDS, MeshPlacement, Sharded

__all__ = [
    "REPLICATE",
    "as_sequence",
    "cache_clear",
    "integer_sizes",
    "parse_placements",
    "to_torch",
]

REPLICATE = Replicate()
# The placements most views give, made once; others are made when first given (a bounded
# cache, emptied by cache_clear).
_MADE: dict[tuple[int, int], Placement] = {(d, 1): Shard(d) for d in range(64)}
_MADE.update({(d, sf): _StridedShard(d, split_factor=sf) for d in range(8) for sf in range(2, 65)})
_STRIDED: dict[tuple[int, Any], Placement] = {}
_STRIDED_LIMIT = 4096


def parse_placements(
    placements: Sequence[Placement], ndim: int, mesh: tuple[int, ...]
) -> tuple[MeshPlacement, ...]:
    """Check ``placements`` against the tensor rank and the mesh (ValueError names the bad
    one) and read each as ``None``, ``Sharded(dim, split factor)`` or the Partial."""
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
            dim = p.dim
            made = SHARDS.get((dim, 1)) if 0 <= dim < ndim else None
            if made is not None:  # the common case: a Shard made once
                out.append(made)
                continue
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
        made = SHARDS.get((dim, sf)) if type(sf) is int else None
        out.append(Sharded(dim, sf) if made is None else made)
    return tuple(out)


def as_sequence(value: Any, name: str) -> tuple[Any, ...]:
    """``value`` as a tuple, or ValueError naming the argument ``name`` when it is not a
    sequence (None, an int, a string)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{name}: expected a sequence, got {value!r}")
    return tuple(value)


def integer_sizes(shape: Sequence[Any]) -> tuple[int, ...] | None:
    """``shape`` as Python ints when every size is an integer and none is symbolic: numpy's
    integers (torch takes them as sizes) are the ints they equal, not symbols. None when a
    size is a SymInt, a bool or not an integer."""
    if any(isinstance(n, (bool, SymInt)) or not hasattr(type(n), "__index__") for n in shape):
        return None
    return tuple(map(operator.index, shape))


def to_torch(out: Sequence[MeshPlacement]) -> tuple[Placement, ...]:
    """The canonical torch placements (shared: placements are immutable) of ``out``."""
    made: list[Placement] = []
    for p in out:
        if type(p) is Sharded:
            placement = _MADE.get(p) if type(p.split_factor) is int else None  # (a SymInt: no hash)
            made.append(_sharded(p) if placement is None else placement)
        else:
            made.append(REPLICATE if p is None else p)  # type: ignore[arg-type]  # a Partial
    return tuple(made)


def _sharded(p: Sharded) -> Placement:
    dim, sf = p
    if type(sf) is not int:
        return _StridedShard(dim, split_factor=sf)  # a SymInt split factor
    if sf == 1:
        return Shard(dim)
    placement = _STRIDED.get(p)
    if placement is None:
        if len(_STRIDED) >= _STRIDED_LIMIT:
            _STRIDED.clear()
        placement = _STRIDED[p] = _StridedShard(dim, split_factor=sf)
    return placement


def cache_clear() -> None:
    """Forget the placements made since the last call."""
    _STRIDED.clear()

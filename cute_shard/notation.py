"""Placements in the notation the command line and the explainers print.

One placement per mesh dim, written ``R`` (Replicate), ``S<dim>`` (Shard), ``SS<dim>:<sf>``
(``_StridedShard`` with split factor ``sf``), ``P`` (``Partial("sum")``) or ``P:<op>`` (``avg``,
``max``, ``min``, ``product``); a list is ``[S0, SS0:4]``. torch prints the same placements
three other ways (``Shard(dim=0)`` in a repr, ``S(0)`` / ``_S(0, 4)`` / ``P(sum)`` from
``str``), and messages from the engine quote them; ``to_notation`` rewrites all of those, so
everything ``cute-shard explain`` shows reads one way.

This module is torch-free until a placement is converted to or from torch's classes.

Worked example::

    >>> ps = parse_placements("S0,SS1:4,P:avg", ndim=3, mesh=(2, 4, 2))
    >>> placements_str(ps)
    '[S0, SS1:4, P:avg]'
    >>> to_notation("redistribute to [Shard(dim=0), Replicate()]; _S(1, 4) cannot stay")
    'redistribute to [S0, R]; SS1:4 cannot stay'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from torch.distributed.tensor.placement_types import Placement

__all__ = [
    "PlacementSpec",
    "Placements",
    "parse_placement",
    "parse_placements",
    "placements_str",
    "to_notation",
]

REDUCE_OPS = ("sum", "avg", "max", "min", "product")

_PLACEMENT = re.compile(r"(R)|S(-?\d+)|SS(-?\d+):(-?\d+)|P(?::(sum|avg|max|min|product))?")


class PlacementSpec(NamedTuple):
    """A placement in CLI notation: ``R``, ``S<dim>``, ``SS<dim>:<split_factor>``, ``P[:<op>]``.

    ``kind`` is ``"R"``, ``"S"`` (Shard), ``"SS"`` (_StridedShard) or ``"P"`` (Partial); the
    other fields matter only for the kinds that have them. ``str`` prints the notation that
    ``parse_placement`` reads; ``to_torch`` and ``of`` convert to and from torch's classes.
    A named tuple: the planners key their caches by lists of placements, which then hash and
    compare in C.
    """

    kind: str
    dim: int = 0
    split_factor: int = 1
    reduce_op: str = "sum"

    def __str__(self) -> str:
        if self.kind == "S":
            return f"S{self.dim}"
        if self.kind == "SS":
            return f"SS{self.dim}:{self.split_factor}"
        if self.kind == "P":
            return "P" if self.reduce_op == "sum" else f"P:{self.reduce_op}"
        return "R"

    @property
    def shards(self) -> bool:
        """Whether it splits the data (Shard or _StridedShard)."""
        return self.kind in ("S", "SS")

    def to_torch(self) -> Placement:
        from torch.distributed.tensor.placement_types import (
            Partial,
            Replicate,
            Shard,
            _StridedShard,
        )

        if self.kind == "S":
            return Shard(self.dim)
        if self.kind == "SS":
            return _StridedShard(self.dim, split_factor=self.split_factor)
        if self.kind == "P":
            return Partial(self.reduce_op)
        return Replicate()

    @staticmethod
    def of(p: Placement) -> PlacementSpec:
        """The notation of a torch placement (``_StridedShard`` is not a ``Shard`` subclass).
        The common ones (Replicate, Shard of a dim < 64, each Partial op) are shared values,
        made once: DTensor's pricing converts every placement of both specs it asks about."""
        cls = type(p)
        kind = _KINDS.get(cls) or _kind_of(cls)
        if kind == "S":
            dim = p.dim  # type: ignore[attr-defined]
            return _SHARDS[dim] if 0 <= dim < len(_SHARDS) else PlacementSpec("S", dim)
        if kind == "R":
            return _REPLICATE
        if kind == "SS":
            return PlacementSpec("SS", p.dim, int(p.split_factor))  # type: ignore[attr-defined]
        if kind == "P":
            op = p.reduce_op  # type: ignore[attr-defined]
            return _PARTIALS.get(op) or PlacementSpec("P", reduce_op=op)
        raise ValueError(f"cannot write placement {p!r} in R/S/SS/P notation")


_REPLICATE = PlacementSpec("R")
_SHARDS = tuple(PlacementSpec("S", d) for d in range(64))
_PARTIALS = {op: PlacementSpec("P", reduce_op=op) for op in REDUCE_OPS}
# The notation's kind of each torch placement class met so far (``_kind_of``).
_KINDS: dict[type, str] = {}


def _kind_of(cls: type) -> str | None:
    """The notation's kind for a torch placement class (a subclass reads as its base;
    ``_StridedShard`` first, as it is not a ``Shard``), noted in ``_KINDS``; None for another
    class."""
    from torch.distributed.tensor.placement_types import (
        Partial,
        Replicate,
        Shard,
        _StridedShard,
    )

    for kind, base in (("SS", _StridedShard), ("S", Shard), ("P", Partial), ("R", Replicate)):
        if issubclass(cls, base):
            if len(_KINDS) < 64:  # (bounded: placement classes are few)
                _KINDS[cls] = kind
            return kind
    return None


Placements = tuple[PlacementSpec, ...]


def parse_placement(token: str, ndim: int) -> PlacementSpec:
    """One placement for a tensor of ``ndim`` dims; the shard dim is made non-negative."""
    text = token.strip()
    m = _PLACEMENT.fullmatch(text)
    if m is None:
        raise ValueError(
            f"--placements: cannot parse {text!r}; expected R, S<dim>, SS<dim>:<split_factor>, "
            "P or P:<op> (op: sum, avg, max, min, product)"
        )
    rep, shard, ss_dim, ss_sf, partial_op = m.groups()
    if rep:
        return PlacementSpec("R")
    if shard is not None:
        return PlacementSpec("S", _shard_dim(int(shard), ndim, text))
    if ss_dim is not None:
        if int(ss_sf) < 1:
            raise ValueError(f"--placements: {text}: split factor must be >= 1, got {ss_sf}")
        return PlacementSpec("SS", _shard_dim(int(ss_dim), ndim, text), int(ss_sf))
    return PlacementSpec("P", reduce_op=partial_op or "sum")


def _shard_dim(dim: int, ndim: int, text: str) -> int:
    if not -ndim <= dim < ndim:
        raise ValueError(
            f"--placements: {text} shards dim {dim}, out of range for a tensor of {ndim} dims "
            f"(expected {-ndim} <= dim < {ndim})"
        )
    return dim % ndim


def parse_placements(text: str, ndim: int, mesh: Sequence[int]) -> Placements:
    """A comma list of placements, one per mesh dim (``[S0, S1]`` brackets are allowed)."""
    tokens = [t for t in text.strip().strip("[]").split(",") if t.strip()]
    if len(tokens) != len(mesh):
        raise ValueError(
            f"--placements: got {len(tokens)} placements for a mesh of {len(mesh)} dims "
            f"({','.join(str(m) for m in mesh)}); give exactly one per mesh dim"
        )
    return tuple(parse_placement(t, ndim) for t in tokens)


def placements_str(ps: Sequence[PlacementSpec]) -> str:
    """``[S0, SS0:4]``: a placement list as the command line prints it."""
    return "[" + ", ".join(str(p) for p in ps) + "]"


# torch's spellings of a placement, each with the notation it becomes. The repr forms come
# first: ``Shard(dim=0)`` must not be read as the ``S(...)`` of ``str``. The lookbehind keeps
# the short forms from matching inside a word (``_S(`` is matched whole, never as ``S(``).
_TORCH_SPELLINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"_StridedShard\(dim=(-?\d+), (?:sf|split_factor)=(\d+)\)"), r"SS\1:\2"),
    (re.compile(r"\bShard\(dim=(-?\d+)\)"), r"S\1"),
    (re.compile(r"\bReplicate\(\)"), "R"),
    (re.compile(r"\bPartial\((?:reduce_op=)?'?sum'?\)"), "P"),
    (re.compile(r"\bPartial\((?:reduce_op=)?'?(\w+)'?\)"), r"P:\1"),
    (re.compile(r"(?<![\w(])_S\((-?\d+), (\d+)\)"), r"SS\1:\2"),
    (re.compile(r"(?<![\w(])S\((-?\d+)\)"), r"S\1"),
    (re.compile(r"(?<![\w(])P\(sum\)"), "P"),
    (re.compile(r"(?<![\w(])P\((\w+)\)"), r"P:\1"),
)


def to_notation(text: str) -> str:
    """``text`` with every placement torch's way (``Shard(dim=0)``, ``S(0)``, ``_S(0, 4)``,
    ``Replicate()``, ``Partial(sum)``, ``P(avg)``) rewritten in CLI notation."""
    for pattern, replacement in _TORCH_SPELLINGS:
        text = pattern.sub(replacement, text)
    return text

"""Convert rules to and from torch's DimSpec classes (this module imports torch).

``to_torch`` maps each of our specs to the same-named class in
``torch.distributed.tensor._ops._view_ops`` (fields map one to one; sequences
become tuples, as torch's own builders produce).  ``from_torch`` maps back
exactly, through the validating constructors, so
``to_torch(from_torch(r)) == r`` for every rule torch's builders produce;
pass ``canonical=True`` to rebuild through the canonicalising ``new``
constructors instead.

Example::

    >>> from torch.distributed.tensor._ops._view_ops import view_groups as torch_vg
    >>> from cute_shard.rules import format_rule, view_groups
    >>> to_torch(view_groups((2, 3, 4), (6, 4))) == torch_vg((2, 3, 4), (6, 4))
    True
    >>> format_rule(from_torch(torch_vg((6,), (2, 3))))
    '(split(d0, (2,3), 0), split(d0, (2,3), 1))'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from torch.distributed.tensor._ops import _view_ops as tv

from .specs import (
    SINGLETON,
    Broadcast,
    DimSpec,
    Flatten,
    InputDim,
    NewDim,
    Repeat,
    Rule,
    Singleton,
    Split,
)

__all__ = ["TorchRule", "from_torch", "to_torch", "torch_refusal"]

TorchRule = tuple[tv.DimSpec, ...]


def _to(s: DimSpec) -> tv.DimSpec:
    if isinstance(s, InputDim):
        return tv.InputDim(s.input_dim)
    if isinstance(s, Singleton):
        return tv.Singleton()
    if isinstance(s, Flatten):
        return tv.Flatten(tuple(_to(d) for d in s.input_dims))
    # torch annotates these sizes as int; its own rules hold SymInts in them too, as ours may
    if isinstance(s, Split):
        return tv.Split(_to(s.input_dim), tuple(s.group_shape), s.split_id)  # type: ignore[arg-type]
    if isinstance(s, Broadcast):
        return tv.Broadcast(_to(s.dim), s.dim_size)  # type: ignore[arg-type]
    if isinstance(s, NewDim):
        return tv.NewDim(s.size)  # type: ignore[arg-type]
    if isinstance(s, Repeat):
        return tv.Repeat(_to(s.input_dim), s.times)  # type: ignore[arg-type]
    raise ValueError(
        f"to_torch: expected a cute_shard DimSpec, got {s!r} of type {type(s).__name__}; "
        "fix: pass a rule built by cute_shard.rules"
    )


def _from(s: object, canonical: bool) -> DimSpec:
    # isinstance, never ==: torch's InputDim.__eq__ raises TypeError when
    # compared with a non-DimSpec.
    if isinstance(s, tv.InputDim):
        return InputDim.new(s.input_dim)
    if isinstance(s, tv.Singleton):
        return SINGLETON
    if isinstance(s, tv.Flatten):
        dims = tuple(_from(d, canonical) for d in s.input_dims)
        return Flatten.new(dims) if canonical else Flatten(dims)  # type: ignore[arg-type]
    if isinstance(s, tv.Split):
        inner = _from(s.input_dim, canonical)
        shape = tuple(s.group_shape)
        return Split.new(inner, shape, s.split_id) if canonical else Split(inner, shape, s.split_id)
    if isinstance(s, tv.Broadcast):
        inner = _from(s.dim, canonical)
        return Broadcast.new(inner, s.dim_size) if canonical else Broadcast(inner, s.dim_size)
    if isinstance(s, tv.NewDim):
        return NewDim.new(s.size) if canonical else NewDim(s.size)
    if isinstance(s, tv.Repeat):
        inner = _from(s.input_dim, canonical)
        return Repeat.new(inner, s.times) if canonical else Repeat(inner, s.times)
    raise ValueError(
        f"from_torch: expected a torch view-op DimSpec, got {s!r} of type {type(s).__name__}; "
        "fix: pass the output of a torch.distributed.tensor._ops._view_ops builder"
    )


def to_torch(rule: Iterable[DimSpec]) -> TorchRule:
    """Our rule as a tuple of torch's ``_view_ops`` DimSpec objects."""
    return tuple(_to(s) for s in rule)


def from_torch(torch_rule: Iterable[tv.DimSpec], *, canonical: bool = False) -> Rule:
    """A torch ``_view_ops`` rule as ours: exact by default, or canonicalised."""
    return tuple(_from(s, canonical) for s in torch_rule)


def torch_refusal(
    placements: Sequence[Any],
    shape: tuple[int, ...],
    rule: Iterable[DimSpec],
    mesh: tuple[int, ...],
) -> str | None:
    """The sentence torch's own propagator on the installed release refuses the strict view
    ``rule`` of ``shape`` with, or None where it does not refuse it (it answers, or fails some
    other way: only a RuntimeError is a refusal). Asked, not guessed, so the words follow
    torch from release to release. Sizes must be ints: asking about SymInts would add guards.

    Example::

        >>> from torch.distributed.tensor.placement_types import Shard
        >>> from cute_shard.rules import view_groups
        >>> torch_refusal([Shard(1)], (4, 3, 8), view_groups((4, 3, 8), (2, 4, 12)), (2,))[:39]
        'Cannot flatten unevenly sharded tensor:'
    """
    try:
        tv.propagate_shape_and_sharding(list(placements), shape, to_torch(rule), mesh, True)
    except RuntimeError as e:
        lines = str(e).strip().splitlines()
        return lines[0].split(". ")[0].rstrip(".") if lines else None
    except Exception:  # torch's propagator crashes on some legal views: no refusal to quote
        return None
    return None

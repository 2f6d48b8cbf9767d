"""The engine's data: what its steps hand each other, named.

A view's propagation reads the placements (one :data:`MeshPlacement` per mesh dim), reads the
rule into a :class:`Plan` (its :class:`Group` s of input and output axes), then decides the
mesh dims in order. In a group, the ranks are described by their :class:`State` s (the local
lengths of the group's axes); placing a mesh dim in a group gives a :class:`Placed` (an output
axis and the split factors that chunk it alike) or a :class:`Fail` whose :class:`FailKind`
says why it cannot stay. Over the plan's readings the answer is a :class:`Placed` on an
output dim or a :class:`Moved`; a kept mesh dim then cuts the states by a :class:`Cut`.

Worked example: ``(8, 16, 32) -> (128, 32)`` on mesh ``(2, 4)`` with ``[Shard(0), Shard(1)]``
is read as ``(Sharded(0, 1), Sharded(1, 1))``; the plan is one view group, input axes
``(8, 16, 32)`` and output axes ``(128, 32)``, in one state. Mesh dim 0 is
``Placed(axis=0, lo=1, hi=1)`` (``Shard(0)``), then ``Cut(0, 1, 0, 1, 2)`` leaves the state
``State([4, 16, 32], [64, 32], False)``; mesh dim 1 is ``Placed(axis=0, lo=4, hi=4)``
(``_StridedShard(0, 4)``).

The ones made per placement (``State``, ``Placed``, ``Moved``, ``Cut``) are slotted classes
read by attribute: a NamedTuple is made through a Python-level ``__new__`` and costs about
1.7x as much to make, and twice as much to read a field of.

These types sit below every algorithm of the engine (``decide.py``, ``plan.py``,
``solve.py``, ``symbolic.py``, ``errors.py``), so none of those imports another for its data.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from itertools import accumulate
from operator import mul
from typing import Any, NamedTuple

from torch.distributed.tensor.placement_types import Partial

__all__ = [
    "SHARDS",
    "Cut",
    "Fail",
    "FailKind",
    "Group",
    "MeshPlacement",
    "Moved",
    "NotStatic",
    "Placed",
    "Plan",
    "Reading",
    "Sharded",
    "Size",
    "State",
    "SymbolicStep",
    "inward",
]

Size = Any  # int, or a symbolic size (``symbolic.Sym``) on the even steps only


class Sharded(NamedTuple):
    """A mesh dim that shards tensor dim ``dim``; ``split_factor`` 1 is ``Shard``, more a
    ``_StridedShard``."""

    dim: int
    split_factor: Size


#: The placements most views read and give, ``(dim, split factor) -> Sharded``, made once (a
#: NamedTuple costs more to build than a dict lookup).
SHARDS = {(d, 1): Sharded(d, 1) for d in range(64)}
SHARDS.update({(d, sf): Sharded(d, sf) for d in range(8) for sf in range(2, 65)})

#: One per mesh dim: None for Replicate, a :class:`Sharded`, or the Partial itself.
MeshPlacement = Sharded | Partial | None


class NotStatic(Exception):
    """A size of the shape or the rule is symbolic: the symbolic engine plans it."""


class SymbolicStep(Exception):
    """An uneven step on a symbolic size: no exact answer for every value of the symbols."""


class FailKind(enum.Enum):
    """Why a mesh dim cannot stay (``errors.reason`` writes each out)."""

    STRADDLE = "straddle"  # even: the gpu sub-mode is in no output dim
    UNEVEN = "uneven"  # uneven: the chunks line up with no output dim's
    SPLIT = "split"  # states (or readings) need different output dims or split factors
    SYMBOLIC = "symbolic"  # uneven where a size is symbolic
    NOWHERE = "nowhere"  # no output dim can hold it (the view drops its dim)


class State:
    """Ranks that agree on the local lengths of a group's axes. ``ins`` and ``outs`` are
    lists: an even step divides them in place (the state has one owner). ``empty``: no rank
    of the state holds anything."""

    __slots__ = ("empty", "ins", "outs")

    def __init__(self, ins: list[Size], outs: list[Size], empty: bool) -> None:
        self.ins = ins
        self.outs = outs
        self.empty = empty

    def __repr__(self) -> str:
        return f"State({self.ins}, {self.outs}, {self.empty})"


class Fail:
    """A mesh dim that cannot stay: ``kind``, and the group and state it was found in (for
    the message; None where no state was reached)."""

    __slots__ = ("group", "kind", "state")

    def __init__(
        self, kind: FailKind, group: Group | None = None, state: State | None = None
    ) -> None:
        self.kind = kind
        self.group = group
        self.state = state

    def __repr__(self) -> str:
        return f"Fail({self.kind.value})"


class Placed:
    """A mesh dim placed in a group: on output ``axis``, by any split factor in ``[lo, hi]``
    (``hi`` None: no bound). The smallest is the answer. (``solve`` reads it in output dims:
    ``axis`` the output dim, a dim moved whole ``Placed(o, sf, sf)``, its own split factor.)"""

    __slots__ = ("axis", "hi", "lo")

    def __init__(self, axis: int, lo: Size, hi: Size | None) -> None:
        self.axis = axis
        self.lo = lo
        self.hi = hi

    def __repr__(self) -> str:
        return f"Placed(axis={self.axis}, lo={self.lo}, hi={self.hi})"


class Moved:
    """A mesh dim that must move (its output is Replicate): the tensor dim it shards, why."""

    __slots__ = ("fail", "mesh_dim", "tensor_dim")

    def __init__(self, mesh_dim: int, tensor_dim: int, fail: Fail) -> None:
        self.mesh_dim = mesh_dim
        self.tensor_dim = tensor_dim
        self.fail = fail

    def __repr__(self) -> str:
        return f"Moved(mesh_dim={self.mesh_dim}, tensor_dim={self.tensor_dim}, {self.fail})"


class Cut:
    """What a kept mesh dim (size ``mesh_size``) does to a group's states: input axis
    ``in_axis`` chunked by ``split_factor``, output axis ``out_axis`` by ``out_split_factor``."""

    __slots__ = ("in_axis", "mesh_size", "out_axis", "out_split_factor", "split_factor")

    def __init__(
        self,
        in_axis: int,
        split_factor: Size,
        out_axis: int,
        out_split_factor: Size,
        mesh_size: int,
    ) -> None:
        self.in_axis = in_axis
        self.split_factor = split_factor
        self.out_axis = out_axis
        self.out_split_factor = out_split_factor
        self.mesh_size = mesh_size

    def __repr__(self) -> str:
        return (
            f"Cut({self.in_axis}, {self.split_factor}, {self.out_axis}, "
            f"{self.out_split_factor}, {self.mesh_size})"
        )


def inward(sizes: Sequence[Size]) -> Iterator[tuple[int, Size, Size]]:
    """The axes of ``sizes`` from the innermost out: ``(k, sizes[k], inner)`` with ``inner``
    the product of the sizes inside axis k (row-major). The scan every output-axis search
    makes: ``inward((4, 6, 8))`` gives ``(2, 8, 1), (1, 6, 8), (0, 4, 48)``. (Built of C-level
    iterators: the router runs it once per placement.)"""
    inner = accumulate(reversed(sizes), mul, initial=1)  # (one more than the axes: zip stops)
    return zip(range(len(sizes) - 1, -1, -1), reversed(sizes), inner, strict=False)


class Group:
    """Input dims and the output dims the view makes of them, as local-layout axes.

    ``in_sizes``: the input axes outer to inner (a view's tensor dims, or a group of them;
    ``axis[d]`` is tensor dim d's axis, None: axis d). Virtual axes (a ``repeat``'s copies,
    never sharded) have no tensor dim. ``out_sizes``/``out_dims``: the output axes outer to
    inner and the output tensor dim of each (None: axis k is output dim k; -1 for an axis no
    placement may name, view_as_complex's (real, imag) pair). ``home[d]``: the output dim for a
    shard whose labelling does not place it (the ranks hold nothing, or one rank holds it all);
    None for a view's group (and a Split's, a view of its dims), where it is the output dim
    that holds the dim's rows in the flat index (:meth:`home_axis`).
    """

    __slots__ = ("axis", "home", "in_sizes", "out_dims", "out_sizes")

    def __init__(
        self,
        in_sizes: tuple[Size, ...],
        out_sizes: tuple[Size, ...],
        axis: dict[int, int] | None = None,
        out_dims: tuple[int, ...] | None = None,
        home: dict[int, int] | None = None,
    ) -> None:
        """``Group(in_sizes, out_sizes)`` is a view's one group: every input dim an axis,
        every output dim an axis."""
        self.in_sizes = in_sizes
        self.axis = axis
        self.out_sizes = out_sizes
        self.out_dims = out_dims
        self.home = home

    def in_axis(self, d: int) -> int:
        return d if self.axis is None else self.axis[d]

    def out_dim(self, k: int) -> int:
        return k if self.out_dims is None else self.out_dims[k]

    def out_axis(self, o: int) -> int:
        return o if self.out_dims is None else self.out_dims.index(o)

    def home_axis(self, d: int, hinted: bool = False) -> int:
        """The output axis for input dim d's shard when no labelling places it (-1: none).
        ``hinted``: read symbolic sizes at their hints (only where any axis is valid, so that
        the choice needs no guard: a mesh dim of size 1)."""
        if self.home is not None:
            o = self.home.get(d, -1)
            return -1 if o < 0 else self.out_axis(o)
        # a view (or a Split, a view of its dims): the outermost output axis the dim's elements
        # reach in the flat index (where a dropped size-1 dim's row would start)
        a = self.in_axis(d)
        ins, outs = self.in_sizes, self.out_sizes
        if hinted:
            ins, outs = _hints(ins), _hints(outs)
        row: Size = 1
        for x in ins[a + 1 :]:
            row = row * x
        n = ins[a]
        top = row * n - 1 if type(n) is int and n > 1 and type(row) is int else row
        for k, size, inner in inward(outs):
            inner = inner * size
            if type(inner) is int and type(top) is int and inner > top:
                return k
        return 0 if outs else -1  # (sizes the hints do not order: the outermost axis)


def _hints(sizes: tuple[Size, ...]) -> tuple[Size, ...]:
    """``sizes`` with each symbolic size at its hint where it has one."""
    return tuple(x if type(x) is int else getattr(x, "hint", None) or x for x in sizes)


class Reading:
    """One reading of the rule: ``carry[d]`` is the output dim that input dim d moves to
    whole; ``view`` the one group of a view (every dim is in it, carried or not), else
    ``group_of[d]`` the group of input dim d; a dim in neither is dropped."""

    __slots__ = ("carry", "group_of", "view")

    def __init__(
        self, carry: dict[int, int], group_of: dict[int, Group], view: Group | None = None
    ) -> None:
        self.carry = carry
        self.group_of = group_of
        self.view = view

    def group(self, d: int) -> Group | None:
        return self.view or self.group_of.get(d)


class Plan(Reading):
    """The rule's first reading (its ``carry``, ``group_of``, ``view``), and ``others``: the
    other readings an answer must hold in (none, unless the rule's op is not known);
    ``out_shape``: the output sizes; ``pair``: the (real, imag) input dim of a view_as_complex
    reading, or -1."""

    __slots__ = ("others", "out_shape", "pair")

    def __init__(
        self,
        carry: dict[int, int],
        group_of: dict[int, Group],
        view: Group | None,
        out_shape: tuple[Size, ...],
        pair: int,
        others: tuple[Reading, ...] = (),
    ) -> None:
        self.carry = carry
        self.group_of = group_of
        self.view = view
        self.out_shape = out_shape
        self.pair = pair
        self.others = others

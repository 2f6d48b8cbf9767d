"""What the engine says when a mesh dim cannot stay as it is.

``Blocked`` records one mesh dim that a view forces to move: which tensor dim it shards, and
why. ``RedistributionRequired`` (a RuntimeError, as DTensor raises for views that need
communication) carries the list and names the first in its message. ``reason`` writes the
text of a :class:`~cute_shard.engine.decide.Fail`; only a caller that shows it pays for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .decide import Fail


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
    placement list that would make the view valid without further communication. Both are
    worked out when first read (``later``): a caller that only catches the error pays
    for neither, and the engine stops deciding at the first mesh dim that must move.
    """

    def __init__(
        self,
        blocked: tuple[Blocked, ...] = (),
        suggestion: tuple[object, ...] | None = None,
        later: Callable[[], tuple[tuple[Blocked, ...], tuple[object, ...]]] | None = None,
    ) -> None:
        """``later``: instead of ``blocked`` and ``suggestion``, the function that gives both
        when the error is first read."""
        self.args = ()  # (what RuntimeError.__init__ would do; the message is __str__'s)
        self._blocked = blocked
        self._suggestion = suggestion
        self._details = later

    def _read(self) -> None:
        if self._details is not None:
            self._blocked, self._suggestion = self._details()
            self._details = None

    @property
    def blocked(self) -> tuple[Blocked, ...]:
        self._read()
        return self._blocked

    @property
    def suggestion(self) -> tuple[object, ...] | None:
        self._read()
        return self._suggestion

    def __str__(self) -> str:
        blocked = self.blocked
        first = blocked[0]
        more = ""
        if len(blocked) > 1:
            # torch names the first refusal its own walk finds, which may be another mesh
            # dim's: its words for every other mesh dim too, so a match on them still holds
            said = [
                f"mesh dim {b.mesh_dim}{_TORCH}{b.reason.rsplit(_TORCH, 1)[1]}"
                for b in blocked[1:]
                if _TORCH in b.reason
            ]
            more = f" (and {len(blocked) - 1} more mesh dims{': ' if said else ''}"
            more += "; ".join(said) + ")"
        hint = ""
        if self.suggestion is not None:
            hint = f"; redistribute the input to {list(self.suggestion)} first, or use reshape"
        return (
            f"view needs communication: tensor dim {first.tensor_dim} is sharded on mesh dim "
            f"{first.mesh_dim} and {first.reason}{more}{hint}"
        )

    def __repr__(self) -> str:
        return f"RedistributionRequired({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.blocked, self.suggestion)


def reason(fail: Fail, mesh_dim: int, dim: int, sf: Any, size: int, pair: int) -> str:
    """The text of why mesh dim ``mesh_dim`` (size ``size``, ``(dim, sf)``) cannot stay.

    Where torch 2.13 refuses the same view for the same reason, the text ends with torch's
    own words for it, ``(in torch's words: ...)``, so code that matches torch's messages keeps
    working; the rest is the explanation. (Where torch itself does not refuse the view, e.g.
    because its answer is wrong, the words still name the reason as torch would.)"""
    ours = _reason(fail, mesh_dim, dim, sf, size, pair)
    words = None if dim == pair else _torch_words(fail, mesh_dim, dim, sf, size)
    return ours if words is None else f"{ours}{_TORCH}{words})"


_TORCH = " (in torch's words: "  # what precedes torch's words at the end of a reason


def _torch_words(fail: Fail, mesh_dim: int, dim: int, sf: Any, size: int) -> str | None:
    """torch 2.13's phrase for the refusal of ``fail``, or None where torch has none like it.

    torch's view propagator (``_ops/_view_ops.py``) refuses a strict view on global sizes: a
    sharded dim the view removes, or a plain ``Shard`` whose dim is flattened with the dims
    inside it (``Cannot flatten``) or in a group split into pieces whose first is not a
    multiple of the mesh dim's size (``Cannot unflatten``), a ``_StridedShard`` in a split
    group, and otherwise the generic "remove or reshape". The view's group is read from the
    flat index: tensor dim ``dim`` spans ``[lo, hi)`` of it, and the smallest run of dims
    whose ends are ends in both shapes is torch's Flatten/Split group; its output dims other
    than size 1 are the Split's pieces (the first is torch's "output dimension 0")."""
    kind = fail.kind
    remove = (
        f"This operation would remove or reshape sharded dimension {dim}, which requires "
        "redistribution"
    )
    if kind == "nowhere":
        return remove
    group = fail.group
    if group is None or kind not in ("straddle", "uneven", "split"):
        return None
    ins, outs = group.in_sizes, group.out_sizes
    if not all(type(n) is int for n in (*ins, *outs)):
        return None
    ax = dim if group.axis is None else group.axis[dim]
    lo = math.prod(ins[ax + 1 :])
    hi = lo * ins[ax]
    in_ends = [math.prod(ins[i:]) for i in range(len(ins) + 1)]
    out_ends = [math.prod(outs[k:]) for k in range(len(outs) + 1)]
    common = set(in_ends) & set(out_ends)
    start = min(b for b in common if b >= hi)  # the group's ends in the flat index
    end = max(b for b in common if b <= lo)
    pieces = [o for k, o in enumerate(outs) if o != 1 and end < out_ends[k] <= start]
    split = len(pieces) > 1  # torch's Split of the group (of a Flatten, or of this dim)
    if sf != 1:
        if split:
            return (
                f"Cannot unflatten tensor with _StridedShard placement: split_factor={sf} does "
                "not match any output dimension"
            )
        return None
    flattened = lo > end  # some dim inside it is in its group: flattened with it
    if kind != "straddle" and flattened and ins[ax] % size:
        return (
            f"Cannot flatten unevenly sharded tensor: dimension {dim} (size {ins[ax]}) is not "
            f"evenly divisible by mesh dimension {mesh_dim} (size {size})"
        )
    if split and pieces and pieces[0] % size:
        return (
            f"Cannot unflatten unevenly sharded tensor: output dimension 0 (size {pieces[0]}) "
            f"is not evenly divisible by mesh dimension {mesh_dim} (size {size})"
        )
    return remove if kind == "straddle" else None


def _reason(fail: Fail, mesh_dim: int, dim: int, sf: Any, size: int, pair: int) -> str:
    kind = fail.kind
    what = (
        f"its shards of tensor dim {dim}"
        if sf == 1
        else (f"its _StridedShard (split factor {sf}) of tensor dim {dim}")
    )
    if dim == pair:
        return "view_as_complex needs whole (real, imag) pairs on every rank"
    if kind == "nowhere":
        return (
            f"the view keeps no output dim for tensor dim {dim}, and only a mesh dim of size 1 "
            "can shard a dim the view drops"
        )
    if kind == "symbolic":
        return (
            "the view mixes it with symbolic sizes, and its shard sizes cannot be proven to "
            "divide evenly for every value"
        )
    group, state = fail.group, fail.state
    if kind == "split" or group is None or state is None:
        return (
            f"{what} leave ranks with different local sizes (uneven chunks), and no one "
            "output placement gives every rank its own elements"
        )
    ins, outs, _ = state
    ax = dim if group.axis is None else group.axis[dim]
    length = ins[ax]
    inner: Any = 1
    for x in ins[ax + 1 :]:
        inner = inner * x
    if kind == "straddle":
        ch = length // (sf * size)
        run = ch * inner
        return (
            f"the view cuts {what}: each rank's chunk of {_rows(ch)} is a run of {run} "
            f"elements of the flat index, which {_spanned(group, outs, run, size)}, and one "
            "mesh dim can shard only one tensor dim (reshaping it requires redistribution)"
        )
    pc = -(-length // sf)
    ch = -(-pc // size)
    piece = f"{length}" if sf == 1 else f"{pc} (a piece of the split factor {sf})"
    held = f"[0, {ch * inner})"
    o = group.home_axis(dim)
    given = ""
    if o >= 0 and type(outs[o]) is int:
        j = 1
        for x in outs[o + 1 :]:
            j = j * x
        out_dim = group.out_dim(o)
        given = (
            f", where Shard({out_dim}) of the output would give it [0, {-(-outs[o] // size) * j})"
        )
    return (
        f"tensor dim {dim} (local size {piece}) is not evenly divisible by mesh dimension "
        f"{mesh_dim} (size {size}): each rank holds ceil({pc}/{size})={ch} rows of it, the last "
        f"ranks fewer or none, so rank 0 holds {held} of the view's flat index"
        f"{given}; no output placement chunks the view that way"
    )


def _rows(n: Any) -> str:
    return "1 row" if n == 1 else f"{n} rows"


def _spanned(group: Any, outs: Sequence[Any], s: Any, size: int) -> str:
    """Where the runs ``[s*c, s*(c+1))`` of the flat local index fall among the output dims."""
    if type(s) is not int:
        return "no output dim holds whole"
    hit: list[int] = []
    inner = 1
    for k in range(len(outs) - 1, -1, -1):
        lo, hi = inner, inner * outs[k]
        if type(hi) is not int:
            break
        if lo < s * size and hi > s and group.out_dim(k) >= 0:
            hit.append(group.out_dim(k))
        inner = hi
    hit.sort()
    if len(hit) > 1:
        return f"crosses the boundary of output dims {' and '.join(map(str, hit))}"
    if hit:
        return f"is not a whole number of rows of output dim {hit[0]}, or not a chunk of it"
    return "no output dim holds whole"

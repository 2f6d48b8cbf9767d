"""What the engine says when a mesh dim cannot stay as it is.

``Blocked`` records one mesh dim that a view forces to move: which tensor dim it shards, and
why. ``RedistributionRequired`` (a RuntimeError, as DTensor raises for views that need
communication) carries the list and names the first in its message. ``reason`` writes the
text of a :class:`~cute_shard.engine.types.Fail`; only a caller that shows it pays for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..chunks import chunking
from .types import Fail, FailKind, Group, inward


@dataclass(frozen=True, slots=True)
class Blocked:
    """Mesh dim ``mesh_dim`` shards input tensor dim ``tensor_dim`` and cannot stay: ``reason``."""

    mesh_dim: int
    tensor_dim: int
    reason: str

    def __str__(self) -> str:
        return f"mesh dim {self.mesh_dim} (sharding tensor dim {self.tensor_dim}): {self.reason}"


Details = tuple[tuple[Blocked, ...], tuple[object, ...] | None, str | None]


class RedistributionRequired(RuntimeError):
    """A strict view (``view``, ``squeeze``, ``squeeze_``) would need communication.

    ``blocked`` lists every mesh dim that would have to move; ``suggestion`` is the input
    placement list that would make the view valid without further communication;
    ``torch_words`` is the sentence torch's own propagator refuses the same view with on the
    installed release, or None where torch does not refuse it. The message ends with torch's
    sentence, ``(in torch's words: ...)``, so code that matches torch's messages keeps working,
    then the suggestion and ``note``: a sentence the caller adds about where the view was met
    (the integration's, for a view met in the backward).
    All three are worked out when first read (``later``): a caller that only catches the error
    pays for none of them, and the engine stops deciding at the first mesh dim that must move.
    """

    def __init__(
        self,
        blocked: tuple[Blocked, ...] = (),
        suggestion: tuple[object, ...] | None = None,
        torch_words: str | None = None,
        *,
        later: Callable[[], Details] | None = None,
    ) -> None:
        """``later``: instead of the three, the function that gives them when the error is
        first read."""
        self.args = ()  # (what RuntimeError.__init__ would do; the message is __str__'s)
        self._details: Details = (blocked, suggestion, torch_words)
        self._later = later
        self.note: str | None = None  # a sentence the caller adds: where the view was met

    def _read(self) -> Details:
        if self._later is not None:
            self._details = self._later()
            self._later = None
        return self._details

    @property
    def blocked(self) -> tuple[Blocked, ...]:
        return self._read()[0]

    @property
    def suggestion(self) -> tuple[object, ...] | None:
        return self._read()[1]

    @property
    def torch_words(self) -> str | None:
        return self._read()[2]

    def __str__(self) -> str:
        blocked, suggestion, words = self._read()
        first = blocked[0]
        more = f" (and {len(blocked) - 1} more mesh dims)" if len(blocked) > 1 else ""
        said = "" if words is None else f" (in torch's words: {words})"
        hint = ""
        if suggestion is not None:
            hint = f"; redistribute the input to {list(suggestion)} first, or use reshape"
        note = "" if self.note is None else f". {self.note}"
        return (
            f"view needs communication: tensor dim {first.tensor_dim} is sharded on mesh dim "
            f"{first.mesh_dim} and {first.reason}{more}{said}{hint}{note}"
        )

    def __repr__(self) -> str:
        return f"RedistributionRequired({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), self._read(), {"note": self.note}


def reason(fail: Fail, mesh_dim: int, dim: int, sf: Any, size: int, pair: int) -> str:
    """The text of why mesh dim ``mesh_dim`` (size ``size``, ``(dim, sf)``) cannot stay."""
    kind = fail.kind
    what = (
        f"its shards of tensor dim {dim}"
        if sf == 1
        else (f"its _StridedShard (split factor {sf}) of tensor dim {dim}")
    )
    if dim == pair:
        return "view_as_complex needs whole (real, imag) pairs on every rank"
    if kind is FailKind.NOWHERE:
        return (
            f"the view keeps no output dim for tensor dim {dim}, and only a mesh dim of size 1 "
            "can shard a dim the view drops"
        )
    if kind is FailKind.SYMBOLIC:
        return (
            "the view mixes it with symbolic sizes, and its shard sizes cannot be proven to "
            "divide evenly for every value"
        )
    group, state = fail.group, fail.state
    if kind is FailKind.SPLIT or group is None or state is None:
        return (
            f"{what} leave ranks with different local sizes (uneven chunks), and no one "
            "output placement gives every rank its own elements"
        )
    ins, outs = state.ins, state.outs
    ax = group.in_axis(dim)
    length = ins[ax]
    inner: Any = 1
    for x in ins[ax + 1 :]:
        inner = inner * x
    if kind is FailKind.STRADDLE:
        ch = length // (sf * size)
        run = ch * inner
        return (
            f"the view cuts {what}: each rank's chunk of {_rows(ch)} is a run of {run} "
            f"elements of the flat index, which {_spanned(group, outs, run, size)}, and one "
            "mesh dim can shard only one tensor dim (reshaping it requires redistribution)"
        )
    pc = chunking(length, sf).size  # (length >= 1 here: an empty dim is never uneven)
    ch = chunking(pc, size).size
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
            f", where Shard({out_dim}) of the output would give it "
            f"[0, {chunking(outs[o], size).size * j})"
        )
    return (
        f"tensor dim {dim} (local size {piece}) is not evenly divisible by mesh dimension "
        f"{mesh_dim} (size {size}): each rank holds ceil({pc}/{size})={ch} rows of it, the last "
        f"ranks fewer or none, so rank 0 holds {held} of the view's flat index"
        f"{given}; no output placement chunks the view that way"
    )


def _rows(n: Any) -> str:
    return "1 row" if n == 1 else f"{n} rows"


def _spanned(group: Group, outs: Sequence[Any], s: Any, size: int) -> str:
    """Where the runs ``[s*c, s*(c+1))`` of the flat local index fall among the output dims."""
    if type(s) is not int:
        return "no output dim holds whole"
    hit: list[int] = []
    for k, length, lo in inward(outs):
        hi = lo * length
        if type(hi) is not int:
            break
        if lo < s * size and hi > s and group.out_dim(k) >= 0:
            hit.append(group.out_dim(k))
    hit.sort()
    if len(hit) > 1:
        return f"crosses the boundary of output dims {' and '.join(map(str, hit))}"
    if hit:
        return f"is not a whole number of rows of output dim {hit[0]}, or not a chunk of it"
    return "no output dim holds whole"

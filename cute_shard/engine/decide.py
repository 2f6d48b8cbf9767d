"""The router: each mesh dim's gpu sub-mode, in the local coordinates the mesh dims before it
leave, placed on an output dim of the view.

DTensor applies placements left to right over mesh dims, each on the local tensor the ones
before it left. So mesh dim ``i`` sees, on every rank, a local tensor of some shape, and its
placement on input dim ``d`` splits that local tensor's row-major (flat) index ``x`` by a
*label* ``c(x)``: the coordinate on mesh dim ``i`` of the rank that keeps element ``x``.

For an even ``Shard``/``_StridedShard(sf)`` on mesh dim size ``M``, with ``l`` the local
length of ``d``, ``I`` the product of the local lengths inside it and ``ch = l / (sf*M)``::

    x = a + s*(c + M*b)    with    s = ch*I,   a < s

which is ``logical_divide`` of the flat local index by the tile ``s:1``: the gpu sub-mode is
``M:s``, local before and after it. ``Shard`` and ``_StridedShard`` are the same thing here
(the split factor only adds outer local modes ``b``). The view keeps the flat index, so the
sub-mode must be a sub-mode of the *output's* local layout: an output dim ``o`` whose local
mode ``L:J`` (``J`` = the product of the output's local lengths inside ``o``) contains it,
``J | s`` and ``s*M | J*L``. Its placement reads back as ``_StridedShard(o, J*L/(s*M))``
(``Shard`` when that is 1). That is the composition of the gpu sub-mode with the output's
local layout; where no output dim contains the sub-mode, it straddles a boundary of the view
and the mesh dim must move.

**Uneven sizes** use the same step. ``torch.chunk`` gives the last chunk of a dim (or of each
split-factor piece) fewer rows, so ranks differ in their local shapes: the ranks are grouped
into *states* (the local lengths of the input and output dims, shared by every rank in the
state), a handful in practice. In each state the label is still a function of ``x`` that
depends only on the local lengths: over one period ``l*I`` it is a word of runs ``0..`` per
piece. Two labellings are equal exactly when their *primitive roots* are equal (a word that
equals another's power is determined by its primitive root), and the root is a tuple of a few
ints (:func:`root`). A candidate output dim is where the root's first run ends (its sub-mode's
stride ``s``), and the split factors that chunk that output dim into the same word form an
interval (:func:`_locate`); intersected over the states, its smallest value is the
answer. An even root is the word of ``m`` runs of ``s``, and for it this is exactly the even
step above (one search serves both). A state whose ranks hold
nothing needs nothing; one whose label is constant (rank 0 keeps it all, as for a sharded
size-1 dim) needs an output dim whose chunks give rank 0 everything.

Why this is exact: by induction over mesh dims, every rank holds the same set of flat indices
on both sides, in increasing order on both (a local tensor keeps global order). Mesh dim
``i``'s input placement and its output placement then keep the same subset exactly when the
two labellings agree, and a local ``view`` of the final local input to the final local output
shape is the rank's output shard.

Worked example, even: ``(8, 16, 32) -> (128, 32)`` on mesh ``(2, 4)`` with
``[Shard(0), Shard(1)]``. Mesh dim 0: ``l = 8, I = 16*32, ch = 4``: ``s = 2048``; output dim 0
is ``128:32`` (spans ``[32, 4096)``), ``J = 32 | 2048`` and ``4096 | 4096``: ``Shard(0)``. The
local shapes become ``(4, 16, 32)`` and ``(64, 32)``. Mesh dim 1: ``l = 16, I = 32, ch = 4``:
``s = 128``; output dim 0 is ``64:32``: ``32 | 128`` and ``512 | 2048``:
``_StridedShard(0, 2048/512 = 4)``.

Uneven: ``(4, 15, 128) -> (60, 128)`` on mesh ``(4,)`` with ``[Shard(1)]``. ``l = 15``: chunks
of 4 (the last 3), so the word over one row of dim 1 is ``0000 1111 2222 333`` (each letter
128 elements); the root is that word, runs of 512 with a last run of 384. Output dim 0 has
``J = 128``: runs of 4 rows, a piece of 15 rows: ``torch.chunk`` pieces of 15 are made by the
split factors with ``ceil(60/sf) == 15``, only 4: ``_StridedShard(0, 4)``.
"""

from __future__ import annotations

from typing import Any

from ..chunks import chunk_lens, chunk_size, chunking
from .types import (
    Cut,
    Fail,
    FailKind,
    Group,
    Placed,
    Size,
    State,
    SymbolicStep,
)

__all__ = ["CONST", "place", "root", "split_states"]


class _Const:
    def __repr__(self) -> str:
        return "CONST"


#: The root of a labelling that gives every element to coordinate 0 (each piece has one row).
CONST = _Const()


def _piece(n: int, m: int, inner: Size) -> tuple[Size, int, Size]:
    """The labelling of one piece of ``n`` rows chunked over ``m`` (``torch.chunk``'s
    :func:`~cute_shard.chunks.chunking`): runs of ``ch`` rows labelled 0, 1, ... (``n // ch``
    of them) and a last run of ``n % ch`` rows, each row ``inner`` elements:
    ``(ch*inner, n // ch, (n % ch)*inner)``."""
    c = chunking(n, m)
    return c.size * inner, c.full, c.last * inner


def root(length: Size, sf: int, m: int, inner: Size) -> Any:
    """The primitive root of the labelling of a flat index by ``_StridedShard(sf)`` (or
    ``Shard``) of an axis of ``length`` rows of ``inner`` elements over ``m`` ranks (m >= 2,
    length >= 1): :data:`CONST`, or ``(A, full, B)``: the word ``A`` of one piece (a
    :func:`_piece` triple) repeated, or ``full`` pieces then a shorter ``B`` (None if none)."""
    q = sf * m
    if not length % q:  # even: runs of ch rows labelled 0..m-1
        return (length // q * inner, m, 0), 0, None
    if type(length) is not int:
        raise SymbolicStep
    pc = chunk_size(length, sf)
    if pc == 1:
        return CONST
    full, rem = divmod(length, pc)
    if not rem:  # whole pieces: the word of one piece, repeated
        return _piece(pc, m, inner), 0, None
    return _piece(pc, m, inner), full, _piece(rem, m, inner)


def _locate(r: Any, m: int, out_dims: tuple[int, ...] | None, outs: list[Size]) -> Placed | None:
    """The output axis whose labelling by every split factor in ``[lo, hi]`` (``hi`` None: no
    bound) is the word of root ``r``, or None. The axis is where the root's first run, ``a0``
    elements, is a whole number of the axis's rows: the only one that can hold it (an axis
    further in has rows too short for the pieces, one further out rows longer than the run).
    Pieces of ``pc`` rows are all ``torch.chunk`` looks at, so the split factors with
    ``ceil(length / sf) == pc`` all chunk alike.

    A piece of ``pc = runs*c + t`` rows (``t < c``) chunks over ``m`` into the word ``runs``
    runs of ``c`` rows then ``t`` exactly when its chunk, ``ceil(pc / m)``, is ``c``. An even
    root (``runs == m``, ``t == 0``: the gpu sub-mode ``m:a0``) always does: the axis is the
    one whose local mode ``L:J`` holds the sub-mode (``J | a0`` and ``a0*m | J*L``), split
    factor ``J*L / (a0*m)``. Only an even root may hold symbolic sizes (``symbolic.Sym``)."""
    a, full, b = r
    a0, runs, last = a
    even = runs == m and not last
    if not even and type(a0) is not int:
        return None  # uneven chunks of symbolic rows: no answer for every value
    inner: Size = 1  # the product of the output axes inside axis k
    for k in range(len(outs) - 1, -1, -1):
        if a0 % inner:
            return None  # inner only grows by factors: no axis further out divides a0 either
        length = outs[k]
        if (out_dims is None or out_dims[k] >= 0) and (not last or not last % inner):
            c = a0 // inner
            pc = runs * c if not last else runs * c + last // inner
            if even or -(-pc // m) == c:
                if b is None:
                    if not length % pc:
                        if type(length) is not int or type(pc) is not int:
                            return Placed(k, length // pc, None)  # symbolic: one state
                        return Placed(k, length // pc, (length - 1) // (pc - 1))
                elif type(length) is int and not b[0] % inner and not b[2] % inner:
                    c = b[0] // inner
                    rem = b[1] * c + b[2] // inner
                    if -(-rem // m) == c and length == full * pc + rem:
                        lo, hi = -(-length // pc), (length - 1) // (pc - 1)
                        # (no split factor may chunk the axis into pieces of pc rows)
                        return Placed(k, lo, hi) if lo <= hi else None
        inner = inner * length
    return None


def place(group: Group, states: list[State], d: int, sf: Any, m: int) -> Placed | Fail:
    """Where tensor dim ``d``'s placement ``sf`` on a mesh dim of size ``m`` goes: a
    :class:`Placed` whose split factors work in every state, or a :class:`Fail`.

    In each state the placement is a :class:`Placed`, :data:`CONST` (rank 0 holds all of it),
    None (the state's ranks hold nothing) or a :class:`Fail`: the output axis that holds its
    labelling's root (:func:`_locate`; even: the gpu sub-mode ``m:s`` of the flat index,
    ``s = ch*inner``)."""
    ax = group.in_axis(d)
    out_dims = group.out_dims
    hits: list[Any] = []
    try:
        for state in states:
            if state.empty:
                hits.append(None)
                continue
            ins = state.ins
            length = ins[ax]
            inner: Size = 1
            for x in ins[ax + 1 :]:
                inner = inner * x
            r = root(length, sf, m, inner)
            if r is CONST:
                hits.append(CONST)
                continue
            hit: Any = _locate(r, m, out_dims, state.outs)
            if hit is None:
                kind = FailKind.UNEVEN if length % (sf * m) else FailKind.STRADDLE
                hit = Fail(kind, group, state)
            hits.append(hit)
        if len(hits) == 1:
            hit = hits[0]
            if type(hit) is Placed or type(hit) is Fail:
                return hit
        found = -1
        lo: Size = 1
        hi: Size | None = None
        for i, hit in enumerate(hits):
            if type(hit) is Fail:
                return hit
            if type(hit) is not Placed:
                continue
            if found == -1:
                found, lo, hi = hit.axis, hit.lo, hit.hi
                continue
            if hit.axis != found:
                return Fail(FailKind.SPLIT, group, states[i])
            lo = hit.lo if hit.lo > lo else lo
            b = hit.hi
            hi = b if hi is None else hi if b is None or b > hi else b
            if hi is not None and lo > hi:
                return Fail(FailKind.SPLIT, group, states[i])
        if found == -1:  # no rank holds anything, or rank 0 holds it all: any output dim
            found = _const_axis(group, d, states, hits)
            if found < 0:
                return Fail(FailKind.NOWHERE, group, states[0])
        for i, hit in enumerate(hits):
            if hit is CONST:  # every row its own piece: rank 0 keeps all of them
                length = states[i].outs[found]
                if type(length) is not int:
                    raise SymbolicStep
                lo = length if length > lo else lo
        if hi is not None and lo > hi:
            return Fail(FailKind.SPLIT, group, states[0])
    except SymbolicStep:
        return Fail(FailKind.SYMBOLIC, group, states[0])
    return Placed(found, lo, hi)


def _const_axis(group: Group, d: int, states: list[State], hits: list[Any]) -> int:
    """The output axis for a placement that gives rank 0 everything (or nothing to anyone):
    one where it reads back as a plain ``Shard`` (a length of at most 1 wherever rank 0 holds
    it all), the home axis first; else the home axis (as a ``_StridedShard`` whose pieces are
    single rows)."""
    home = group.home_axis(d)
    held = [states[i].outs for i, hit in enumerate(hits) if hit is CONST]
    if not held:
        return home
    out_dims = group.out_dims
    k: int
    for k in (home, *range(len(group.out_sizes))):
        if k < 0 or (out_dims is not None and out_dims[k] < 0):
            continue
        for outs in held:
            if type(outs[k]) is not int or outs[k] > 1:
                break
        else:
            return k
    return home


def split_states(states: list[State], cut: Cut) -> list[State]:
    """The states after a kept mesh dim's ``cut``: each state's ranks, by their coordinate on
    it. An even step divides a state's lengths in place; an uneven one makes a state per
    distinct share (raising :class:`SymbolicStep` where that share is symbolic)."""
    ax, sf, k = cut.in_axis, cut.split_factor, cut.out_axis
    sf_out, m = cut.out_split_factor, cut.mesh_size
    if len(states) == 1:  # the common case: one state, an even step divides it in place
        ins, outs = states[0].ins, states[0].outs
        if not ins[ax] % (sf * m) and not outs[k] % (sf_out * m):
            ins[ax] = ins[ax] // m
            outs[k] = outs[k] // m
            return states
    out: list[State] = []
    for state in states:
        ins, outs, empty = state.ins, state.outs, state.empty
        length, length_out = ins[ax], outs[k]
        if not length % (sf * m) and not length_out % (sf_out * m):  # even: one state
            ins[ax] = length // m
            outs[k] = length_out // m
            out.append(state)
            continue
        if type(length) is not int or type(length_out) is not int:
            raise SymbolicStep  # ranks of a symbolic size with unequal shares
        for a, b in dict.fromkeys(
            zip(chunk_lens(length, sf, m), chunk_lens(length_out, sf_out, m), strict=True)
        ):
            new_in = ins.copy()
            new_out = outs.copy()
            new_in[ax] = a
            new_out[k] = b
            out.append(State(new_in, new_out, empty or a == 0))
    if len(out) > len(states) > 1:  # states of distinct pasts may now be alike
        try:
            unique: dict[tuple[Any, ...], State] = {}
            for st in out:
                unique.setdefault((tuple(st.ins), tuple(st.outs), st.empty), st)
            out = list(unique.values())
        except TypeError:  # symbolic sizes are not hashable: keep them all
            pass
    return out

"""The hot path for uneven shards: the uneven fallback's answer, read off the sizes.

When a shard does not divide its dim, a layout cannot express the input and the general
engine runs the uneven fallback (``uneven.propagate_uneven``): mesh dims in order, each kept
with the first output placement proven valid on every rank, or replicated. That proof is
exact and general, and costs 70-400 µs. For the groups models meet, the decision is a
comparison of two chunk sizes, and this module makes it, mesh dim by mesh dim in the same
order, with plain ints:

- an ``InputDim`` output moves its dim whole: every placement on it stays as it is;
- a ``Shard`` of dim d in a ``Flatten`` (the dims before d have one local size on every
  rank, so the split factor is one number): :func:`flatten_keeps` on the local sizes every
  rank may have;
- a chain of ``Shard``\\ s of one dim split into pieces: :func:`split_keeps` on the local
  sizes of the piece the chain has reached (the first; the next once every rank holds one
  row of it);
- ``Shard``\\ s in a split of a flatten: either of the above, on the piece where the sharded
  dim starts (:func:`_piece_of`). Other kept dims of the group whose sharded digits lie
  in that piece are read as in a flatten (:func:`_piece_flatten`; in a split-like piece,
  only before the dim). Where kept mesh dims already shard the dim or one before it and
  some rank holds fewer rows than the mesh dim has ranks, several split factors give every
  rank the same elements and the fallback's order picks one: it decides.

A kept mesh dim gets the placement the group's structure predicts, which is the first
candidate the fallback proves; a mesh dim that cannot keep its shard on the rank at
coordinate 0 of every mesh dim (whose input is never empty) has no valid placement at all,
so it is replicated. Anything else returns None for the general engine: a ``_StridedShard``
outside an ``InputDim``, a kept dim's digits across a piece's bounds, a rule that may be
``view_as_complex``'s with its pairs dim sharded (or view_as_complex itself), a decision
that depends on ranks with other local sizes, a malformed rule, and every view a layout can
express (those go through the layout search, whose choices differ).

The groups are read off a ``GroupedRule``'s table when the rule is one for this shape, else
off the rule (:func:`_rule_groups`, which also checks it).

``tests/test_fast_uneven.py`` and the fast-path property tests check it against the fallback.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

from ..rules import (
    Broadcast,
    DimSpec,
    Flatten,
    Group,
    InputDim,
    NewDim,
    Singleton,
    Split,
)
from .fast import (
    complex_pair_dim,
    flatten_keeps,
    placement,
    split_keeps,
    static_sizes,
    table_for,
)

__all__ = ["uneven_answer"]

_REPLICATE = Replicate()
# Kinds of group an input dim belongs to.
_INPUT, _FLAT, _SPLIT, _OTHER = 0, 1, 2, 3
# A set of local sizes larger than this is left to the fallback.
_MAX_SIZES = 64


def _piece_of(
    shape: tuple[int, ...], src: tuple[int, ...], d: int, pieces: tuple[int, ...]
) -> tuple[int, int, bool, int, tuple[int, int], int, int] | None:
    """Where dim d of the flatten of ``src`` lands when it is split into ``pieces``:
    ``(piece j, split factor, flatten-like, rows, window, lo, hi)``, or None if not decided
    here. The digits are place values of the flat index: the piece holds ``[lo, hi)``, and
    a kept shard of d splits ``window`` (all of d, or its first rows when split-like, as
    every rank then holds whole rows).

    The flat index is ``(A, s, inner)`` (the dims before d, d, the dims after), and the
    pieces cut it too. The piece j where d starts (pieces before it of size Pb, with
    ``A = Pb * a``) is ``(a, w)``. If it holds all of d and ``rows = inner / Ps`` more (Ps:
    the pieces after it) it is *flatten-like*: its rows are read as in a flatten. If it holds
    the first ``w`` rows of d (d = ``(w, rows)``, the pieces after it ``rows * inner``) it is
    split-like: read as in a split. Either way a shard of d that stays is
    ``_StridedShard(j, a)``. Any other cut of d's rows is left to the fallback."""
    s = shape[d]
    if s < 2:
        return None
    outer = 1
    inner = 1
    before = True
    for e in src:
        if e == d:
            before = False
        elif before:
            outer *= shape[e]
        else:
            inner *= shape[e]
    size = outer * s * inner
    pb = 1
    j = 0
    while pb * pieces[j] <= outer:  # j: the piece where d starts
        pb *= pieces[j]
        j += 1
        if j == len(pieces):
            return None
    p = pieces[j]
    if outer % pb or p % (outer // pb):
        return None
    a = outer // pb
    w = p // a
    ps = size // (pb * p)
    if w % s == 0 and inner % ps == 0 and w == s * (inner // ps):
        return j, a, True, inner // ps, (inner, inner * s), ps, ps * p
    if w >= 2 and s % w == 0 and ps == (s // w) * inner:
        return j, a, False, s // w, (ps, inner * s), ps, ps * p
    return None


def _piece_flatten(
    kept: dict[int, tuple[int, int, bool]],
    sizes: dict[int, set[int]],
    first: dict[int, set[int]],
    d: int,
    window: tuple[int, int],
    lo: int,
    hi: int,
) -> tuple[int, set[int], int] | None:
    """A flatten-like piece ``[lo, hi)`` (place values) holding all of dim d (``window``),
    read as a flatten of (the rows before d, d, the rows after d) with the other kept dims
    of the group (``kept``: their sharded digits, and whether their local sizes are in
    ``sizes`` or, split-like, in ``first``): the split factor (the local size of the rows
    before d, one number), the local sizes the rows after d may have, and the one on the
    rank at coordinate 0; None if a kept dim's digits cross the piece's bounds or d's, or the
    rows before d have several local sizes."""
    d_lo, d_hi = window
    outer = hi // d_hi
    rest = d_lo // lo  # the rows after d no kept dim shards
    inner = {1}
    at_zero = 1
    for e, (e_lo, e_hi, e_flat) in kept.items():
        if e == d or e_hi <= lo or e_lo >= hi:
            continue  # (d's own chain, or another piece)
        if e_lo < lo or e_hi > hi:
            return None
        local = sizes[e] if e_flat else first[e]
        size = e_hi // e_lo
        if e_lo >= d_hi:  # before d: the split factor counts its local size
            if len(local) != 1 or outer % size:
                return None
            outer = outer // size * min(local)
        else:
            if rest % size:
                return None
            rest //= size
            inner = {a * b for a in inner for b in local}
            if len(inner) > _MAX_SIZES:
                return None
            at_zero *= max(local)
    return outer, {v * rest for v in inner}, at_zero * rest


def _ahead(kept: dict[int, tuple[int, int, bool]], src: tuple[int, ...], d: int) -> bool:
    """Whether kept mesh dims shard d itself or a dim before it in the group."""
    for e in src:
        if e in kept:
            return True
        if e == d:
            return False
    return False


def _flatten_all(lengths: set[int], inner: set[int], n: int) -> bool:
    """:func:`flatten_keeps` for every local size of the dim and of the dims after it."""
    for s in lengths:
        c = -(-s // n)
        for v in inner:
            if -(-s * v // n) != c * v:
                return False
    return True


def _split_all(lengths: set[int], rest: int, n: int) -> bool:
    """:func:`split_keeps` for every nonzero local size of the first piece."""
    for f in lengths:
        if f and -(-f // n) * rest != -(-f * rest // n):
            return False
    return True


def _chunks(sizes: set[int], n: int) -> set[int]:
    """Every local size ``torch.chunk`` into n gives a dim of one of ``sizes``: rank r gets
    ``min(max(s - r*c, 0), c)`` with ``c = ceil(s/n)``, i.e. ``s // c`` full chunks, then
    the remainder if any, then empty ones if ranks are left."""
    out = set()
    for s in sizes:
        if s == 0:
            out.add(0)
            continue
        c = -(-s // n)
        full, rest = divmod(s, c)
        out.add(c)
        if rest:
            out.add(rest)
            full += 1
        if full < n:
            out.add(0)
    return out


def _uneven_dims(
    placements: Sequence[Placement], shape: tuple[int, ...], mesh: tuple[int, ...]
) -> list[int] | None:
    """The tensor dim of each mesh dim (-1 if it shards none), or None if this path does not
    answer: sizes not static, a size-1 mesh dim, or no uneven step. Only where a layout
    cannot express the input: some step of DTensor's split (mesh dims in order) does not
    divide the dim's local length."""
    if not static_sizes(placements, shape, mesh) or 1 in mesh:
        return None
    ndim = len(shape)
    dims: list[int] = []
    local = list(shape)
    uneven = False
    for m, p in enumerate(placements):
        cls = type(p)
        if cls is Shard or cls is _StridedShard:
            d = p.dim  # type: ignore[attr-defined]
            if d < 0:
                d += ndim
            if not 0 <= d < ndim:
                return None
            sf = 1 if cls is Shard else p.split_factor  # type: ignore[attr-defined]
            if type(sf) is not int or sf < 1:
                return None
            if local[d] % (sf * mesh[m]):
                uneven = True
            else:
                local[d] //= mesh[m]
            dims.append(d)
        elif cls is Replicate or cls is Partial or isinstance(p, Partial):
            dims.append(-1)
        else:
            return None
    return dims if uneven else None


def _parsed_dims(
    shape: tuple[int, ...], mesh: tuple[int, ...], parsed: dict[int, list[tuple[int, int]]]
) -> list[int] | None:
    """:func:`_uneven_dims` from ``{tensor dim: [(mesh dim, split factor), ...]}``."""
    if 1 in mesh:
        return None
    uneven = False
    dims = [-1] * len(mesh)
    for d, steps in parsed.items():
        local = shape[d]
        for m, sf in steps:
            dims[m] = d
            if local % (sf * mesh[m]):
                uneven = True
            else:
                local //= mesh[m]
    return dims if uneven else None


# A split of a group: (its input dims, the pieces, the output dim of each piece).
_SplitGroup = tuple[tuple[int, ...], tuple[int, ...], Sequence[int]]
# Per input dim its kind and where (_INPUT/_FLAT: the output dim; _SPLIT: index into the
# splits), the input dims of each Flatten output dim, and the splits.
Groups = tuple[list[int], list[int], dict[int, tuple[int, ...]], list[_SplitGroup]]


def _rule_groups(rule: tuple[DimSpec, ...], shape: tuple[int, ...]) -> Groups | None:
    """The rule's :data:`Groups`, or None if this path does not answer (a malformed rule, one
    that does not match the shape, a DimSpec it does not know)."""
    ndim = len(shape)
    kind = [-1] * ndim
    where = [0] * ndim  # _INPUT/_FLAT: the output dim; _SPLIT: index into `splits`
    flats: dict[int, tuple[int, ...]] = {}  # output dim of a Flatten: its input dims
    splits: list[_SplitGroup] = []
    for o, spec in enumerate(rule):
        cls = type(spec)
        if cls is InputDim:
            src: tuple[int, ...] = (spec.input_dim,)  # type: ignore[attr-defined]
            k = _INPUT
        elif cls is Flatten:
            src = spec.dims  # type: ignore[attr-defined]
            flats[o] = src
            k = _FLAT
        elif cls is Split:
            source = spec.input_dim  # type: ignore[attr-defined]
            pieces = spec.group_shape  # type: ignore[attr-defined]
            if type(source) is InputDim:
                src = (source.input_dim,)
            elif type(source) is Flatten:
                src = source.dims
            else:
                return None
            d = src[0]
            if not 0 <= d < ndim:
                return None
            if kind[d] == -1:
                for e in src:
                    if not 0 <= e < ndim or kind[e] != -1:
                        return None
                    kind[e] = _SPLIT
                    where[e] = len(splits)
                splits.append((src, pieces, [-1] * len(pieces)))
            elif kind[d] != _SPLIT or splits[where[d]][:2] != (src, pieces):
                return None
            targets = splits[where[d]][2]  # type: ignore[assignment]
            i = spec.split_id  # type: ignore[attr-defined]
            if not 0 <= i < len(targets) or targets[i] != -1:
                return None
            targets[i] = o
            continue
        elif cls is Singleton or cls is NewDim:
            continue
        elif cls is Broadcast and type(spec.dim) is Singleton:  # type: ignore[attr-defined]
            continue
        elif cls is Broadcast and type(spec.dim) is InputDim:  # type: ignore[attr-defined]
            src = (spec.dim.input_dim,)  # type: ignore[attr-defined]
            k = _OTHER
        else:
            return None
        for d in src:
            if not 0 <= d < ndim or kind[d] != -1:
                return None
            kind[d] = k
            where[d] = o
    for d in range(ndim):
        if kind[d] == -1 and shape[d] != 1:
            return None
    for src, pieces, targets in splits:
        total = 1
        for q in pieces:
            if type(q) is not int:
                return None
            total *= q
        for d in src:
            total //= shape[d]
        if total != 1 or -1 in targets:
            return None
    return kind, where, flats, splits


def _table_groups(
    table: tuple[tuple[int, ...], tuple[int, ...], tuple[Group, ...]],
) -> Groups:
    """:data:`Groups` read off a ``GroupedRule``'s table (valid for its shape)."""
    _, at, groups = table
    kind = [-1] * len(at)
    where = [0] * len(at)
    flats: dict[int, tuple[int, ...]] = {}
    splits: list[_SplitGroup] = []
    for d, w in enumerate(at):
        if w >= 0:
            kind[d] = _INPUT
            where[d] = w
    for src, pieces, targets in groups:
        if pieces is None:
            flats[targets[0]] = src
            for d in src:
                kind[d] = _FLAT
                where[d] = targets[0]
        else:
            for d in src:
                kind[d] = _SPLIT
                where[d] = len(splits)
            splits.append((src, pieces, targets))
    return kind, where, flats, splits


def uneven_answer(
    placements: Sequence[Placement],
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
    strict: bool = False,
    parsed: dict[int, list[tuple[int, int]]] | None = None,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]] | None:
    """``(input target, output)`` as the uneven fallback gives them, or None (see the module
    docstring). With ``strict`` only an answer that moves nothing is given. ``parsed``: the
    placements as ``fast_propagate`` parsed them, if it did (the sizes are then static)."""
    if parsed is not None:
        dims = _parsed_dims(shape, mesh, parsed)
    else:
        dims = _uneven_dims(placements, shape, mesh)
    if dims is None:
        return None
    ndim = len(shape)
    # A rule view_as_complex may have is read as the real view's. For view_as_complex
    # itself that is another answer; when the op is unknown the answer must hold for both,
    # which the real view's does while the (real, imag) pairs dim is not sharded.
    if (complex_view or (complex_view is None and (ndim - 1) in dims)) and complex_pair_dim(
        rule, shape
    ) is not None:
        return None
    # The groups: kind, output dim(s) and sources of every input dim.
    table = table_for(rule, shape)
    if table is not None:
        groups = _table_groups(table)
    else:
        groups = _rule_groups(rule, shape)
        if groups is None:
            return None
    kind, where, flats, splits = groups
    # Mesh dims in order: keep or replicate.
    sizes: dict[int, set[int]] = {}  # local sizes of the dims kept mesh dims shard
    first: dict[int, set[int]] = {}  # split groups: local sizes of the piece a chain is at
    at: dict[int, int] = {}  # splits of one dim: the piece its chain is at, if not the first
    # Splits of a flatten: the dims kept mesh dims shard, with the digits they shard.
    busy: dict[int, dict[int, tuple[int, int, bool]]] = {}
    target = list(placements)
    out = list(placements)
    moved = False
    for m, p in enumerate(placements):
        d = dims[m]
        if d < 0:  # Replicate, Partial: carried as they are
            continue
        n = mesh[m]
        k = kind[d]
        if k == _INPUT:  # moved whole: the placement stays
            sf = 1 if type(p) is Shard else p.split_factor  # type: ignore[attr-defined]
            out[m] = placement(where[d], sf)
            continue
        if type(p) is not Shard:
            return None
        if k == _FLAT:
            o = where[d]
            src = flats[o]
            outer = 1
            inner = {1}  # the local sizes of the dims after d, over the ranks
            at_zero = 1  # the one on the rank at coordinate 0 of every mesh dim
            before = True
            for e in src:
                if e == d:
                    before = False
                elif before:
                    if e in sizes:
                        if len(sizes[e]) != 1:  # (the split factor would differ between ranks)
                            return None
                        outer *= min(sizes[e])
                    else:
                        outer *= shape[e]
                elif e in sizes:
                    inner = {a * b for a in inner for b in sizes[e]}
                    if len(inner) > _MAX_SIZES:
                        return None
                    at_zero *= max(sizes[e])
                else:
                    inner = {a * shape[e] for a in inner}
                    at_zero *= shape[e]
            lengths = sizes.get(d, {shape[d]})  # d's local sizes (a chain of Shards of d)
            top = max(lengths)
            if top < 2:
                return None
            if _flatten_all(lengths, inner, n):
                out[m] = placement(o, outer)
                sizes[d] = _chunks(lengths, n)
                continue
            if flatten_keeps(top, at_zero, n):
                return None  # only ranks with other local sizes fail: the fallback decides
        elif k == _SPLIT and len(splits[where[d]][0]) > 1:  # a split of a flatten
            src, pieces, targets = splits[where[d]]
            found = _piece_of(shape, src, d, pieces)
            if found is None:
                return None
            j, sf, flat, rows, window, lo, hi = found
            kept = busy.setdefault(where[d], {})
            # A chain of Shards of d: each kept one reads d's local sizes so far, as in a
            # flatten (flatten-like piece) or a split (split-like: its first rows).
            if flat:
                # The piece as a flatten: (sf rows, d, rows), where other kept dims of the
                # group may lie inside the rows before d or after it (not across the piece).
                read = _piece_flatten(kept, sizes, first, d, window, lo, hi)
                if read is None:
                    return None
                sf, inner, at_zero = read
                lengths = sizes.get(d, {shape[d]})
                top = max(lengths)
                if top < 2 or (min(lengths) < n and _ahead(kept, src, d)):
                    return None
                if _flatten_all(lengths, inner, n):
                    out[m] = placement(targets[j], sf)
                    sizes[d] = _chunks(lengths, n)
                    kept[d] = (*window, True)
                    continue
                if flatten_keeps(top, at_zero, n):
                    return None  # only ranks with other local sizes fail: the fallback decides
            else:
                # The piece (sf rows, d's first rows): other kept dims may lie in the rows
                # before d, whose local size is then the split factor.
                read = _piece_flatten(kept, sizes, first, d, window, lo, hi)
                if read is None:
                    return None
                sf = read[0]
                lengths = first.get(d, {shape[d] // rows})
                top = max(lengths)
                if top < 2 or (min(lengths) < n and _ahead(kept, src, d)):
                    return None
                if _split_all(lengths, rows, n):
                    out[m] = placement(targets[j], sf)
                    lengths = _chunks(lengths, n)
                    if len(lengths) > _MAX_SIZES:
                        return None
                    first[d] = lengths
                    kept[d] = (*window, False)
                    continue
                if split_keeps(top, rows, n):
                    return None
        elif k == _SPLIT:
            _, pieces, targets = splits[where[d]]
            i = at.get(d, 0)  # the piece the chain of Shards of d has reached
            lengths = first.get(d, {pieces[0]})
            if lengths == {1} and i + 1 < len(pieces):  # each rank holds one row of it
                i += 1
                lengths = {pieces[i]}
            rest = shape[d]
            for q in pieces[: i + 1]:
                rest //= q
            top = max(lengths)
            if top < 2 or shape[d] < 2:
                return None
            if _split_all(lengths, rest, n):
                out[m] = placement(targets[i], 1)
                lengths = _chunks(lengths, n)
                if len(lengths) > _MAX_SIZES:
                    return None
                first[d] = lengths
                at[d] = i
                continue
            if split_keeps(top, rest, n):
                return None
        else:  # a broadcast or dropped size-1 dim
            return None
        # No placement keeps it: replicated.
        if strict:
            return None
        moved = True
        target[m] = _REPLICATE
        out[m] = _REPLICATE
    return (tuple(target) if moved else tuple(placements)), tuple(out)

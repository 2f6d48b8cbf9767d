"""The hot path: the common view answered with plain ints, or ``None`` for the general engine.

Most views a model runs are even, static and need no communication: a flatten of an evenly
sharded dim, an unflatten, a permute. For them this module computes the same answer as the
layout pipeline (``placements_to_layout`` -> ``compose_view`` -> ``layout_to_placements``),
with the sub-modes held as two flat lists per tensor dim and no objects built on the way.
Anything else returns ``None`` and the caller runs the general engine, which also owns every
error message: symbolic or zero sizes, uneven shards, size-1 mesh dims, a mesh dim that must
move, ``repeat`` of a sharded dim, a rule that does not match the shape, a placement it does
not know.

The representation, outer sub-mode first (row-major): ``sizes[d]`` and ``tags[d]``, where a
tag is ``-1`` for a local sub-mode and the mesh dim for a gpu one.

- Building (DTensor applies mesh dims left to right): a ``_StridedShard(d, sf)`` on mesh dim
  m of size n (a ``Shard`` is sf = 1) cuts the local sub-modes of dim d, read row-major, into
  ``(sf, n, rest)`` and tags the middle block m. The cut must fall on sub-mode boundaries or
  divide a local sub-mode, and ``sf * n`` must divide the local length (even).
- Routing: a group (one ``InputDim``, a ``Flatten``, or the ``Split``s of one source) lines
  up its input dims' sub-modes and cuts them at the output pieces' boundaries. Only local
  sub-modes may be cut; a gpu sub-mode must land whole in one output dim.
- Reading: mesh dim m's split factor is the product of the sub-modes outer to its block,
  leaving out those of the mesh dims before m (they are already applied).

``InputDim`` outputs carry their placements verbatim (the local op moves the dim whole), as
in the general engine.

A rule that carries its groups for this shape (a ``GroupedRule`` from ``view_groups``) is not
scanned or checked: only the groups holding a sharded dim are routed (:func:`_grouped`).

Where these flat lists give up (a mesh dim's gpu sub-mode in several pieces, as a ``Shard``
after a ``_StridedShard`` of the same dim makes it) and for views that must move, the *leaf
pass* (``_LeafPass``) runs the general engine's first attempt step for step on int leaves
``(size, mesh dim or LOCAL, part)``: carve, coalesce, route innermost piece first, read back.
It gives the failing mesh dims, or, when nothing fails, the output placements. When what
must move is in one group (one sharded dim or several), the hot pass runs the same routing
on that group itself for each step of the search for what moves (``_group_moves``).

``tests``/``property_tests`` check that these paths and the general one agree on every case
they answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import combinations

from torch import SymInt
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
    GroupedRule,
    InputDim,
    NewDim,
    Repeat,
    Singleton,
    Split,
)
from .sizes import Size, is_static

__all__ = [
    "OPTIONAL",
    "complex_pair_dim",
    "fast_answer",
    "fast_propagate",
    "flatten_keeps",
    "leaf_propagate",
    "placement",
    "replicated",
    "search_moves",
    "split_keeps",
    "static_sizes",
    "table_for",
]

LOCAL = -1
_CACHE_LIMIT = 4096
_placements: dict[tuple[int, int], Placement] = {}


# Shard(d) for the dims models have, built once (placements are immutable).
_SHARDS = tuple(Shard(d) for d in range(64))


def placement(dim: int, sf: int) -> Placement:
    """The canonical torch placement for ``(dim, sf)``, shared (placements are immutable)."""
    if sf == 1 and dim < 64:
        return _SHARDS[dim]
    p = _placements.get((dim, sf))
    if p is None:
        if len(_placements) >= _CACHE_LIMIT:
            _placements.clear()
        p = Shard(dim) if sf == 1 else _StridedShard(dim, split_factor=sf)
        _placements[(dim, sf)] = p
    return p


def fast_propagate(
    placements: Sequence[Placement],
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
    moved: list[int] | None = None,
    parsed: list[dict[int, list[tuple[int, int]]]] | None = None,
) -> tuple[Placement, ...] | None:
    """The output placements of a zero-communication view with input ``placements``, or None
    when this path does not answer (see the module docstring).

    With ``moved`` (a one-item list) the path also answers for groups holding one ``Shard``
    of one dim whatever its evenness (see :func:`_one_shard_flatten` and
    :func:`_one_shard_split`), and for a group that cannot keep the rule's only sharded dim
    whole (the search for what moves on that group, :func:`_group_moves`): a mesh dim that
    must move is replicated in the output and its bit is set in ``moved[0]``; the input
    target is the input with those mesh dims replicated.

    With ``parsed`` (an empty list) the placements it parsed are appended, when it got that
    far: :func:`_shard_dims` of static sizes, for the paths after it to reuse."""
    ndim = len(shape)
    if len(placements) != len(mesh):
        return None
    for n in mesh:
        if type(n) is not int or n < 1:
            return None
    if type(rule) is GroupedRule and (table := table_for(rule, shape)) is not None:
        return _grouped(placements, shape, rule, table, mesh, complex_view, moved, parsed)
    # A rule that only moves, adds and drops dims relabels the placements (any sizes): the
    # output position of each input dim, -2 for a broadcast one, is read in the same scan
    # that looks for a Flatten, Split or Repeat.
    at = [-1] * ndim
    for o, spec in enumerate(rule):
        cls = type(spec)
        if cls is InputDim:
            d = spec.input_dim  # type: ignore[attr-defined]
            if d >= ndim or at[d] != -1:
                return None
            at[d] = o
        elif cls is Flatten or cls is Split or cls is Repeat:
            break
        elif cls is Broadcast:
            inner = spec.dim  # type: ignore[attr-defined]
            if type(inner) is InputDim:
                d = inner.input_dim
                if d >= ndim or type(shape[d]) is not int or shape[d] != 1 or at[d] != -1:
                    return None
                at[d] = -2
        elif cls is not Singleton and cls is not NewDim:
            return None  # (not one of our DimSpecs)
    else:
        return _relabel(placements, shape, at, mesh)
    for n in shape:
        if type(n) is not int or n < 1:
            return None
    dims = _parse(placements, shape, rule, mesh, complex_view, parsed)
    if dims is None:
        return None
    out: list[Placement] = list(placements)
    used = 0
    source: DimSpec | None = None  # the Split group being collected: source, (split_id, o)s
    ids: list[tuple[int, int]] = []
    for o, spec in enumerate(rule):
        cls = type(spec)
        if cls is Singleton or cls is NewDim:  # size-1 or new dims may sit inside a group
            continue
        if source is not None and (cls is not Split or spec.input_dim != source):  # type: ignore[attr-defined]
            used = _split_group(shape, rule, source, ids, used, dims, mesh, out, moved)
            if used < 0:
                return None
            source = None
        if cls is InputDim:
            d = spec.input_dim  # type: ignore[attr-defined]
            if d >= ndim or used >> d & 1:
                return None
            used |= 1 << d
            for m, sf in dims.get(d, ()):
                out[m] = placement(o, sf)
        elif cls is Flatten:
            src = spec.dims  # type: ignore[attr-defined]
            used = _use(src, used, ndim)
            if used < 0 or not _flatten_group(
                shape, rule, src, o, dims, mesh, out, moved, complex_view
            ):
                return None
        elif cls is Split:
            if source is None:
                source = spec.input_dim  # type: ignore[attr-defined]
                ids = []
            ids.append((spec.split_id, o))  # type: ignore[attr-defined]
        elif cls is Broadcast:
            inner = spec.dim  # type: ignore[attr-defined]
            if type(inner) is InputDim:
                d = inner.input_dim
                if d >= ndim or d in dims or shape[d] != 1 or used >> d & 1:
                    return None
                used |= 1 << d
        else:  # Repeat: the general engine
            return None
    if source is not None:
        used = _split_group(shape, rule, source, ids, used, dims, mesh, out, moved)
        if used < 0:
            return None
    if used != (1 << ndim) - 1:  # an input dim the rule drops must be an unsharded size-1 dim
        for d in range(ndim):
            if not used >> d & 1 and (shape[d] != 1 or d in dims):
                return None
    if moved is not None and len(moved) > 1 and moved[0] != moved[1]:
        return None  # (a group's search for what moves, and other moves: the search decides)
    return tuple(out)


def table_for(
    rule: tuple[DimSpec, ...], shape: tuple[Size, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Group, ...]] | None:
    """The groups ``rule`` carries if it is a ``GroupedRule`` built for ``shape``, else None.
    (The sizes' types are checked first: comparing a SymInt with an int would guard.)"""
    if type(rule) is not GroupedRule:
        return None
    for n in shape:
        if type(n) is not int:
            return None
    table: tuple[tuple[int, ...], tuple[int, ...], tuple[Group, ...]] = rule.table
    return table if table[0] == shape else None


def _parse(
    placements: Sequence[Placement],
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
    parsed: list[dict[int, list[tuple[int, int]]]] | None,
) -> dict[int, list[tuple[int, int]]] | None:
    """:func:`_shard_dims` of static sizes (appended to ``parsed``), or None where the hot
    path does not answer: a placement it does not know, or a rule view_as_complex may have
    with the (real, imag) pairs dim sharded (view_as_complex needs whole pairs per rank)."""
    ndim = len(shape)
    dims = _shard_dims(placements, ndim, mesh)
    if dims is None:
        return None
    if parsed is not None:
        parsed.append(dims)
    if (
        complex_view is not False
        and (ndim - 1) in dims
        and shape[-1] == 2
        and complex_pair_dim(rule, shape) is not None
    ):
        return None
    return dims


def _flatten_group(
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    src: tuple[int, ...],
    o: int,
    dims: dict[int, list[tuple[int, int]]],
    mesh: tuple[int, ...],
    out: list[Placement],
    moved: list[int] | None,
    complex_view: bool | None,
) -> bool:
    """Route the ``Flatten`` of the input dims ``src`` into output dim o (placements into
    ``out``, moves into ``moved``); False where the hot path does not answer."""
    hit = -1  # the one sharded dim of the group, -2 for several
    for d in src:
        if d in dims:
            if hit >= 0:
                hit = -2
                break
            hit = d
    if hit == -1:  # only a group holding a sharded dim needs routing
        return True
    if hit >= 0 and (whole := _chain(dims[hit], mesh)):
        # Shards of one dim on one or more mesh dims: sub-modes (dims before it, n0, n1, ...,
        # the rest), so each reads the size of the dims before it as its split factor.
        steps = dims[hit]
        if shape[hit] % whole:  # uneven: only a lone Shard is decided here
            if (
                len(steps) != 1
                or moved is None
                or (complex_view is not False and complex_pair_dim(rule, shape) is not None)
            ):  # (view_as_complex flattens pairs: another size, another answer)
                return False
            keep = _one_shard_flatten(shape, src, hit, whole)
            if keep < 0:
                return False
            if not keep:
                moved[0] |= 1 << steps[0][0]
                out[steps[0][0]] = _REPLICATE
                return True
        outer = 1
        for d in src:
            if d == hit:
                break
            outer *= shape[d]
        for m, _ in steps:
            out[m] = placement(o, outer)
        return True
    return _route(shape, src, None, (o,), dims, mesh, out) or _moves(
        shape, src, None, (o,), dims, mesh, out, moved
    )


def _grouped(
    placements: Sequence[Placement],
    shape: tuple[int, ...],
    rule: GroupedRule,
    table: tuple[tuple[int, ...], tuple[int, ...], tuple[Group, ...]],
    mesh: tuple[int, ...],
    complex_view: bool | None,
    moved: list[int] | None,
    parsed: list[dict[int, list[tuple[int, int]]]] | None,
) -> tuple[Placement, ...] | None:
    """:func:`fast_propagate` for a rule that carries its groups for this shape (a
    :class:`GroupedRule`, valid by construction): no rule to scan or check, and only the
    groups holding a sharded dim are routed, each once. (``table``: the rule's, for this
    shape, whose sizes are ints >= 1.)

    The groups are routed in the order of the sharded dims, not the rule's: the answer is
    the same, since each group writes only its own mesh dims, and two groups that both move
    something give None in either order (a group search refuses after another move, or the
    final check sees the other's bits)."""
    dims = _parse(placements, shape, rule, mesh, complex_view, parsed)
    if dims is None:
        return None
    out: list[Placement] = list(placements)
    _, where, groups = table
    done = 0  # the groups routed
    for d, steps in dims.items():
        w = where[d]
        if w >= 0:  # moved whole: relabelled
            for m, sf in steps:
                out[m] = placement(w, sf)
            continue
        if w == -1:
            return None  # a sharded dim the rule drops: the general engine's error
        g = -2 - w
        if done >> g & 1:
            continue
        done |= 1 << g
        src, pieces, targets = groups[g]
        if pieces is None:
            if not _flatten_group(
                shape, rule, src, targets[0], dims, mesh, out, moved, complex_view
            ):
                return None
        elif not _split_routes(shape, src, pieces, targets, dims, mesh, out, moved):
            return None
    if moved is not None and len(moved) > 1 and moved[0] != moved[1]:
        return None  # (a group's search for what moves, and other moves: the search decides)
    return tuple(out)


def _relabel(
    placements: Sequence[Placement],
    shape: tuple[Size, ...],
    at: list[int],
    mesh: tuple[int, ...],
) -> tuple[Placement, ...] | None:
    """:func:`fast_propagate` for a rule that only moves, adds and drops dims (``InputDim``,
    size-1 and new dims, ``Broadcast``: permute, transpose, squeeze, unsqueeze, expand),
    ``at`` the output position of each input dim (-1 dropped, -2 broadcast): every placement
    is relabelled to its dim's output position. The local op moves each dim whole, so that
    holds for any sizes, SymInts included: only a dim the rule drops or broadcasts must be a
    static 1 here."""
    ndim = len(shape)
    for d in range(ndim):
        n = shape[d]
        if type(n) is int:
            if n < 1 or (at[d] == -1 and n != 1):  # (only size-1 dims may disappear)
                return None
        elif type(n) is not SymInt or at[d] == -1:
            return None
    out = list(placements)
    m = 0
    for p in placements:
        cls = type(p)
        if cls is Shard or cls is _StridedShard:
            d = p.dim  # type: ignore[attr-defined]
            if d < 0:
                d += ndim
            if not 0 <= d < ndim or mesh[m] == 1 or at[d] < 0:
                return None  # (a sharded dim dropped or broadcast: the general engine)
            o = at[d]
            if cls is Shard:
                out[m] = _SHARDS[o] if o < 64 else placement(o, 1)
            else:
                sf = p.split_factor  # type: ignore[attr-defined]
                if type(sf) is not int or sf < 1:
                    return None
                out[m] = placement(o, sf)
        elif cls is not Replicate and cls is not Partial and not isinstance(p, Partial):
            return None
        m += 1
    return tuple(out)


def _split_group(
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    source: DimSpec,
    ids: list[tuple[int, int]],
    used: int,
    dims: dict[int, list[tuple[int, int]]],
    mesh: tuple[int, ...],
    out: list[Placement],
    moved: list[int] | None,
) -> int:
    """Route the ``Split``s of one source (consecutive in the rule); ``used`` updated, or -1."""
    if type(source) is InputDim:
        src: tuple[int, ...] = (source.input_dim,)  # type: ignore[attr-defined]
    elif type(source) is Flatten:
        src = source.dims  # type: ignore[attr-defined]
    else:
        return -1
    used = _use(src, used, len(shape))
    pieces = rule[ids[0][1]].group_shape  # type: ignore[attr-defined]
    if used < 0 or len(ids) != len(pieces):
        return -1
    total = 1
    for d in src:
        total *= shape[d]
    product = 1
    for x in pieces:
        product *= x
    if product != total:
        return -1
    seen = 0
    for split_id, _ in ids:
        seen |= 1 << split_id
    if seen != (1 << len(pieces)) - 1:  # not every piece once: the general engine's error
        return -1
    targets = [0] * len(pieces)
    for split_id, o in ids:
        targets[split_id] = o
    return used if _split_routes(shape, src, pieces, targets, dims, mesh, out, moved) else -1


def _split_routes(
    shape: tuple[int, ...],
    src: tuple[int, ...],
    pieces: tuple[int, ...],
    targets: Sequence[int],
    dims: dict[int, list[tuple[int, int]]],
    mesh: tuple[int, ...],
    out: list[Placement],
    moved: list[int] | None,
) -> bool:
    """Route the flatten of the input dims ``src`` split into ``pieces`` (output dims
    ``targets``; placements into ``out``, moves into ``moved``); False where the hot path
    does not answer."""
    for d in src:
        if d in dims:  # only a group holding a sharded dim needs routing
            break
    else:
        return True
    if len(src) == 1:
        steps = dims[src[0]]
        whole = _chain(steps, mesh)
        if whole:
            # Shards of one dim on one or more mesh dims: sub-modes (n0, n1, ..., rest).
            # When the first piece holds them all, each is that piece's Shard.
            if pieces[0] % whole == 0:
                for m, _ in steps:
                    out[m] = placement(targets[0], 1)
                return True
            if len(steps) == 1:  # a lone Shard can only be the first piece's
                if moved is None:
                    return False
                keep = _one_shard_split(shape[src[0]], pieces[0], whole)
                if keep < 0:
                    return False
                m = steps[0][0]
                if keep:
                    out[m] = placement(targets[0], 1)
                else:
                    moved[0] |= 1 << m
                    out[m] = _REPLICATE
                return True
    if _route(shape, src, pieces, targets, dims, mesh, out):
        return True
    return _moves(shape, src, pieces, targets, dims, mesh, out, moved)


def _moves(
    shape: tuple[int, ...],
    src: tuple[int, ...],
    pieces: tuple[int, ...] | None,
    targets: Sequence[int],
    dims: dict[int, list[tuple[int, int]]],
    mesh: tuple[int, ...],
    out: list[Placement],
    moved: list[int] | None,
) -> bool:
    """For a group the hot path could not keep whole (a Flatten: ``pieces`` None, or the
    Splits of a source): the search for what moves (:func:`_group_moves`), its answer
    written into ``out`` and ``moved[0]``. False where it does not answer (a strict view, an
    uneven shard anywhere, a case the leaf pass leaves, other moves before it).

    Other groups may hold sharded dims if each keeps them all: a step moving some of their
    mesh dims cannot repair this group, and the subset of a step that does repair it that
    leaves them alone comes first in the search's order, so the search's answer moves only
    this group's mesh dims. The caller checks that no other group moves anything (the
    answer's mask is appended to ``moved`` for it)."""
    if moved is None or len(moved) != 1 or moved[0]:
        return False
    sharded = {e: dims[e] for e in src if e in dims}
    if not sharded:
        return False
    for e, e_steps in dims.items():  # every shard even (else the uneven fallback decides)
        local = shape[e]
        for m, sf in e_steps:
            if local % (sf * mesh[m]):
                return False
            local //= mesh[m]
    found = _group_moves(shape, src, sharded, pieces, targets, mesh)
    if found is None:
        return False
    moved[0] |= found[0]
    moved.append(found[0])
    for steps in sharded.values():
        for m, _ in steps:
            out[m] = _REPLICATE
    for m, p in found[1]:
        out[m] = p
    return True


def _group_moves(
    shape: tuple[int, ...],
    src: tuple[int, ...],
    sharded: dict[int, list[tuple[int, int]]],
    pieces: tuple[int, ...] | None,
    targets: Sequence[int],
    mesh: tuple[int, ...],
) -> tuple[int, list[tuple[int, Placement]]] | None:
    """:func:`search_moves` for a view whose sharded dims that must move are all in one group
    (the input dims ``src``, split into ``pieces`` or flattened; ``sharded``: its sharded
    dims and their steps): the mesh dims that move (bit mask) and the output placements of
    the others, or None where the leaf pass does not cover it. The same steps in the same
    order, each a leaf-pass routing of the group (:meth:`_LeafPass._route`): the first
    attempt's directly failing mesh dims, else each single mesh dim, smallest first, then
    the other subsets by cost."""
    mesh_dims = sorted(m for steps in sharded.values() for m, _ in steps)
    chain = -1  # the one sharded dim, if a chain of Shards split into pieces
    if pieces is not None and len(src) == 1 and _chain(sharded[src[0]], mesh):
        chain = src[0]
    order = None
    moved = 0
    while True:
        found: tuple[int, list[tuple[int, Placement]]] | None
        if chain >= 0:
            kept = [m for m in mesh_dims if not moved >> m & 1]
            found = _chain_pieces(shape[chain], kept, mesh, pieces, targets) if kept else (0, [])
        else:
            leaves: dict[int, list[_Leaf]] = {}
            for e, steps in sharded.items():
                kept_steps = [step for step in steps if not moved >> step[0] & 1]
                if kept_steps:
                    dim = _leaves(shape[e], kept_steps, mesh)
                    if dim is None:
                        return None
                    leaves[e] = dim
            if leaves:
                found = _route_leaves(_group(shape, leaves, src), pieces, targets, len(mesh))
            else:
                found = 0, []
        if order is None:  # the first attempt: nothing moved
            if not found[0]:
                return None  # (nothing fails: the hot path's routing should have kept it)
            order = _search_order(found[0] & ~OPTIONAL, mesh_dims, mesh)
        elif not found[0]:
            return moved, found[1]
        moved = next(order, -1)
        if moved < 0:
            return None


def _chain_pieces(
    length: int,
    kept: list[int],
    mesh: tuple[int, ...],
    pieces: tuple[int, ...],
    targets: Sequence[int],
) -> tuple[int, list[tuple[int, Placement]]]:
    """:func:`_route_leaves` for one dim of ``length`` sharded by a chain of ``Shard``\\ s on
    the mesh dims ``kept`` (in mesh order) and split into ``pieces``, with plain ints. The
    leaves, fastest first, are the rest and then one per mesh dim, last to first; so within
    a piece the leaves slower than a mesh dim's are earlier mesh dims', which makes every
    piece readable and each mesh dim that lands whole in piece j ``Shard(targets[j])``.
    Routing (innermost piece first, a piece stops the group at its first problem) and the
    failure mask are :func:`_take_pieces`'s."""
    sizes = [mesh[m] for m in reversed(kept)]
    tags = kept[::-1]
    whole = 1
    for n in sizes:
        whole *= n
    if length != whole:
        sizes.insert(0, length // whole)
        tags.insert(0, LOCAL)
    at: dict[int, int] = {}  # the piece of each mesh dim's leaf (or leaves)
    split = 0  # mesh dims whose leaf is cut between pieces
    i = 0
    for j in range(len(pieces) - 1, -1, -1):
        q = pieces[j]
        p = 1
        while p != q:
            if i >= len(sizes):
                return OPTIONAL, []  # the sub-modes do not fill the piece
            s = sizes[i]
            t = tags[i]
            if q % (p * s) == 0:
                p *= s
                i += 1
                if t != LOCAL:
                    if at.setdefault(t, j) != j:
                        split |= 1 << t
                continue
            if q % p == 0 and s % (q // p) == 0:
                sizes[i] = s // (q // p)
                p = q
                if t != LOCAL:  # (the rest of its leaf goes to an outer piece: cut)
                    at.setdefault(t, j)
                break
            return (OPTIONAL if t == LOCAL else 1 << t), []
    if split:
        return split, []
    return 0, [(m, placement(targets[at[m]], 1)) for m in kept]


def flatten_keeps(s: int, inner: int, n: int) -> bool:
    """Whether ``Shard`` over n ranks of a dim of local size s, flattened with local size
    ``inner`` after it, is the flattened dim's placement with the blocks before it as
    pieces: rank r holds rows ``[r*c, (r+1)*c)`` (``c = ceil(s/n)``, clipped) of every
    block, and the output chunk of a block is ``ceil(s*inner/n)``."""
    return -(-s * inner // n) == -(-s // n) * inner


def split_keeps(first: int, rest: int, n: int) -> bool:
    """Whether ``Shard`` over n ranks of a dim of local size ``first * rest``, split into a
    first piece of local size ``first`` and pieces of size ``rest`` after it, is the first
    piece's ``Shard``: ``ceil(first/n)`` rows of ``rest`` elements on rank 0, clipped the
    same way on the others."""
    return -(-first // n) * rest == -(-first * rest // n)


def _one_shard_flatten(shape: tuple[int, ...], src: tuple[int, ...], hit: int, n: int) -> int:
    """Whether a ``Shard`` of dim ``hit`` (of ``n`` ranks, the only sharding of the flatten
    group ``src``) stays, whatever the evenness: 1 yes, 0 it must move, -1 not decided here.

    With size s and the dims after it of size ``inner``, rank r holds rows
    ``[r*c, (r+1)*c)`` (``c = ceil(s/n)``, clipped) of every block of the dims before it. The
    flattened dim read as a ``_StridedShard`` with those blocks as pieces gives rank r
    ``[r*C, (r+1)*C)`` of every block (``C = ceil(s*inner/n)``), the same exactly when
    ``C == c*inner``. Otherwise no placement gives rank 0 its set (rows ``[0, c)`` of every
    block, ``c < s``), so the mesh dim must move."""
    s = shape[hit]
    if s < 2:
        return -1
    inner = 1
    after = False
    for d in src:
        if after:
            inner *= shape[d]
        elif d == hit:
            after = True
    return 1 if flatten_keeps(s, inner, n) else 0


def _one_shard_split(total: int, first: int, n: int) -> int:
    """Whether a ``Shard`` (of ``n`` ranks, the only sharding) of a dim of size ``total``
    split into pieces, the first of size ``first``, stays: 1 yes (as the first piece's
    ``Shard``), 0 it must move, -1 not decided here.

    Rank r holds ``[r*c, (r+1)*c)`` of the dim (``c = ceil(total/n)``, clipped): on rank 0 a
    prefix shorter than the dim. Whole rows of the first piece can make such a prefix; rows
    of a later piece cannot (they repeat for every row of the first piece). So only the
    first piece's ``Shard`` can hold it: ``ceil(first/n)`` rows of ``total/first`` elements
    on rank 0, clipped the same way on the others, equal exactly when that is ``c``."""
    if first < 2 or total < 2:
        return -1
    return 1 if split_keeps(first, total // first, n) else 0


def static_sizes(
    placements: Sequence[Placement], shape: tuple[int, ...], mesh: tuple[int, ...]
) -> bool:
    """One placement per mesh dim, and every size an int >= 1 (what the int paths cover).
    (:func:`fast_propagate` inlines the same checks: it is the hottest path.)"""
    if len(placements) != len(mesh):
        return False
    for n in shape:
        if type(n) is not int or n < 1:
            return False
    for n in mesh:
        if type(n) is not int or n < 1:
            return False
    return True


def _shard_dims(
    placements: Sequence[Placement], ndim: int, mesh: tuple[int, ...]
) -> dict[int, list[tuple[int, int]]] | None:
    """``{tensor dim: [(mesh dim, split factor), ...]}`` in mesh order, or None."""
    dims: dict[int, list[tuple[int, int]]] = {}
    m = 0
    for p in placements:
        cls = type(p)
        if cls is Shard:
            d = p.dim  # type: ignore[attr-defined]
            sf = 1
        elif cls is Replicate:
            m += 1
            continue
        elif cls is _StridedShard:
            d = p.dim  # type: ignore[attr-defined]
            sf = p.split_factor  # type: ignore[attr-defined]
            if type(sf) is not int or sf < 1:
                return None
        elif cls is Partial or isinstance(p, Partial):
            m += 1
            continue
        else:
            return None
        if d < 0:
            d += ndim
        if not 0 <= d < ndim or mesh[m] == 1:
            return None
        steps = dims.get(d)
        if steps is None:
            dims[d] = [(m, sf)]
        else:
            steps.append((m, sf))
        m += 1
    return dims


def _use(src: tuple[int, ...], used: int, ndim: int) -> int:
    """``used`` with the bits of ``src`` set, or -1 if one is out of range or used twice."""
    for d in src:
        if d >= ndim or used >> d & 1:
            return -1
        used |= 1 << d
    return used


def _build(
    length: int, steps: list[tuple[int, int]], mesh: tuple[int, ...]
) -> tuple[list[int], list[int]] | None:
    """The sub-modes of a dim of ``length`` sharded by ``steps``, outer first, or None."""
    sizes = [length]
    tags = [LOCAL]
    local = length
    for m, sf in steps:
        n = mesh[m]
        if local % (sf * n):
            return None
        start = _cut(sizes, tags, sf)
        end = _cut(sizes, tags, sf * n) if start >= 0 else -1
        if end < 0:
            return None
        block = [k for k in range(start, end) if tags[k] == LOCAL]
        if len(block) != 1:  # n spans several local sub-modes: the general engine
            return None
        tags[block[0]] = m
        local //= n
    return sizes, tags


def _chain(steps: list[tuple[int, int]], mesh: tuple[int, ...]) -> int:
    """How many ranks a chain of plain Shards of one dim splits it among (the product of
    their mesh sizes); 0 if some step is a ``_StridedShard``."""
    whole = 1
    for m, sf in steps:
        if sf != 1:
            return 0
        whole *= mesh[m]
    return whole


def _cut(sizes: list[int], tags: list[int], outer: int) -> int:
    """Cut the local sub-modes so that those before the returned index hold exactly
    ``outer`` local elements (row-major); -1 if that needs a non-dividing cut."""
    acc = 1
    i = 0
    while acc < outer:
        if i >= len(sizes):
            return -1
        s = sizes[i]
        if tags[i] == LOCAL:
            if acc * s > outer:
                need = outer // acc
                if outer % acc or s % need:
                    return -1
                sizes[i : i + 1] = [need, s // need]
                tags[i : i + 1] = [LOCAL, LOCAL]
                s = need
            acc *= s
        i += 1
    return i


def _route(
    shape: tuple[int, ...],
    src: tuple[int, ...],
    pieces: Sequence[int] | None,
    targets: Sequence[int],
    dims: dict[int, list[tuple[int, int]]],
    mesh: tuple[int, ...],
    out: list[Placement],
) -> bool:
    """Route the sub-modes of the input dims ``src`` to the output dims ``targets`` (sizes
    ``pieces``, outer first; None for one output dim, a flatten) and read the placements
    back into ``out``. False if a shard is uneven, or a gpu sub-mode or a non-dividing local
    one would be cut."""
    seq_s: list[int] = []
    seq_t: list[int] = []
    for d in src:
        steps = dims.get(d)
        if steps is None:
            seq_s.append(shape[d])
            seq_t.append(LOCAL)
        elif len(steps) == 1 and steps[0][1] == 1:  # one Shard: (n, rest)
            m = steps[0][0]
            n = mesh[m]
            if shape[d] % n:
                return False
            seq_s += (n, shape[d] // n)
            seq_t += (m, LOCAL)
        elif whole := _chain(steps, mesh):  # Shards on several mesh dims: (n0, n1, ..., rest)
            for m, _ in steps:
                seq_s.append(mesh[m])
                seq_t.append(m)
            if shape[d] % whole:
                return False
            if shape[d] != whole:
                seq_s.append(shape[d] // whole)
                seq_t.append(LOCAL)
        else:
            built = _build(shape[d], steps, mesh)
            if built is None:
                return False
            seq_s += built[0]
            seq_t += built[1]
    if pieces is None:
        _read(seq_s, seq_t, 0, len(seq_s), targets[0], out)
        return True
    i = 0
    for k, piece in enumerate(pieces):
        start = i
        acc = 1
        while acc < piece:
            s = seq_s[i]
            if acc * s > piece:  # the boundary falls inside this sub-mode: cut it
                need = piece // acc
                if piece % acc or s % need or seq_t[i] != LOCAL:
                    return False
                seq_s[i : i + 1] = (need, s // need)
                seq_t[i : i + 1] = (LOCAL, LOCAL)
                s = need
            acc *= s
            i += 1
        _read(seq_s, seq_t, start, i, targets[k], out)
    return True


def _read(s: list[int], t: list[int], start: int, end: int, o: int, out: list[Placement]) -> None:
    """Placements of the mesh dims whose gpu sub-modes are ``s[start:end]`` (output dim o)."""
    local = 1
    before: list[tuple[int, int]] = []
    for j in range(start, end):
        m = t[j]
        if m == LOCAL:
            local *= s[j]
            continue
        sf = local
        for m2, size in before:
            if m2 > m:  # a later mesh dim is not applied yet: it still counts
                sf *= size
        out[m] = placement(o, sf)
        before.append((m, s[j]))


def complex_pair_dim(rule: tuple[DimSpec, ...], shape: tuple[Size, ...]) -> int | None:
    """The input dim holding (real, imag) pairs if ``rule`` may be view_as_complex's:
    ``(d0, .., d(n-3), flat(d(n-2), d(n-1)))`` with a last dim of size 2."""
    n = len(shape)
    if n < 2 or len(rule) != n - 1 or not (is_static(shape[-1]) and shape[-1] == 2):
        return None
    last = rule[-1]
    if not isinstance(last, Flatten) or tuple(d.input_dim for d in last.input_dims) != (
        n - 2,
        n - 1,
    ):
        return None
    if any(rule[i] != InputDim(i) for i in range(n - 2)):
        return None
    return n - 1


# --------------------------------------------------------------------------------------------
# Views that need communication: which mesh dims move


def fast_answer(
    placements: Sequence[Placement],
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]] | None:
    """``(input target, output)`` exactly as the general engine gives it, or None for the
    general engine.

    A zero-communication view is :func:`fast_propagate`'s, else the leaf pass's. Otherwise
    this walks the general engine's search for what moves (``propagate._least_to_move``) in
    its order: the directly failing mesh dims if there are any (the search tries exactly
    them first), else each single sharded mesh dim, smallest first, then the other subsets
    by cost. Each step runs the leaf pass; a step it does not cover ends the walk (None).
    """
    moved = [0]
    out = fast_propagate(placements, shape, rule, mesh, complex_view, moved)
    if out is not None:
        return replicated(placements, moved[0]), out
    return search_moves(placements, shape, rule, mesh, complex_view)


def replicated(placements: Sequence[Placement], moved: int) -> tuple[Placement, ...]:
    """``placements`` with the mesh dims in the bit mask ``moved`` replicated."""
    if not moved:
        return tuple(placements)
    return tuple(_REPLICATE if moved >> m & 1 else p for m, p in enumerate(placements))


def search_moves(
    placements: Sequence[Placement],
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
    dims: dict[int, list[tuple[int, int]]] | None = None,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]] | None:
    """:func:`fast_answer` for a view :func:`fast_propagate` did not answer (``dims``: the
    placements it parsed, if any).

    Every step of the search is a leaf pass of the input with some mesh dims replicated.
    Groups are independent, so a step re-routes only the groups those mesh dims shard
    (:class:`_LeafPass` keeps the others' results)."""
    view = _LeafPass.of(placements, shape, rule, mesh, complex_view, dims)
    if view is None:
        return None
    found = view.run(0)
    if found is None:
        return None
    if not found[0]:  # no communication
        return tuple(placements), view.output(placements, found[1])
    sharded = [m for m, p in enumerate(placements) if type(p) is Shard or type(p) is _StridedShard]
    for moved in _search_order(found[0] & ~OPTIONAL, sharded, mesh):
        answer = view.attempt(placements, moved)
        if answer is not False:
            return answer
    return None


def _search_order(direct: int, sharded: list[int], mesh: tuple[int, ...]) -> Iterator[int]:
    """The general engine's order of the mesh dims to move (``propagate._least_to_move``),
    as bit masks: the directly failing ones (``direct``) if any, else each sharded mesh dim
    alone, smallest first; then every other subset of ``sharded``: the fewest mesh dims
    beyond the directly failing ones first, then the fewest ranks (ranked only if the search
    gets that far)."""
    if direct:
        steps = [direct]
    else:
        steps = [1 << m for _, m in sorted([(mesh[m], m) for m in sharded])]
    yield from steps
    ranked = []
    for r in range(1, len(sharded) + 1):
        for subset in combinations(sharded, r):
            mask = 0
            size = 1
            for m in subset:
                mask |= 1 << m
                size *= mesh[m]
            if mask not in steps:
                ranked.append(((mask & ~direct).bit_count(), size, subset, mask))
    ranked.sort()
    for cost in ranked:
        yield cost[3]


_REPLICATE = Replicate()

# A sub-mode as the general engine holds it: (size, mesh dim or LOCAL, part), fastest first.
_Leaf = tuple[int, int, int]


# In a failure mask: some group's local sub-modes are cut (an "optional" failure).
OPTIONAL = 1 << 62


def leaf_propagate(
    placements: Sequence[Placement],
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
    dims: dict[int, list[tuple[int, int]]] | None = None,
) -> tuple[Placement, ...] | None:
    """The general engine's zero-communication output for this view, or None (something
    fails, or :class:`_LeafPass` does not cover the case). It answers the even views
    :func:`fast_propagate` gives up on: a mesh dim whose gpu sub-mode falls in several
    pieces (a ``Shard`` after a ``_StridedShard`` of the same dim that cuts through it).
    ``dims``: the placements :func:`fast_propagate` parsed, if any."""
    view = _LeafPass.of(placements, shape, rule, mesh, complex_view, dims)
    found = view.run(0) if view is not None else None
    if found is None or found[0]:
        return None
    return view.output(placements, found[1])  # type: ignore[union-attr]


# A group of the rule for the leaf pass: (input dims, output dim(s), split pieces or None,
# verbatim). An InputDim is verbatim (its placements carry over unchanged); a Flatten has one
# output dim and no pieces; the Splits of one source have one output dim per piece.
_Group = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None, bool]


class _LeafPass:
    """The general engine's first attempt with int leaves, for the input and for the same
    input with some mesh dims replicated (the steps of the search).

    It follows the general engine step by step, with int tuples for leaves: the layout
    (``carve``, ``coalesce_leaves``), the routing of each group (``_take``, innermost piece
    first; a group stops at its first problem), and the read-back. What fails is a bit mask:
    bit m for a mesh dim that fails directly, :data:`OPTIONAL` if a group's local sub-modes
    are cut. Covered: static sizes >= 1, no sharded size-1 mesh dim, a layout that exists, no
    ``Repeat``, and the ``Split``s of a source next to each other in the rule (as every
    builder makes them). A rule that may be ``view_as_complex``'s fails the mesh dims
    sharding its (real, imag) pairs, as in the general engine.

    The rule is parsed into groups once. A group's outcome depends only on the placements of
    its own input dims, so each is kept per set of its mesh dims replicated."""

    __slots__ = ("dims", "groups", "masks", "mesh", "pairs", "seen", "shape", "stray")

    def __init__(
        self,
        dims: dict[int, list[tuple[int, int]]],
        groups: list[_Group],
        shape: tuple[int, ...],
        mesh: tuple[int, ...],
        pairs: int,
    ) -> None:
        self.dims = dims
        self.groups = groups
        self.shape = shape
        self.mesh = mesh
        self.pairs = pairs  # the mesh dims sharding view_as_complex's (real, imag) pairs
        grouped = 0
        self.masks = []  # per group: the mesh dims sharding its input dims
        for src, _, _, _ in groups:
            mask = 0
            for d in src:
                grouped |= 1 << d
                for m, _ in dims.get(d, ()):
                    mask |= 1 << m
            self.masks.append(mask)
        stray = 0  # mesh dims sharding an input dim no group holds (the pass gives up)
        for d, steps in dims.items():
            if not grouped >> d & 1:
                for m, _ in steps:
                    stray |= 1 << m
        self.stray = stray
        self.seen: dict[tuple[int, int], tuple[int, list[tuple[int, Placement]]] | None] = {}

    @classmethod
    def of(
        cls,
        placements: Sequence[Placement],
        shape: tuple[int, ...],
        rule: tuple[DimSpec, ...],
        mesh: tuple[int, ...],
        complex_view: bool | None,
        dims: dict[int, list[tuple[int, int]]] | None = None,
    ) -> _LeafPass | None:
        """The pass for this view, or None where it does not cover the case. ``dims``: the
        placements as :func:`fast_propagate` parsed them, if it did (the sizes are then
        static)."""
        if dims is None:
            if not static_sizes(placements, shape, mesh):
                return None
            dims = _shard_dims(placements, len(shape), mesh)
            if dims is None:
                return None
        table = table_for(rule, shape)
        groups = _leaf_groups(shape, rule) if table is None else _table_leaf_groups(table)
        if groups is None:
            return None
        pairs = 0
        if complex_view is not False and complex_pair_dim(rule, shape) is not None:
            for m, _ in dims.get(len(shape) - 1, ()):
                pairs |= 1 << m
        return cls(dims, groups, shape, mesh, pairs)

    def run(self, moved: int) -> tuple[int, list[tuple[int, Placement]]] | None:
        """The pass with the mesh dims in ``moved`` replicated: (what fails, the output
        placements read back as (mesh dim, placement) when nothing fails), or None where the
        pass does not cover it."""
        if self.stray & ~moved:
            return None
        failed = self.pairs & ~moved
        writes: list[tuple[int, Placement]] = []
        covered = True
        for k, mask in enumerate(self.masks):
            if not mask & ~moved:  # no sharding left in the group: nothing to route
                continue
            key = (k, moved & mask)
            found = self.seen.get(key, _UNSEEN)
            if found is _UNSEEN:
                found = self.seen[key] = self._route(self.groups[k], moved)
            if found is None:
                covered = False  # (every group still runs, as one pass over the rule would)
                continue
            failed |= found[0]
            writes += found[1]
        return (failed, writes) if covered else None

    def attempt(
        self, placements: Sequence[Placement], moved: int
    ) -> tuple[tuple[Placement, ...], tuple[Placement, ...]] | bool | None:
        """One step of the search: the answer if the view with the mesh dims in ``moved``
        replicated needs no communication, False if it does (the search goes on), None if
        only the general engine can tell."""
        found = self.run(moved)
        if found is None:
            return None
        if found[0]:
            return False
        target = replicated(placements, moved)
        return target, self.output(target, found[1])

    @staticmethod
    def output(
        placements: Sequence[Placement], writes: list[tuple[int, Placement]]
    ) -> tuple[Placement, ...]:
        out = list(placements)
        for m, p in writes:
            out[m] = p
        return tuple(out)

    def _route(self, group: _Group, moved: int) -> tuple[int, list[tuple[int, Placement]]] | None:
        """One group routed with the mesh dims in ``moved`` replicated: (what fails, what it
        reads back when nothing fails), or None where the pass does not cover it."""
        src, targets, pieces, verbatim = group
        shape = self.shape
        leaves: dict[int, list[_Leaf]] = {}
        kept: list[tuple[int, int]] = []
        for d in src:
            kept = [step for step in self.dims.get(d, ()) if not moved >> step[0] & 1]
            if kept:
                dim = _leaves(shape[d], kept, self.mesh)
                if dim is None:
                    return None
                leaves[d] = dim
        group_leaves = _group(shape, leaves, src)
        if verbatim:  # the local op moves the dim whole: placements verbatim
            failed = _unreadable(group_leaves)
            if failed:
                return failed, []
            return 0, [(m, placement(targets[0], sf)) for m, sf in kept]
        return _route_leaves(group_leaves, pieces, targets, len(self.mesh))


_UNSEEN: object = object()


def _route_leaves(
    leaves: list[_Leaf], pieces: tuple[int, ...] | None, targets: Sequence[int], n: int
) -> tuple[int, list[tuple[int, Placement]]]:
    """Route one group's sub-modes (fastest first) to its output dims (sizes ``pieces``,
    or one flattened dim) and read them back, for a mesh of ``n`` dims: (what fails, as
    :meth:`_LeafPass.run` gives it; the (mesh dim, placement)s read when nothing fails)."""
    out: list[Placement | None] = [None] * n
    if pieces is None:
        failed = _unreadable(leaves)
        if not failed:
            _read_leaves(leaves, targets[0], out)  # type: ignore[arg-type]
    else:
        taken: list[list[_Leaf]] = []
        failed = _take_pieces(leaves, pieces, taken)
        if not failed:
            last = len(pieces) - 1
            for k, piece in enumerate(taken):  # innermost piece first
                _read_leaves(piece, targets[last - k], out)  # type: ignore[arg-type]
    if failed:
        return failed, []
    return 0, [(m, p) for m, p in enumerate(out) if p is not None]


def _leaves(length: int, steps: list[tuple[int, int]], mesh: tuple[int, ...]) -> list[_Leaf] | None:
    """The leaves of a dim of ``length`` sharded by ``steps``, fastest first, or None if a
    cut does not divide."""
    whole = _chain(steps, mesh)
    if whole:  # (rest, LOCAL), then the mesh dims, last first
        if length % whole:
            return None
        dim: list[_Leaf] = [(length // whole, LOCAL, 0)] if length != whole else []
        for j in range(len(steps) - 1, -1, -1):
            m = steps[j][0]
            dim.append((mesh[m], m, 0))
        return dim
    dim = [(length, LOCAL, 0)] if length != 1 else []
    for m, sf in steps:
        carved = _carve(dim, m, mesh[m], sf)
        if carved is None:
            return None
        dim = carved
    return dim


def _leaf_groups(shape: tuple[int, ...], rule: tuple[DimSpec, ...]) -> list[_Group] | None:
    """The rule's groups (see :data:`_Group`), or None to leave the rule to the general
    engine (a bad rule, a source split twice, view_as_real, ``Repeat``)."""
    ndim = len(shape)
    groups: list[_Group] = []
    used = 0
    source: DimSpec | None = None  # the Split group being collected
    ids: list[tuple[int, int]] = []
    for o, spec in enumerate(rule):
        cls = type(spec)
        if cls is Singleton or cls is NewDim:
            continue
        if source is not None and (cls is not Split or spec.input_dim != source):  # type: ignore[attr-defined]
            used = _split_source(shape, rule, source, ids, used, groups)
            if used < 0:
                return None
            source = None
        if cls is InputDim or cls is Flatten:
            src = (spec.input_dim,) if cls is InputDim else spec.dims  # type: ignore[attr-defined]
            used = _use(src, used, ndim)
            if used < 0:
                return None
            groups.append((src, (o,), None, cls is InputDim))
        elif cls is Split:
            if source is None:
                source = spec.input_dim  # type: ignore[attr-defined]
                ids = []
            ids.append((spec.split_id, o))  # type: ignore[attr-defined]
        elif cls is Broadcast:
            inner = spec.dim  # type: ignore[attr-defined]
            if type(inner) is InputDim:
                d = inner.input_dim
                if d >= ndim or shape[d] != 1 or used >> d & 1:
                    return None
                used |= 1 << d
            elif type(inner) is not Singleton:
                return None
        else:
            return None
    if source is not None:
        used = _split_source(shape, rule, source, ids, used, groups)
        if used < 0:
            return None
    for d in range(ndim):
        if not used >> d & 1 and shape[d] != 1:
            return None
    return groups


def _table_leaf_groups(
    table: tuple[tuple[int, ...], tuple[int, ...], tuple[Group, ...]],
) -> list[_Group]:
    """:func:`_leaf_groups` read off a ``GroupedRule``'s table (valid for its shape; the
    order of the groups does not matter to the pass)."""
    _, where, groups = table
    out: list[_Group] = [((d,), (o,), None, True) for d, o in enumerate(where) if o >= 0]
    for src, pieces, targets in groups:
        out.append((src, tuple(targets), pieces, False))
    return out


def _split_source(
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    source: DimSpec,
    ids: list[tuple[int, int]],
    used: int,
    groups: list[_Group],
) -> int:
    """Add one source's consecutive ``Split``s to ``groups``: ``used`` updated, or -1 to
    leave the rule to the general engine (a bad rule, a source split twice, view_as_real)."""
    if type(source) is InputDim:
        src: tuple[int, ...] = (source.input_dim,)  # type: ignore[attr-defined]
    elif type(source) is Flatten:
        src = source.dims  # type: ignore[attr-defined]
    else:
        return -1
    used = _use(src, used, len(shape))
    if used < 0:
        return -1
    pieces: tuple[int, ...] = rule[ids[0][1]].group_shape  # type: ignore[attr-defined]
    if len(ids) != len(pieces):
        return -1
    seen = 0
    targets = [0] * len(pieces)
    for split_id, o in ids:
        if rule[o].group_shape != pieces:  # type: ignore[attr-defined]
            return -1
        seen |= 1 << split_id
        targets[split_id] = o
    if seen != (1 << len(pieces)) - 1:
        return -1
    total = 1
    for d in src:
        total *= shape[d]
    whole = 1
    for q in pieces:
        if type(q) is not int:
            return -1
        whole *= q
    if whole != total:
        return -1  # view_as_real, or a rule that does not match
    groups.append((src, tuple(targets), pieces, False))
    return used


def _carve(leaves: list[_Leaf], m: int, n: int, sf: int) -> list[_Leaf] | None:
    """``sharded.carve`` on int leaves: the fastest ``k`` local elements stay, the next ``n``
    become mesh dim m's, the slowest ``sf`` stay; None if a cut does not divide a leaf."""
    total = 1
    for s, mesh_dim, _ in leaves:
        if mesh_dim == LOCAL:
            total *= s
    if total % (n * sf):
        return None
    k = total // (n * sf)
    kn = k * n
    out: list[_Leaf] = []
    done = 1
    part = 0
    for size, mesh_dim, p in leaves:
        if mesh_dim != LOCAL:
            out.append((size, mesh_dim, p))
            continue
        start = done
        end = done * size
        pieces: list[tuple[int, int]] = []
        for c in (k, kn):
            if start % c == 0 or c % end == 0:
                continue
            if c % start or (end // start) % (c // start):
                return None
            pieces.append((c // start, start))
            start = c
        pieces.append((end // start, start))
        for s, lo in pieces:
            if s == 1:
                continue
            if lo % k == 0 and lo % kn:
                out.append((s, m, part))
                part += 1
            else:
                out.append((s, LOCAL, 0))
        done = end
    return _coalesce(out)


def _coalesce(leaves: list[_Leaf]) -> list[_Leaf]:
    """``sharded.coalesce_leaves`` on int leaves."""
    out: list[_Leaf] = []
    for leaf in leaves:
        if out:
            last = out[-1]
            if leaf[1] == last[1] and (leaf[1] == LOCAL or leaf[2] == last[2] + 1):
                out[-1] = (last[0] * leaf[0], last[1], last[2])
                continue
        out.append(leaf)
    if len(out) == len(leaves):
        return out
    seen: dict[int, int] = {}
    renumbered = []
    for size, mesh_dim, _ in out:
        part = seen.get(mesh_dim, 0)
        seen[mesh_dim] = part + 1
        renumbered.append((size, mesh_dim, part if mesh_dim != LOCAL else 0))
    return renumbered


def _group(
    shape: tuple[int, ...], leaves: dict[int, list[_Leaf]], src: tuple[int, ...]
) -> list[_Leaf]:
    """The sub-modes of the input dims ``src`` flattened, fastest first, coalesced."""
    if len(src) == 1:
        d = src[0]
        found = leaves.get(d)
        if found is not None:
            return found
        return [(shape[d], LOCAL, 0)] if shape[d] != 1 else []
    joined: list[_Leaf] = []
    for d in reversed(src):
        found = leaves.get(d)
        if found is not None:
            joined += found
        elif shape[d] != 1:
            joined.append((shape[d], LOCAL, 0))
    return _coalesce(joined)


def _take_pieces(leaves: list[_Leaf], pieces: Sequence[int], taken: list[list[_Leaf]]) -> int:
    """Route one split group innermost piece first, as ``compose._route_group``, into
    ``taken`` (innermost piece first), and check the pieces read back; what fails (a mask as
    :meth:`_LeafPass.run` gives)."""
    rest = list(leaves)
    failed = 0
    for j in range(len(pieces) - 1, -1, -1):
        q = pieces[j]
        piece: list[_Leaf] = []
        p = 1
        i = 0
        while True:
            if p == q:
                break
            if i >= len(rest):
                failed = OPTIONAL  # the sub-modes do not fill the piece
                break
            s, mesh_dim, part = rest[i]
            if q % (p * s) == 0:
                piece.append(rest[i])
                p *= s
                i += 1
                continue
            if q % p == 0 and s % (q // p) == 0:
                f = q // p
                piece.append((f, mesh_dim, part))
                rest[i] = (s // f, mesh_dim, part)
                p = q
                break
            failed = OPTIONAL if mesh_dim == LOCAL else 1 << mesh_dim
            break
        if failed:
            break  # the group stops at its first problem; the pieces so far are read back
        rest = rest[i:]
        taken.append(piece)
    if not failed:
        seen: dict[int, int] = {}
        for k, piece in enumerate(taken):
            for _, mesh_dim, _ in piece:
                if mesh_dim != LOCAL and seen.setdefault(mesh_dim, k) != k:
                    failed |= 1 << mesh_dim
    for piece in taken:
        if len(piece) > 1:  # (one sub-mode is always readable)
            failed |= _unreadable(piece)
    return failed


def _read_leaves(leaves: list[_Leaf], o: int, out: list[Placement]) -> None:
    """``layout_to_placements`` for one output dim o whose sub-modes (fastest first) are
    readable (:func:`_unreadable` is 0): mesh dim m's split factor is the product of the
    sub-modes slower than its block, leaving out those of the mesh dims before m."""
    for _, m, _ in leaves:
        if m == LOCAL:
            continue
        sf = 1
        for size, m2, _ in reversed(leaves):  # slowest first, down to m's block
            if m2 == m:
                break
            if m2 == LOCAL or m2 > m:
                sf *= size
        out[m] = placement(o, sf)


def _unreadable(leaves: list[_Leaf]) -> int:
    """The mesh dims (bit mask) whose sub-modes in one output dim ``layout_to_placements``
    cannot read: not one contiguous block in coordinate order once the earlier mesh dims'
    sub-modes are removed."""
    gpu = [mesh_dim for _, mesh_dim, _ in leaves if mesh_dim != LOCAL]
    if len(gpu) < 2:
        return 0  # one sub-mode or none: always one block
    meshes = sorted(set(gpu))
    failed = 0
    for m in meshes:
        current = [leaf for leaf in leaves if leaf[1] == LOCAL or leaf[1] >= m]
        at = [i for i, leaf in enumerate(current) if leaf[1] == m]
        parts = [current[i][2] for i in at]
        if at != list(range(at[0], at[-1] + 1)) or parts != sorted(parts):
            failed |= 1 << m
    return failed

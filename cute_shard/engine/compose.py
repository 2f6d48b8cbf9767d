"""``compose_view``: route the sub-modes of the input dims to the output dims of a view rule.

A view does not move data; it reinterprets coordinates. The rule groups the dims:

- ``InputDim(d)``: output dim = input dim d, sub-modes unchanged (permute, transpose, ...).
- ``Flatten(d_a..d_b)``: the dims' sub-modes are concatenated, inner dims fastest. This is the
  flattened index F, which is row-major over the group.
- ``Split(src, (q_0..q_k), j)``: the pieces of one flattened group, outer to inner. Output
  dim j holds the digits of F in ``[q_j+1*...*q_k, q_j*...*q_k)``. Routing cuts the group's
  sub-modes at the piece boundaries, innermost piece first. A sub-mode that a boundary cuts
  is split when the boundary divides it, so a local sub-mode can always be reshaped locally.
  A gpu sub-mode that lands in two pieces cannot stay: one mesh dim can shard only one
  tensor dim.
- ``Repeat(src, r)``: the source's sub-modes plus a slowest local sub-mode r. Every rank
  repeats its own shard, which is why a sharded source comes out as ``_StridedShard(sf=r)``.
- ``Broadcast``, ``NewDim``, ``Singleton``: local sub-modes only.

Sub-modes are stored in stride order (see ``sharded.py``), and every step keeps that order.
So the strides never need to be computed or compared, and sizes may be SymInts.

Why the result is right: the rank's elements of a group are the F values whose gpu digits
equal the rank's coordinates. Their local order is increasing in F, both before the view (the
local tensor) and after it (the local output). A local view keeps that order. So the local
input viewed to the local output shape is exactly the output shard, provided every output dim
gets whole sub-modes. That is what the cuts guarantee.

Worked example: view (8,16,32) -> (128,32) on mesh (2,4) with [Shard(0), Shard(1)].
Dim 0 is ``[4 local, 2 gpu0]`` and dim 1 is ``[4 local, 4 gpu1]``. Flatten(d0, d1) gives
``[4 local, 4 gpu1, 4 local, 2 gpu0]``. Read back, mesh 0 has nothing slower: Shard(0).
Mesh 1 has the 4 local of dim 0 slower: _StridedShard(0, split_factor=4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from ..rules import Broadcast, DimSpec, Flatten, InputDim, NewDim, Repeat, Singleton, Split
from .sharded import LOCAL, Leaf, ShardedLayout, coalesce_leaves
from .sizes import Size, divides, eq, is_one, prod

__all__ = ["Routed", "compose_view", "rule_groups"]


@dataclass
class Routed:
    """The output dims' sub-modes, and what could not be routed.

    ``failures`` maps a mesh dim to ``(input tensor dim, reason)``. ``local_failures`` holds
    ``(input tensor dims, reason)`` for a group whose local sub-modes a boundary cuts other
    than at a divisor: some mesh dim of that group must go so that the sub-modes merge.
    ``home`` maps an input dim to the outermost output dim that holds it.
    """

    out_dims: list[tuple[Leaf, ...]]
    failures: dict[int, tuple[int, str]] = field(default_factory=dict)
    local_failures: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    home: dict[int, int] = field(default_factory=dict)


# A group: the input dims of a Flatten/InputDim source and the output pieces it splits into.
@dataclass(frozen=True)
class _Group:
    in_dims: tuple[int, ...]
    out_dims: tuple[int, ...]  # outer to inner
    sizes: tuple[Size, ...]  # piece sizes, outer to inner


def rule_groups(
    rule: Sequence[DimSpec],
) -> tuple[tuple[_Group, ...], tuple[tuple[int, DimSpec], ...]]:
    """Split a rule into Flatten/Split/InputDim groups and the other ``(output dim, spec)``.

    Pure in the rule, so it is computed once per rule (the engine asks for it on every
    attempt); rules holding SymInt sizes are not hashable and are grouped afresh.
    """
    try:
        return _rule_groups_cached(tuple(rule))
    except TypeError:
        return _rule_groups(rule)


@lru_cache(maxsize=1024)
def _rule_groups_cached(
    rule: tuple[DimSpec, ...],
) -> tuple[tuple[_Group, ...], tuple[tuple[int, DimSpec], ...]]:
    return _rule_groups(rule)


def _rule_groups(
    rule: Sequence[DimSpec],
) -> tuple[tuple[_Group, ...], tuple[tuple[int, DimSpec], ...]]:
    splits: dict[DimSpec, dict[int, tuple[int, tuple[Size, ...]]]] = {}
    groups: list[_Group] = []
    others: dict[int, DimSpec] = {}
    for o, spec in enumerate(rule):
        if isinstance(spec, Split):
            splits.setdefault(spec.input_dim, {})[spec.split_id] = (o, spec.group_shape)
        elif isinstance(spec, (InputDim, Flatten)):
            groups.append(_Group(_source_dims(spec), (o,), (None,)))
        else:
            others[o] = spec
    for src, pieces in splits.items():
        shape = next(iter(pieces.values()))[1]
        if sorted(pieces) != list(range(len(shape))):
            raise ValueError(
                f"rule splits {src} into {len(shape)} pieces {shape} but has pieces "
                f"{sorted(pieces)}: every piece of a Split must be an output dim"
            )
        outs = tuple(pieces[j][0] for j in range(len(shape)))
        groups.append(_Group(_source_dims(src), outs, tuple(shape)))
    return tuple(groups), tuple(others.items())


def _source_dims(spec: DimSpec) -> tuple[int, ...]:
    if isinstance(spec, InputDim):
        return (spec.input_dim,)
    if isinstance(spec, Flatten):
        return tuple(d.input_dim for d in spec.input_dims)
    raise ValueError(f"a Split can only split an input dim or a Flatten, got {spec}")


def compose_view(sl: ShardedLayout, rule: Sequence[DimSpec]) -> Routed:
    """Route ``sl``'s sub-modes through ``rule``: the output dims' sub-modes, in stride order."""
    routed = Routed(out_dims=[()] * len(rule))
    groups, others = rule_groups(rule)
    for g in groups:
        _route_group(sl, g, routed)
    for o, spec in others:
        routed.out_dims[o] = _route_other(sl, o, spec, routed)
    return routed


def _group_leaves(sl: ShardedLayout, dims: tuple[int, ...]) -> tuple[list[Leaf], Size]:
    """The flattened group's sub-modes, fastest first (inner dims first), and its size."""
    leaves: list[Leaf] = []
    for d in reversed(dims):
        leaves.extend(sl.dims[d].leaves)
    return list(coalesce_leaves(leaves)), prod(sl.dims[d].size for d in dims)


def _route_group(sl: ShardedLayout, g: _Group, routed: Routed) -> None:
    leaves, total = _group_leaves(sl, g.in_dims)
    for d in g.in_dims:
        routed.home.setdefault(d, g.out_dims[0])
    if g.sizes == (None,):  # InputDim or Flatten: one output dim, nothing to cut
        routed.out_dims[g.out_dims[0]] = tuple(leaves)
        return
    sizes = g.sizes
    whole = prod(sizes)
    if not eq(whole, total):
        # view_as_real: each complex element becomes a fastest local pair of reals.
        if eq(whole, 2 * total) and eq(sizes[-1], 2):
            leaves = list(coalesce_leaves([(2, LOCAL, 0), *leaves]))
        else:
            raise ValueError(
                f"rule splits input dims {list(g.in_dims)} (size {total}) into {tuple(sizes)} "
                f"(size {whole}): the rule does not match the shape"
            )
    dim_of = _dim_of_mesh(sl, g.in_dims)
    for j in range(len(sizes) - 1, -1, -1):
        piece, leaves, problem = _take(leaves, sizes[j])
        if problem is not None:
            mesh, reason = problem
            if mesh == LOCAL:
                routed.local_failures.append((g.in_dims, reason))
            else:
                routed.failures.setdefault(mesh, (dim_of[mesh], reason))
            return
        routed.out_dims[g.out_dims[j]] = piece
    for mesh, parts in _meshes_in_pieces(routed, g.out_dims).items():
        if len(parts) > 1:
            routed.failures.setdefault(
                mesh,
                (
                    dim_of[mesh],
                    f"the view splits it across output dims {sorted(parts)} (pieces "
                    f"{tuple(sizes)}), and one mesh dim can shard only one tensor dim",
                ),
            )


def _take(
    leaves: list[Leaf], q: Size
) -> tuple[tuple[Leaf, ...], list[Leaf], tuple[int, str] | None]:
    """The fastest sub-modes of total size ``q`` (one output piece), and the rest.

    A sub-mode that the piece boundary cuts is split at a divisor. If none exists, the third
    value names the mesh dim of that sub-mode (LOCAL for a local one) and why.
    """
    piece: list[Leaf] = []
    p: Size = 1
    for i, (s, mesh, part) in enumerate(leaves):
        if eq(p, q):
            return tuple(piece), leaves[i:], None
        if divides(p * s, q):
            piece.append((s, mesh, part))
            p = p * s
            continue
        f = q // p if divides(p, q) else None
        if f is not None and divides(f, s):
            piece.append((f, mesh, part))
            return tuple(piece), [(s // f, mesh, part), *leaves[i + 1 :]], None
        kind = "a local sub-mode" if mesh == LOCAL else "its sub-mode"
        return (
            (),
            [],
            (
                mesh,
                f"{kind} of size {s} straddles the boundary of an output piece of size {q} "
                f"at a point that does not divide it",
            ),
        )
    if eq(p, q):
        return tuple(piece), [], None
    return (), [], (LOCAL, f"the sub-modes do not fill an output piece of size {q}")


def _meshes_in_pieces(routed: Routed, out_dims: tuple[int, ...]) -> dict[int, set[int]]:
    seen: dict[int, set[int]] = {}
    for o in out_dims:
        for _, mesh, _ in routed.out_dims[o]:
            if mesh != LOCAL:
                seen.setdefault(mesh, set()).add(o)
    return seen


def _dim_of_mesh(sl: ShardedLayout, dims: tuple[int, ...]) -> dict[int, int]:
    return {mesh: d for d in dims for _, mesh, _ in sl.dims[d].leaves if mesh != LOCAL}


def _route_other(sl: ShardedLayout, o: int, spec: DimSpec, routed: Routed) -> tuple[Leaf, ...]:
    if isinstance(spec, Singleton):
        return ()
    if isinstance(spec, NewDim):
        return () if is_one(spec.size) else ((spec.size, LOCAL, 0),)
    if isinstance(spec, Broadcast):
        # Only a size-1 dim broadcasts, and a size-1 dim has no sub-modes.
        if isinstance(spec.dim, InputDim):
            routed.home.setdefault(spec.dim.input_dim, o)
        return () if is_one(spec.dim_size) else ((spec.dim_size, LOCAL, 0),)
    if isinstance(spec, Repeat):
        src: tuple[Leaf, ...] = ()
        if isinstance(spec.input_dim, InputDim):
            d = spec.input_dim.input_dim
            routed.home.setdefault(d, o)
            src = sl.dims[d].leaves
        elif not isinstance(spec.input_dim, Singleton):
            raise ValueError(f"Repeat of {spec.input_dim} is not supported")
        return src if is_one(spec.times) else (*src, (spec.times, LOCAL, 0))
    raise ValueError(f"unsupported rule entry {spec} for output dim {o}")

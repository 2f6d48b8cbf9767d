"""The hot path against the general engine on the benchmark's case pools.

The pools are what the benchmark times: seeded views of every static family (flatten,
unflatten, reshape, permute, squeeze, expand, _StridedShard inputs, uneven sizes) on 1-D,
2-D and 3-D meshes, many of them needing some mesh dims to move. Wherever the hot path
answers (``fast_answer``, ``uneven_answer``), the general engine must give the same input
target and output. The leaf pass (``leaf_propagate``) answers the even views the hot path's
flat lists cannot hold.
"""

from __future__ import annotations

import itertools

import pytest
from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard

import cute_shard
from bench.propagate_cases import BUILDERS, make_pool
from cute_shard.engine import propagate as P
from cute_shard.engine.fast import (
    _chain_pieces,
    _leaves,
    _route_leaves,
    _search_order,
    fast_answer,
    fast_propagate,
    leaf_propagate,
)
from cute_shard.engine.fast_uneven import uneven_answer
from cute_shard.engine.sharded import normalize_placements, to_torch_placement
from cute_shard.rules import parse_rule, view_groups

R = Replicate()
FAMILIES = ("flatten", "unflatten", "reshape", "permute", "squeeze", "expand", "strided", "uneven")


def _general(placements, shape, rule, mesh, complex_view):  # type: ignore[no-untyped-def]
    norm = normalize_placements(placements, len(shape), mesh)
    target, out, _ = P._propagate(norm, shape, rule, mesh, complex_view)
    return (
        tuple(P._merge_target(placements, target)),
        tuple(to_torch_placement(p) for p in out),
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_hot_path_equals_general_engine_on_bench_pools(family: str) -> None:
    answered = moved = uneven = 0
    for rank in (1, 2, 3):
        for c in make_pool(family, rank, 192):
            rule = BUILDERS[c.op][0](*c.args)
            answer = fast_answer(c.placements, c.shape, rule, c.mesh, None)
            if answer is None:
                answer = uneven_answer(c.placements, c.shape, rule, c.mesh, None)
                uneven += answer is not None
            if answer is None:
                continue
            answered += 1
            moved += answer[0] != tuple(c.placements)
            assert answer == _general(c.placements, c.shape, rule, c.mesh, None), str(c)
    assert answered > 0
    if family in ("unflatten", "reshape", "strided"):
        assert moved > 20, f"only {moved} views that move mesh dims were answered"
    if family == "uneven":
        assert uneven > 50, f"the uneven hot path answered only {uneven} views"


@pytest.mark.parametrize(
    ("shape", "mesh", "placements", "rule", "want"),
    [
        # Shard(1) after _StridedShard(1, 2) on mesh (2, 4): mesh dim 1's gpu sub-mode falls
        # in two pieces, with mesh dim 0's between them.
        (
            (16, 16, 8),
            (2, 4),
            (_StridedShard(1, split_factor=2), Shard(1)),
            "(d0, flat(d1,d2))",
            (_StridedShard(1, split_factor=2), Shard(1)),
        ),
        (
            (48, 2, 4),
            (2, 4),
            (_StridedShard(0, split_factor=6), _StridedShard(0, split_factor=3)),
            "(split(flat(d0,d1,d2), (3,128), 0), split(flat(d0,d1,d2), (3,128), 1))",
            (_StridedShard(1, split_factor=2), Shard(1)),
        ),
    ],
)
def test_leaf_pass_reads_gpu_sub_modes_in_several_pieces(
    shape: tuple[int, ...], mesh: tuple[int, ...], placements: tuple, rule: str, want: tuple
) -> None:
    parsed = parse_rule(rule)
    assert fast_propagate(placements, shape, parsed, mesh, None) is None
    assert leaf_propagate(placements, shape, parsed, mesh, None) == want
    assert _general(placements, shape, parsed, mesh, None) == (placements, want)
    assert cute_shard.propagate_shape_and_sharding(
        placements, shape, parsed, mesh, strict_view=True
    ) == (placements, want)


@pytest.mark.parametrize(
    ("shape", "to", "mesh", "placements", "want"),
    [
        # Shards of dim 1 on all three mesh dims, flattened with dim 0 before it: each reads
        # dim 0 (size 4) as its split factor.
        ((4, 16, 3), (64, 3), (2, 2, 2), (Shard(1),) * 3, (_StridedShard(0, split_factor=4),) * 3),
        # The same chain of dim 0, unflattened to (8, 2, 3): the first piece holds all eight
        # ranks, so each mesh dim shards that piece.
        ((48, 5), (8, 2, 3, 5), (2, 2, 2), (Shard(0),) * 3, (Shard(0),) * 3),
        # A chain on mesh dims 0 and 2 with a Shard of another dim between them.
        (
            (12, 8, 2),
            (12, 16),
            (2, 3, 2),
            (Shard(1), Shard(0), Shard(1)),
            (Shard(1), Shard(0), Shard(1)),
        ),
        # The first piece (4) holds two of the three mesh dims; the third shards the second.
        ((32,), (4, 8), (2, 2, 2), (Shard(0),) * 3, (Shard(0), Shard(0), Shard(1))),
        # The first piece (3) cannot hold even one: the general paths decide what moves.
        ((24,), (3, 8), (2, 2, 2), (Shard(0),) * 3, None),
    ],
)
def test_shard_chains_of_one_dim_are_read_directly(
    shape: tuple[int, ...], to: tuple[int, ...], mesh: tuple[int, ...], placements: tuple, want
) -> None:
    from cute_shard import oracle
    from cute_shard.rules import view_groups

    rule = view_groups(shape, to)
    got = fast_propagate(placements, shape, rule, mesh, None)
    assert got == want
    if want is None:
        return
    assert _general(placements, shape, rule, mesh, None) == (placements, want)
    verdict = oracle.check_view(
        shape, placements, want, mesh, lambda g: g.reshape(to), lambda t, s: t.reshape(s)
    )
    assert verdict.ok


@pytest.mark.parametrize(
    ("shape", "to", "mesh", "placements", "want"),
    [
        # The first piece (3) cannot hold a mesh dim, alone or both: both move.
        ((24,), (3, 8), (2, 2), (Shard(0), Shard(0)), ((R, R), (R, R))),
        ((768,), (3, 16, 16), (4, 2), (Shard(0), Shard(0)), ((R, R), (R, R))),
        # The first piece (2) holds one mesh dim: single moves are tried smallest first
        # (mesh dim 0 before 1 at equal sizes), and moving mesh dim 0 leaves mesh dim 1
        # the first piece's Shard.
        ((48,), (2, 3, 8), (2, 2), (Shard(0), Shard(0)), ((R, Shard(0)), (R, Shard(0)))),
        # Mesh dim 1 (4) fails directly in the second piece: it alone moves.
        ((64,), (4, 16), (2, 4), (Shard(0), Shard(0)), ((Shard(0), R), (Shard(0), R))),
        # A _StridedShard and a Shard of one dim, the other dims unsharded.
        (
            (4, 48),
            (4, 3, 16),
            (2, 4),
            (_StridedShard(1, split_factor=2), Shard(1)),
            ((R, R), (R, R)),
        ),
        # Another sharded dim, whose group keeps it (d1's Shard in the first piece, 2): a
        # step moving its mesh dim cannot repair d0's group, so d0's group is searched alone.
        (
            (12, 8),
            (3, 4, 2, 4),
            (2, 2, 2),
            (Shard(0), Shard(1), Shard(0)),
            ((R, Shard(1), R), (R, Shard(2), R)),
        ),
    ],
)
def test_a_sharded_dim_that_must_move_is_searched_on_the_hot_path(
    shape: tuple[int, ...], to: tuple[int, ...], mesh: tuple[int, ...], placements: tuple, want
) -> None:
    """The rule's only sharded dim in a group that cannot keep it: the hot path walks the
    general engine's search for what moves on that group alone, with the same answer."""
    from cute_shard import oracle
    from cute_shard.rules import view_groups

    rule = view_groups(shape, to)
    moved = [0]
    out = fast_propagate(placements, shape, rule, mesh, None, moved)
    assert out is not None and moved[0]
    got = (tuple(R if moved[0] >> m & 1 else p for m, p in enumerate(placements)), out)
    assert got == want == _general(placements, shape, rule, mesh, None)
    verdict = oracle.check_view(
        shape, got[0], got[1], mesh, lambda g: g.reshape(to), lambda t, s: t.reshape(s)
    )
    assert verdict.ok
    assert fast_propagate(placements, shape, rule, mesh, None) is None  # strict: not here


def test_a_group_search_with_other_moves_is_left_to_the_search() -> None:
    """d0's chain must partly move, and so must d1's lone Shard (6 over 3 in a first piece of
    2): two groups move, so the hot path leaves the whole search to ``search_moves``."""
    from cute_shard.rules import view_groups

    shape, to, mesh = (24, 6), (3, 8, 2, 3), (2, 3, 2)
    placements = (Shard(0), Shard(1), Shard(0))
    rule = view_groups(shape, to)
    assert fast_propagate(placements, shape, rule, mesh, None, [0]) is None
    want = ((R, R, R), (R, R, R))
    assert fast_answer(placements, shape, rule, mesh, None) == want
    assert _general(placements, shape, rule, mesh, None) == want


def _general_order(direct: set[int], sharded: list[int], mesh: tuple[int, ...]) -> list[int]:
    # The general engine's order (propagate._least_to_move), with sets: the directly failing
    # mesh dims first if any, else single mesh dims smallest first; then every subset by
    # (how many mesh dims it adds to the directly failing ones, ranks, the subset).
    def cost(subset: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
        size = 1
        for m in subset:
            size *= mesh[m]
        return (len(set(subset) - direct), size, subset)

    subsets = sorted(
        (c for r in range(1, len(sharded) + 1) for c in itertools.combinations(sharded, r)),
        key=cost,
    )
    masks = [sum(1 << m for m in subset) for subset in subsets]
    if direct:
        first = [sum(1 << m for m in direct)]
    else:
        first = [1 << m for m in sorted(sharded, key=lambda m: (mesh[m], m))]
    return first + [m for m in masks if m not in first]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_search_order_is_the_general_engines(n: int) -> None:
    for mesh in itertools.product((2, 3, 4), repeat=n):
        for r in range(1, n + 1):
            for sharded in itertools.combinations(range(n), r):
                for k in range(len(sharded) + 1):
                    for direct in itertools.combinations(sharded, k):
                        mask = sum(1 << m for m in direct)
                        got = list(_search_order(mask, list(sharded), mesh))
                        assert got == _general_order(set(direct), list(sharded), mesh)


def _splits(total: int) -> list[tuple[int, ...]]:
    """Every way to split ``total`` into 2 or 3 pieces of size >= 2."""
    out = []
    for a in range(2, total):
        if total % a == 0:
            out.append((a, total // a))
            rest = total // a
            out += [(a, b, rest // b) for b in range(2, rest) if rest % b == 0]
    return out


def test_chain_pieces_are_the_leaf_routing() -> None:
    # _chain_pieces is _route_leaves on a chain of Shards' leaves, with plain ints.
    checked = 0
    for mesh in [(2, 3), (3, 2), (2, 2), (4, 2), (2, 2, 2), (2, 3, 2), (4, 4)]:
        for r in range(1, len(mesh) + 1):
            for kept in itertools.combinations(range(len(mesh)), r):
                whole = 1
                for m in kept:
                    whole *= mesh[m]
                for rest in (1, 2, 3, 4, 6, 8):
                    length = whole * rest
                    for pieces in _splits(length):
                        targets = tuple(range(5, 5 + len(pieces)))
                        steps = [(m, 1) for m in kept]
                        leaves = _leaves(length, steps, mesh)
                        want = _route_leaves(leaves, pieces, targets, len(mesh))
                        got = _chain_pieces(length, list(kept), mesh, pieces, targets)
                        assert (got[0], sorted(got[1])) == (want[0], sorted(want[1])), (
                            length,
                            kept,
                            mesh,
                            pieces,
                        )
                        checked += 1
    assert checked > 1000


def test_a_group_with_several_sharded_dims_is_searched_on_the_hot_path() -> None:
    # Flattens and splits of flattens of small shapes, each view one group, with two or
    # more sharded dims: where the group must move, the hot pass walks the search itself.
    searched = several = 0
    for shape in [(2, 6), (4, 6), (6, 4), (8, 3), (2, 3, 4)]:
        total = 1
        for n in shape:
            total *= n
        for new in [(total,), *_splits(total)]:
            rule = view_groups(shape, new)
            for mesh in [(2, 2), (2, 3), (4, 2), (2, 2, 2)]:
                options = [R, *(Shard(d) for d in range(len(shape)))]
                options.append(_StridedShard(0, split_factor=2))
                for placements in itertools.product(options, repeat=len(mesh)):
                    moved = [0]
                    out = fast_propagate(placements, shape, rule, mesh, False, moved)
                    if out is None or len(moved) < 2:
                        continue
                    searched += 1
                    sharded = {p.dim for p in placements if p is not R}
                    several += len(sharded) >= 2
                    assert fast_answer(placements, shape, rule, mesh, False) == _general(
                        placements, shape, rule, mesh, False
                    ), (shape, new, mesh, placements)
    assert searched > 1000 and several > 400

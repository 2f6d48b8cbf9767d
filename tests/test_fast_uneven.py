"""The uneven hot path (``cute_shard.engine.fast_uneven``) on worked cases.

Each case is answered by ``uneven_answer``, must equal the uneven fallback's answer (the general
engine with the hot paths bypassed), and is checked on every simulated rank by the oracle.
Cases outside the hot path's reach must give None, so the general engine decides them.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

import cute_shard
from cute_shard import oracle
from cute_shard.engine import propagate as P
from cute_shard.engine.fast import flatten_keeps, split_keeps
from cute_shard.engine.fast_uneven import uneven_answer
from cute_shard.engine.sharded import normalize_placements, to_torch_placement
from cute_shard.rules import flatten, view_groups

R = Replicate()


def _general(placements, shape, rule, mesh, complex_view=None):  # type: ignore[no-untyped-def]
    norm = normalize_placements(placements, len(shape), mesh)
    target, out, _ = P._propagate(norm, shape, rule, mesh, complex_view)
    return (
        tuple(P._merge_target(placements, target)),
        tuple(to_torch_placement(p) for p in out),
    )


def _valid(shape, to, target, out, mesh) -> bool:  # type: ignore[no-untyped-def]
    def local(t: torch.Tensor, local_shape: tuple[int, ...]) -> torch.Tensor:
        return t.reshape(local_shape)

    verdict = oracle.check_view(shape, target, out, mesh, lambda g: g.reshape(to), local)
    return verdict.ok


CASES: list[
    tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[Placement, ...], object]
] = [
    # (shape, view to, mesh, placements, want (target, out))
    # A flatten keeps an uneven Shard when each block's chunk is whole rows.
    ((3, 33), (99,), (6,), (Shard(1),), ((Shard(1),), (_StridedShard(0, split_factor=3),))),
    (
        (4, 15, 128),
        (60, 128),
        (4,),
        (Shard(1),),
        ((Shard(1),), (_StridedShard(0, split_factor=4),)),
    ),
    # ... and replicates it when the flattened chunk is not whole rows.
    ((15, 16), (240,), (8,), (Shard(0),), ((R,), (R,))),
    ((6, 256), (1536,), (8,), (Shard(0),), ((R,), (R,))),
    # Split of an uneven dim: kept on the first piece only if its chunk is whole rows.
    ((4,), (2, 2), (3,), (Shard(0),), ((Shard(0),), (Shard(0),))),
    ((441, 63), (63, 7, 63), (6,), (Shard(0),), ((R,), (R,))),
    # Mesh dims in order: the first moves, the second then keeps its dim.
    (
        (3, 3),
        (9,),
        (2, 3),
        (Shard(0), Shard(1)),
        ((R, Shard(1)), (R, _StridedShard(0, split_factor=3))),
    ),
    ((945,), (15, 63), (2, 3), (Shard(0), Shard(0)), ((R, Shard(0)), (R, Shard(0)))),
    # A kept uneven Shard of a later dim leaves the earlier dim's Shard whole rows.
    (
        (63, 33),
        (2079,),
        (2, 3),
        (Shard(1), Shard(0)),
        ((Shard(1), Shard(0)), (_StridedShard(0, split_factor=63), Shard(0))),
    ),
    # A chain of Shards of one dim: once each rank holds one row of the first piece, the
    # next Shard splits the next piece.
    ((22,), (2, 11), (2, 2), (Shard(0), Shard(0)), ((Shard(0), Shard(0)), (Shard(0), Shard(1)))),
    # ... and a piece a Shard cannot keep is not skipped by the Shards after it.
    ((330,), (2, 5, 33), (2, 2, 2), (Shard(0),) * 3, ((Shard(0), R, R), (Shard(0), R, R))),
    # A chain in a split of a flatten whose piece holds all of the dim: each Shard reads
    # the dim's local sizes so far, as in a flatten (here 9 rows of d0 in the piece).
    (
        (99, 33),
        (11, 297),
        (2, 4, 2),
        (Shard(1),) * 3,
        ((Shard(1),) * 3, (_StridedShard(1, split_factor=9),) * 3),
    ),
    # Two dims of a split of a flatten, each read in its own piece: d0 in the first as a
    # split (whole rows of 264), d1 in the second as a flatten (8 rows of d0 before it).
    (
        (2112, 17),
        (264, 136),
        (2, 2, 4),
        (Shard(1), Shard(0), Shard(1)),
        (
            (Shard(1), Shard(0), Shard(1)),
            (_StridedShard(1, split_factor=8), Shard(0), _StridedShard(1, split_factor=8)),
        ),
    ),
    # Two dims kept in one piece of a split of a flatten: the piece (16 rows of d0, d1, the
    # first 2 rows of d2) is read as a flatten, where d2's rows are already split by mesh 0
    # (one per rank), so d1 keeps its uneven Shard with 16 rows before it, and so does d0
    # with both after it.
    (
        (16, 27, 6),
        (864, 3),
        (2, 2, 4),
        (Shard(2), Shard(1), Shard(0)),
        (
            (Shard(2), Shard(1), Shard(0)),
            (_StridedShard(0, split_factor=432), _StridedShard(0, split_factor=16), Shard(0)),
        ),
    ),
    # ... and one that cannot stay there: d1 (63 over 2) before d2's 4 local rows.
    (
        (126, 63, 16),
        (2, 63504),
        (2, 4, 2),
        (Shard(0), Shard(2), Shard(1)),
        (
            (Shard(0), Shard(2), R),
            (Shard(0), _StridedShard(1, split_factor=3969), R),
        ),
    ),
    # A rule view_as_complex may have (the op unknown), its pairs dim whole on every rank:
    # the real view's answer holds for both ops. Here 3 rows over 2 ranks: 4 reals on rank
    # 0 is not half of 6, so the mesh dim moves (view_as_complex alone would keep it).
    ((3, 2), (6,), (2,), (Shard(0),), ((R,), (R,))),
    ((3, 2), (6,), (4,), (Shard(0),), ((Shard(0),), (Shard(0),))),
    # Partial and dims moved whole are carried.
    (
        (5, 7, 6),
        (5, 42),
        (2, 2),
        (Partial(), Shard(0)),
        ((Partial(), Shard(0)), (Partial(), Shard(0))),
    ),
]


@pytest.mark.parametrize(("shape", "to", "mesh", "placements", "want"), CASES)
def test_uneven_answer_equals_the_fallback_and_is_valid(shape, to, mesh, placements, want) -> None:  # type: ignore[no-untyped-def]
    rule = view_groups(shape, to)
    answer = uneven_answer(placements, shape, rule, mesh, None)
    assert answer == want
    assert answer == _general(placements, shape, rule, mesh)
    assert _valid(shape, to, *answer, mesh)
    assert cute_shard.propagate_shape_and_sharding(placements, shape, rule, mesh) == want
    strict = uneven_answer(placements, shape, rule, mesh, None, strict=True)
    assert strict == (want if want[0] == placements else None)


@pytest.mark.parametrize(
    ("shape", "rule", "mesh", "placements"),
    [
        # A layout expresses it (even): the layout search decides, not this path.
        ((4, 8), view_groups((4, 8), (32,)), (2,), (Shard(0),)),
        # A split of a flatten.
        ((3, 10), view_groups((3, 10), (5, 6)), (2,), (Shard(1),)),
        # A sharded size-1 dim, a _StridedShard outside an InputDim.
        ((1, 5), flatten(2), (2,), (Shard(0),)),
        ((6, 5), flatten(2), (2,), (_StridedShard(1, split_factor=2),)),
        # A rule view_as_complex may have, with the pairs dim sharded.
        ((3, 2), flatten(2), (4,), (Shard(1),)),
        # A chain link whose earlier links leave some ranks fewer rows than it has ranks,
        # after a kept dim before it: several split factors give every rank the same
        # elements (here 2 and 3), and the fallback picks one by its own order.
        ((4, 4), view_groups((4, 4), (2, 8)), (2, 3, 2), (Shard(0), Shard(1), Shard(1))),
        # After the first Shard the first piece has 2 rows on some ranks, 1 on others: the
        # second Shard keeps whole rows on the first kind only; the fallback decides.
        ((21,), view_groups((21,), (7, 3)), (4, 2), (Shard(0), Shard(0))),
    ],
)
def test_uneven_answer_leaves_the_rest_to_the_general_engine(shape, rule, mesh, placements) -> None:  # type: ignore[no-untyped-def]
    assert uneven_answer(placements, shape, rule, mesh, None) is None


def test_chunk_comparisons() -> None:
    # 15 rows over 4 ranks: 4 rows of 128 (512) on rank 0, but 1920 / 4 = 480.
    assert not flatten_keeps(15, 128, 4)
    assert flatten_keeps(15, 1, 4)
    assert flatten_keeps(33, 1, 6)
    assert not flatten_keeps(6, 256, 8)
    # 4 = (2, 2) on 3 ranks: chunks [2, 2, 0] of the dim, [1, 1, 0] rows of the first piece.
    assert split_keeps(2, 2, 3)
    assert not split_keeps(63, 7, 6)
    assert all(
        flatten_keeps(s, v, n) == (math.ceil(s * v / n) == math.ceil(s / n) * v)
        for s in range(1, 20)
        for v in range(0, 6)
        for n in range(2, 6)
    )


def test_splits_of_flattens_of_small_shapes_equal_the_fallback() -> None:
    """Every split of a flatten of two small dims, every Shard/Replicate on two 3-D meshes:
    wherever the hot path answers, the fallback gives the same answer."""
    answered = 0
    for shape in itertools.product((2, 3, 4, 5, 6, 8), repeat=2):
        total = math.prod(shape)
        for first in range(2, total):
            if total % first:
                continue
            rule = view_groups(shape, (first, total // first))
            for mesh in ((2, 3, 2), (3, 2, 2)):
                for dims in itertools.product(range(3), repeat=3):
                    placements = tuple(R if d == 2 else Shard(d) for d in dims)
                    answer = uneven_answer(placements, shape, rule, mesh, None)
                    if answer is not None:
                        answered += 1
                        assert answer == _general(placements, shape, rule, mesh), (
                            shape,
                            first,
                            mesh,
                            placements,
                        )
    assert answered > 1000


def test_rules_view_as_complex_may_have_equal_the_fallback() -> None:
    """``(..., flat(d(n-2), d(n-1)))`` with a last dim of 2, every Shard/Replicate, the op
    unknown, view_as_complex or a real view: wherever the hot path answers, the fallback
    gives the same answer."""
    answered = 0
    shapes = [(a, 2) for a in range(2, 14)] + [(a, b, 2) for a in (2, 3, 5) for b in (3, 4, 7)]
    for shape in shapes:
        rule = flatten(len(shape), len(shape) - 2, len(shape) - 1)
        for mesh in ((2,), (3,), (4,), (2, 3), (3, 2), (2, 2, 2)):
            for dims in itertools.product(range(len(shape) + 1), repeat=len(mesh)):
                placements = tuple(R if d == len(shape) else Shard(d) for d in dims)
                for complex_view in (None, True, False):
                    answer = uneven_answer(placements, shape, rule, mesh, complex_view)
                    if answer is None:
                        continue
                    answered += 1
                    general = _general(placements, shape, rule, mesh, complex_view)
                    assert answer == general, (shape, mesh, placements, complex_view)
    assert answered > 1000

"""The hot path reads a ``GroupedRule``'s groups instead of scanning and checking the rule.

That path must give exactly what the scan gives on the same rule as a plain tuple (the
answer, the mesh dims that move when it answers, the placements it parsed), and must only be
taken for the shape the rule was built for.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from torch._dynamo.source import ConstantSource
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from cute_shard import propagate_shape_and_sharding as propagate
from cute_shard.engine.fast import fast_propagate, leaf_propagate, search_moves
from cute_shard.engine.fast_uneven import uneven_answer
from cute_shard.rules import GroupedRule, view_groups

VIEWS = [
    ((24,), (2, 12)),
    ((24,), (2, 3, 4)),
    ((24, 64), (2, 12, 8, 8)),
    ((6, 4, 32), (24, 4, 8)),
    ((2, 16, 6), (8, 4, 6)),
    ((4, 6, 8), (4, 2, 3, 8)),
    ((12, 1, 8), (3, 4, 1, 8)),
    ((8, 6), (2, 4, 1, 6)),
    ((3, 8, 2), (6, 4, 2)),
    ((16, 2), (4, 4, 2)),
    ((2, 3, 4), (6, 2, 2)),
    ((18, 4), (9, 2, 4)),
]
MESHES = [(2,), (4,), (2, 2), (2, 3), (4, 2), (2, 2, 2)]


def _placements(ndim: int, mesh: tuple[int, ...]) -> list[tuple[Any, ...]]:
    choices: list[Any] = [Replicate(), Partial()]
    for d in range(ndim):
        choices += [Shard(d), _StridedShard(d, split_factor=2), _StridedShard(d, split_factor=3)]
    return list(itertools.product(choices, repeat=len(mesh)))


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (ValueError, RuntimeError) as e:
        return type(e).__name__


@pytest.mark.parametrize("view", VIEWS, ids=str)
def test_the_grouped_path_is_the_scan(view: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    shape, new = view
    rule = view_groups(shape, new)
    assert type(rule) is GroupedRule
    plain = tuple(rule)
    answered = 0
    for mesh in MESHES:
        for placements in _placements(len(shape), mesh):
            for complex_view in (None, False):
                runs = []
                for r in (rule, plain):
                    moved, parsed = [0], []
                    out = fast_propagate(placements, shape, r, mesh, complex_view, moved, parsed)
                    runs.append((out, moved if out is not None else None, parsed))
                assert runs[0] == runs[1], (placements, mesh, complex_view)
                answered += runs[0][0] is not None
            assert _outcome(propagate, placements, shape, rule, mesh) == _outcome(
                propagate, placements, shape, plain, mesh
            )
    assert answered > 50


def test_views_of_more_than_64_dims() -> None:
    shape = (4,) + (1,) * 62 + (2, 2, 3)  # (a Flatten of dims 1..65: built the other way)
    rule = view_groups(shape, (2, 2, 12))
    assert type(rule) is GroupedRule
    for placements in [(Shard(64),), (Shard(0),), (Shard(63), Shard(0)), (Shard(0), Shard(65))]:
        mesh = (2,) * len(placements)
        got = propagate(placements, shape, rule, mesh)
        assert got == propagate(placements, shape, tuple(rule), mesh)
    assert propagate((Shard(64),), shape, rule, (2,))[1] == (_StridedShard(2, split_factor=2),)


def test_a_rule_given_another_shape_is_scanned() -> None:
    rule = view_groups((4, 6), (2, 2, 6))  # the table holds for (4, 6) only
    placements = (Shard(0),)
    for shape in [(6, 4), (2, 12), (4, 6, 1)]:
        assert fast_propagate(placements, shape, rule, (2,), None) == fast_propagate(
            placements, shape, tuple(rule), (2,), None
        )
        assert _outcome(propagate, placements, shape, rule, (2,)) == _outcome(
            propagate, placements, shape, tuple(rule), (2,)
        )
    with pytest.raises(ValueError):
        propagate(placements, (6, 4), rule, (2,))


def test_symbolic_sizes_are_not_compared_with_the_table() -> None:
    # Comparing a SymInt with an int would install a guard: the table is only read for ints.
    env = ShapeEnv(duck_shape=False)
    s0 = env.create_symintnode(env.create_symbol(4, ConstantSource("s0")), hint=4)
    rule = view_groups((4, 6), (2, 2, 6))
    assert fast_propagate((Shard(1),), (s0, 6), rule, (2,), None) is None
    assert list(env.guards) == []


UNEVEN_VIEWS = [
    ((15,), (3, 5)),
    ((21, 4), (3, 7, 4)),
    ((6, 5), (2, 15)),
    ((9, 10), (3, 30)),
    ((5, 6, 7), (5, 3, 14)),
    ((7, 6), (7, 2, 3)),
    ((10, 3), (2, 5, 3)),
]


@pytest.mark.parametrize("view", UNEVEN_VIEWS, ids=str)
def test_the_uneven_path_reads_the_same_groups(view: tuple[tuple[int, ...], ...]) -> None:
    shape, new = view
    rule = view_groups(shape, new)
    assert type(rule) is GroupedRule
    plain = tuple(rule)
    answered = 0
    for mesh in [(2,), (4,), (2, 2), (2, 3), (4, 2)]:
        for placements in _placements(len(shape), mesh):
            for strict in (False, True):
                got = uneven_answer(placements, shape, rule, mesh, None, strict)
                assert got == uneven_answer(placements, shape, plain, mesh, None, strict)
                answered += got is not None
    assert answered > 10


@pytest.mark.parametrize("view", VIEWS[:8], ids=str)
def test_the_leaf_pass_reads_the_same_groups(view: tuple[tuple[int, ...], ...]) -> None:
    shape, new = view
    rule = view_groups(shape, new)
    plain = tuple(rule)
    searched = 0
    for mesh in [(2, 2), (2, 3), (4, 2), (2, 2, 2)]:
        for placements in _placements(len(shape), mesh):
            got = search_moves(placements, shape, rule, mesh, None)
            assert got == search_moves(placements, shape, plain, mesh, None)
            assert leaf_propagate(placements, shape, rule, mesh, None) == leaf_propagate(
                placements, shape, plain, mesh, None
            )
            searched += got is not None and got[0] != placements
    assert searched > 3

"""Views of empty tensors (a size-0 dim: an empty batch).

Every rank's shard of an empty tensor is empty, and a local view of an empty tensor to any
empty shape works, so every placement stays: the input target is the input and the output is
valid on every rank. Each case runs every placement list over small meshes, in both modes,
against the oracle (``cute_shard.oracle``).
"""

from __future__ import annotations

import itertools

import pytest
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard, _StridedShard

import cute_shard
import cute_shard.rules as R
from cute_shard import oracle as O

# (input shape, view target): size-0 dims moved whole, merged, split and moved across groups
VIEWS = [
    ((0, 8), (0,)),
    ((0, 8), (4, 0, 2)),
    ((5, 0, 2), (5, 0, 2)),
    ((2, 0, 3), (6, 0)),
    ((0,), (0, 1)),
    ((4, 0), (2, 2, 0)),
    ((0, 4, 6), (0, 24)),
]
MESHES = [(2,), (3,), (2, 2)]


def _placement_lists(ndim: int, mesh: tuple[int, ...]) -> list[tuple[Placement, ...]]:
    one: list[Placement] = [Replicate()]
    one += [Shard(d) for d in range(ndim)]
    one += [_StridedShard(d, split_factor=2) for d in range(ndim)]
    return list(itertools.product(one, repeat=len(mesh)))


@pytest.mark.parametrize(("shape", "target"), VIEWS, ids=[f"{s}->{t}" for s, t in VIEWS])
@pytest.mark.parametrize("mesh", MESHES, ids=[str(m) for m in MESHES])
def test_every_placement_of_an_empty_tensor_stays(
    shape: tuple[int, ...], target: tuple[int, ...], mesh: tuple[int, ...]
) -> None:
    rule = R.view_groups(shape, target)
    for placements in _placement_lists(len(shape), mesh):
        for strict in (False, True):
            got_target, out = cute_shard.propagate_shape_and_sharding(
                list(placements), shape, rule, mesh, strict
            )
            assert tuple(got_target) == placements, (placements, strict)
            verdict = O.check_op(
                shape, "view", (target,), got_target, out, mesh, strict_view=strict
            )
            assert verdict.ok, (placements, strict, out, verdict.reason)


def test_a_view_of_an_empty_tensor_has_a_rule() -> None:
    """(torch 2.13's builder does not return on this input.)"""
    assert R.format_rule(R.view_groups((0, 8), (0,))) == "(flat(d0,d1),)"

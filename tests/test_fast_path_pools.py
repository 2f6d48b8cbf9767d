"""The hot path against the general engine on the benchmark's case pools.

The pools are what the benchmark times: seeded views of every static family (flatten,
unflatten, reshape, permute, squeeze, expand, _StridedShard inputs, uneven sizes) on 1-D,
2-D and 3-D meshes, many of them needing some mesh dims to move. Wherever the hot path
answers (``fast_answer``), the general engine must give the same input target and output.
"""

from __future__ import annotations

import pytest

from bench.propagate_cases import BUILDERS, make_pool
from cute_shard.engine import propagate as P
from cute_shard.engine.fast import fast_answer
from cute_shard.engine.sharded import normalize_placements, to_torch_placement

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
    answered = moved = 0
    for rank in (1, 2, 3):
        for c in make_pool(family, rank, 192):
            rule = BUILDERS[c.op][0](*c.args)
            answer = fast_answer(c.placements, c.shape, rule, c.mesh, None)
            if answer is None:
                continue
            answered += 1
            moved += answer[0] != tuple(c.placements)
            assert answer == _general(c.placements, c.shape, rule, c.mesh, None), str(c)
    assert answered > 0
    if family in ("unflatten", "reshape", "strided"):
        assert moved > 20, f"only {moved} views that move mesh dims were answered"

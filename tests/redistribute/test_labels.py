"""The ownership labels the planner reads (``cute_shard/redistribute/labels.py``), held to
the oracle and to the layout algebra.

- ``dim_runs`` against ``oracle.local_indices``: for every dim size 0-13 and every stack of
  one or two placements (mesh sizes 1-4, split factors 1, 2, 3, 5; a seeded sample of three),
  the positions labelled with a coordinate are exactly that rank's local indices, in order,
  and the runs are sorted, disjoint, cover the dim and are merged.
- the labels are the layout's: for even shardings, ``placements_to_layout`` gives each dim's
  leaves tagged with mesh dims; the owner of position p on mesh dim m is the mixed radix
  digits of p at m's gpu leaves (colexicographic by part), and equals the runs' label.
- "a mesh dim whose gpu sub-mode is the same in source and target moves nothing": for even
  pairs, a mesh dim (size > 1) has no move in the plan exactly when its gpu sub-mode layout
  (tensor dim, leaves' sizes and strides) is the same in both.
- ``DimLabels`` (``counts``, ``local_ranges``) on the design brief's example; one side's
  counts, which it reads off the levels without cutting runs, against the oracle on the
  grid above.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

import pytest
from torch.distributed.tensor.placement_types import Placement, Shard, _StridedShard

from cute_shard import oracle
from cute_shard.engine import placements_to_layout
from cute_shard.engine.sharded import LOCAL, DimSharding
from cute_shard.notation import PlacementSpec
from cute_shard.redistribute import plan_redistribution
from cute_shard.redistribute.labels import DST, SRC, dim_labels, dim_runs

LEVELS = [(size, sf) for size in (1, 2, 3, 4) for sf in (1, 2, 3, 5)]


def _placement(sf: int) -> Placement:
    return Shard(0) if sf == 1 else _StridedShard(0, split_factor=sf)


def _check_runs(n: int, levels: tuple[tuple[int, int], ...]) -> None:
    runs = dim_runs(n, levels)
    # Post: sorted, disjoint, covering [0, n), neighbours labelled differently (merged)
    assert all(a < b for a, b, _ in runs)
    assert all(x[1] == y[0] for x, y in itertools.pairwise(runs))
    assert (runs[0][0], runs[-1][1]) == (0, n) if runs else n == 0
    assert all(x[2] != y[2] for x, y in itertools.pairwise(runs))
    mesh = tuple(size for size, _ in levels)
    placements = [_placement(sf) for _, sf in levels]
    # one side's counts, which ``DimLabels`` reads off the levels without the runs: each
    # coordinate's count of local positions, on either side, and no label without positions
    stack = tuple((m, size, sf) for m, (size, sf) in enumerate(levels))
    source, target = dim_labels(n, stack, ()), dim_labels(n, (), stack)
    counts = source.counts(source.slots)
    assert target.counts(target.slots) == counts
    assert 0 not in counts.values()
    for coord in itertools.product(*(range(size) for size in mesh)):
        mine = [p for a, b, lab in runs if lab == coord for p in range(a, b)]
        (want,) = oracle.local_indices((n,), placements, mesh, coord)
        assert mine == want.tolist(), f"n={n} levels={levels} coord={coord}"
        assert counts.get(coord, 0) == len(want), f"n={n} levels={levels} coord={coord}"


@pytest.mark.parametrize("n", range(14))
def test_dim_runs_match_oracle_one_and_two_levels(n: int) -> None:
    for level in LEVELS:
        _check_runs(n, (level,))
    for pair in itertools.product(LEVELS, repeat=2):
        _check_runs(n, pair)


def test_dim_runs_match_oracle_three_levels() -> None:
    rng = random.Random(3)
    for _ in range(400):
        n = rng.choice((0, 1, 5, 7, 8, 12, 16, 24, 30, 31))
        _check_runs(n, tuple(rng.choice(LEVELS) for _ in range(3)))


def test_dim_runs_example() -> None:
    """The module docstring's worked example."""
    assert dim_runs(12, ((2, 1),)) == ((0, 6, (0,)), (6, 12, (1,)))
    assert dim_runs(12, ((3, 1), (2, 2)))[:5] == (
        (0, 1, (0, 0)),
        (1, 2, (0, 1)),
        (2, 3, (0, 0)),
        (3, 4, (0, 1)),
        (4, 5, (1, 0)),
    )


def test_dim_labels_counts_and_ranges() -> None:
    """(12,) on (3, 2): source [R, S0], target [S0, SS0:2]: the rank at (0, 1) holds 6-11
    and needs 1 and 3 (the docstring's example), read through ``DimLabels``."""
    labels = dim_labels(12, ((1, 2, 1),), ((0, 3, 1), (1, 2, 2)))
    assert labels.slots == ((SRC, 1), (DST, 0), (DST, 1))
    src, dst = ((SRC, 1),), ((DST, 0), (DST, 1))
    assert labels.counts(src) == {(0,): 6, (1,): 6}
    assert labels.counts(dst) == {(c0, c1): 2 for c0 in range(3) for c1 in range(2)}
    # of what (0, 1) needs, the local ranges it holds in the source: none; (0, 0) holds both
    assert labels.local_ranges(dst, (0, 1), src, (1,)) == ()
    assert labels.local_ranges(dst, (0, 1), src, (0,)) == ((0, 2),)
    assert labels.local_ranges(src, (0,), dst, (0, 1)) == ((1, 2), (3, 4))
    assert [p for a, b, _ in labels.positions(dst, (0, 1)) for p in range(a, b)] == [1, 3]


# ------------------------------------------------------------------ labels are the layout's


MESHES = [(2,), (4,), (8,), (2, 2), (2, 4), (4, 2), (2, 2, 2), (1, 4), (2, 1, 2)]


def _random_placements(
    rng: random.Random, ndim: int, mesh: Sequence[int]
) -> tuple[PlacementSpec, ...]:
    out = []
    for _ in mesh:
        r = rng.random()
        d = rng.randrange(ndim)
        if r < 0.2:
            out.append(PlacementSpec("R"))
        elif r < 0.55:
            out.append(PlacementSpec("S", d))
        else:
            out.append(PlacementSpec("SS", d, rng.choice((2, 4))))
    return tuple(out)


def _owners(dim: DimSharding, mesh: Sequence[int], n: int) -> dict[int, list[int]]:
    """Per mesh dim with gpu leaves on ``dim``, the owner coordinate of each position: the
    digits of p at that mesh dim's leaves, the coordinate colexicographic by part."""
    out: dict[int, list[int]] = {}
    strides = [math.prod(s for s, _, _ in dim.leaves[:i]) for i in range(len(dim.leaves))]
    for m in sorted({mesh_dim for _, mesh_dim, _ in dim.leaves if mesh_dim != LOCAL}):
        leaves = sorted(
            (part, size, stride)
            for (size, mesh_dim, part), stride in zip(dim.leaves, strides, strict=True)
            if mesh_dim == m
        )
        owner = []
        for p in range(n):
            coord, scale = 0, 1
            for _, size, stride in leaves:
                coord += (p // stride) % size * scale
                scale *= size
            owner.append(coord)
        assert scale == mesh[m]
        out[m] = owner
    return out


def _even_cases(
    count: int, seed: int
) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[PlacementSpec, ...]]]:
    """Random (shape, mesh, placements) whose sharding has a layout (even)."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        mesh = rng.choice(MESHES)
        ndim = rng.randint(1, 3)
        shape = tuple(rng.choice((1, 2, 4, 8, 16, 32)) for _ in range(ndim))
        ps = _random_placements(rng, ndim, mesh)
        layout = placements_to_layout(shape, [p.to_torch() for p in ps], mesh)
        if layout is not None:
            out.append((shape, mesh, ps))
    return out


def test_runs_are_the_layouts_owners() -> None:
    for shape, mesh, ps in _even_cases(300, seed=11):
        layout = placements_to_layout(shape, [p.to_torch() for p in ps], mesh)
        assert layout is not None
        for d, (n, dim) in enumerate(zip(shape, layout.dims, strict=True)):
            levels = tuple(
                (mesh[m], p.split_factor)
                for m, p in enumerate(ps)
                if p.shards and p.dim == d and mesh[m] > 1
            )
            sharding = [m for m, p in enumerate(ps) if p.shards and p.dim == d and mesh[m] > 1]
            owners = _owners(dim, mesh, n)
            assert set(owners) == set(sharding), f"{shape} {mesh} {ps} d{d}"
            label_of = [lab for a, b, lab in dim_runs(n, levels) for _ in range(a, b)]
            for i, m in enumerate(sharding):
                assert [lab[i] for lab in label_of] == owners[m], (
                    f"{shape} on {mesh} {ps}: d{d}, mesh dim {m}"
                )


def _gpu_modes(
    shape: tuple[int, ...], mesh: tuple[int, ...], ps: tuple[PlacementSpec, ...]
) -> dict[int, tuple[int, tuple[tuple[int, int], ...]]]:
    """Per sharding mesh dim (size > 1): (tensor dim, its gpu sub-mode's (size, stride)s)."""
    layout = placements_to_layout(shape, [p.to_torch() for p in ps], mesh)
    assert layout is not None
    out = {}
    for d, dim in enumerate(layout.dims):
        _, gpu = dim.modes()
        for m, leaves in gpu.items():
            out[m] = (d, leaves)
    return out


def test_same_gpu_sub_mode_moves_nothing() -> None:
    """For even pairs: mesh dim m has no move exactly when its gpu sub-mode (tensor dim,
    sizes, strides) is the same in source and target (both unsharded counts as the same when
    the placements are equal)."""
    cases = _even_cases(600, seed=12)
    rng = random.Random(13)
    kept = moved = 0
    for shape, mesh, src in cases:
        # a target on the same mesh and shape with a layout, often sharing mesh dims
        for _ in range(20):
            dst = tuple(
                p if rng.random() < 0.4 else q
                for p, q in zip(src, _random_placements(rng, len(shape), mesh), strict=True)
            )
            if placements_to_layout(shape, [p.to_torch() for p in dst], mesh) is not None:
                break
        else:
            continue
        a, b = _gpu_modes(shape, mesh, src), _gpu_modes(shape, mesh, dst)
        plan = plan_redistribution(shape, mesh, src, dst)
        moving = {move.mesh_dim for move in plan.moves}
        in_steps = {m for step in plan.steps for m in step.mesh_dims}
        assert in_steps <= moving
        for m in range(len(mesh)):
            if mesh[m] == 1:
                assert m not in moving
                continue
            if m in a or m in b:
                same = a.get(m) == b.get(m)
            else:
                same = src[m] == dst[m]
            assert same == (m not in moving), (
                f"{shape} on {mesh}: {src} -> {dst}: mesh dim {m}: source {a.get(m)}, "
                f"target {b.get(m)}, moves {sorted(moving)}"
            )
            kept += same
            moved += not same
    assert kept > 200 and moved > 200, (kept, moved)

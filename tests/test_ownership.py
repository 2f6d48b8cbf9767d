"""The owner grid (``ownership.picture``) the command line and ``visualize`` draw.

Its axes are runs read off each dim's ownership runs. Checked here against the oracle element
by element (every position's shard id is what ``oracle.local_indices`` says, uneven and
strided shards and every tensor rank included), and on dims too long to hold element by
element: a picture costs the runs, not the elements.
"""

from __future__ import annotations

import itertools
import math
import random
import time

import numpy as np
import pytest

from cute_shard import oracle
from cute_shard.chunks import chunk_size
from cute_shard.notation import PlacementSpec, parse_placements
from cute_shard.ownership import grid_lines, picture, row_strides


def _oracle_ids(
    shape: tuple[int, ...], ps: tuple[PlacementSpec, ...], mesh: tuple[int, ...]
) -> np.ndarray:
    """The shard id of every element of the fold (rows = leading dims, cols = last dim), from
    the oracle's per-rank index lists."""
    sharded = [m for m, p in enumerate(ps) if p.shards]
    weights = row_strides([mesh[m] for m in sharded])
    ids = np.zeros(shape, dtype=np.int64)
    given = [p.to_torch() for p in ps]
    seen = np.zeros(shape, dtype=np.int64)
    for coord in oracle.mesh_coords(mesh):
        sid = sum(w * coord[m] for m, w in zip(sharded, weights, strict=True))
        block = np.ix_(*oracle.local_indices(shape, given, mesh, coord))
        ids[block] = sid
        seen[block] += 1
    copies = math.prod(mesh[m] for m in range(len(mesh)) if m not in sharded)
    assert (seen == copies).all()  # every element held once per replica
    n_cols = shape[-1] if shape else 1
    return ids.reshape(-1, n_cols)


def _draw(rng: random.Random) -> tuple[tuple[int, ...], tuple[PlacementSpec, ...], tuple[int, ...]]:
    mesh = tuple(rng.choice((1, 2, 3, 4)) for _ in range(rng.randint(1, 3)))
    shape = tuple(rng.randint(0, 13) for _ in range(rng.randint(0, 4)))
    texts = []
    for _ in mesh:
        kind = rng.random()
        if not shape or kind < 0.2:
            texts.append(rng.choice(("R", "P")))
        elif kind < 0.6:
            texts.append(f"S{rng.randrange(len(shape))}")
        else:
            texts.append(f"SS{rng.randrange(len(shape))}:{rng.randint(1, 4)}")
    return shape, parse_placements(",".join(texts), len(shape), mesh), mesh


def test_every_element_has_the_oracles_shard_id() -> None:
    rng = random.Random(0)
    for _ in range(400):
        shape, ps, mesh = _draw(rng)
        pic = picture("x", shape, ps, mesh)
        if 0 in shape:  # nothing to draw, said so (grid and diagram print the note)
            assert pic.rows is None and pic.cols is None and "no elements" in (pic.note or "")
            assert grid_lines(pic) == []
            continue
        assert pic.rows is not None and pic.cols is not None
        got = pic.rows.dense()[:, None] + pic.cols.dense()[None, :]
        want = _oracle_ids(shape, ps, mesh)
        assert got.shape == want.shape, (shape, ps, mesh)
        assert (got == want).all(), (shape, ps, mesh)
        # runs: neighbours differ, and they cover the axis in order
        for axis in (pic.rows, pic.cols):
            runs = axis.runs()
            assert all(a[2] != b[2] and a[1] == b[0] for a, b in itertools.pairwise(runs))
            assert (runs[0][0], runs[-1][1]) == (0, len(axis))


@pytest.mark.parametrize(
    ("placements", "mesh"),
    [("S0", (8,)), ("SS0:3,S0", (2, 4)), ("S0,SS0:5", (4, 2))],
)
def test_a_dim_of_a_trillion_elements_costs_its_runs(
    placements: str, mesh: tuple[int, ...]
) -> None:
    """A flat 10**12 + 7 element buffer: the runs come out in milliseconds (element by
    element it would need terabytes), each run's owners are the chunk model's, and the grid
    names the ranks' ranges."""
    n = 10**12 + 7
    ps = parse_placements(placements, 1, mesh)
    t0 = time.perf_counter()
    pic = picture("flat", (n,), ps, mesh)
    assert time.perf_counter() - t0 < 5  # (seconds: only a wild regression trips it)
    assert pic.cols is not None and len(pic.cols) == n
    runs = pic.cols.runs()
    assert len(runs) <= 64 and runs[0][0] == 0 and runs[-1][1] == n
    if placements == "S0":  # torch.chunk's pieces in rank order
        piece = chunk_size(n, 8)
        assert [(a, v) for a, _, v in runs] == [(k * piece, k) for k in range(8)]
    assert grid_lines(pic)[0].split()[0] == f"0-{runs[0][1] - 1}"

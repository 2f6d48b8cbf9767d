"""The two readings of a ``_StridedShard``: as a split factor (what ``distribute_tensor`` places
and the planner reads) and as an encoded shard order (what a spec with
``use_strided_shard_as_shard_order`` means: the tensor dim is sharded by plain Shards, in the
order of its mesh dims that ``DTensorSpec._maybe_convert_StridedShard_to_shard_order`` decodes).

``cute_shard/redistribute/dtensor.py`` reads both by split factor, on the claim that wherever
the order decodes the two place the same data. Checked exhaustively: every placement list of R,
``Shard(d)`` and ``_StridedShard(d, sf)`` (sf 2-8) on every mesh of 1-3 dims with at most 8
ranks, for tensors of 1 and 2 dims, whose ``_StridedShard``s decode (the decoder needs a
``DeviceMesh``: fake worlds), on every rank:

- even sizes (each dim of size 840, which every product of mesh sizes and split factors up to
  8 divides, and of the smallest size the dim's mesh dims divide): the same data, always;
- uneven sizes: not always; ``test_uneven_sizes_can_differ`` pins the smallest counterexample,
  so the claim holds for even sizes only.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrder
from torch.distributed.tensor.placement_types import Placement, _StridedShard
from torch.testing._internal.distributed.fake_pg import FakeStore

from cute_shard import oracle

MESHES = [
    mesh
    for ndim in (1, 2, 3)
    for mesh in itertools.product(range(1, 9), repeat=ndim)
    if math.prod(mesh) <= 8
]
EVEN = 840  # lcm(1..8)


Decoded = tuple[tuple[int, ...], int, tuple[Placement, ...], ShardOrder]


@dataclass(frozen=True)
class Enumeration:
    """How many placement lists were tried, and each (mesh, tensor ndim, placements, decoded
    order) with a ``_StridedShard`` whose order decodes."""

    tried: int
    cases: tuple[Decoded, ...]


@functools.cache
def enumeration() -> Enumeration:
    found = []
    tried = 0
    by_size: dict[int, list[tuple[int, ...]]] = collections.defaultdict(list)
    for mesh in MESHES:
        by_size[math.prod(mesh)].append(mesh)
    for size, meshes in sorted(by_size.items()):
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
        try:
            for shape in meshes:
                mesh = init_device_mesh("cpu", shape)
                for ndim in (1, 2):
                    for ps in _placement_lists(len(shape), ndim):
                        tried += 1
                        if not any(isinstance(p, _StridedShard) for p in ps):
                            continue
                        order = DTensorSpec._maybe_convert_StridedShard_to_shard_order(ps, mesh)
                        if order is not None:
                            found.append((shape, ndim, ps, order))
        finally:
            dist.destroy_process_group()
    return Enumeration(tried, tuple(found))


def decodable() -> tuple[Decoded, ...]:
    return enumeration().cases


def _placement_lists(mesh_ndim: int, ndim: int) -> Iterator[tuple[Placement, ...]]:
    options: list[Placement] = [Replicate()]
    options += [Shard(d) for d in range(ndim)]
    options += [_StridedShard(d, split_factor=sf) for d in range(ndim) for sf in range(2, 9)]
    return itertools.product(options, repeat=mesh_ndim)


def shard_order_indices(
    shape: tuple[int, ...], order: ShardOrder, mesh: tuple[int, ...], coord: tuple[int, ...]
) -> list[np.ndarray]:
    """Per tensor dim, the positions a rank holds when each dim is sharded by plain Shards in
    the order's mesh dims, one after another (torch.chunk of what the previous ones left)."""
    out = [np.arange(n) for n in shape]
    for entry in order:
        idx = out[entry.tensor_dim]
        for m in entry.mesh_dims:
            size = -(-len(idx) // mesh[m])
            idx = idx[coord[m] * size : (coord[m] + 1) * size]
        out[entry.tensor_dim] = idx
    return out


def _differences(
    shape: tuple[int, ...], mesh: tuple[int, ...], ps: tuple[Placement, ...], order: ShardOrder
) -> list[tuple[tuple[int, ...], int, list[int], list[int]]]:
    out = []
    for coord in itertools.product(*(range(n) for n in mesh)):
        by_split_factor = oracle.local_indices(shape, ps, mesh, coord)
        by_order = shard_order_indices(shape, order, mesh, coord)
        for d, (a, b) in enumerate(zip(by_split_factor, by_order, strict=True)):
            if not np.array_equal(a, b):
                out.append((coord, d, a.tolist(), b.tolist()))
    return out


def _even_shapes(
    mesh: tuple[int, ...], ps: tuple[Placement, ...], ndim: int
) -> list[tuple[int, ...]]:
    smallest = []
    for d in range(ndim):
        n = math.prod(mesh[m] for m, p in enumerate(ps) if getattr(p, "dim", None) == d)
        smallest.append(n)
    return [tuple(smallest), (EVEN,) * ndim]


def test_shard_order_places_the_split_factor_data_on_even_sizes() -> None:
    cases = decodable()
    checked = 0
    for mesh, ndim, ps, order in cases:
        for shape in _even_shapes(mesh, ps, ndim):
            diff = _differences(shape, mesh, ps, order)
            assert not diff, f"{shape} on {mesh}: {ps} decodes to {order}; differ: {diff[:2]}"
            checked += 1
    # every list of the enumeration was tried, and enough of them decode to mean something
    assert enumeration().tried > 200_000
    assert len(cases) >= 500, len(cases)
    assert checked == 2 * len(cases)


def test_uneven_sizes_can_differ() -> None:
    """(13,) on mesh (3, 2), [_StridedShard(0, sf=2), Shard(0)] decodes to "mesh dim 1, then
    mesh dim 0". By split factor, mesh dim 0 takes the third third of each half: rank (2, *)
    holds 6, 11, 12, and mesh dim 1 halves that: (2, 0) holds 6, 11. By the order, mesh dim 1
    halves 13 into 0-6 and 7-12, then mesh dim 0 takes thirds of those: (2, 0) holds 6 only,
    (2, 1) holds 11, 12. So the readings agree on even sizes only."""
    ps = (_StridedShard(0, split_factor=2), Shard(0))
    ((mesh, _, _, order),) = [c for c in decodable() if c[:3] == ((3, 2), 1, ps)]
    assert [(e.tensor_dim, e.mesh_dims) for e in order] == [(0, (1, 0))]
    diff = {(coord, tuple(a), tuple(b)) for coord, _, a, b in _differences((13,), mesh, ps, order)}
    assert diff == {((2, 0), (6, 11), (6,)), ((2, 1), (12,), (11, 12))}
    uneven = sum(bool(_differences((13, 7)[:n], m, p, o)) for m, n, p, o in decodable())
    assert 0 < uneven < len(decodable())

"""Large 3-D meshes (64 to 512 ranks) on a fake process group: placements and local shapes.

A fake process group runs one rank of a large world in this process (collectives do nothing).
For a few ranks of each mesh (the first, one inside, the last) the test builds that rank's
local input with the oracle, runs the op through DTensor with cute_shard installed, and checks
the local output shape against the oracle for the placements DTensor reports. Where the view
needed no communication the local data must be exactly the rank's shard of plain torch's
result. The placements must be the same on every rank checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.placement_types import Partial, _StridedShard

import cute_shard
from cute_shard import oracle

from .conftest import fake_world

Rep = Replicate()
MESHES = [(4, 4, 4), (2, 4, 8), (4, 8, 8), (8, 8, 8)]

Fn = Callable[[torch.Tensor], torch.Tensor]


def cases(mesh: tuple[int, ...]) -> list[tuple[str, tuple[int, ...], tuple[Any, ...], Fn, bool]]:
    """(name, global shape, placements, op, zero_comm expected)."""
    a, b, c = mesh
    n = a * b * c
    bsh = (2 * a, 4 * b, 8 * c)  # (batch, sequence, hidden): one mesh dim each
    bb, ss, hh = bsh
    return [
        ("token flatten", bsh, (Shard(0), Shard(1), Shard(2)), lambda t: t.view(bb * ss, hh), True),
        (
            "head split",
            bsh,
            (Shard(0), Shard(1), Shard(2)),
            lambda t: t.view(bb, ss, 2 * c, 4).transpose(1, 2),
            True,
        ),
        (
            "head merge",
            (bb, 2 * c, ss, 4),
            (Shard(0), Shard(2), Shard(1)),
            lambda t: t.transpose(1, 2).reshape(bb, ss, 8 * c),
            True,
        ),
        ("flatten all", bsh, (Shard(0), Shard(1), Shard(2)), lambda t: t.flatten(), False),
        ("stacked unflatten", (2 * n, 6), (Shard(0),) * 3, lambda t: t.view(n, 2, 6), True),
        ("stacked split", (4 * n,), (Shard(0),) * 3, lambda t: t.view(n, 4), True),
        ("stacked refusal", (2 * n, 6), (Shard(0),) * 3, lambda t: t.reshape(2, n, 6), False),
        (
            "strided back",
            (bb * ss, hh),
            (Shard(0), _StridedShard(0, split_factor=bb // a), Shard(1)),
            lambda t: t.view(bb, ss, hh),
            True,
        ),
        (
            "partial permute",
            bsh,
            (Partial(), Shard(1), Shard(2)),
            lambda t: t.permute(2, 0, 1),
            True,
        ),
        (
            "unsqueeze squeeze",
            bsh,
            (Shard(0), Rep, Shard(2)),
            lambda t: t.unsqueeze(1).squeeze(1),
            True,
        ),
        ("expand", (bb, 1, hh), (Shard(0), Rep, Shard(2)), lambda t: t.expand(bb, 3, hh), True),
        ("repeat", (bb, hh), (Shard(0), Shard(1), Rep), lambda t: t.repeat(1, 2), False),
        ("uneven flatten", (n + 3, 4), (Shard(0),) * 3, lambda t: t.reshape(4 * (n + 3)), False),
        ("uneven keep", (n + 3, 2 * c, 2), (Shard(0), Rep, Shard(1)), lambda t: t.flatten(1), True),
    ]


def _ranks(n: int) -> tuple[int, ...]:
    return (0, n // 2 + 3, n - 1)


@pytest.mark.parametrize("mesh_shape", MESHES, ids=lambda m: "x".join(map(str, m)))
def test_large_3d_meshes(mesh_shape: tuple[int, int, int]) -> None:
    n = math.prod(mesh_shape)
    failures: list[str] = []
    for name, shape, placements, fn, zero_comm in cases(mesh_shape):
        g = torch.arange(float(math.prod(shape))).reshape(shape)
        want = fn(g).contiguous()
        seen = set()
        for rank in _ranks(n):
            # Inference mode: a reshape reaches DTensor as aten.reshape (may redistribute).
            with fake_world(n, rank), cute_shard.enabled(), torch.inference_mode():
                mesh = init_device_mesh("cpu", mesh_shape)
                coord = mesh.get_coordinate()
                local = oracle.local_shard(g, placements, mesh_shape, coord)
                stride = tuple(math.prod(shape[d + 1 :]) for d in range(len(shape)))
                dt = DTensor.from_local(
                    local, mesh, placements, run_check=False, shape=torch.Size(shape), stride=stride
                )
                with CommDebugMode() as comm:
                    out = fn(dt)
                seen.add(tuple(out.placements))
                problem = _check(out, want, mesh_shape, coord, comm.get_total_counts(), zero_comm)
                if problem:
                    failures.append(f"{name} rank {rank} {out.placements}: {problem}")
        if len(seen) != 1:
            failures.append(f"{name}: ranks disagree on placements {seen}")
    assert not failures, "\n".join(failures)


def _check(
    out: DTensor,
    want: torch.Tensor,
    mesh_shape: tuple[int, ...],
    coord: list[int],
    comm: int,
    zero_comm: bool,
) -> str:
    expected_shape = oracle.local_shape(tuple(want.shape), out.placements, mesh_shape, coord)
    if tuple(out.to_local().shape) != expected_shape:
        return f"local shape {tuple(out.to_local().shape)}, expected {expected_shape}"
    if zero_comm and comm:
        return f"{comm} collectives where none are needed"
    if not comm and not any(isinstance(p, Partial) for p in out.placements):
        # No communication: the data is real, so it must be this rank's shard exactly.
        if not torch.equal(
            out.to_local(), oracle.local_shard(want, out.placements, mesh_shape, coord)
        ):
            return "local data differs from the oracle's shard"
    return ""

"""Live DTensors in one process, for the explainers' tests: an 8-rank fake process group.

``world8`` (a module-scoped fixture factory) keeps a fake process group of 8 ranks for a test
module; collectives do nothing, which is all that reading a DTensor's shape, mesh and
placements needs. ``make`` builds a DTensor of any global shape and placements (uneven and
``_StridedShard`` included) from a local tensor of the right shape for rank 0, as DTensor
would hold it, without any collective.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Placement
from torch.testing._internal.distributed.fake_pg import FakeStore

from cute_shard import oracle

WORLD = 8


@pytest.fixture(scope="module")
def world8() -> Iterator[None]:
    """A fake process group of 8 ranks (this process is rank 0) for the test module."""
    if dist.is_initialized():  # another module's group: not ours to replace
        pytest.skip(f"a {dist.get_backend()!r} process group is already initialised")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    try:
        yield
    finally:
        dist.destroy_process_group()


def make(
    shape: Sequence[int],
    mesh: DeviceMesh | Sequence[int],
    placements: Sequence[Placement],
    dtype: torch.dtype = torch.float32,
) -> DTensor:
    """A DTensor of global ``shape`` on ``mesh`` (a DeviceMesh or a mesh shape)."""
    device_mesh = mesh if isinstance(mesh, DeviceMesh) else init_device_mesh("cpu", tuple(mesh))
    coord = device_mesh.get_coordinate()
    if coord is None:
        raise ValueError("this rank is not in the mesh")
    local = oracle.local_shape(tuple(shape), list(placements), tuple(device_mesh.shape), coord)
    return DTensor.from_local(
        torch.zeros(local, dtype=dtype),
        device_mesh,
        list(placements),
        run_check=False,
        shape=torch.Size(shape),
        stride=torch.empty(tuple(shape), device="meta").stride(),
    )

"""torch's tensor-parallel styles (``parallelize_module`` with SequenceParallel,
ColwiseParallel, RowwiseParallel) with cute_shard installed, every rank simulated by
``LocalTensorMode`` on a fake world of 4: outputs and gradients equal the single-process
block's, and the styles' redistributions (``async_op=True``) were cute_shard's
(``parallel_programs.py``). The same check runs on 4 real gloo ranks in
``test_redistribute_gloo.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

import cute_shard
from cute_shard import integration

from .parallel_programs import check_styles


@pytest.fixture
def installed() -> Iterator[None]:
    was = integration.is_installed()
    cute_shard.install()
    yield
    if not was:
        cute_shard.uninstall()


def test_sequence_and_tensor_parallel_block_equals_one_process(installed: None) -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        with LocalTensorMode(frozenset(range(4))):
            report = check_styles(init_device_mesh("cpu", (4,)))
    finally:
        dist.destroy_process_group()
    assert not report["problems"], "\n".join(report["problems"])
    assert report["runs"] > 0

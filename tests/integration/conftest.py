"""Fixtures for the DTensor integration tests.

``fake_world(world_size, rank)`` runs a block inside a fake process group (collectives do
nothing), which is enough to check placements, local shapes and propagation on meshes of any
size in this process. Every test leaves cute_shard installed or not as it found it, so the rest
of the suite (which compares against torch's own propagator) is unaffected.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from cute_shard import integration


@contextmanager
def fake_world(world_size: int, rank: int = 0) -> Iterator[None]:
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture(autouse=True)
def _restore_install_state() -> Iterator[None]:
    was = integration.is_installed()
    yield
    if was:
        integration.install()
    else:
        integration.uninstall()


@pytest.fixture
def world8() -> Iterator[None]:
    with fake_world(8):
        yield


@pytest.fixture
def installed() -> Iterator[None]:
    integration.install()
    yield

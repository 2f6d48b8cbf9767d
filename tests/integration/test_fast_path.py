"""install()'s fast path for DTensor cache misses of view ops, as DTensor programs see it.

While installed, a view op's sharding propagation is answered without running the op on fake
tensors and without recomputing the output's local shape (``ViewPropagation``); anything the
fast path cannot produce exactly goes to DTensor's own path, which runs the ViewStrategy. Here,
on a fake process group: that the fake run and the local-shape recomputation are skipped, and
that in grad mode, under no_grad and under inference mode every op gives the DTensor (global
shape, stride, placements, mesh object, local data) that DTensor's own path gives. Field-by-
field equality of the OutputSharding on random schemas is in
``property_tests/test_integration_meta.py``; real ranks in ``test_multirank.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._sharding_prop import ShardingPropagator
from torch.distributed.tensor.placement_types import _StridedShard

import cute_shard
from cute_shard import integration, oracle

from .test_install import dtensor

Rep = Replicate()
aten = torch.ops.aten


@pytest.fixture
def mesh24(world8: None) -> Iterator[DeviceMesh]:
    yield init_device_mesh("cpu", (2, 4))


def propagator() -> Any:
    return DTensor._op_dispatcher.sharding_propagator


@contextlib.contextmanager
def torch_path_only() -> Iterator[None]:
    """While installed: every view op through DTensor's own path (the ViewStrategy)."""
    p = propagator()
    fast = p.propagate_op_sharding_non_cached
    p.propagate_op_sharding_non_cached = integration.ViewPropagation(fast.torch_path, {})
    integration.clear_dtensor_caches()
    try:
        yield
    finally:
        p.propagate_op_sharding_non_cached = fast
        integration.clear_dtensor_caches()


# (name, global shape, placements, dtype, op): the view ops a model calls, with outputs that
# are sharded (a local shape argument), _StridedShard, uneven, Partial, non-contiguous.
OPS: list[tuple[str, tuple[int, ...], tuple[Any, ...], Any, Callable[..., torch.Tensor]]] = [
    ("token flatten", (8, 16, 32), (Shard(0), Shard(1)), None, lambda t: t.view(128, 32)),
    ("head split", (8, 16, 32), (Shard(0), Shard(2)), None, lambda t: t.view(8, 16, 4, 8)),
    ("head merge", (8, 4, 16, 8), (Shard(0), Shard(1)), None, lambda t: t.transpose(1, 2)),
    ("reshape", (8, 16, 32), (Shard(0), Shard(2)), None, lambda t: t.reshape(8, 512)),
    ("flatten", (8, 16, 32), (Shard(0), Shard(1)), None, lambda t: t.flatten(0, 1)),
    (
        "unflatten",
        (128, 32),
        (Shard(0), _StridedShard(0, split_factor=4)),
        None,
        lambda t: t.unflatten(0, (8, 16)),
    ),
    ("uneven view", (6, 12), (Shard(0), Shard(1)), None, lambda t: t.view(6, 3, 4)),
    ("permute", (8, 16, 32), (Shard(2), Partial()), None, lambda t: t.permute(2, 0, 1)),
    ("unsqueeze", (8, 16), (Shard(1), Rep), None, lambda t: t.unsqueeze(0)),
    ("squeeze", (8, 1, 16), (Shard(0), Shard(2)), None, lambda t: t.squeeze(1)),
    ("squeeze all", (8, 1, 16), (Shard(0), Rep), None, lambda t: t.squeeze()),
    # a sharded size-1 dim: a strict view, it raises (both paths alike)
    ("squeeze sharded", (8, 1, 16), (Shard(0), Shard(1)), None, lambda t: t.squeeze(1)),
    ("squeeze all sharded", (8, 1, 16), (Shard(1), Shard(2)), None, lambda t: t.squeeze()),
    ("expand", (8, 1, 16), (Shard(0), Shard(2)), None, lambda t: t.expand(8, 4, 16)),
    (
        "view of a transpose",
        (8, 16),
        (Shard(0), Shard(1)),
        None,
        lambda t: t.transpose(0, 1).view(4, 4, 8),
    ),
    ("repeat", (8, 16), (Shard(0), Rep), None, lambda t: t.repeat(1, 2)),
    ("view_as_real", (8, 16), (Shard(0), Shard(1)), torch.complex64, torch.view_as_real),
    ("view_as_complex", (8, 16, 2), (Shard(0), Shard(1)), None, torch.view_as_complex),
]
MODES = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference": torch.inference_mode,
}


def run(mode: str, fn: Callable[..., torch.Tensor], x: DTensor) -> DTensor | str:
    """``fn(x)`` under ``mode``: the DTensor, or the first line of what it raised."""
    try:
        with MODES[mode]():
            return fn(x)  # type: ignore[return-value]
    except RuntimeError as e:
        return str(e).splitlines()[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", OPS, ids=[c[0] for c in OPS])
def test_every_mode_gives_torchs_path_result(mesh24: DeviceMesh, mode: str, case: Any) -> None:
    _, shape, placements, dtype, fn = case
    cute_shard.install()
    x = dtensor(shape, mesh24, placements, dtype)
    integration.clear_dtensor_caches()
    got = run(mode, fn, x)
    with torch_path_only():
        want = run(mode, fn, x)
    assert type(got) is type(want), (got, want)
    if isinstance(want, str):
        assert got == want
        return
    assert isinstance(got, DTensor)
    assert got._spec == want._spec and got.device_mesh is mesh24
    assert got._spec.tensor_meta == want._spec.tensor_meta
    assert got.stride() == want.stride() and got.dtype == want.dtype
    assert torch.equal(got.to_local(), want.to_local())
    if not any(isinstance(p, Partial) for p in got.placements):
        n = int(torch.Size(shape).numel())
        plain = fn(torch.arange(float(n)).reshape(shape).to(dtype or torch.float32))
        local = oracle.local_shard(plain, got.placements, (2, 4), mesh24.get_coordinate())
        assert torch.equal(got.to_local(), local)


class Calls:
    """Counts calls of a ShardingPropagator method, by op."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.ops: list[Any] = []
        real = getattr(ShardingPropagator, name)

        def spy(propagator: Any, *args: Any) -> Any:
            schema = next(a for a in args if hasattr(a, "op"))
            self.ops.append(schema.op)
            return real(propagator, *args)

        monkeypatch.setattr(ShardingPropagator, name, spy)


@pytest.mark.parametrize("installed", [True, False], ids=["cute_shard", "torch"])
def test_a_view_miss_runs_nothing_on_fake_tensors_nor_recomputes_local_shapes(
    mesh24: DeviceMesh, monkeypatch: pytest.MonkeyPatch, installed: bool
) -> None:
    (cute_shard.install if installed else cute_shard.uninstall)()
    fake_runs = Calls(monkeypatch, "_propagate_tensor_meta_non_cached")
    local_shapes = Calls(monkeypatch, "_adjust_shape_and_stride_args")
    for _, shape, placements, dtype, fn in OPS:
        x = dtensor(shape, mesh24, placements, dtype)
        integration.clear_dtensor_caches()
        run("grad", fn, x)  # (a strict view may raise: its propagation ran all the same)
    if installed:
        assert fake_runs.ops == [] and local_shapes.ops == []
    else:
        assert len(fake_runs.ops) >= len(OPS) and aten.view.default in local_shapes.ops
    x = dtensor((8, 16), mesh24, (Shard(0), Rep))
    fake_runs.ops.clear()
    x + x  # other ops keep DTensor's own path
    assert fake_runs.ops == [aten.add.Tensor]


def test_the_fast_path_declines_what_it_cannot_produce_exactly(
    mesh24: DeviceMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An illegal view, a squeeze_ in place and simulated ranks (LocalTensorMode) go through
    DTensor's own path (and so raise or answer as it does)."""
    cute_shard.install()
    fake_runs = Calls(monkeypatch, "_propagate_tensor_meta_non_cached")
    x = dtensor((8, 16), mesh24, (Shard(0), Rep))
    with pytest.raises(RuntimeError, match=r"shape '\[5\]' is invalid"):
        x.view(5)
    assert fake_runs.ops == [aten.view.default]
    dtensor((8, 1), mesh24, (Shard(0), Rep)).squeeze_(1)
    assert fake_runs.ops[-1] == aten.squeeze_.dim


def test_strict_views_raise_the_engines_error_from_the_fast_path(mesh24: DeviceMesh) -> None:
    cute_shard.install()
    x = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1)))
    with pytest.raises(RuntimeError) as fast:
        x.view(16, 8, 32)
    with torch_path_only(), pytest.raises(RuntimeError) as slow:
        x.view(16, 8, 32)
    assert str(fast.value) == str(slow.value)
    assert isinstance(fast.value.__cause__, cute_shard.RedistributionRequired)

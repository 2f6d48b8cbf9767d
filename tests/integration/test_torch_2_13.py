"""What torch's DTensor does around view ops, pinned so the integration's workarounds stay
honest: a strict xfail turns into a failure the day torch fixes the bug. Every bug here is
the same on torch 2.13.0, 2.14.1 and 2.15.0 (the suite runs on each), but where a test
says otherwise.

These run torch's own propagator (cute_shard uninstalled) unless a test says otherwise. Ranks
are simulated with LocalTensorMode on a fake process group, so every rank's data is checked.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor.placement_types import _StridedShard

import cute_shard
from cute_shard import oracle

from .conftest import fake_world
from .test_install import run_on_all_ranks

aten = torch.ops.aten
Rep = Replicate()


def SS(dim: int, sf: int) -> _StridedShard:
    return _StridedShard(dim, split_factor=sf)


def redistribute_all_ranks(
    shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    placements: tuple[Any, ...],
    target: tuple[Any, ...],
    shard_order_flag: bool | None = None,
) -> bool:
    """Distribute, redistribute to ``target``, and say whether every rank holds its shard."""
    from torch.distributed._local_tensor import LocalTensorMode

    g = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    ranks = int(torch.Size(mesh_shape).numel())
    with LocalTensorMode(frozenset(range(ranks))):
        mesh = init_device_mesh("cpu", mesh_shape)
        dt = distribute_tensor(g, mesh, list(placements), src_data_rank=None)
        if shard_order_flag is not None:
            spec = DTensorSpec(
                mesh,
                dt._spec.placements,
                dt._spec.tensor_meta,
                use_strided_shard_as_shard_order=shard_order_flag,
            )
            dt = DTensor(dt._local_tensor, spec, requires_grad=False)
        try:
            local = dt.redistribute(mesh, list(target))._local_tensor
        except RuntimeError:
            return False
    per_rank = getattr(local, "_local_tensors", None) or dict.fromkeys(range(ranks), local)
    for rank, coord in enumerate(oracle.mesh_coords(mesh_shape)):
        want = oracle.local_shard(g, target, mesh_shape, coord)
        if per_rank[rank].shape != want.shape or not torch.equal(per_rank[rank], want):
            return False
    return True


def test_reshape_reaches_dtensor_as_view_outside_inference_mode() -> None:
    seen: list[Any] = []
    propagator = DTensor._op_dispatcher.sharding_propagator
    real = propagator.propagate_op_sharding_non_cached

    def spy(schema: Any) -> Any:
        seen.append(schema.op)
        return real(schema)

    with fake_world(4):
        cute_shard.uninstall()
        mesh = init_device_mesh("cpu", (4,))
        dt = DTensor.from_local(torch.ones(2, 8), mesh, [Shard(0)], run_check=False)
        propagator.propagate_op_sharding_non_cached = spy
        try:
            dt.reshape(16, 4)
            with torch.inference_mode():
                dt.reshape(4, 16)
        finally:
            propagator.propagate_op_sharding_non_cached = real
    assert seen == [aten.view.default, aten.reshape.default]


@pytest.mark.xfail(
    strict=True,
    reason="torch bug: under inference mode flatten reaches DTensor undecomposed and "
    "DecompShardingStrategy combines single-mesh-dim answers: wrong data on a 2x2x2 mesh "
    "(install() decomposes these ops for real; see test_install.py)",
)
def test_torch_flatten_under_inference_mode_on_a_3d_mesh() -> None:
    with fake_world(8):
        cute_shard.uninstall()
        assert run_on_all_ranks((4, 4, 8), (Shard(0), Shard(1), Shard(2)), lambda t: t.flatten())


@pytest.mark.xfail(
    strict=True,
    reason="torch bug: a _StridedShard followed by a Shard of the same tensor dim on a later "
    "mesh dim cannot be redistributed (_maybe_unpad_tensor check fails; on real gloo ranks the "
    "collective sizes mismatch and gloo aborts the process)",
)
def test_torch_redistributes_strided_then_shard_on_one_dim() -> None:
    with fake_world(4):
        assert redistribute_all_ranks((12, 3), (2, 2), (SS(0, 3), Shard(0)), (Rep, Rep))


@pytest.mark.xfail(
    strict=True,
    reason="torch bug: specs built from _StridedShard placements (from_local, "
    "distribute_tensor) read them as a shard order, and view outputs inherit that reading; "
    "where they cannot encode a shard order, redistribution gives wrong shards",
)
def test_torch_redistributes_strided_shards_read_as_a_shard_order() -> None:
    with fake_world(4):
        assert redistribute_all_ranks((4, 8), (2, 2), (SS(1, 2), SS(0, 2)), (Shard(0), Shard(1)))


def test_the_same_shards_read_as_strided_shards_redistribute_right() -> None:
    with fake_world(4):
        assert redistribute_all_ranks(
            (4, 8), (2, 2), (SS(1, 2), SS(0, 2)), (Shard(0), Shard(1)), shard_order_flag=False
        )


@pytest.mark.xfail(
    strict=True,
    reason="torch bug: a pointwise op on a DTensor with a _StridedShard on a symbolic-size "
    "dim fails under torch.compile (_StridedShard.local_shard_size_and_offset calls tolist() "
    "on fake indices: a data-dependent error); install() computes it from the size "
    "(test_compile.py)",
    raises=torch._dynamo.exc.TorchRuntimeError,
)
def test_torch_compiles_strided_shards_on_a_symbolic_dim() -> None:
    from torch._dynamo.testing import CompileCounterWithBackend

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1) + 1  # (8, B, 64) with B sharded -> _S(0, sf=8) on 8*B

    with fake_world(8):
        cute_shard.uninstall()
        torch._dynamo.reset()
        mesh = init_device_mesh("cpu", (2, 4))
        compiled = torch.compile(f, backend=CompileCounterWithBackend("aot_eager"))
        for batch in (8, 16):
            local = torch.ones(8, batch // 4, 64)
            x = DTensor.from_local(
                local,
                mesh,
                [Rep, Shard(1)],
                run_check=False,
                shape=torch.Size((8, batch, 64)),
                stride=(batch * 64, 64, 1),
            )
            torch._dynamo.mark_dynamic(x, 1)
            compiled(x)
        torch._dynamo.reset()


@pytest.mark.xfail(
    strict=True,
    reason="torch bug: an in-place squeeze_ on a DTensor squeezes the local tensor but "
    "keeps the old global shape (with torch's propagator as with cute_shard)",
)
def test_torch_squeeze_inplace_updates_the_global_shape() -> None:
    with fake_world(4):
        mesh = init_device_mesh("cpu", (4,))
        dt = DTensor.from_local(torch.ones(2, 6, 1), mesh, [Shard(0)], run_check=False)
        out = dt.clone()
        out.squeeze_(2)
        assert out.to_local().shape == (2, 6)
        assert out.shape == (8, 6)


@pytest.mark.xfail(
    strict=True,
    reason="torch bug: under torch.compile, an op consuming a _StridedShard DTensor on "
    "DTensor caches that have not seen it fails with PendingUnbackedSymbolNotFound: the "
    "redistribute planner computes the _StridedShard's local size by splitting an index "
    "tensor, and under the fake mode its tolist() mints an unbacked symbol per element "
    "(install() computes it on real tensors)",
    raises=torch._dynamo.exc.InternalTorchDynamoError,
)
def test_torch_compiles_a_strided_shard_view_on_cold_caches() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.view(128, 32).sin()  # [S(0), S(1)] -> [S(0), _S(0, sf=4)]

    with fake_world(8):
        cute_shard.uninstall()
        torch._dynamo.reset()
        mesh = init_device_mesh("cpu", (2, 4))
        x = DTensor.from_local(
            torch.ones(4, 4, 32),
            mesh,
            [Shard(0), Shard(1)],
            run_check=False,
            shape=torch.Size((8, 16, 32)),
            stride=(512, 32, 1),
        )
        try:
            torch.compile(f, backend="eager", fullgraph=True)(x)
        finally:
            torch._dynamo.reset()


@pytest.mark.xfail(
    # (strict where seen; on a release not yet run here a pass is no failure)
    strict=torch.__version__.startswith(("2.13", "2.14", "2.15")),
    reason="torch bug (with install() too): under torch.compile with dynamic shapes and an "
    "AOT backend, the backward of a DTensor matmul (b, s, h) @ (h, n) recurses without end "
    "while tracing: the floor division that computes the fold's local size, (2*s)//2, "
    "returns the size's own SymInt, and its proxy is replaced by one computed from itself "
    "(of the family of pytorch/pytorch#159709 and #152954); seen on 2.13.0, 2.14.1 and 2.15.0",
    raises=torch._dynamo.exc.BackendCompilerFailed,
)
@pytest.mark.filterwarnings("ignore:Error detected in UnsafeViewBackward0")
@pytest.mark.parametrize("installed", [False, True], ids=["torch", "cute_shard"])
def test_torch_compiles_a_matmul_backward_with_dynamic_shapes(installed: bool) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w

    with fake_world(8):
        (cute_shard.install if installed else cute_shard.uninstall)()
        torch._dynamo.reset()
        mesh = init_device_mesh("cpu", (2, 4))
        compiled = torch.compile(f, backend="aot_eager", dynamic=True)
        w = distribute_tensor(torch.randn(32, 32), mesh, [Rep, Shard(1)]).requires_grad_()
        try:
            x = distribute_tensor(torch.randn(2, 16, 32), mesh, [Shard(0), Rep])
            compiled(x, w).sum().backward()
        finally:
            torch._dynamo.reset()
            cute_shard.uninstall()


@pytest.mark.xfail(
    torch.__version__.startswith("2.13"),
    strict=True,
    reason="torch 2.13 bug (with install() too; 2.14.1 traces it): under torch.compile with "
    "dynamic shapes and an AOT backend, q @ q.transpose(1, 2) of a DTensor q = x @ w fails to "
    "trace: DTensor computes the bmm output's stride (s*s) with the proxy modes disabled "
    "(_propagate_tensor_meta_non_cached), then builds the output DTensor from it under the "
    "tracer, which has no proxy for it ('s**2 is not tracked with proxy')",
    raises=torch._dynamo.exc.BackendCompilerFailed,
)
@pytest.mark.parametrize("installed", [False, True], ids=["torch", "cute_shard"])
def test_torch_compiles_a_square_bmm_with_dynamic_shapes(installed: bool) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        q = x @ w
        return q @ q.transpose(1, 2)

    with fake_world(8):
        (cute_shard.install if installed else cute_shard.uninstall)()
        torch._dynamo.reset()
        mesh = init_device_mesh("cpu", (2, 4))
        x = distribute_tensor(torch.randn(4, 16, 8), mesh, [Shard(0), Rep])
        w = distribute_tensor(torch.randn(8, 8), mesh, [Rep, Rep])
        try:
            torch.compile(f, backend="aot_eager", dynamic=True)(x, w)
        finally:
            torch._dynamo.reset()
            cute_shard.uninstall()


@pytest.mark.xfail(
    strict=True,
    reason="torch bug: matmul of (batch, heads, seq, d) with the batch on one mesh dim "
    "(one sequence per rank) and the heads on the other: torch's view propagator folds it to "
    "a non-canonical [S(0), _S(0, sf=1)] and then refuses to unfold the bmm's output (cute_shard "
    "gives [S(0), S(0)] and both views are free)",
    raises=RuntimeError,
)
def test_torch_runs_matmul_attention_with_one_sequence_per_data_parallel_rank() -> None:
    from .strided_steps import attention_step, inputs

    with fake_world(8):
        cute_shard.uninstall()
        mesh = init_device_mesh("cpu", (2, 4))
        attention_step(*inputs(mesh, "attention"), gather=False)


def test_cute_shard_runs_matmul_attention_with_one_sequence_per_data_parallel_rank() -> None:
    from .strided_steps import attention_step, inputs

    with fake_world(8):
        cute_shard.install()
        mesh = init_device_mesh("cpu", (2, 4))
        x, wq, *_ = inputs(mesh, "attention")
        b, s, _ = x.shape
        q = (x @ wq).view(b, s, 8, -1).transpose(1, 2)  # (1 per dp rank, 2 heads per tp rank)
        assert q.placements == (Shard(0), Shard(1))
        assert q.flatten(0, 1).placements == (Shard(0), Shard(0))  # matmul's fold: free
        out = attention_step(*inputs(mesh, "attention"), gather=False)
        assert out.placements == (Shard(0), Partial())

"""torch.compile (backend "aot_eager") over DTensor view chains with cute_shard installed.

A fake process group of 8 ranks (2x4 mesh) is enough: the block needs no communication, so
each rank's data is real and the compiled result must equal eager exactly. The block is the
view side of a transformer layer: head split and merge, token flatten and back, with the batch
sharded on mesh dim 0 and the hidden dim on mesh dim 1.

A reshape that needs communication (outside inference mode, through install()'s reshape
methods: torch.compile records each as one call) compiles too: its redistribution is traced
into the forward graph as the collective eager runs. The fake group's collectives move no data,
so there only placements, shapes and the graph are compared.

Views whose outputs are ``_StridedShard`` (``strided_steps.py``) compile with fullgraph=True on
cold DTensor caches, once for five steps; torch 2.13 alone fails there (its redistribute
planner computes a ``_StridedShard``'s local size from fake index tensors; pinned in
``test_torch_2_13.py``), and install() computes it on real ones. The same steps run on gloo
ranks in ``multirank_cases.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import torch
from torch._dynamo.testing import AotEagerAndRecordGraphs, CompileCounterWithBackend
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.placement_types import _StridedShard

import cute_shard
from cute_shard import integration

from . import strided_steps
from .conftest import fake_world

SEQ, HIDDEN, HEADS = 16, 256, 4


def block(x: torch.Tensor) -> torch.Tensor:
    b, s, h = x.shape
    heads = x.view(b, s, HEADS, h // HEADS).transpose(1, 2)  # head split
    merged = heads.transpose(1, 2).reshape(b, s, h)  # head merge
    tokens = merged.flatten(0, 1) * 2  # token flatten
    return tokens.unflatten(0, (b, s)).unsqueeze(0).squeeze(0).permute(1, 0, 2)


def make_input(mesh: DeviceMesh, batch: int) -> DTensor:
    local = torch.arange(float(batch // 2 * SEQ * (HIDDEN // 4))).reshape(batch // 2, SEQ, -1)
    return DTensor.from_local(
        local,
        mesh,
        [Shard(0), Shard(2)],
        run_check=False,
        shape=torch.Size((batch, SEQ, HIDDEN)),
        stride=(SEQ * HIDDEN, HIDDEN, 1),
    )


@pytest.fixture
def mesh() -> Iterator[DeviceMesh]:
    with fake_world(8):
        torch._dynamo.reset()
        cute_shard.install()
        yield init_device_mesh("cpu", (2, 4))
        torch._dynamo.reset()


class ShapeRecorder:
    """Records the global shapes the installed strategies propagate."""

    def __init__(self) -> None:
        self.engine = integration.propagate_shape_and_sharding
        self.shapes: list[tuple[Any, ...]] = []

    def __call__(self, placements: Any, shape: Any, *args: Any, **kwargs: Any) -> Any:
        self.shapes.append(tuple(shape))
        return self.engine(placements, shape, *args, **kwargs)


def run(
    mesh: DeviceMesh, batches: list[int], dynamic: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[CompileCounterWithBackend, ShapeRecorder]:
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, backend=counter, dynamic=dynamic)
    recorder = ShapeRecorder()
    monkeypatch.setattr(integration, "propagate_shape_and_sharding", recorder)
    for batch in batches:
        x = make_input(mesh, batch)
        got, want = compiled(x), block(x)
        assert got.placements == want.placements == (Shard(1), Shard(2))
        assert got.device_mesh is mesh
        assert torch.equal(got.to_local(), want.to_local())
    return counter, recorder


def test_compiles_once_across_five_calls(mesh: DeviceMesh, monkeypatch: pytest.MonkeyPatch) -> None:
    counter, _ = run(mesh, [8] * 5, dynamic=False, monkeypatch=monkeypatch)
    assert counter.frame_count == 1


def test_no_recompile_when_only_the_batch_changes(
    mesh: DeviceMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter, recorder = run(mesh, [8, 16, 24, 32, 40], dynamic=True, monkeypatch=monkeypatch)
    assert counter.frame_count == 1
    # The strategies saw symbolic shapes, and propagated them without a data-dependent guard.
    assert any(isinstance(n, torch.SymInt) for shape in recorder.shapes for n in shape)


def merge_uneven(x: torch.Tensor) -> torch.Tensor:
    """(b, 6, 32) -> (b, 192) with the 6 sharded over 4 ranks (uneven): mesh dim 1 must be
    gathered first."""
    return x.reshape(x.shape[0], 6 * 32) * 2


def make_uneven_input(mesh: DeviceMesh, batch: int) -> DTensor:
    local = torch.arange(float(batch // 2 * 2 * 32)).reshape(batch // 2, 2, 32)  # rank 0: 2 of 6
    return DTensor.from_local(
        local,
        mesh,
        [Shard(0), Shard(1)],
        run_check=False,
        shape=torch.Size((batch, 6, 32)),
        stride=(6 * 32, 32, 1),
    )


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd is returning a function")
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_reshape_that_needs_communication_compiles(mesh: DeviceMesh, dynamic: bool) -> None:
    backend = AotEagerAndRecordGraphs()
    compiled = torch.compile(merge_uneven, backend=backend, dynamic=dynamic)
    for batch in [8, 16, 24] if dynamic else [8] * 3:
        x = make_uneven_input(mesh, batch).requires_grad_()
        got = compiled(x)
        with CommDebugMode() as comm:
            want = merge_uneven(x)
        assert got.placements == want.placements == (Shard(0), Replicate())
        assert got.shape == want.shape and got.device_mesh is mesh
        got.sum().backward()
        assert x.grad is not None and x.grad.placements == x.placements
    assert len(backend.graphs) == 1
    traced = [
        node.target
        for graph in backend.fw_graphs
        for node in graph.graph.nodes
        if "c10d_functional" in str(node.target) and "wait_tensor" not in str(node.target)
    ]
    assert len(traced) == comm.get_total_counts() == 1


# --------------------------------------------------------------------------------------------
# Views that keep sharding as _StridedShard (strided_steps.py), compiled with cold caches


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd is returning a function")
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", ["strided", "attention"])
def test_strided_views_compile_once_and_equal_eager(
    mesh: DeviceMesh, backend: str, name: str
) -> None:
    """fullgraph=True on DTensor caches that have not seen these views: one graph for five
    steps, each equal to eager (without the final gather: the fake group moves no data). With
    the gather, the collective is in the graph and the placements are eager's."""
    step = strided_steps.STEPS[name]
    for gather in (False, True):
        torch._dynamo.reset()
        integration.clear_dtensor_caches()
        counter = CompileCounterWithBackend(backend)
        compiled = torch.compile(step, backend=counter, fullgraph=True)
        for seed in range(5):
            args = strided_steps.inputs(mesh, name, seed)
            got = compiled(*args, gather=gather)
            want = step(*args, gather=gather)
            assert got.placements == want.placements and got.shape == want.shape
            assert got.device_mesh is mesh
            if not gather:
                assert torch.equal(got.to_local(), want.to_local())
        assert counter.frame_count == 1
    strided = strided_steps.STEPS[name](*strided_steps.inputs(mesh, name), gather=False)
    assert strided.placements == (
        (Shard(0), Shard(1)) if name == "strided" else (Shard(0), Partial())
    )


def test_the_strided_step_keeps_a_strided_shard(mesh: DeviceMesh) -> None:
    x, _ = strided_steps.inputs(mesh, "strided")
    assert x.view(-1, x.shape[-1]).placements == (Shard(0), _StridedShard(0, split_factor=2))


# --------------------------------------------------------------------------------------------
# _StridedShard redistributions with dynamic shapes


def strided_redistributions(x: torch.Tensor) -> torch.Tensor:
    """(n, 6, 32) from [R, S1] to [S0, SS0:2] (a view's sharding), to [S1, S0], gathered."""
    dt = cast(DTensor, x)
    mesh = dt.device_mesh
    y = dt.redistribute(mesh, [Shard(0), _StridedShard(0, split_factor=2)]) * 2
    z = cast(DTensor, y).redistribute(mesh, [Shard(1), Shard(0)])
    return z.redistribute(mesh, [Replicate(), Replicate()])


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd is returning a function")
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_strided_redistributions_compile_once_for_every_multiple_of_their_units(
    mesh: DeviceMesh, backend: str
) -> None:
    """With dynamic shapes (what torch.compile turns to when a size changes), install() plans
    each redistribution on the symbolic sizes: one graph, with fullgraph=True, forward and
    backward, for every first dim that is a multiple of the pairs' units (16 here:
    ``[S0, SS0:2]`` on (2, 4) cuts d0 in 2, then each half in 2 pieces of 4 chunks) but the
    unit itself (a factor of 1, which torch's own kernels compare with 1: as torch.compile
    specialises sizes of 1); a size that is not a multiple, and the 6 that 4 ranks shard, are
    planned at their values (guarded), so 24 and 40 compile a graph each. (torch's own
    redistribution of these pairs fails to trace: its ``_StridedShard`` sizes come from index
    tensors, data-dependent under tracing.)"""
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(strided_redistributions, backend=counter, dynamic=True, fullgraph=True)
    frames = []
    for n in (48, 64, 80, 160, 24, 40):
        g = torch.arange(float(n * 6 * 32)).reshape(n, 6, 32)
        x = distribute_tensor(g, mesh, [Replicate(), Shard(1)]).requires_grad_()
        got = compiled(x)
        want = strided_redistributions(x.detach())
        assert got.placements == want.placements == (Replicate(), Replicate())
        assert got.to_local().shape == want.to_local().shape == (n, 6, 32)
        got.sum().backward()
        assert x.grad is not None and x.grad.placements == x.placements
        assert x.grad.to_local().shape == x.to_local().shape
        frames.append(counter.frame_count)
    assert frames == [1, 1, 1, 1, 2, 3]


def strided_sum(x: torch.Tensor) -> torch.Tensor:
    """(8, b, 64) with b sharded over 4 ranks, flattened: ``[R, SS0:8]`` on 8*b, plus 1."""
    return x.flatten(0, 1) + 1


def make_strided_input(mesh: DeviceMesh, batch: int) -> DTensor:
    local = torch.arange(float(8 * batch // 4 * 64)).reshape(8, batch // 4, 64)
    return DTensor.from_local(
        local,
        mesh,
        [Replicate(), Shard(1)],
        run_check=False,
        shape=torch.Size((8, batch, 64)),
        stride=(batch * 64, 64, 1),
    )


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd is returning a function")
def test_a_strided_view_on_a_symbolic_dim_compiles_once(mesh: DeviceMesh) -> None:
    """A pointwise op on a ``_StridedShard`` of a symbolic size: its strategy asks the shard's
    local size, which torch computes from index tensors (a data-dependent error under
    tracing; ``test_torch_2_13.py``); installed, it is ``n // num_chunks`` wherever every
    chunk is exact, one graph for every such batch. The compiled function also returns the
    strided view's output, which AOT tracing flattens and rebuilds (``_tensor_unflatten``)."""
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(strided_sum, backend=counter)
    for batch in (8, 16, 24, 32):
        x = make_strided_input(mesh, batch)
        torch._dynamo.mark_dynamic(x, 1)
        got, want = compiled(x), strided_sum(x)
        assert got.placements == want.placements == (Replicate(), _StridedShard(0, split_factor=8))
        assert torch.equal(got.to_local(), want.to_local())
    assert counter.frame_count == 1


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd is returning a function")
def test_a_compiled_function_returns_a_strided_view_as_eager_does(mesh: DeviceMesh) -> None:
    """Static shapes: the output of a view read by split factor survives AOT tracing's
    flatten and rebuild with its reading (torch 2.13 and 2.14 refuse to rebuild its spec)."""
    compiled = torch.compile(strided_sum, backend="aot_eager", fullgraph=True)
    x = make_strided_input(mesh, 8)
    got, want = compiled(x), strided_sum(x)
    assert got.placements == want.placements
    assert got._spec.use_strided_shard_as_shard_order is False
    assert got._spec == want._spec and torch.equal(got.to_local(), want.to_local())


@pytest.mark.parametrize("mode", ["FIRST", "NONE"])
def test_strided_local_sizes_of_symbolic_sizes_hold_at_every_multiple(mode: str) -> None:
    """``_StridedShard.local_shard_size_and_offset`` installed, on a symbolic size hinted at a
    multiple of ``split_factor * num_chunks``: read at other multiples, the size and first
    offset are torch's own at those ints, for every rank; the only guard says the size is
    such a multiple. A size that is not one is its value (a guard pins it)."""
    from torch.distributed.tensor.placement_types import _StridedShardOffsetMode

    from property_tests.redistribute_sim import Symbols

    torch_fn = integration._TORCH_STRIDED_LOCAL_SIZE
    offset_mode = getattr(_StridedShardOffsetMode, mode)
    for split_factor, chunks in ((2, 2), (3, 4), (8, 4), (1, 3)):
        pieces = split_factor * chunks
        symbols = Symbols.of((pieces * 5,))
        (n,) = symbols.sizes
        placement = _StridedShard(0, split_factor=split_factor)
        for rank in range(chunks):
            size, first = integration._strided_local_size(placement, n, chunks, rank, offset_mode)
            for k in (1, 2, 7, 12):
                values = (pieces * k,)
                want = torch_fn(placement, pieces * k, chunks, rank, offset_mode)
                assert (symbols.at(size, values), symbols.at(first, values)) == want
        assert all(symbols.holds(g, (pieces * k,)) for g in symbols.guards() for k in (1, 3))
        odd = Symbols.of((pieces * 5 + 1,))
        got = integration._strided_local_size(placement, odd.sizes[0], chunks, 0, offset_mode)
        assert got == torch_fn(placement, pieces * 5 + 1, chunks, 0, offset_mode)


@pytest.mark.skipif(
    torch.__version__.startswith("2.13"),
    reason="torch 2.13 fails to trace the scores' bmm with dynamic shapes, with install() or "
    "without (test_torch_2_13.py::test_torch_compiles_a_square_bmm_with_dynamic_shapes)",
)
@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd is returning a function")
def test_the_attention_step_compiles_once_for_every_sequence_length(mesh: DeviceMesh) -> None:
    """The attention block (one sequence per data-parallel rank: its matmul folds keep the
    batch and the heads as ``[S(0), S(0)]``), compiled with dynamic shapes: one graph for
    every sequence length, each call's local output equal to eager's. (Forward only: torch's
    matmul backward does not trace with dynamic shapes, ``test_torch_2_13.py``.)"""
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(strided_steps.attention_step, backend=counter, dynamic=True)
    dp, tp = mesh.shape
    hidden = 2 * tp * strided_steps.HIDDEN_PER_HEAD
    column, row = (Replicate(), Shard(1)), (Replicate(), Shard(0))
    placements = [(Shard(0), Replicate()), column, column, column, row]
    for seq in (16, 24, 40, 12):  # (not 8 or 32, the weights' local sizes: duck sizing)
        g = torch.Generator().manual_seed(seq)
        tensors = [torch.randn(dp, seq, hidden, generator=g)]
        tensors += [torch.randn(hidden, hidden, generator=g) for _ in range(4)]
        args = [distribute_tensor(t, mesh, p) for t, p in zip(tensors, placements, strict=True)]
        got = compiled(*args, gather=False)
        want = strided_steps.attention_step(*args, gather=False)
        assert got.placements == want.placements == (Shard(0), Partial())
        assert torch.allclose(got.to_local(), want.to_local(), rtol=1e-5, atol=1e-6)
    assert counter.frame_count == 1

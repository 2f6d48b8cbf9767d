"""cute_shard's redistribution installed into DTensor (``cute_shard/redistribute/dtensor.py``),
on fake worlds: every rank simulated by torch's ``LocalTensorMode`` where data matters, the
plain fake process group (this process is one rank, collectives do nothing) where only what
happens before any collective matters.

- ``DTensor.redistribute``: every rank's local tensor is the oracle's target shard (Partial
  sources reduced exactly once), ``full_tensor()`` is the global tensor, and the gradient
  through the redistribution equals plain torch's.
- The paths that reach the redistribution without the user asking: op dispatch bringing a
  ``_StridedShard`` input of ``mm`` to the chosen strategy (forward and backward), and
  ``from_local``'s backward; the observer (``set_observer``) sees each of them.
- ``uninstall()`` puts torch's own functions back in every module that bound them.
- ``redistribute_cost``: 0 from a replicated source, inf for Shard -> Partial (as torch),
  finite where the planner plans (torch: inf for every ``_StridedShard`` source), never above
  torch's price on plain cases, below it for the FSDP2 + TP weight.
- A local tensor that does not match its spec raises ValueError before any collective; the
  in-place ``squeeze_`` case (a local tensor without the global size-1 dims) still works.
- The issue's smallest torch failure, (12,) on (3, 2), ``[R, S0] -> [S0, SS0:2]``: right with
  ``install()``, wrong without (torch 2.13).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed._local_tensor import LocalTensorMode, rank_map
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import (
    DTensor,
    Partial,
    Placement,
    Replicate,
    Shard,
    _collective_utils,
    _dispatch,
    _redistribute,
    distribute_tensor,
)
from torch.distributed.tensor import _utils as tensor_utils
from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry, TensorMeta
from torch.distributed.tensor._ops import utils as ops_utils
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.placement_types import _StridedShard
from torch.testing._internal.distributed.fake_pg import FakeStore

import cute_shard
from cute_shard import integration, oracle
from cute_shard.redistribute import Kind
from cute_shard.redistribute import dtensor as rd
from cute_shard.redistribute.plan import physical_limit
from property_tests.redistribute_sim import Case, World, expected_locals, full_tensor, source_locals

TORCH_2_13 = torch.__version__.startswith("2.13")


@contextmanager
def fake_world(size: int, rank: int = 0) -> Iterator[None]:
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=size)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextmanager
def every_rank(size: int) -> Iterator[None]:
    """A fake world of ``size`` ranks, every one simulated (``LocalTensorMode``)."""
    with fake_world(size), LocalTensorMode(frozenset(range(size))):
        yield


class Seen:
    """An observer: every redistribution cute_shard runs, as (source, target, explicit)."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Placement, ...], tuple[Placement, ...], bool]] = []

    def redistributed(
        self, current: DTensorSpec, target: DTensorSpec, plan: object, explicit: bool
    ) -> None:
        self.calls.append((tuple(current.placements), tuple(target.placements), explicit))


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    """Leave cute_shard installed or not, with its observer, as the test found it."""
    was = integration.is_installed()
    observer = rd.set_observer(None)
    rd.set_observer(observer)
    yield
    rd.set_observer(observer)
    if was:
        integration.install()
    else:
        integration.uninstall()


@pytest.fixture
def seen() -> Seen:
    cute_shard.install()
    observer = Seen()
    rd.set_observer(observer)
    return observer


def per_rank(t: Any, size: int) -> list[torch.Tensor]:
    """A LocalTensor's (or a DTensor's local tensor's) value on each simulated rank."""
    if isinstance(t, DTensor):
        t = t._local_tensor
    return [t._local_tensors[r] for r in range(size)]


def from_shards(
    shards: Sequence[torch.Tensor], mesh: DeviceMesh, placements: Sequence[Placement], full: Any
) -> DTensor:
    local = rank_map(lambda r: shards[r].clone())
    return DTensor.from_local(
        local, mesh, list(placements), shape=full.shape, stride=full.stride(), run_check=False
    )


def torch_placements(case: Case, which: str) -> list[Placement]:
    return [p.to_torch() for p in (case.src if which == "src" else case.dst)]


# --------------------------------------------------------------------- DTensor.redistribute

CASES = [
    ("fsdp2+tp weight", Case.parse((64, 32), (2, 4), "SS0:4,S0", "S0,S0")),
    ("fsdp2+tp weight back", Case.parse((64, 32), (2, 4), "S0,S0", "SS0:4,S0")),
    ("head merge", Case.parse((32, 24, 16), (2, 4), "S0,SS0:2", "S0,S1")),
    ("swap", Case.parse((8, 8), (2, 4), "S0,S1", "S1,S0")),
    ("uneven strided", Case.parse((5, 7), (2, 4), "S0,SS1:2", "R,S0")),
    ("stacked", Case.parse((12, 3), (2, 4), "SS0:3,S0", "S1,R")),
    ("3-D mesh", Case.parse((9, 4), (2, 2, 2), "S0,S0,S1", "SS0:2,S1,S0")),
    ("1-D mesh", Case.parse((10,), (8,), "S0", "SS0:2")),
    ("gather", Case.parse((6, 5), (2, 4), "SS1:2,S0", "R,R")),
    ("partial sum", Case.parse((8, 8), (2, 4), "P,S1", "S0,R")),
    ("partial max", Case.parse((6, 8), (2, 4), "P:max,SS1:2", "S1,S0")),
    ("partial min", Case.parse((7, 3), (2, 4), "P:min,S0", "SS0:2,S1")),
    ("partial sum and avg", Case.parse((7, 3), (2, 2, 2), "P,S0,P:avg", "S0,R,SS0:2")),
]


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[name for name, _ in CASES])
def test_redistribute_exact_full_tensor_and_backward(seen: Seen, case: Case) -> None:
    size = math.prod(case.mesh)
    full = full_tensor(case.shape)
    weights = torch.arange(full.numel(), dtype=full.dtype).reshape(full.shape) % 5 + 1
    partial_source = any(p.kind == "P" for p in case.src)
    with every_rank(size):
        mesh = init_device_mesh("cpu", case.mesh)
        x = from_shards(source_locals(case, full), mesh, torch_placements(case, "src"), full)
        if not partial_source:
            x.requires_grad_()
        y = x.redistribute(mesh, torch_placements(case, "dst"))
        assert tuple(y.placements) == tuple(torch_placements(case, "dst"))
        for coord, got, want in zip(
            World.of(case.mesh).coords, per_rank(y, size), expected_locals(case, full), strict=True
        ):
            assert got.shape == want.shape and torch.equal(got, want), f"{case}: rank {coord}"
        assert all(torch.equal(t, full) for t in per_rank(y.full_tensor(), size))
        assert seen.calls[0] == (
            tuple(torch_placements(case, "src")),
            tuple(torch_placements(case, "dst")),
            True,
        )
        if partial_source:
            return
        w = distribute_tensor(weights, mesh, [Replicate()] * len(case.mesh), src_data_rank=None)
        (y * w).sum().backward()
        grad = x.grad
        assert grad is not None
        plain = full.clone().requires_grad_()
        (plain * weights).sum().backward()
        assert all(torch.equal(t, plain.grad) for t in per_rank(grad.full_tensor(), size))


def test_the_issues_smallest_torch_failure() -> None:
    """(12,) on mesh (3, 2), [Replicate(), Shard(0)] -> [Shard(0), _StridedShard(0, sf=2)]:
    with install() every rank holds ``distribute_tensor(full, mesh, target)``'s local tensor
    and ``full_tensor()`` is the original; torch 2.13 alone gets both wrong, silently."""
    full = torch.arange(12.0)
    src: list[Placement] = [Replicate(), Shard(0)]
    dst: list[Placement] = [Shard(0), _StridedShard(0, split_factor=2)]
    results = {}
    for installed in (True, False):
        if installed:
            cute_shard.install()
        else:
            cute_shard.uninstall()
        with every_rank(6):
            mesh = init_device_mesh("cpu", (3, 2))
            want = per_rank(distribute_tensor(full, mesh, dst), 6)
            y = distribute_tensor(full, mesh, src).redistribute(mesh, dst)
            results[installed] = (
                [torch.equal(a, b) for a, b in zip(per_rank(y, 6), want, strict=True)],
                [torch.equal(t, full) for t in per_rank(y.full_tensor(), 6)],
            )
    assert results[True] == ([True] * 6, [True] * 6)
    if TORCH_2_13:  # the regression install() fixes
        assert results[False] == ([False] * 6, [False] * 6)


# ----------------------------------------------------------- op dispatch, from_local backward


def test_op_dispatch_redistributes_a_strided_input_of_mm(seen: Seen) -> None:
    """mm of a [S0, SS0:2] matrix by a [R, S1] one: the strategy DTensor picks moves the
    strided input (cute_shard runs it, not explicitly asked); forward and both gradients
    equal plain torch's."""
    a_full = torch.arange(8 * 16, dtype=torch.float64).reshape(8, 16)
    b_full = torch.arange(16 * 64, dtype=torch.float64).reshape(16, 64) % 7
    pa: list[Placement] = [Shard(0), _StridedShard(0, split_factor=2)]
    coords = list(itertools.product(range(2), range(4)))
    with every_rank(8):
        mesh = init_device_mesh("cpu", (2, 4))
        a = from_shards(
            [oracle.local_shard(a_full, pa, (2, 4), c) for c in coords], mesh, pa, a_full
        )
        a.requires_grad_()
        b = distribute_tensor(b_full, mesh, [Replicate(), Shard(1)]).requires_grad_()
        c = torch.mm(a, b)
        implicit = [call for call in seen.calls if not call[2]]
        assert any(any(isinstance(p, _StridedShard) for p in src) for src, _, _ in implicit), (
            seen.calls
        )
        assert all(torch.equal(t, a_full @ b_full) for t in per_rank(c.full_tensor(), 8))
        c.sum().backward()
        a_plain, b_plain = a_full.clone().requires_grad_(), b_full.clone().requires_grad_()
        (a_plain @ b_plain).sum().backward()
        assert a.grad is not None and b.grad is not None
        assert all(torch.equal(t, a_plain.grad) for t in per_rank(a.grad.full_tensor(), 8))
        assert all(torch.equal(t, b_plain.grad) for t in per_rank(b.grad.full_tensor(), 8))


def test_from_local_backward_redistributes_the_gradient(seen: Seen) -> None:
    """``from_local`` with [S0, SS0:2]; the gradient reaches it replicated and is brought to
    [S0, SS0:2] by cute_shard: each rank's local gradient is its shard of the weights."""
    full = torch.arange(8 * 16, dtype=torch.float64).reshape(8, 16)
    weights = full % 5 + 1
    pa: list[Placement] = [Shard(0), _StridedShard(0, split_factor=2)]
    coords = list(itertools.product(range(2), range(4)))
    with every_rank(8):
        mesh = init_device_mesh("cpu", (2, 4))
        local = rank_map(lambda r: oracle.local_shard(full, pa, (2, 4), coords[r]))
        local.requires_grad_()
        d = DTensor.from_local(local, mesh, pa, shape=full.shape, stride=full.stride())
        w = distribute_tensor(weights, mesh, [Replicate(), Replicate()], src_data_rank=None)
        (d * w).sum().backward()
        assert local.grad is not None
        for r, c in enumerate(coords):
            assert torch.equal(
                local.grad._local_tensors[r], oracle.local_shard(weights, pa, (2, 4), c)
            )
    assert ((Replicate(), Replicate()), tuple(pa), False) in seen.calls


@pytest.mark.parametrize("mode", ["methods", "dispatcher"])
@pytest.mark.parametrize("seed", [300558, 711498])
def test_a_gradient_of_a_transposed_tensor_is_viewed_back(seed: int, mode: str) -> None:
    """Two random programs (``dtensor_programs``) whose backward views back, through
    transposes, a gradient the redistribution's backward made; the local tensor must be laid
    out in the DTensor's order of dims, or that local view fails. Output and gradient equal
    the one-process program's on every rank, in both modes.

    - 300558: (8, 8, 12, 3) ``[Shard(0)]`` on 8 ranks, reshaped, transposed, viewed,
      redistributed to ``[Shard(2)]``, transposed and permuted: the gradient is *chunked* from a
      transposed replicated tensor (the chunk keeps the local order, as torch's does).
    - 711498: (16, 2) ``[Replicate()]`` on 8 ranks, viewed to (2, 8, 2) and (2, 16),
      transposed, redistributed to ``[Shard(1)]``, then a matmul: with cute_shard's prices the
      matmul's gradient reaches the redistribution as ``[Shard(0)]`` and is *gathered* (a
      collective's output is row-major, so it is laid out again; it raised before)."""
    from property_tests.dtensor_programs import random_program, run_program

    cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
    try:
        outcome = run_program(random_program(seed))
    finally:
        cute_shard.uninstall()
    assert outcome.right, outcome


def _stride_order(strides: Sequence[int]) -> list[int]:
    return sorted(range(len(strides)), key=lambda d: -strides[d])


def test_a_redistribution_keeps_the_local_tensor_in_the_global_order_of_dims() -> None:
    """Every step's output is laid out in the DTensor's order of dims: a transposed (12, 8)
    and a permuted (4, 6, 8) (whose order is not its own inverse), ``[Shard(1)] ->
    [Replicate()]`` (a gather) and ``[Shard(0)] -> [Shard(1)]`` (an exchange), give local
    tensors whose strides follow the global ones, and contiguous tensors stay row-major.
    (torch's own gather returns a row-major local tensor there.)"""
    cute_shard.install()
    with every_rank(4):
        mesh = init_device_mesh("cpu", (4,))
        flat = torch.arange(192.0)
        bases = (
            flat[:96].reshape(8, 12).t(),
            flat[:96].reshape(8, 12),
            flat.reshape(8, 4, 6).permute(1, 2, 0),
            flat.reshape(4, 6, 8),
        )
        for base in bases:
            order = _stride_order(base.stride())
            for src, dst in (([Shard(1)], [Replicate()]), ([Shard(0)], [Shard(1)])):
                x = distribute_tensor(base, mesh, src)
                y = x.redistribute(mesh, dst)
                assert _stride_order(y.stride()) == order, (src, dst, y.stride())
                for r in range(4):
                    local = y._local_tensor._local_tensors[r]  # type: ignore[attr-defined]
                    assert _stride_order(local.stride()) == order, (r, local.stride())
                    want = oracle.local_shard(base, dst, (4,), (r,))
                    assert torch.equal(local, want)
                assert torch.equal(y.full_tensor()._local_tensors[0], base)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- uninstall


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async_op"])
def test_every_collective_a_redistribution_starts_is_waited(async_op: bool) -> None:
    """On one rank of a fake world (its collectives return pending outputs, as on a real
    rank), each case's redistribution, its result read, leaves no collective unwaited (torch
    counts them in its work registry and warns of any at exit). The swap's rank 0 receives
    nothing in its exchange: its output, never read, was left unwaited."""
    from torch._C._distributed_c10d import _get_work_registry_size

    cute_shard.install()
    for name, case in CASES:
        full = full_tensor(case.shape)
        with fake_world(math.prod(case.mesh)):
            mesh = init_device_mesh("cpu", case.mesh)
            x = DTensor.from_local(
                source_locals(case, full)[0],
                mesh,
                torch_placements(case, "src"),
                shape=full.shape,
                stride=full.stride(),
                run_check=False,
            )
            before = _get_work_registry_size()
            y = x.redistribute(mesh, torch_placements(case, "dst"), async_op=async_op)
            y.to_local().sum()  # (reading it waits on what is still pending)
            assert _get_work_registry_size() == before, name


def test_uninstall_restores_torchs_functions_everywhere() -> None:
    cute_shard.uninstall()
    execute_homes = (_redistribute, _dispatch, torch.distributed.tensor._api)
    cost_homes = (_collective_utils, ops_utils, tensor_utils)
    torch_execute = {m: m.redistribute_local_tensor for m in execute_homes}
    torch_cost = {m: m.redistribute_cost for m in cost_homes}
    assert all(f.__module__.startswith("torch.") for f in torch_execute.values())
    assert all(f.__module__.startswith("torch.") for f in torch_cost.values())
    assert len(set(torch_execute.values())) == len(set(torch_cost.values())) == 1

    cute_shard.install()
    assert rd.is_installed()
    assert all(m.redistribute_local_tensor is rd.redistribute_local_tensor for m in execute_homes)
    assert all(m.redistribute_cost is rd.redistribute_cost for m in cost_homes)

    cute_shard.uninstall()
    assert not rd.is_installed()
    assert all(m.redistribute_local_tensor is torch_execute[m] for m in execute_homes)
    assert all(m.redistribute_cost is torch_cost[m] for m in cost_homes)

    # install(redistribute=False): views only, torch's redistribution
    cute_shard.install(redistribute=False)
    assert not rd.is_installed()
    assert all(m.redistribute_local_tensor is torch_execute[m] for m in execute_homes)


# ------------------------------------------------------------------------------- pricing


def _spec(
    mesh: DeviceMesh, placements: Sequence[Placement], shape: Sequence[int], **kw: Any
) -> DTensorSpec:
    t = torch.empty(tuple(shape))
    meta = TensorMeta(t.shape, t.stride(), t.dtype)
    return DTensorSpec(mesh, tuple(placements), tensor_meta=meta, **kw)


PLAIN = [Replicate(), Partial(), Shard(0), Shard(1)]


def _plain_pairs(mesh: DeviceMesh) -> Iterator[tuple[tuple[Placement, ...], tuple[Placement, ...]]]:
    n = mesh.ndim
    for a in itertools.product(PLAIN, repeat=n):
        for b in itertools.product(PLAIN, repeat=n):
            yield a, b


@pytest.fixture
def torch_cost() -> Any:
    """torch's own ``redistribute_cost`` (cute_shard installed afterwards)."""
    cute_shard.uninstall()
    fn = _collective_utils.redistribute_cost
    cute_shard.install()
    return fn


MESHES = [(8,), (2, 4), (4, 2), (2, 2, 2)]


def test_cost_is_zero_from_replicated_and_inf_to_partial_from_a_shard(torch_cost: Any) -> None:
    with fake_world(8):
        for shape in MESHES:
            mesh = init_device_mesh("cpu", shape)
            for a, b in _plain_pairs(mesh):
                src, dst = _spec(mesh, a, (16, 32)), _spec(mesh, b, (16, 32))
                cost = rd.redistribute_cost(src, dst)
                if all(p.is_replicate() for p in a):
                    assert cost == 0.0
                shard_to_partial = any(
                    q.is_partial() and p.is_shard() for p, q in zip(a, b, strict=True)
                )
                if shard_to_partial:
                    assert cost == math.inf == torch_cost(src, dst), (a, b)
                else:
                    assert math.isfinite(cost) and cost >= 0, (a, b)
                if a == b:
                    assert cost == 0.0, a


def test_cost_is_finite_for_strided_sources_torch_cannot_price(torch_cost: Any) -> None:
    with fake_world(8):
        mesh = init_device_mesh("cpu", (2, 4))
        for src, dst in [
            ([_StridedShard(0, split_factor=4), Shard(0)], [Shard(0), Shard(0)]),
            ([Shard(0), _StridedShard(0, split_factor=2)], [Shard(0), Shard(1)]),
            ([Shard(0), _StridedShard(0, split_factor=3)], [Replicate(), Shard(0)]),
        ]:
            a, b = _spec(mesh, src, (48, 32)), _spec(mesh, dst, (48, 32))
            assert torch_cost(a, b) == math.inf
            cost = rd.redistribute_cost(a, b)
            assert math.isfinite(cost) and cost > 0
            assert rd.redistribute_cost(a, b) == cost  # cached, stable
            big = rd.redistribute_cost(_spec(mesh, src, (480, 320)), _spec(mesh, dst, (480, 320)))
            assert big > cost  # more bytes, a higher price


def _symbolic_spec(
    mesh: DeviceMesh, placements: Sequence[Placement], env: Any = None
) -> DTensorSpec:
    """A (s0, 32) spec, s0 a symbol of ``env`` hinted at 16 (as ``torch.compile`` with dynamic
    shapes makes)."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv() if env is None else env
    s0 = env.create_symintnode(env.create_symbol(16, source=ConstantSource("s0")), hint=16)
    meta = TensorMeta(torch.Size([s0, 32]), (32, 1), torch.float32)
    return DTensorSpec(mesh, tuple(placements), tensor_meta=meta)


def test_cost_of_symbolic_sizes_is_the_plans_at_their_hints(torch_cost: Any) -> None:
    """Specs with symbolic sizes cannot key the price table (their hash raises TypeError,
    as torch's own function does on them in 2.13); they are priced as the same specs at the
    sizes' hints, without a guard (a price only ranks strategies: the plan that runs is made
    from the symbols). Two meshes cost infinity, as torch's says; a replicated source
    nothing, symbolic or not."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with fake_world(8):
        mesh = init_device_mesh("cpu", (2, 4))
        other = init_device_mesh("cpu", (4, 2))
        for a, b in [
            ((Shard(0), Shard(1)), (Replicate(), Shard(0))),
            ((Replicate(), Replicate()), (Shard(0), Shard(1))),
            ((Partial(), Shard(0)), (Replicate(), Replicate())),
            ((Shard(0), _StridedShard(0, split_factor=2)), (Shard(0), Shard(1))),
        ]:
            env = ShapeEnv()
            src, dst = _symbolic_spec(mesh, a, env), _symbolic_spec(mesh, b, env)
            with pytest.raises(TypeError):
                hash(src)  # (why the table cannot hold it)
            at_hints = (_spec(mesh, a, (16, 32)), _spec(mesh, b, (16, 32)))
            assert rd.redistribute_cost(src, dst) == rd.redistribute_cost(*at_hints), (a, b)
            assert not env.guards, (a, b)
            cross = (_spec(mesh, a, (16, 32)), _spec(other, b, (16, 32)))
            assert rd.redistribute_cost(*cross) == torch_cost(*cross) == math.inf, (a, b)
        src, dst = _symbolic_spec(mesh, (Replicate(), Replicate())), _symbolic_spec(mesh, PLAIN[2:])
        assert rd.redistribute_cost(src, dst) == 0.0


def test_a_spec_naming_a_dim_the_tensor_lacks_is_refused_by_name() -> None:
    """The DTensor side hands the planner what it read off torch's specs, unchecked for types
    (``plan_of_tuples``), but the placements are still checked: a Shard of a dim the tensor
    lacks is a ValueError naming the mesh dim and the placement, and it is never the cheaper
    strategy."""
    with fake_world(8):
        mesh = init_device_mesh("cpu", (2, 4))
        good = _spec(mesh, [Shard(0), Shard(1)], (16, 32))
        bad = _spec(mesh, [Shard(0), Shard(2)], (16, 32))
        for src, dst, what in [(good, bad, "target"), (bad, good, "source")]:
            with pytest.raises(ValueError, match=f"{what} placement S2 on mesh dim 1"):
                rd.plan_for_specs(src, dst)
            assert rd.redistribute_cost(src, dst) == math.inf


def test_cost_is_keyed_by_the_default_group() -> None:
    """A price depends on whether one collective may span several mesh dims, which the default
    group decides (``_joint``): priced before and after the group exists, each is right."""
    mesh_shape = (2, 4)
    a = [_StridedShard(0, split_factor=4), Shard(0)]
    b = [Shard(0), Shard(0)]
    with fake_world(8):
        mesh = init_device_mesh("cpu", mesh_shape)
        src, dst = _spec(mesh, a, (64, 32)), _spec(mesh, b, (64, 32))
        joint = rd.redistribute_cost(src, dst)
        assert rd._priced(src, dst, dist.group.WORLD) == joint
    assert dist.group.WORLD is None
    # the same specs with no default group: no step over both mesh dims, priced again
    alone = rd.redistribute_cost(src, dst)
    assert alone == rd._priced.__wrapped__(src, dst, None)
    assert alone > joint  # one mesh dim at a time moves more than one permutation


def _plain_comparison(torch_cost: Any, kind: str) -> list[str]:
    """Plain pairs (Replicate, Partial, Shard; default shard order) where cute_shard's price
    exceeds torch's, among the pairs whose plan is of ``kind``: ``"joint"`` (a step over
    several mesh dims), ``"reductions"`` (an all-reduce and a reduce-scatter) or ``"other"``."""
    above = []
    with fake_world(8):
        for shape in MESHES:
            mesh = init_device_mesh("cpu", shape)
            for a, b in _plain_pairs(mesh):
                src, dst = _spec(mesh, a, (16, 32)), _spec(mesh, b, (16, 32))
                theirs = torch_cost(src, dst)
                if math.isinf(theirs):
                    continue
                plan = rd.plan_for_specs(src, dst)
                kinds = {s.kind for s in plan.steps}
                if any(len(s.mesh_dims) > 1 for s in plan.steps):
                    of = "joint"
                elif {Kind.ALL_REDUCE, Kind.REDUCE_SCATTER} <= kinds:
                    of = "reductions"
                else:
                    of = "other"
                if of != kind:
                    continue
                ours = rd.redistribute_cost(src, dst)
                if ours > theirs + 1e-9:
                    above.append(f"{shape} {a} -> {b}: {ours:.3f} > torch {theirs:.3f} ({plan})")
    return above


def test_cost_never_above_torch_on_plain_cases(torch_cost: Any) -> None:
    above = _plain_comparison(torch_cost, "other")
    assert not above, "\n".join(above[:10])


def test_cost_never_above_torch_on_plain_joint_plans(torch_cost: Any) -> None:
    above = _plain_comparison(torch_cost, "joint")
    assert not above, "\n".join(above[:10])


def test_cost_never_above_torch_on_plain_plans_with_two_reductions(torch_cost: Any) -> None:
    above = _plain_comparison(torch_cost, "reductions")
    assert not above, "\n".join(above[:10])


def _fsdp_costs(torch_cost: Any, shape: tuple[int, int]) -> tuple[float, float]:
    """(cute_shard's price of [SS0:4, S0] -> [S0, S0] on (2, 4), torch's price of the same
    move written as torch's shard order: [S0, S0] with d0 sharded by mesh dim 1 first)."""
    with fake_world(8):
        mesh = init_device_mesh("cpu", (2, 4))
        strided = _spec(mesh, [_StridedShard(0, split_factor=4), Shard(0)], shape)
        ordered = _spec(
            mesh, [Shard(0), Shard(0)], shape, shard_order=(ShardOrderEntry(0, (1, 0)),)
        )
        target = _spec(mesh, [Shard(0), Shard(0)], shape)
        plan = rd.plan_for_specs(strided, target)
        assert plan.received == physical_limit(plan)
        return rd.redistribute_cost(strided, target), torch_cost(ordered, target)


def test_cost_below_torch_for_the_fsdp2_tp_weight(torch_cost: Any) -> None:
    ours, theirs = _fsdp_costs(torch_cost, (4096, 4096))
    assert ours < theirs / 2, (ours, theirs)


def test_cost_below_torch_for_the_fsdp2_tp_weight_at_the_briefs_size(torch_cost: Any) -> None:
    ours, theirs = _fsdp_costs(torch_cost, (64, 32))
    assert ours < theirs, (ours, theirs)


# --------------------------------------------------------------- bad local tensors, squeeze_


@pytest.mark.parametrize("rank", [0, 5])
def test_a_local_tensor_that_does_not_match_raises_before_any_collective(rank: int) -> None:
    cute_shard.install()
    with fake_world(8, rank=rank):
        mesh = init_device_mesh("cpu", (2, 4))
        bad = DTensor.from_local(
            torch.zeros(4, 3), mesh, [Shard(0), Shard(1)], shape=torch.Size((8, 8)), stride=(8, 1)
        )
        coord = tuple(mesh.get_coordinate() or ())
        with CommDebugMode() as comm, pytest.raises(ValueError) as err:
            bad.redistribute(mesh, [Replicate(), Replicate()])
        assert comm.get_total_counts() == 0
        message = str(err.value)
        assert f"mesh coordinate {coord}" in message
        assert "(4, 3)" in message and "(4, 2)" in message and "[S0, S1]" in message


def test_a_local_tensor_with_more_dims_than_its_spec_raises_the_same_error() -> None:
    cute_shard.install()
    with fake_world(8):
        mesh = init_device_mesh("cpu", (2, 4))
        bad = DTensor.from_local(
            torch.zeros(4, 2, 1),
            mesh,
            [Shard(0), Shard(1)],
            shape=torch.Size((8, 8)),
            stride=(8, 1),
        )
        with (
            CommDebugMode() as comm,
            pytest.raises(ValueError, match=r"its local tensor has shape \(4, 2, 1\)"),
        ):
            bad.redistribute(mesh, [Replicate(), Replicate()])
        assert comm.get_total_counts() == 0


def test_a_local_tensor_that_does_not_match_raises_under_local_tensor_mode() -> None:
    cute_shard.install()
    with every_rank(8):
        mesh = init_device_mesh("cpu", (2, 4))
        bad = DTensor.from_local(
            rank_map(lambda r: torch.zeros(4, 3)),
            mesh,
            [Shard(0), Shard(1)],
            shape=torch.Size((8, 8)),
            stride=(8, 1),
        )
        with CommDebugMode() as comm, pytest.raises(ValueError):
            bad.redistribute(mesh, [Replicate(), Replicate()])
        assert comm.get_total_counts() == 0


def test_inplace_squeeze_then_redistribute(seen: Seen) -> None:
    """torch's ``squeeze_`` of a dim no mesh dim shards keeps the DTensor's global shape and
    squeezes the local tensor: the local tensor lacks the global size-1 dim. Redistributing
    it still moves the right data."""
    full = torch.arange(8 * 4, dtype=torch.float64).reshape(8, 1, 4)
    with every_rank(8):
        mesh = init_device_mesh("cpu", (2, 4))
        x = distribute_tensor(full, mesh, [Replicate(), Shard(0)])
        x.squeeze_(1)
        assert x.shape == full.shape and all(t.dim() == 2 for t in per_rank(x, 8))
        y = x.redistribute(mesh, [Replicate(), Replicate()])
        assert all(torch.equal(t.reshape(full.shape), full) for t in per_rank(y, 8))
    assert seen.calls == [((Replicate(), Shard(0)), (Replicate(), Replicate()), True)]


def _squeezed_local_shape(installed: bool, rank: int) -> tuple[int, ...]:
    if installed:
        cute_shard.install()
    else:
        cute_shard.uninstall()
    with fake_world(8, rank=rank):
        mesh = init_device_mesh("cpu", (2, 4))
        x = distribute_tensor(torch.zeros(8, 1, 4), mesh, [Replicate(), Shard(0)])
        x.squeeze_(1)
        return tuple(x.redistribute(mesh, [Replicate(), Replicate()])._local_tensor.shape)


@pytest.mark.parametrize("rank", [0, 6])
def test_inplace_squeeze_result_stays_squeezed_as_torchs(rank: int) -> None:
    """On a real rank (coordinates are ints) the result keeps the local tensor squeezed, as
    torch's own redistribution does."""
    assert _squeezed_local_shape(True, rank) == _squeezed_local_shape(False, rank) == (8, 4)


def test_inplace_squeeze_result_stays_squeezed_under_local_tensor_mode() -> None:
    shapes = {}
    for installed in (False, True):
        if installed:
            cute_shard.install()
        else:
            cute_shard.uninstall()
        with every_rank(8):
            mesh = init_device_mesh("cpu", (2, 4))
            x = distribute_tensor(torch.zeros(8, 1, 4), mesh, [Replicate(), Shard(0)])
            x.squeeze_(1)
            y = x.redistribute(mesh, [Replicate(), Replicate()])
            shapes[installed] = [tuple(t.shape) for t in per_rank(y, 8)]
    assert shapes[True] == shapes[False] == [(8, 4)] * 8


def test_inplace_squeeze_then_a_target_that_shards_the_squeezed_dim() -> None:
    """After ``squeeze_`` the local tensor lacks a global size-1 dim; a target sharding that
    dim gives its one row to the first rank and none to the others, so no rank's result can
    stay squeezed: every rank's keeps the dim, the DTensor is consistent again, and
    ``full_tensor()`` is the tensor (torch's own redistribution returns a (1,) local tensor
    per rank here, and ``full_tensor()`` gives ``[0.]``)."""
    cute_shard.install()
    full = torch.arange(3.0).reshape(1, 3)
    for source in ([Replicate()], [Partial()]):
        with every_rank(4):
            mesh = init_device_mesh("cpu", (4,))
            x = distribute_tensor(full, mesh, [Replicate()])
            if source == [Partial()]:
                x = DTensor.from_local(rank_map(lambda r: full / 4), mesh, source, run_check=False)
            x.squeeze_(0)
            y = x.redistribute(mesh, [Shard(0)])
            assert [tuple(t.shape) for t in per_rank(y, 4)] == [(1, 3), (0, 3), (0, 3), (0, 3)]
            assert all(torch.equal(t, full) for t in per_rank(y.full_tensor(), 4))
    # a target sharding the other dim: every rank's result stays squeezed, and the way back
    # reads its (1,) as lacking the size-1 dim 0, not the size-3 dim 1
    with every_rank(4):
        mesh = init_device_mesh("cpu", (4,))
        x = distribute_tensor(full, mesh, [Replicate()])
        x.squeeze_(0)
        y = x.redistribute(mesh, [Shard(1)])
        assert [tuple(t.shape) for t in per_rank(y, 4)] == [(1,), (1,), (1,), (0,)]
        assert all(torch.equal(t, full[0]) for t in per_rank(y.full_tensor(), 4))


# ------------------------------------------------------------------------------ async_op

# (name, mesh, shape, source, target, whether the last collective's output is the target up
# to views, so async_op leaves it pending: torch's own answer on each, checked below)
ASYNC = [
    ("all-reduce", (8,), (16, 4), [Partial()], [Replicate()], True),
    ("reduce-scatter", (8,), (16, 4), [Partial()], [Shard(0)], True),
    ("reduce-scatter of d1", (8,), (16, 8), [Partial()], [Shard(1)], True),
    ("gather of d0", (8,), (16, 4), [Shard(0)], [Replicate()], True),
    (
        "gather of d0 within a shard",
        (2, 4),
        (16, 4),
        [Shard(0), Shard(0)],
        [Shard(0), Replicate()],
        True,
    ),
    (
        "gather of d0 beside a shard of d1",
        (2, 4),
        (16, 4),
        [Shard(0), Shard(1)],
        [Replicate(), Shard(1)],
        True,
    ),
    ("gather of d1", (8,), (4, 16), [Shard(1)], [Replicate()], False),
    ("all-to-all", (8,), (16, 16), [Shard(0)], [Shard(1)], False),
    (
        "strided gather",
        (2, 4),
        (16, 4),
        [Shard(0), _StridedShard(0, split_factor=2)],
        [Shard(0), Replicate()],
        False,
    ),
]


def _pending(
    mesh_shape: tuple[int, ...],
    shape: tuple[int, ...],
    src: list[Placement],
    dst: list[Placement],
    async_op: bool,
) -> bool:
    """Whether ``redistribute(async_op=...)`` hands back the last collective still pending."""
    mesh = init_device_mesh("cpu", mesh_shape)
    if any(isinstance(p, Partial) for p in src):
        x = DTensor.from_local(torch.ones(shape), mesh, src, run_check=False)
    else:
        x = distribute_tensor(torch.ones(shape), mesh, src)
    y = x.redistribute(mesh, dst, async_op=async_op)
    pending = isinstance(y._local_tensor, funcol.AsyncCollectiveTensor)
    funcol.wait_tensor(y._local_tensor)  # type: ignore[no-untyped-call]  # (leave none in flight)
    return pending


@pytest.mark.parametrize(
    ("mesh_shape", "shape", "src", "dst", "pending"),
    [c[1:] for c in ASYNC],
    ids=[c[0] for c in ASYNC],
)
def test_async_op_leaves_the_last_collective_pending_where_torch_does(
    mesh_shape: tuple[int, ...],
    shape: tuple[int, ...],
    src: list[Placement],
    dst: list[Placement],
    pending: bool,
) -> None:
    """TP's parallel styles redistribute with ``async_op=True`` so the collective overlaps the
    next computation: with install() the result is pending exactly where torch's own is (an
    all-reduce, a reduce-scatter, a gather whose blocks are the target in order, which is
    then the gathered buffer itself, not a copy), and never without ``async_op``."""
    seen: dict[tuple[bool, bool], bool] = {}
    with fake_world(math.prod(mesh_shape)):
        for installed in (False, True):
            (cute_shard.install if installed else cute_shard.uninstall)()
            for async_op in (False, True):
                seen[installed, async_op] = _pending(mesh_shape, shape, src, dst, async_op)
    assert seen == {
        (False, False): False,
        (True, False): False,
        (False, True): pending,
        (True, True): pending,
    }

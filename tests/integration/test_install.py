"""install()/uninstall()/enabled(): what they replace, what they restore, and what DTensor sees.

All in this process, on a fake process group (placements, specs, caches and errors need no
real communication; data on real ranks is in ``test_multirank.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._op_schema import OpSchema, OpSpec, OpStrategy
from torch.distributed.tensor.debug import CommDebugMode, _get_fast_path_sharding_prop_cache_stats
from torch.distributed.tensor.placement_types import _StridedShard

import cute_shard
from cute_shard import RedistributionRequired, integration, oracle, rules
from cute_shard.notation import placements_str

from .conftest import fake_world
from .multirank_cases import OPS

aten = torch.ops.aten
Rep = Replicate()

# The view-op overloads every supported torch release registers in _view_ops (the integration
# finds them itself; this list catches a torch upgrade that adds or drops one), and t(), which
# torch registers elsewhere, each with its strictness under install(): torch's, except
# _unsafe_view, which torch registers as strict and install() lets redistribute (a composite
# op's fold of its own result, which nothing aliases; the real views stay strict).
TORCH_VIEW_OPS = {
    aten.view.default: True,
    aten.reshape.default: False,
    aten._unsafe_view.default: False,
    aten.view_copy.default: False,
    aten.squeeze.default: True,
    aten.squeeze.dim: True,
    aten.squeeze.dims: True,
    aten.squeeze_.default: True,
    aten.squeeze_.dim: True,
    aten.squeeze_.dims: True,
    aten.unsqueeze.default: False,
    aten.expand.default: False,
    aten.expand_copy.default: False,
    aten.permute.default: False,
    aten.repeat.default: False,
    aten.transpose.int: False,
    aten.t.default: False,
    aten.view_as_real.default: False,
    aten.view_as_complex.default: False,
}


# CompositeImplicitAutograd view ops: they reach DTensor only under inference mode. Those whose
# arguments are dims or counts get a ViewStrategy, the others are decomposed.
COMPOSITE_VIEW_OPS = {
    aten.atleast_1d.default,
    aten.atleast_2d.default,
    aten.atleast_3d.default,
    aten.flatten.using_ints,
    aten.movedim.int,
    aten.movedim.intlist,
    aten.ravel.default,
    aten.tile.default,
}
DECOMPOSED_OPS = {
    aten.atleast_1d.Sequence,
    aten.atleast_2d.Sequence,
    aten.atleast_3d.Sequence,
    aten.broadcast_to.default,
    aten.unflatten.int,
}


# The reshape family: CompositeImplicitAutograd ops that may copy and end in a strict view.
# By default install() sets these DTensor methods; with reshape_may_copy="dispatcher" it
# registers a MayCopy kernel for each op below at PythonTLSSnapshot (reshape_as calls reshape).
MAY_COPY_METHODS = ("reshape", "reshape_as", "flatten", "unflatten", "ravel")
MAY_COPY_OPS = {
    aten.reshape.default,
    aten.flatten.using_ints,
    aten.unflatten.int,
    aten.ravel.default,
}


def propagator() -> Any:
    return DTensor._op_dispatcher.sharding_propagator


def has_kernel(op: Any) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(
        op.name(), torch._C.DispatchKey.PythonTLSSnapshot
    )


def dtensor(
    shape: tuple[int, ...], mesh: DeviceMesh, placements: tuple[Any, ...], dtype: Any = None
) -> DTensor:
    from cute_shard import oracle

    n = int(torch.Size(shape).numel())
    g = torch.arange(float(n)).reshape(shape).to(dtype or torch.float32)
    local = oracle.local_shard(g, placements, tuple(mesh.shape), mesh.get_coordinate())
    stride = tuple(int(torch.Size(shape[d + 1 :]).numel()) for d in range(len(shape)))
    return DTensor.from_local(
        local, mesh, placements, run_check=False, shape=torch.Size(shape), stride=stride
    )


@pytest.fixture
def mesh24(world8: None) -> Iterator[DeviceMesh]:
    yield init_device_mesh("cpu", (2, 4))


# --------------------------------------------------------------------------------------------
# What install() replaces and uninstall() restores


def test_finds_every_view_op_torch_registers() -> None:
    found = {v.overload: v.strict_view for v in integration.torch_view_ops()}
    assert found == TORCH_VIEW_OPS


def test_install_replaces_exactly_the_view_ops_and_uninstall_restores_the_same_objects() -> None:
    p = propagator()
    before = dict(p.op_strategy_funcs)
    before_single = dict(p.op_single_dim_strategy_funcs)
    before_info = dict(p.op_to_schema_info)
    torch_cache = p.propagate_op_sharding
    strided_local_size = _StridedShard.local_shard_size_and_offset
    unflatten = DTensor.__dict__["__tensor_unflatten__"]
    cute_shard.install()
    assert DTensor.__dict__["__tensor_unflatten__"] is not unflatten
    for op in TORCH_VIEW_OPS:
        strategy = p.op_strategy_funcs[op]
        assert isinstance(strategy, integration.ViewStrategy) and strategy.op.overload is op
        assert op not in p.op_single_dim_strategy_funcs
    viewed, decomposed = integration.composite_view_ops()
    assert {v.overload for v in viewed} == COMPOSITE_VIEW_OPS
    assert set(decomposed) == DECOMPOSED_OPS
    for op in COMPOSITE_VIEW_OPS:
        assert isinstance(p.op_strategy_funcs[op], integration.ViewStrategy)
    for op in DECOMPOSED_OPS:
        assert isinstance(p.op_strategy_funcs[op], integration.Decompose)
    assert {k.overload for k in integration.may_copy_kernels()} == MAY_COPY_OPS
    assert not any(has_kernel(op) for op in MAY_COPY_OPS)  # the default: methods
    assert set(MAY_COPY_METHODS) <= DTensor.__dict__.keys()
    assert isinstance(p.propagate_op_sharding_non_cached, integration.ViewPropagation)
    assert p.propagate_op_sharding is not torch_cache
    composite = COMPOSITE_VIEW_OPS | DECOMPOSED_OPS
    replaced = set(TORCH_VIEW_OPS) | composite
    others = {op: f for op, f in p.op_strategy_funcs.items() if op not in replaced}
    assert others == {op: f for op, f in before.items() if op not in replaced}
    assert all(others[op] is before[op] for op in others)
    assert p.op_to_schema_info == before_info
    cute_shard.uninstall()
    assert p.op_strategy_funcs == before
    assert all(p.op_strategy_funcs[op] is before[op] for op in before)
    assert p.op_single_dim_strategy_funcs == before_single
    assert aten.view_as_complex.default not in p.op_strategy_funcs
    assert not composite & p.op_strategy_funcs.keys()
    assert p.op_to_schema_info == before_info
    assert not any(has_kernel(op) for op in MAY_COPY_OPS)
    assert not set(MAY_COPY_METHODS) & DTensor.__dict__.keys()
    assert "propagate_op_sharding_non_cached" not in vars(p)  # the class's method again
    assert p.propagate_op_sharding is torch_cache
    assert _StridedShard.local_shard_size_and_offset is strided_local_size
    assert DTensor.__dict__["__tensor_unflatten__"] is unflatten


def test_t_of_an_uneven_shard_stays_sharded(mesh24: DeviceMesh) -> None:
    """t() is a view: it keeps every shard, uneven ones too, with no communication. (torch
    2.13's own strategy for t does so; 2.14 and 2.15 register a single-mesh-dim strategy for
    it that replicates a shard of uneven size, an all-gather.) More than 2 dims: torch's
    error, before any communication."""
    cute_shard.install()
    dt = dtensor((6, 5), mesh24, (Shard(0), Shard(1)))  # 6 rows over 2, 5 columns over 4
    with CommDebugMode() as comm:
        out = dt.t()
    assert comm.get_comm_counts() == {}
    assert out.placements == (Shard(1), Shard(0))
    assert torch.equal(out.to_local(), dt.to_local().t())  # (one rank: a fake world)
    vector = dtensor((6,), mesh24, (Shard(0), Rep))
    assert vector.t().placements == (Shard(0), Rep)
    with pytest.raises(RuntimeError, match="t"), CommDebugMode() as comm:
        dtensor((2, 4, 8), mesh24, (Shard(0), Shard(1))).t()
    assert comm.get_comm_counts() == {}


def test_install_and_uninstall_are_idempotent() -> None:
    p = propagator()
    original = p.op_strategy_funcs[aten.view.default]
    cute_shard.install()
    ours = p.op_strategy_funcs[aten.view.default]
    cute_shard.install()
    assert p.op_strategy_funcs[aten.view.default] is ours
    assert integration.torch_view_ops() == tuple(
        p.op_strategy_funcs[v.overload].op for v in integration.torch_view_ops()
    )
    cute_shard.uninstall()
    cute_shard.uninstall()
    assert p.op_strategy_funcs[aten.view.default] is original
    assert not integration.is_installed()


def test_enabled_is_reentrant_and_restores_the_previous_state() -> None:
    cute_shard.uninstall()
    with cute_shard.enabled():
        assert integration.is_installed()
        with cute_shard.enabled():
            assert integration.is_installed()
        assert integration.is_installed()
    assert not integration.is_installed()
    cute_shard.install()
    with cute_shard.enabled():
        pass
    assert integration.is_installed()
    with pytest.raises(ZeroDivisionError), cute_shard.enabled():
        raise ZeroDivisionError
    assert integration.is_installed()


def test_every_overload_is_reached_by_the_ops_the_tests_run(mesh24: DeviceMesh) -> None:
    """The multi-rank suite's ops, between them, reach the decision of every replaced
    strategy (through the fast path or the ViewStrategy)."""
    reached: set[Any] = set()
    real_decide = integration.ViewOp.decide

    def spy(self: integration.ViewOp, *args: Any) -> Any:
        reached.add(self.overload)
        return real_decide(self, *args)

    args: dict[str, tuple[tuple[int, ...], tuple[Any, ...]]] = {
        "view": ((8, 6), ((48,),)),
        "reshape": ((8, 6), ((48,),)),
        "reshape_inference": ((8, 6), ((48,),)),
        "_unsafe_view": ((8, 6), ((48,),)),
        "view_copy": ((8, 6), ((48,),)),
        "squeeze": ((8, 1, 6), ()),
        "squeeze_dim": ((8, 1, 6), (1,)),
        "squeeze_dims": ((8, 1, 6), ((1,),)),
        "squeeze_": ((8, 1, 6), (1,)),
        "squeeze__all": ((8, 1, 6), ()),
        "squeeze__dims": ((8, 1, 6), ((1,),)),
        "unsqueeze": ((8, 6), (0,)),
        "expand": ((8, 1), ((8, 6),)),
        "expand_copy": ((8, 1), ((8, 6),)),
        "permute": ((8, 6), ((1, 0),)),
        "repeat": ((8, 6), ((1, 2),)),
        "transpose": ((8, 6), (0, 1)),
        "view_as_real": ((8, 6), ()),
        "view_as_complex": ((8, 6, 2), ()),
        "flatten": ((8, 6, 2), (0, 1)),
        "unflatten": ((8, 6), (0, (2, 4))),
        "movedim": ((8, 6), (0, 1)),
        "t": ((8, 6), ()),
        "ravel": ((8, 6), ()),
        "broadcast_to": ((1, 6), ((8, 6),)),
        "tile": ((8, 6), ((2, 1),)),
        "atleast_2d": ((8,), ()),
        "atleast_3d": ((8, 6), ()),
        "flatten_inference": ((8, 6, 2), (0, 1)),
        "unflatten_inference": ((8, 6), (0, (2, 4))),
        "movedim_inference": ((8, 6), (0, 1)),
        "ravel_inference": ((8, 6), ()),
        "broadcast_to_inference": ((1, 6), ((8, 6),)),
        "tile_inference": ((8, 6), ((2, 1),)),
        "atleast_3d_inference": ((8, 6), ()),
        "torch.ravel": ((8, 6), ()),
        "view_no_grad": ((8, 6), ((48,),)),
        "reshape_no_grad": ((8, 6), ((48,),)),
        "flatten_no_grad": ((8, 6, 2), (0, 1)),
        "permute_no_grad": ((8, 6), ((1, 0),)),
    }
    assert set(args) == set(OPS)
    cute_shard.install()
    integration.ViewOp.decide = spy  # type: ignore[method-assign]
    try:
        for name, (shape, op_args) in args.items():
            op = OPS[name]
            dtype = torch.complex64 if op.complex_input else torch.float32
            dt = dtensor(shape, mesh24, (Shard(0), Rep), dtype)
            with torch.inference_mode(op.inference), torch.set_grad_enabled(not op.no_grad):
                op.fn(dt, *op_args)
    finally:
        integration.ViewOp.decide = real_decide  # type: ignore[method-assign]
    assert reached == set(TORCH_VIEW_OPS) | (
        COMPOSITE_VIEW_OPS
        - {aten.atleast_1d.default, aten.atleast_2d.default, aten.movedim.intlist}
    )


# --------------------------------------------------------------------------------------------
# Caches


@pytest.fixture
def mesh23() -> Iterator[DeviceMesh]:
    with fake_world(6):
        yield init_device_mesh("cpu", (2, 3))


def test_switching_propagators_clears_dtensor_caches(mesh23: DeviceMesh) -> None:
    """(24,) -> (2, 12) on a 2x3 mesh with [S(0), S(0)]: torch refuses, cute_shard keeps it
    sharded. Whatever answer surfaces right after a switch shows that no cached one was used."""
    cute_shard.uninstall()
    dt = dtensor((24,), mesh23, (Shard(0), Shard(0)))
    with pytest.raises(RuntimeError):
        dt.view(2, 12)
    dt.view(24)  # fill the caches with torch answers
    assert propagator().propagate_op_sharding.cache_info().currsize + sum(
        _get_fast_path_sharding_prop_cache_stats()
    )
    cute_shard.install()
    assert propagator().propagate_op_sharding.cache_info().currsize == 0
    assert dt.view(2, 12).placements == (Shard(0), Shard(1))
    cute_shard.uninstall()
    assert propagator().propagate_op_sharding.cache_info().currsize == 0
    with pytest.raises(RuntimeError):
        dt.view(2, 12)


def test_equal_inputs_give_equal_hash_equal_specs_and_the_cache_hits(mesh24: DeviceMesh) -> None:
    cute_shard.install()
    dt = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1)))
    hits, misses = _get_fast_path_sharding_prop_cache_stats()
    a = dt.view(128, 32)
    hits_a, misses_a = _get_fast_path_sharding_prop_cache_stats()
    b = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1))).view(128, 32)
    hits_b, misses_b = _get_fast_path_sharding_prop_cache_stats()
    assert (misses_a - misses, hits_a - hits) == (1, 0)
    assert (misses_b - misses_a, hits_b - hits_a) == (0, 1)  # the repeat is a cache hit
    assert a._spec == b._spec and hash(a._spec) == hash(b._spec)
    assert a.placements == (Shard(0), _StridedShard(0, split_factor=4))


def _schema(op: Any, spec: DTensorSpec, *args: Any) -> OpSchema:
    return OpSchema(op, (OpStrategy([OpSpec(spec)]), *args), {})


def _spec(mesh: DeviceMesh, placements: tuple[Any, ...], shape: tuple[int, ...]) -> DTensorSpec:
    stride = tuple(int(torch.Size(shape[d + 1 :]).numel()) for d in range(len(shape)))
    meta = TensorMeta(torch.Size(shape), stride, torch.float32)
    return DTensorSpec(mesh, placements, tensor_meta=meta)


def test_strategy_outputs_are_canonical_and_hash_equal(mesh24: DeviceMesh) -> None:
    strategy = integration.ViewStrategy(
        next(v for v in integration.torch_view_ops() if v.overload is aten.view.default)
    )
    # A _StridedShard with split factor 1 is a Shard: the same input either way.
    for placements in ((Shard(0), Shard(1)), (_StridedShard(0, split_factor=1), Shard(1))):
        first = strategy(
            _schema(aten.view.default, _spec(mesh24, placements, (8, 16, 32)), [128, 32])
        )
        again = strategy(
            _schema(aten.view.default, _spec(mesh24, placements, (8, 16, 32)), [128, 32])
        )
        out_a, out_b = first.strategies[0].output_spec, again.strategies[0].output_spec
        assert out_a == out_b and hash(out_a) == hash(out_b)
        assert out_a.placements == (Shard(0), _StridedShard(0, split_factor=4))
        assert not any(
            isinstance(p, _StridedShard) and p.split_factor == 1 for p in out_a.placements
        )


def test_strategy_output_has_torchs_format(mesh24: DeviceMesh) -> None:
    """Where both propagators agree, the OpStrategy is the same object for object."""
    spec = _spec(mesh24, (Shard(0), Rep), (8, 6))
    schema = _schema(aten.view.default, spec, [48])
    torch_strategy = propagator().op_strategy_funcs[aten.view.default]
    ours = integration.ViewStrategy(
        next(v for v in integration.torch_view_ops() if v.overload is aten.view.default)
    )
    theirs, mine = torch_strategy(schema), ours(schema)
    assert len(theirs.strategies) == len(mine.strategies) == 1
    t, m = theirs.strategies[0], mine.strategies[0]
    assert m.output_spec == t.output_spec
    assert m.output_spec.tensor_meta == t.output_spec.tensor_meta is None
    assert m.input_specs == t.input_specs
    assert m.input_specs[0].tensor_meta == spec.tensor_meta
    assert m.redistribute_cost == t.redistribute_cost
    assert m.output_spec.use_strided_shard_as_shard_order is False


# --------------------------------------------------------------------------------------------
# Mesh identity


def test_outputs_stay_on_the_callers_mesh_object(mesh24: DeviceMesh) -> None:
    cute_shard.install()
    dt = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1)))
    assert dt.view(128, 32).device_mesh is mesh24
    assert dt.reshape(8, 512).device_mesh is mesh24
    assert dt.permute(2, 0, 1).device_mesh is mesh24


def test_strategy_keeps_mesh_identity_through_a_deepcopied_schema(
    mesh24: DeviceMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller may deep-copy the OpSchema with a memo that keeps the mesh; the strategy
    then answers on that same mesh object, and never copies or constructs one itself."""
    strategy = integration.ViewStrategy(
        next(v for v in integration.torch_view_ops() if v.overload is aten.view.default)
    )
    schema = _schema(aten.view.default, _spec(mesh24, (Shard(0), Shard(1)), (8, 16, 32)), [128, 32])
    copied = copy.deepcopy(schema, memo={id(mesh24): mesh24})

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("cute_shard constructed or copied a DeviceMesh")

    monkeypatch.setattr(DeviceMesh, "__init__", refuse)
    monkeypatch.setattr(DeviceMesh, "__getstate__", refuse)
    monkeypatch.setattr(DeviceMesh, "__deepcopy__", refuse, raising=False)
    result = strategy(copied)
    spec = result.strategies[0]
    assert spec.output_spec.mesh is mesh24
    assert spec.input_specs[0].mesh is mesh24


# --------------------------------------------------------------------------------------------
# What a user sees


def test_a_strict_view_that_needs_communication_names_the_dims(mesh24: DeviceMesh) -> None:
    cute_shard.install()
    dt = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1)))
    with pytest.raises(RuntimeError) as info:
        dt.view(16, 8, 32)
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith("view needs communication: tensor dim 1 is sharded on mesh dim 1")
    assert "redistribute the input to [Shard(dim=0), Replicate()]" in first_line
    cause = info.value.__cause__
    assert isinstance(cause, RedistributionRequired)
    assert [(b.tensor_dim, b.mesh_dim) for b in cause.blocked] == [(1, 1)]
    assert dt.redistribute(mesh24, cause.suggestion).view(16, 8, 32).placements == (Shard(0), Rep)
    # The hint's other way out: reshape moves the same mesh dim and succeeds.
    with CommDebugMode() as reshaped:
        assert dt.reshape(16, 8, 32).placements == (Shard(0), Rep)
    with CommDebugMode() as suggested:
        dt.redistribute(mesh24, cause.suggestion)
    assert reshaped.get_comm_counts() == suggested.get_comm_counts() != {}


UNEVEN_RESHAPES = [
    # (global shape, new shape, mesh, placements)
    ((6, 256), (1536,), (8,), (Shard(0),)),
    ((10, 12), (2, 5, 12), (8,), (Shard(0),)),
    ((18,), (3, 1, 6), (2, 3), (Rep, _StridedShard(0, split_factor=2))),
    ((12, 20), (20, 12), (2, 4), (Shard(0), _StridedShard(1, split_factor=2))),
    ((5, 7), (35,), (2, 4), (Shard(0), Shard(1))),
]


@pytest.mark.parametrize("inference", [False, True], ids=["grad", "inference"])
@pytest.mark.parametrize(("shape", "new", "mesh_shape", "placements"), UNEVEN_RESHAPES)
def test_reshape_never_fails_on_a_legal_shape(
    world8: None,
    shape: tuple[int, ...],
    new: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    placements: tuple[Any, ...],
    inference: bool,
) -> None:
    """reshape redistributes what must move and succeeds, also where torch 2.13 raises
    "Cannot unflatten/flatten unevenly sharded tensor": under inference mode (DTensor sees
    aten.reshape) and in grad mode (it sees aten.view, after the MayCopy kernel)."""
    mesh = init_device_mesh("cpu", mesh_shape)
    dt = dtensor(shape, mesh, placements)
    cute_shard.install()
    with torch.inference_mode(inference):
        out = dt.reshape(new)
    assert out.shape == torch.Size(new) and out.device_mesh is mesh


@pytest.mark.parametrize(
    ("shape", "new", "word"), [((6, 256), (1536,), "flatten"), ((10, 12), (2, 5, 12), "unflatten")]
)
def test_torch_refuses_uneven_reshapes_outside_inference_mode(
    world8: None, shape: tuple[int, ...], new: tuple[int, ...], word: str
) -> None:
    """What torch 2.13 does with the same reshapes in grad mode (its strict view path)."""
    mesh = init_device_mesh("cpu", (8,))
    dt = dtensor(shape, mesh, (Shard(0),))
    cute_shard.uninstall()
    with pytest.raises(RuntimeError, match=f"Cannot {word} unevenly sharded tensor"):
        dt.reshape(new)


def test_view_as_complex_reduces_pending_max_first(mesh24: DeviceMesh) -> None:
    strategy = integration.ViewStrategy(
        next(v for v in integration.torch_view_ops() if v.local_op is torch.view_as_complex)
    )
    for reduce_op, kept in (("max", False), ("sum", True), ("avg", True)):
        spec = _spec(mesh24, (Partial(reduce_op), Shard(0)), (8, 6, 2))
        out = strategy(_schema(aten.view_as_complex.default, spec)).strategies[0]
        assert isinstance(out.input_specs[0].placements[0], Partial) is kept
        assert out.output_spec.placements[1] == Shard(0)


# --------------------------------------------------------------------------------------------
# Inference mode: the CompositeImplicitAutograd view ops reach DTensor undecomposed

COMPOSITE_CASES = {
    "flatten": ((4, 4, 8), (Shard(0), Shard(1), Shard(2)), lambda t: t.flatten()),
    "flatten(0, 1)": ((4, 4, 8), (Shard(0), Shard(1), Rep), lambda t: t.flatten(0, 1)),
    "unflatten": ((16, 8), (Shard(0), Shard(0), Rep), lambda t: t.unflatten(0, (4, 4))),
    "movedim": ((4, 4, 8), (Shard(0), Shard(1), Shard(2)), lambda t: t.movedim(0, -1)),
    "ravel": ((4, 4, 8), (Shard(0), Shard(1), Rep), torch.ravel),
    "broadcast_to": ((1, 8), (Rep, Shard(1), Rep), lambda t: torch.broadcast_to(t, (4, 8))),
    "tile": ((4, 8), (Shard(0), Shard(1), Rep), lambda t: torch.tile(t, (1, 2))),
    "atleast_3d": ((4, 8), (Shard(0), Shard(1), Rep), torch.atleast_3d),
}


def run_on_all_ranks(shape: tuple[int, ...], placements: tuple[Any, ...], fn: Any) -> bool:
    """Run ``fn`` under inference mode on every rank of a simulated 2x2x2 mesh
    (LocalTensorMode) and say whether ``full_tensor()`` equals plain torch everywhere."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor import distribute_tensor

    g = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    with LocalTensorMode(frozenset(range(8))), torch.inference_mode():
        mesh = init_device_mesh("cpu", (2, 2, 2))
        full = fn(distribute_tensor(g, mesh, list(placements), src_data_rank=None)).full_tensor()
        per_rank = getattr(full, "_local_tensors", {0: full})
        return all(torch.equal(t, fn(g)) for t in per_rank.values())


@pytest.mark.parametrize("name", COMPOSITE_CASES)
def test_composite_view_ops_under_inference_mode(world8: None, name: str) -> None:
    shape, placements, fn = COMPOSITE_CASES[name]
    cute_shard.install()
    assert run_on_all_ranks(shape, placements, fn)


# --------------------------------------------------------------------------------------------
# The reshape family outside inference mode: the methods (default) and the MayCopy kernels

# (mesh, global shape, placements, op, the modes that reach it), each on 8 ranks. Each needs
# communication; in grad mode DTensor sees only the strict aten.view that the op decomposes
# into. The DTensor methods reach method calls (nn.Flatten calls one); only the dispatcher's
# kernels reach the function forms.
BOTH = ("methods", "dispatcher")
MAY_COPY_CASES: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...], Any, Any]] = {
    "reshape, uneven flatten": ((8,), (6, 256), (Shard(0),), lambda t: t.reshape(1536), BOTH),
    "reshape, uneven unflatten": (
        (8,),
        (10, 12),
        (Shard(0),),
        lambda t: t.reshape(2, 5, 12),
        BOTH,
    ),
    "reshape on 2x4": (
        (2, 4),
        (8, 16, 32),
        (Shard(0), Shard(1)),
        lambda t: t.reshape(16, 8, 32),
        BOTH,
    ),
    # Not viewable: reshape decomposes into clone + _unsafe_view.
    "reshape of a transpose": ((8,), (4, 6), (Shard(1),), lambda t: t.t().reshape(24), BOTH),
    "reshape_as": (
        (8,),
        (6, 256),
        (Shard(0),),
        lambda t: t.reshape_as(torch.empty(1536)),
        BOTH,
    ),
    "flatten": ((2, 4), (6, 3, 4), (Shard(0), Shard(1)), lambda t: t.flatten(1, 2), BOTH),
    "nn.Flatten": ((8,), (3, 4, 6), (Shard(1),), torch.nn.Flatten(0), BOTH),
    "unflatten": ((8,), (12, 6), (Shard(0),), lambda t: t.unflatten(0, (3, 4)), BOTH),
    "ravel": ((2, 4), (6, 8), (Shard(1), Shard(0)), lambda t: t.ravel(), BOTH),
    "torch.flatten": (
        (2, 4),
        (6, 3, 4),
        (Shard(1), Shard(0)),
        lambda t: torch.flatten(t, 0, 1),
        ("dispatcher",),
    ),
    "torch.ravel": ((2, 4), (6, 8), (Shard(1), Shard(0)), torch.ravel, ("dispatcher",)),
}
MAY_COPY_RUNS = [
    pytest.param(name, mode, id=f"{name}-{mode}")
    for name, case in MAY_COPY_CASES.items()
    for mode in case[4]
]


def engine_target(dt: DTensor, out_shape: tuple[int, ...]) -> tuple[Any, ...]:
    """The engine's (non-strict) input target for a view of ``dt`` to ``out_shape``."""
    shape = tuple(dt.shape)
    rule = rules.view_groups(shape, out_shape)
    target, _ = cute_shard.propagate_shape_and_sharding(
        dt.placements, shape, rule, tuple(dt.device_mesh.shape), complex_view=False
    )
    return tuple(target)


@pytest.mark.parametrize(("name", "mode"), MAY_COPY_RUNS)
def test_reshape_family_redistributes_what_the_engine_moves(
    world8: None, name: str, mode: str
) -> None:
    """In grad mode: the op succeeds on the caller's mesh, communicating exactly what
    redistributing the input to the engine's input target takes (and that is not nothing);
    the output is what the view gives after that redistribution."""
    mesh_shape, shape, placements, fn, _ = MAY_COPY_CASES[name]
    mesh = init_device_mesh("cpu", mesh_shape)
    cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
    dt = dtensor(shape, mesh, placements)
    with CommDebugMode() as comm:
        out = fn(dt)
    if name == "reshape of a transpose":
        dt = dt.t()  # the transpose is free; the reshape's input is this
    out_shape = tuple(fn(torch.empty(shape)).shape)
    target = engine_target(dt, out_shape)
    assert target != dt.placements
    with CommDebugMode() as implied:
        moved = dt.redistribute(mesh, target)
    assert comm.get_comm_counts() == implied.get_comm_counts() != {}
    assert tuple(out.shape) == out_shape and out.device_mesh is mesh
    assert out.placements == moved.reshape(out_shape).placements
    assert oracle.is_canonical(out.placements)


def test_methods_do_not_reach_the_function_forms(world8: None) -> None:
    """With the default methods, torch.flatten / torch.ravel stay the strict view they
    decompose into (as without install(reshape_may_copy="dispatcher"))."""
    cute_shard.install()
    for name in ("torch.flatten", "torch.ravel"):
        mesh_shape, shape, placements, fn, _ = MAY_COPY_CASES[name]
        dt = dtensor(shape, init_device_mesh("cpu", mesh_shape), placements)
        with pytest.raises(RuntimeError) as info:
            fn(dt)
        assert isinstance(info.value.__cause__, RedistributionRequired)


def on_all_ranks(
    mesh_shape: tuple[int, ...], shape: tuple[int, ...], placements: tuple[Any, ...], fn: Any
) -> tuple[bool, bool]:
    """Run ``fn`` in grad mode on every rank of a simulated 8-rank mesh (LocalTensorMode) and
    backward through ``(fn(x) * w).sum()``. Says whether ``full_tensor()`` of the output and of
    the input's gradient equal plain torch's on every rank."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor import distribute_tensor

    g = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    plain = g.clone().requires_grad_()
    want = fn(plain)
    w = torch.arange(float(want.numel())).reshape(want.shape) + 1
    (want * w).sum().backward()
    with LocalTensorMode(frozenset(range(8))):
        mesh = init_device_mesh("cpu", mesh_shape)
        x = distribute_tensor(g, mesh, list(placements), src_data_rank=None).requires_grad_()
        out = fn(x)
        weights = distribute_tensor(w, mesh, [Rep] * len(mesh_shape), src_data_rank=None)
        (out * weights).sum().backward()
        got, grad = out.full_tensor(), x.grad.full_tensor()

    def everywhere(t: torch.Tensor, expected: torch.Tensor) -> bool:
        per_rank = getattr(t, "_local_tensors", {0: t})
        return all(torch.equal(r, expected) for r in per_rank.values())

    return everywhere(got, want.detach()), everywhere(grad, plain.grad)


@pytest.mark.parametrize(("name", "mode"), MAY_COPY_RUNS)
def test_reshape_family_data_and_gradients_on_every_rank(
    world8: None, name: str, mode: str
) -> None:
    cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
    assert on_all_ranks(*MAY_COPY_CASES[name][:4]) == (True, True)


def test_gradients_are_torchs_where_torch_handles_the_reshape(world8: None) -> None:
    """Backward through reshapes that need no communication: the same with and without
    install() (and equal to plain torch)."""
    cases = [
        ((2, 4), (8, 16, 32), (Shard(0), Rep), lambda t: t.reshape(128, 32)),
        ((2, 4), (8, 16, 32), (Shard(0), Shard(2)), lambda t: t.flatten(0, 1)),
        ((8,), (16, 6), (Shard(0),), lambda t: t.unflatten(0, (8, 2))),
    ]
    for case in cases:
        cute_shard.uninstall()
        assert on_all_ranks(*case) == (True, True)
        for mode in BOTH:
            cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
            assert on_all_ranks(*case) == (True, True)


_W = torch.arange(18.0).reshape(6, 3) % 5 - 2


def _at_w(t: torch.Tensor) -> torch.Tensor:
    """``t @ _W``, the weight replicated when ``t`` is a DTensor."""
    if isinstance(t, DTensor):
        from torch.distributed.tensor import distribute_tensor

        mesh = t.device_mesh
        return t @ distribute_tensor(_W, mesh, [Rep] * mesh.ndim, src_data_rank=None)
    return t @ _W


def test_a_matmul_folds_its_result_back_whatever_strategy_mm_takes(world8: None) -> None:
    """``x @ w`` of a 3-D ``x`` views it to 2-D, runs mm and folds the result back with
    ``_unsafe_view``. Priced by its plan, an all-to-all to ``_StridedShard(0, 2)`` of the rows
    is mm's cheapest input (torch's pricing chose an all-gather), and that shard of the (32, 3)
    result cannot stay in the (8, 4, 3) fold: the fold moves it (torch registers it strict,
    and the matmul raised where it ran without install())."""
    case = ((8,), (8, 4, 6), (_StridedShard(2, split_factor=2),), _at_w)
    cute_shard.uninstall()
    assert on_all_ranks(*case) == (True, True)
    cute_shard.install()
    with cute_shard.trace() as t:
        assert on_all_ranks(*case) == (True, True)
    # mm took the strided rows (an all-to-all), and the fold back all-gathered them
    assert [placements_str(r.target) for r in t.redistributions] == ["[SS0:2]"]
    (fold,) = [r for r in t.views if r.op == "_unsafe_view"]
    assert (placements_str(fold.input), placements_str(fold.target)) == ("[SS0:2]", "[R]")


def _view_then_matmul_backward(mode: str) -> bool:
    """``(x.view(2, 4, 2, 12) @ w).sum().backward()`` with x (6, 8, 4) ``[Shard(0)]`` and w
    (12, 2) ``[Shard(0)]`` on 2 simulated ranks, under ``install(reshape_may_copy=mode)`` (or
    torch alone, "torch"): whether the gradient equals plain torch's everywhere."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor import distribute_tensor

    if mode == "torch":
        cute_shard.uninstall()
    else:
        cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
    g = torch.arange(192.0).reshape(6, 8, 4) % 7
    weight = torch.arange(24.0).reshape(12, 2) % 5 - 2
    plain = g.clone().requires_grad_()
    (plain.view(2, 4, 2, 12) @ weight).sum().backward()
    with fake_world(2), LocalTensorMode(frozenset(range(2))):
        mesh = init_device_mesh("cpu", (2,))
        x = distribute_tensor(g, mesh, [Shard(0)], src_data_rank=None).requires_grad_()
        w = distribute_tensor(weight, mesh, [Shard(0)], src_data_rank=None)
        (x.view(2, 4, 2, 12) @ w).sum().backward()
        grad = x.grad.full_tensor()
    return all(torch.equal(t, plain.grad) for t in grad._local_tensors.values())


def test_a_views_backward_that_must_move_redistributes_in_dispatcher_mode() -> None:
    """The backward of ``x.view`` reshapes the gradient back, and that reshape reaches DTensor
    as a strict ``aten.view``. Here the gradient arrives ``[Shard(3)]`` (mm's backward keeps
    the weight's shard, the cheapest strategy by its plan), which (6, 8, 4) cannot keep. The
    dispatcher's kernel reaches that reshape and moves it, as torch's path does."""
    assert _view_then_matmul_backward("torch")
    assert _view_then_matmul_backward("dispatcher")


def test_a_views_backward_that_must_move_says_the_way_out_in_methods_mode() -> None:
    """The default methods mode does not reach that reshape: it stays the strict view, and
    the refusal says where it was met and which mode redistributes it. (Letting ``aten.view``
    itself redistribute, with the user's views checked at a ``view`` method, would close it
    but is unsound: a function-form reshape's output would be a copy that autograd still
    treats as a view, design.md section 7.)"""
    with pytest.raises(RuntimeError) as info:
        _view_then_matmul_backward("methods")
    first = str(info.value).splitlines()[0]
    assert first.startswith("view needs communication: tensor dim")
    assert first.endswith(
        "It was met in the backward (ViewBackward0), where torch reshapes a gradient back: "
        'install(reshape_may_copy="dispatcher") lets such inner reshapes redistribute'
    )


def test_merging_a_sharded_trailing_size_two_dim_needs_no_communication(
    mesh24: DeviceMesh,
) -> None:
    """The methods ask the engine about a real view: a trailing size-2 dim is not a
    (real, imag) pair that view_as_complex would need whole on one rank."""
    cute_shard.install()
    dt = dtensor((4, 2), mesh24, (Shard(1), Shard(0)))
    with CommDebugMode() as comm:
        out = dt.flatten()
    assert comm.get_total_counts() == 0
    assert out.placements == (_StridedShard(0, split_factor=4), Shard(0))


def _matmul(t: torch.Tensor) -> torch.Tensor:
    weight = torch.arange(32.0).reshape(8, 4)
    if isinstance(t, DTensor):
        from torch.distributed.tensor import distribute_tensor

        return t @ distribute_tensor(weight, t.device_mesh, [Rep], src_data_rank=None)
    return t @ weight


def test_reshapes_inside_other_ops_redistribute_with_the_dispatcher_kernels(
    world8: None,
) -> None:
    """matmul folds a 3-D input with reshape (torch's C++ calls it through the dispatcher):
    a batch sharded unevenly, which torch and a strict view refuse to flatten, is gathered by
    the dispatcher's kernels; the methods do not see that reshape, so it stays strict."""
    cute_shard.install(reshape_may_copy="dispatcher")
    assert on_all_ranks((8,), (3, 5, 8), (Shard(0),), _matmul) == (True, True)
    cute_shard.install()
    with pytest.raises(RuntimeError, match="view needs communication"):
        on_all_ranks((8,), (3, 5, 8), (Shard(0),), _matmul)


def test_squeeze_of_a_sharded_size_one_dim_is_strict_because_its_output_aliases() -> None:
    """squeeze returns a view of its input. Were it to move the sharded size-1 dim first,
    ``y = x.squeeze(1); y.mul_(2)`` would change a copy and leave ``x`` as it was, while
    autograd, which still links ``y`` to ``x``, gave the gradient of the aliased program: on 2
    ranks the forward read 828 where one process reads 1104, and the gradient was the
    aliased program's 4 where the values computed imply 3. So squeeze raises, as torch
    2.13-2.15 do; ``reshape`` (which may copy) is the way that moves."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor import distribute_tensor

    g = torch.arange(24.0).reshape(6, 1, 4)
    for mode in BOTH:
        cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
        with fake_world(2), LocalTensorMode(frozenset(range(2))):
            mesh = init_device_mesh("cpu", (2,))
            x = distribute_tensor(g, mesh, [Shard(1)], src_data_rank=None).requires_grad_()
            with pytest.raises(RuntimeError, match="would remove or reshape sharded dimension 1"):
                (x * 1.0).squeeze(1)
            y = (x * 1.0).reshape(6, 4)  # keeps the shard: a view, the alias intact
            y.mul_(2)
            y.sum().backward()
            assert torch.equal(y.full_tensor(), 2 * g.reshape(6, 4))
            assert torch.equal(x.grad.full_tensor(), torch.full((6, 1, 4), 2.0))


def test_reshape_methods_take_every_argument_form_and_keep_no_tensor_alive(
    mesh24: DeviceMesh,
) -> None:
    """``x.reshape(shape=...)`` redistributes like ``x.reshape(...)`` (it used to skip the
    move and raise as the strict view), and ``x.reshape_as(other)`` caches by ``other``'s
    shape: the cache of input targets never holds ``other`` alive."""
    import gc
    import weakref

    cute_shard.install()
    dt = dtensor((6, 8), mesh24, (Shard(1), Shard(0)))
    assert dt.reshape(shape=(48,)).placements == dt.reshape(48).placements
    other = torch.empty(48)
    alive = weakref.ref(other)
    assert dt.reshape_as(other).shape == (48,)
    del other
    gc.collect()
    assert alive() is None


def test_view_stays_strict_where_reshape_redistributes(mesh24: DeviceMesh) -> None:
    for mode in BOTH:
        cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
        dt = dtensor((6, 8), mesh24, (Shard(1), Shard(0)))
        with pytest.raises(RuntimeError) as info:
            dt.view(48)
        assert isinstance(info.value.__cause__, RedistributionRequired)
        assert dt.reshape(48).shape == (48,)


def test_without_may_copy_the_reshape_family_stays_a_strict_view(mesh24: DeviceMesh) -> None:
    """install(reshape_may_copy="off") sets no method and registers no kernel: outside
    inference mode a reshape is the strict view torch makes of it, and one that needs
    communication raises ours."""
    for off in ("off", False):
        cute_shard.uninstall()
        cute_shard.install(reshape_may_copy=off)
        assert integration.is_installed() and integration.may_copy_mode() == "off"
        assert not any(has_kernel(op) for op in MAY_COPY_OPS)
        assert not set(MAY_COPY_METHODS) & DTensor.__dict__.keys()
        dt = dtensor((6, 8), mesh24, (Shard(1), Shard(0)))
        for fn in (lambda t: t.reshape(48), lambda t: t.flatten()):
            with pytest.raises(RuntimeError) as info:
                fn(dt)
            assert isinstance(info.value.__cause__, RedistributionRequired)
        assert dt.reshape(6, 2, 4).placements == (Shard(1), Shard(0))  # free: nothing moves
        with torch.inference_mode():  # aten.reshape's own (non-strict) strategy moves mesh dim 1
            assert dt.reshape(48).placements == (_StridedShard(0, split_factor=6), Rep)


def may_copy_state() -> tuple[str | None, bool, bool]:
    """(mode, any kernel registered, any method set)."""
    return (
        integration.may_copy_mode(),
        any(has_kernel(op) for op in MAY_COPY_OPS),
        bool(set(MAY_COPY_METHODS) & DTensor.__dict__.keys()),
    )


def test_reshape_may_copy_switches_and_enabled_restores_it(mesh24: DeviceMesh) -> None:
    p = propagator()
    cute_shard.uninstall()
    assert may_copy_state() == (None, False, False)
    cute_shard.install()
    assert may_copy_state() == ("methods", False, True)
    ours = p.op_strategy_funcs[aten.view.default]
    fast = p.propagate_op_sharding_non_cached
    cute_shard.install(reshape_may_copy="dispatcher")
    assert may_copy_state() == ("dispatcher", True, False)
    assert p.op_strategy_funcs[aten.view.default] is ours  # only the reshape family changes
    assert p.propagate_op_sharding_non_cached is fast
    cute_shard.install(reshape_may_copy=True)
    assert may_copy_state() == ("methods", False, True)
    cute_shard.install(reshape_may_copy="off")
    assert may_copy_state() == ("off", False, False)
    with cute_shard.enabled():
        assert may_copy_state() == ("methods", False, True)
        dt = dtensor((6, 8), mesh24, (Shard(1), Shard(0)))
        assert dt.reshape(48).shape == (48,)
        with cute_shard.enabled(reshape_may_copy="dispatcher"):
            assert may_copy_state() == ("dispatcher", True, False)
        assert may_copy_state() == ("methods", False, True)
    assert may_copy_state() == ("off", False, False)
    cute_shard.uninstall()
    with cute_shard.enabled(reshape_may_copy="dispatcher"):
        assert may_copy_state() == ("dispatcher", True, False)
    assert may_copy_state() == (None, False, False)
    with pytest.raises(ValueError, match="reshape_may_copy: expected 'methods', 'dispatcher'"):
        cute_shard.install(reshape_may_copy="sometimes")  # type: ignore[arg-type]
    assert not integration.is_installed()


def test_only_reshape_family_calls_on_dtensors_reach_the_kernels(
    mesh24: DeviceMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain tensors and every other DTensor op never enter Python for a MayCopy kernel (the
    key is one only tensor subclasses and dispatch modes carry)."""
    cute_shard.install(reshape_may_copy="dispatcher")
    reached: list[Any] = []
    real_call = integration.MayCopy.__call__

    def spy(self: integration.MayCopy, *args: Any, **kwargs: Any) -> Any:
        reached.append(self.overload)
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(integration.MayCopy, "__call__", spy)
    plain = torch.arange(48.0).reshape(6, 8)
    plain.reshape(48), plain.flatten(), plain.unflatten(1, (2, 4)), torch.ravel(plain)
    dt = dtensor((8, 6), mesh24, (Shard(0), Rep))
    dt.view(48), dt + dt, dt.sum(), dt.permute(1, 0), dt.unsqueeze(0), dt.transpose(0, 1)
    assert reached == []
    dt.reshape(48), dt.flatten(), dt.unflatten(1, (2, 3)), torch.ravel(dt), dt.reshape_as(dt)
    assert reached == [
        aten.reshape.default,
        aten.flatten.using_ints,
        aten.unflatten.int,
        aten.ravel.default,
        aten.reshape.default,
    ]


def test_only_reshape_family_methods_of_dtensors_reach_the_engine(
    mesh24: DeviceMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The methods are DTensor's: plain tensors keep torch's, and no other DTensor call asks
    which mesh dims to move. A repeated call is answered from the cache."""
    cute_shard.install()
    asked: list[Any] = []
    real_target = integration._method_target

    def spy(spec: Any, out_shape: Any, *args: Any) -> Any:
        asked.append(out_shape.__name__)
        return real_target(spec, out_shape, *args)

    monkeypatch.setattr(integration, "_method_target", spy)
    plain = torch.arange(48.0).reshape(6, 8)
    plain.reshape(48), plain.flatten(), plain.unflatten(1, (2, 4)), plain.ravel()
    assert torch.Tensor.reshape is not DTensor.reshape
    dt = dtensor((8, 6), mesh24, (Shard(0), Rep))
    dt.view(48), dt + dt, dt.sum(), dt.permute(1, 0), dt.unsqueeze(0), torch.ravel(dt)
    assert asked == []
    for _ in range(2):
        dt.reshape(48), dt.flatten(), dt.unflatten(1, (2, 3)), dt.ravel(), dt.reshape_as(dt)
    assert asked == ["_reshaped", "_flattened", "_unflattened", "_raveled", "_reshaped_as"]


@pytest.mark.parametrize("mode", BOTH)
@pytest.mark.parametrize(
    ("fn", "error", "message"),
    [
        (lambda t: t.reshape(5), RuntimeError, r"shape '\[5\]' is invalid for input of size 48"),
        (lambda t: t.flatten(1, 0), RuntimeError, "start_dim cannot come after end_dim"),
        (lambda t: t.unflatten(0, (4, 4)), RuntimeError, "unflatten: Provided sizes"),
        (lambda t: t.flatten(0, 5), IndexError, "Dimension out of range"),
        (lambda t: t.reshape("x"), TypeError, "reshape"),
    ],
)
def test_illegal_arguments_raise_torchs_error_without_communicating(
    mesh24: DeviceMesh, fn: Any, error: type[Exception], message: str, mode: str
) -> None:
    cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
    dt = dtensor((6, 8), mesh24, (Shard(1), Shard(0)))
    with CommDebugMode() as comm, pytest.raises(error, match=message):
        fn(dt)
    assert comm.get_total_counts() == 0

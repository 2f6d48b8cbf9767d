"""The fast path of ``install()`` against torch's own path: the same OutputSharding, exactly.

While installed, DTensor's propagator answers the view ops from ``ViewPropagation`` without
running them on fake tensors (``cute_shard.integration``, design.md section 4). Its answer is
judged against what DTensor's own ``propagate_op_sharding_non_cached`` computes for the same
``OpSchema`` with cute_shard's ViewStrategy registered (the fake run for the output's tensor
meta, the strategy, the redistribution, the local shape argument, the squeeze rewrite):

- where torch's path raises, the fast path either declines (None: DTensor then takes torch's
  path and raises torch's error) or raises the same exception with the same message;
- otherwise the fast path answers (it declines only where torch raises: eager, int sizes), and
  the output spec (mesh object, placements, shard order and its flag, tensor meta with its
  ``torch.Size``, strides and dtype), the redistribute schema (op, every argument with its
  type, kwargs) and both flags are equal.

Inputs are random global shapes with random strides (contiguous, permuted, sliced, expanded),
random placements (Replicate, Partial, Shard, _StridedShard read either way) on the 8-rank
meshes, and every overload the fast path handles with legal and illegal arguments. Ranks 0 and
5 of a fake process group give two mesh coordinates; ``_local_shape`` is also checked on every
coordinate against torch's ``_compute_local_shape_and_global_offset`` and the rank oracle.

The same comparison runs on every call of the DTensor benchmark's pools
(``bench/dtensor_bench.py``) and of the attention block (``bench/attention_bench.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import event, given
from hypothesis import strategies as st
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._op_schema import OpSchema, OutputSharding
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)
from torch.testing._internal.distributed.fake_pg import FakeStore

from cute_shard import integration, oracle

aten = torch.ops.aten
MESHES = ((8,), (2, 4), (4, 2), (2, 2, 2))
SIZES = (1, 1, 2, 2, 3, 4, 5, 6, 8, 12, 16)


@pytest.fixture(scope="module", params=[0, 5], ids=["rank0", "rank5"])
def meshes(request: pytest.FixtureRequest) -> Iterator[dict[tuple[int, ...], DeviceMesh]]:
    was = integration.is_installed()
    dist.init_process_group("fake", store=FakeStore(), rank=request.param, world_size=8)
    try:
        integration.install()
        yield {shape: init_device_mesh("cpu", shape) for shape in MESHES}
    finally:
        (integration.install if was else integration.uninstall)()
        dist.destroy_process_group()


def propagation() -> integration.ViewPropagation:
    fast = DTensor._op_dispatcher.sharding_propagator.propagate_op_sharding_non_cached
    assert isinstance(fast, integration.ViewPropagation)
    return fast


# --------------------------------------------------------------------------------------------
# Comparing answers


def outcome(fn: Any, schema: OpSchema) -> Any:
    try:
        return fn(schema)
    except Exception as e:  # the comparison is of what each path raises, too
        return e


def same_spec(a: DTensorSpec, b: DTensorSpec) -> str | None:
    if a.mesh is not b.mesh:
        return "mesh objects differ"
    if a != b:
        return f"{a} != {b}"
    if (a.use_strided_shard_as_shard_order, a.shard_order) != (
        b.use_strided_shard_as_shard_order,
        b.shard_order,
    ):
        return f"shard order {a.shard_order}/{a.use_strided_shard_as_shard_order} != " + (
            f"{b.shard_order}/{b.use_strided_shard_as_shard_order}"
        )
    ma, mb = a.tensor_meta, b.tensor_meta
    if (ma is None) != (mb is None):
        return f"tensor meta {ma} != {mb}"
    if ma is not None and mb is not None:
        if (type(ma.shape), tuple(ma.shape), tuple(ma.stride), ma.dtype) != (
            type(mb.shape),
            tuple(mb.shape),
            tuple(mb.stride),
            mb.dtype,
        ):
            return f"tensor meta {ma} != {mb}"
    return None


def same_arg(a: Any, b: Any) -> str | None:
    if isinstance(a, DTensorSpec) and isinstance(b, DTensorSpec):
        return same_spec(a, b)
    if type(a) is not type(b) or a != b:
        return f"argument {a!r} != {b!r}"
    return None


def same_schema(a: OpSchema | None, b: OpSchema | None) -> str | None:
    if a is None or b is None:
        return None if a is b else f"redistribute schema {a} != {b}"
    if a.op != b.op or len(a.args_schema) != len(b.args_schema):
        return f"redistribute schema {a} != {b}"
    for x, y in zip(a.args_schema, b.args_schema, strict=True):
        why = same_arg(x, y)
        if why:
            return why
    if a.kwargs_schema != b.kwargs_schema or a != b:
        return f"redistribute schema {a} != {b}"
    return None


def difference(got: Any, want: Any) -> str | None:
    """Why the fast path's outcome ``got`` differs from torch's ``want`` (None: the same)."""
    if isinstance(want, Exception):
        if got is None:
            return None  # declined: DTensor runs torch's path, which raises this
        if isinstance(got, Exception) and type(got) is type(want) and str(got) == str(want):
            return None
        return f"torch's path raised {type(want).__name__}: {want}; the fast path gave {got!r}"
    if not isinstance(got, OutputSharding):
        return f"the fast path gave {got!r} where torch's path answers"
    assert isinstance(want, OutputSharding)
    for attr in ("needs_redistribute", "use_val_from_redistribute_schema"):
        if getattr(got, attr) != getattr(want, attr):
            return f"{attr}: {getattr(got, attr)} != {getattr(want, attr)}"
    return same_spec(got.output_spec, want.output_spec) or same_schema(
        got.redistribute_schema, want.redistribute_schema
    )


def check(schema: OpSchema) -> Any:
    """Assert the fast path's answer for ``schema`` is torch's; return torch's outcome."""
    prop = propagation()
    view = prop.fast[schema.op]
    want = outcome(prop.torch_path, schema)
    got = outcome(view.output_sharding, schema)
    why = difference(got, want)
    assert why is None, f"{schema}: {why}"
    return want


# --------------------------------------------------------------------------------------------
# Random schemas


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A global shape and strides: contiguous, permuted, sliced or broadcast."""
    shape = tuple(draw(st.lists(st.sampled_from((*SIZES, 0)), min_size=0, max_size=4)))
    kind = draw(st.sampled_from(("contiguous", "contiguous", "permuted", "sliced", "broadcast")))
    if kind == "permuted" and len(shape) > 1:
        order = draw(st.permutations(range(len(shape))))
        t = torch.empty([shape[d] for d in order], device="meta")
        t = t.permute([order.index(d) for d in range(len(shape))])
    elif kind == "sliced" and shape:
        steps = [draw(st.sampled_from((1, 2))) for _ in shape]
        t = torch.empty([max(s * k, 1) for s, k in zip(shape, steps, strict=True)], device="meta")
        t = t[tuple(slice(0, s * k, k) for s, k in zip(shape, steps, strict=True))]
    elif kind == "broadcast" and shape:
        d = draw(st.integers(0, len(shape) - 1))
        t = torch.empty((*shape[:d], 1, *shape[d + 1 :]), device="meta").expand(shape)
    else:
        t = torch.empty(shape, device="meta")
    return tuple(t.shape), tuple(t.stride())


@st.composite
def placements_for(draw: st.DrawFn, shape: Sequence[int], mesh: Sequence[int]) -> list[Placement]:
    out: list[Placement] = []
    for _ in mesh:
        kinds = ["R", "P"] + (["S", "S", "SS"] if shape else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "R":
            out.append(Replicate())
        elif kind == "P":
            out.append(Partial(draw(st.sampled_from(("sum", "max", "avg")))))
        elif kind == "S":
            out.append(Shard(draw(st.integers(0, len(shape) - 1))))
        else:
            sf = draw(st.sampled_from((2, 3, 4)))
            out.append(_StridedShard(draw(st.integers(0, len(shape) - 1)), split_factor=sf))
    return out


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@st.composite
def view_shapes(draw: st.DrawFn, shape: tuple[int, ...]) -> list[int]:
    """A target for view/reshape: a merge, a split, a -1, a factorisation, or an illegal one."""
    n = _numel(shape)
    choices: list[list[int]] = [[-1], [n], [*shape, 1], [1, *shape]]
    for d in range(len(shape) - 1):
        choices.append([*shape[:d], shape[d] * shape[d + 1], *shape[d + 2 :]])
    for d, s in enumerate(shape):
        for f in (2, 3, 4):
            if s and s % f == 0:
                choices.append([*shape[:d], f, s // f, *shape[d + 1 :]])
                choices.append([*shape[:d], f, -1, *shape[d + 1 :]])
    choices.append([n + 1])  # illegal: torch raises
    target = draw(st.sampled_from(choices))
    if draw(st.booleans()) and n > 1 and len(target) > 1:  # re-factorise the whole numel
        first = draw(st.sampled_from([f for f in range(1, n + 1) if n % f == 0]))
        target = [first, -1]
    return list(target)


@st.composite
def op_calls(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, tuple[Any, ...], torch.dtype]:
    """An overload the fast path handles, its arguments after the input, and the input dtype."""
    nd = len(shape)
    dim = st.integers(-nd - 1, nd) if nd else st.sampled_from((0, -1, 1))
    kind = draw(
        st.sampled_from(
            (
                "view",
                "view",
                "_unsafe_view",
                "reshape",
                "view_copy",
                "squeeze",
                "squeeze_dim",
                "squeeze_dims",
                "unsqueeze",
                "expand",
                "permute",
                "transpose",
                "repeat",
                "view_as_real",
                "view_as_complex",
            )
        )
    )
    f32 = torch.float32
    if kind in ("view", "_unsafe_view", "reshape", "view_copy"):
        op = {
            "view": aten.view.default,
            "_unsafe_view": aten._unsafe_view.default,
            "reshape": aten.reshape.default,
            "view_copy": aten.view_copy.default,
        }[kind]
        return op, (draw(view_shapes(shape)),), f32
    if kind == "squeeze":
        return aten.squeeze.default, (), f32
    if kind == "squeeze_dim":
        return aten.squeeze.dim, (draw(dim),), f32
    if kind == "squeeze_dims":
        return aten.squeeze.dims, (draw(st.lists(dim, min_size=1, max_size=2)),), f32
    if kind == "unsqueeze":
        return aten.unsqueeze.default, (draw(st.integers(-nd - 2, nd + 1)),), f32
    if kind == "expand":
        sizes = [
            draw(st.sampled_from((s, -1, 3))) if s == 1 else draw(st.sampled_from((s, -1, 2)))
            for s in shape
        ]
        lead = draw(st.lists(st.sampled_from((1, 2, 4)), max_size=2))
        return aten.expand.default, ([*lead, *sizes],), f32
    if kind == "permute":
        dims = list(draw(st.permutations(range(nd))))
        if dims and draw(st.booleans()):
            dims[0] -= nd  # a negative dim
        return aten.permute.default, (dims,), f32
    if kind == "transpose":
        return aten.transpose.int, (draw(dim), draw(dim)), f32
    if kind == "repeat":
        reps = draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd + 1))
        return aten.repeat.default, (reps,), f32
    if kind == "view_as_real":
        return aten.view_as_real.default, (), torch.complex64
    return aten.view_as_complex.default, (), f32


@st.composite
def schemas(draw: st.DrawFn, meshes: dict[tuple[int, ...], DeviceMesh]) -> OpSchema:
    mesh = meshes[draw(st.sampled_from(MESHES))]
    if draw(st.integers(0, 9)) == 0:  # a trailing (2,):(1,) for view_as_complex
        shape = (*draw(st.lists(st.sampled_from(SIZES), max_size=3)), 2)
        layout = torch.empty(shape, device="meta")
        shape, stride = tuple(layout.shape), tuple(layout.stride())
        op, args, dtype = aten.view_as_complex.default, (), torch.float32
    else:
        shape, stride = draw(layouts())
        op, args, dtype = draw(op_calls(shape))
    placements = draw(placements_for(shape, tuple(mesh.shape)))
    flag = draw(st.sampled_from((None, False, True)))
    spec = DTensorSpec(
        mesh,
        tuple(placements),
        tensor_meta=TensorMeta(torch.Size(shape), stride, dtype),
        use_strided_shard_as_shard_order=flag,
    )
    info = DTensor._op_dispatcher.sharding_propagator.op_to_schema_info.get(op)
    return OpSchema(op, (spec, *args), {}, schema_info=info)


# --------------------------------------------------------------------------------------------
# The properties


@given(data=st.data())
def test_fast_path_equals_torchs_path(
    meshes: dict[tuple[int, ...], DeviceMesh], data: st.DataObject
) -> None:
    want = check(data.draw(schemas(meshes)))
    event("torch raised" if isinstance(want, Exception) else "answered")


@given(data=st.data())
def test_fast_path_declines_only_where_torch_raises(
    meshes: dict[tuple[int, ...], DeviceMesh], data: st.DataObject
) -> None:
    schema = data.draw(schemas(meshes))
    prop = propagation()
    want = outcome(prop.torch_path, schema)
    got = outcome(prop.fast[schema.op].output_sharding, schema)
    assert got is not None or isinstance(want, Exception), f"{schema}: declined"


def test_the_fast_path_covers_the_view_ops_with_a_strategy(
    meshes: dict[tuple[int, ...], DeviceMesh],
) -> None:
    """Every overload with a strategy and a geometry has a FastView, and nothing else."""
    fast = propagation().fast
    assert set(fast) == {v.overload for v in integration.torch_view_ops()} & set(
        integration.GEOMETRIES
    )
    assert aten.squeeze_.dim not in fast  # in place: torch's path
    assert fast[aten.view.default].shape_arg == 1 and fast[aten.permute.default].shape_arg is None
    assert fast[aten.squeeze.dim].squeeze_dims is aten.squeeze.dims


@given(data=st.data())
def test_local_shape_is_torchs_and_the_oracles_on_every_rank(data: st.DataObject) -> None:
    mesh = data.draw(st.sampled_from(MESHES))
    shape = tuple(
        data.draw(st.lists(st.sampled_from((*SIZES, 7, 9, 10, 13, 24)), min_size=1, max_size=3))
    )
    placements = data.draw(placements_for(shape, mesh))
    for coord in itertools.product(*(range(m) for m in mesh)):
        got = integration._local_shape(shape, placements, mesh, coord)
        want, _ = _compute_local_shape_and_global_offset(
            shape, mesh, list(coord), placements, skip_offset=True
        )
        assert got == tuple(want), f"{shape} {placements} at {coord}: {got} != {want}"
        assert got == tuple(oracle.local_shape(shape, placements, mesh, coord))


# --------------------------------------------------------------------------------------------
# Every call of the benchmarks' pools


def recorded_schemas(run: Any) -> list[OpSchema]:
    """The OpSchemas ``run()`` sends to the installed propagation (cache misses)."""
    prop = propagation()
    seen: list[OpSchema] = []

    class Spy(integration.ViewPropagation):
        def __call__(self, op_schema: OpSchema) -> OutputSharding:
            if op_schema.op in self.fast:
                seen.append(op_schema)
            return super().__call__(op_schema)

    p = DTensor._op_dispatcher.sharding_propagator
    p.propagate_op_sharding_non_cached = Spy(prop.torch_path, prop.fast)
    try:
        integration.clear_dtensor_caches()
        run()
    finally:
        p.propagate_op_sharding_non_cached = prop
    return seen


def test_every_call_of_the_dtensor_benchmark_pools(
    meshes: dict[tuple[int, ...], DeviceMesh],
) -> None:
    from bench import dtensor_bench

    total = 0
    for shape in ((8,), (2, 4), (2, 2, 2)):
        ops = dtensor_bench.make_ops(
            meshes[shape] if shape in meshes else init_device_mesh("cpu", shape), 48
        )

        def run(ops: list[Any] = ops) -> None:
            for x, name, args in ops:
                dtensor_bench.clear_all()
                try:
                    getattr(x, name)(*args)
                except RuntimeError:
                    pass  # a view torch refuses too: its schema is still compared

        for schema in recorded_schemas(run):
            check(schema)
            total += 1
    assert total >= 140


def test_every_call_of_the_attention_block(meshes: dict[tuple[int, ...], DeviceMesh]) -> None:
    from bench import attention_bench

    block = attention_bench.Block(meshes[(2, 4)])
    schemas_seen = recorded_schemas(lambda: [block(block.input(seq)) for seq in (16, 24, 40)])
    assert schemas_seen
    for schema in schemas_seen:
        assert not isinstance(check(schema), Exception)

"""DTensor integration: ``install()`` makes DTensor propagate every view op with cute_shard.

What ``install()`` changes, and why each piece sits where it does (design.md, section 4):

1. **Strategies.** DTensor's ``ShardingPropagator`` keeps one strategy function per aten
   overload. torch 2.13 registers its view ops in ``torch.distributed.tensor._ops._view_ops``
   (``register_op_strategy_map``, a closure over torch's ``dim_map`` builder and a
   ``strict_view`` flag, and ``view_as_complex`` as a single-mesh-dim strategy). ``install()``
   finds them in the registry (``torch_view_ops``) and registers a ``ViewStrategy`` in their
   place: the OpStrategy torch's ``reshape_strategy`` builds, with cute_shard's placements.
2. **Misses without the fake run** (``ViewPropagation``). On a cache miss DTensor runs the op
   on fake tensors to learn the output's shape and stride, asks the strategy, then recomputes
   the output's local shape: almost all of a ~400 µs miss. While installed the propagator's
   entry points (``propagate_op_sharding_non_cached`` and its LRU cache) answer the view ops
   directly: the placements from the same decision the ViewStrategy takes (``_decide``), the
   global shape and stride from ``cute_shard.meta`` and the local shape from the placements,
   assembled into the ``OutputSharding`` torch's own path would return (equal field for
   field, checked by ``property_tests/test_integration_meta.py``). Anything it cannot produce
   exactly (symbolic sizes, tracing, simulated ranks, an argument torch would reject) goes to
   torch's path, which runs the ViewStrategy.
3. **The reshape family may copy.** reshape, flatten, unflatten and ravel are
   CompositeImplicitAutograd: outside inference mode they reach DTensor as the strict
   ``aten.view`` they decompose into, which raises where communication is needed. By default
   (``reshape_may_copy="methods"``) ``install()`` sets them, and ``reshape_as``, as methods of
   the DTensor class: a method asks the engine (cached per input spec and arguments) which mesh
   dims the view cannot keep, redistributes them, and calls torch's method. Only those calls
   on DTensors pay (a Python frame, ~0.3 µs); plain tensors and every other op are untouched.
   ``reshape_may_copy="dispatcher"`` instead registers a ``MayCopy`` kernel at
   ``DispatchKey.PythonTLSSnapshot`` that also reaches the function forms (``torch.flatten``),
   reshapes inside other ops (matmul's fold, a view's backward), at ~3-5 µs per call.
4. **_StridedShard under torch.compile.** torch computes a ``_StridedShard``'s local size by
   materialising index tensors; under torch.compile's fake mode that mints an unbacked
   symbol per element and the trace fails. While installed, with plain int sizes that
   computation runs on real tensors, and a symbolic size is read as ``n // num_chunks``
   wherever every chunk is exact (``_strided_local_size``). AOT tracing rebuilds a DTensor's
   spec from its flattened parts; a view's output, which reads its ``_StridedShard`` by split
   factor, is rebuilt with that reading (``_tensor_unflatten``: torch's refuses it).

``uninstall()`` puts every saved object back. ``install()`` and ``uninstall()`` clear
DTensor's sharding-propagation caches (the Python LRU cache and the calling thread's C++
fast-path cache), so no answer of the other propagator is reused. The mesh of every spec
built here is the input spec's own ``DeviceMesh`` object: nothing copies or constructs one.

Worked example, on a 2x4 mesh::

    import cute_shard
    cute_shard.install()
    x = distribute_tensor(torch.randn(8, 16, 32), mesh, [Shard(0), Shard(1)])
    x.view(128, 32).placements  # (Shard(dim=0), _StridedShard(dim=0, sf=4)): no communication
    x.view(16, 8, 32)  # RuntimeError: view needs communication: tensor dim 1 is sharded on
    #                    mesh dim 1 and ...; redistribute the input to [Shard(dim=0),
    #                    Replicate()] first, or use reshape
    x.reshape(16, 8, 32).placements  # (Shard(dim=0), Replicate()): mesh dim 1 all-gathered
    with cute_shard.enabled():  # reentrant; restores the state before it
        ...

Strict views (``view``, ``squeeze`` and the in-place ``squeeze_``) that need communication
raise ``cute_shard.RedistributionRequired``; DTensor wraps it in a RuntimeError whose message
starts with ours (the tensor dim, the mesh dim and the redistribution that would work). A
view shares its input's storage, so moving data inside one would break the alias (a write
through either would not reach the other, and autograd would still treat them as one). The
one view torch registers as strict that moves what must move instead (``_NOT_STRICT``) is
``_unsafe_view``, a composite op's view of its own fresh result (matmul's fold back), which
nothing else aliases and autograd does not treat as a view.

Under inference mode the CompositeImplicitAutograd view ops arrive whole. ``aten.reshape`` has
its own (non-strict) strategy; for the others torch 2.13 propagates their decomposition one
mesh dim at a time (``DecompShardingStrategy``), which is wrong for views on multi-dim meshes.
While installed, those whose arguments are dims or counts (flatten, ravel, movedim, tile,
atleast_*d) get a ``ViewStrategy`` with their own rule, and the others a ``Decompose``
strategy, which makes DTensor decompose the op for real.
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, cast

import torch
from torch._ops import OpOverload
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.distributed._functional_collectives import _are_we_tracing
from torch.distributed._local_tensor import local_tensor_mode
from torch.distributed.tensor import DTensor, _sharding_prop
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._op_schema import OpSchema, OpSpec, OpStrategy, OutputSharding
from torch.distributed.tensor._ops import _view_ops
from torch.distributed.tensor._ops.utils import generate_redistribute_costs
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)
from torch.fx.experimental.symbolic_shapes import has_guarding_hint

from . import meta, rules
from .engine import (
    RedistributionRequired,
    ViewDecision,
    decide_view,
    propagate_shape_and_sharding,
)
from .redistribute import dtensor as redistribution
from .rules import UndecidableRule

__all__ = [
    "Decompose",
    "MayCopy",
    "Observer",
    "ReshapeMayCopy",
    "ViewOp",
    "ViewPropagation",
    "ViewStrategy",
    "composite_view_ops",
    "enabled",
    "install",
    "is_installed",
    "may_copy_kernels",
    "may_copy_methods",
    "may_copy_mode",
    "redistribute_for_view",
    "set_observer",
    "torch_view_ops",
    "uninstall",
]

aten = torch.ops.aten
RuleBuilder = Callable[..., rules.Rule]
Shape = tuple[int, ...]


def _t_dims(ndim: int) -> tuple[int, int]:
    """The dims ``t()`` swaps: (0, 1) of a matrix; none of a vector or scalar."""
    if ndim > 2:
        raise ValueError(f"t: expects a tensor with <= 2 dims, got {ndim}; use transpose")
    return (0, 1) if ndim == 2 else (0, 0)


def _t_dim_map(first: Any) -> Any:
    """torch's rule for ``t()``: its transpose rule for the dims ``t()`` swaps."""
    return _view_ops.dim_maps[torch.transpose](first, *_t_dims(first.ndim))


# The name in ``cute_shard.rules.OP_RULES`` of each local op torch keys its ``dim_maps`` by.
_OP_NAMES: dict[Callable[..., Any], str] = {
    torch.Tensor.view: "view",
    torch.reshape: "reshape",
    torch.squeeze: "squeeze",
    torch.unsqueeze: "unsqueeze",
    torch.Tensor.expand: "expand",
    torch.permute: "permute",
    torch.Tensor.repeat: "repeat",
    torch.transpose: "transpose",
    torch.t: "t",
    torch.view_as_real: "view_as_real",
    torch.view_as_complex: "view_as_complex",
    torch.flatten: "flatten",
    torch.ravel: "ravel",
    torch.movedim: "movedim",
    torch.tile: "tile",
    torch.atleast_1d: "atleast_1d",
    torch.atleast_2d: "atleast_2d",
    torch.atleast_3d: "atleast_3d",
}

# cute_shard's builder for each of those local ops, looked up once here: called with the
# input's global shape (a tuple), then the aten op's arguments.
BUILDERS: dict[Callable[..., Any], RuleBuilder] = {
    local: rules.OP_RULES[name] for local, name in _OP_NAMES.items()
}

# Complex numbers have no order: a pending max/min of (real, imag) pairs is not a pending
# max/min of complex values, so view_as_complex keeps only these Partials (as torch does).
_COMPLEX_PARTIALS = ("sum", "avg")


@dataclass(frozen=True, slots=True)
class ViewOp:
    """A view-op overload as torch registers it: its local op, torch's rule and strictness
    (torch's, except that ``_unsafe_view`` may redistribute: ``_NOT_STRICT``)."""

    overload: OpOverload
    local_op: Callable[..., Any]
    torch_dim_map: Callable[..., Any]
    strict_view: bool

    def __str__(self) -> str:
        return f"{self.overload} ({'strict' if self.strict_view else 'may redistribute'})"

    def rule(
        self, first: Any, shape: tuple[Any, ...], args: Sequence[Any], kwargs: Any
    ) -> Sequence[object]:
        """The op's DimMap rule for an input of global ``shape``: cute_shard's builder, or
        torch's where ours cannot decide. ``first`` is what torch's builder takes in the
        input's place (its OpStrategy or DTensorSpec); ``args`` are the op's other arguments."""
        builder = BUILDERS.get(self.local_op)
        if builder is not None:
            try:
                return builder(shape, *args, **kwargs)
            except UndecidableRule:
                # A SymInt comparison that only a guard could settle. torch's builder may
                # guard (backed sizes); the engine reads its DimSpecs directly.
                pass
        rule: Sequence[object] = self.torch_dim_map(first, *args, **kwargs)  # (a DimMap)
        return rule

    def decide(
        self,
        placements: Sequence[Placement],
        shape: tuple[Any, ...],
        rule: Sequence[object],
        mesh: Any,
    ) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
        """(input target, output placements): the one sharding decision for this op, taken
        by the ViewStrategy and by the fast path alike; a strict view that must move raises
        ``RedistributionRequired``."""
        placements, complex_view = self._engine_input(placements)
        try:
            target, output = propagate_shape_and_sharding(
                placements, shape, rule, mesh.shape, self.strict_view, complex_view=complex_view
            )
        except RedistributionRequired as refused:
            refused.note = _refused_where()
            raise
        return tuple(target), tuple(output)

    def decision(
        self,
        placements: Sequence[Placement],
        shape: tuple[Any, ...],
        rule: Sequence[object],
        mesh: Any,
    ) -> ViewDecision:
        """The same decision as :meth:`decide`, returned whole: with each mesh dim that moves
        and why, for a strict view too (``ViewDecision.refusal()`` is what it would raise)."""
        placements, complex_view = self._engine_input(placements)
        return decide_view(placements, shape, rule, mesh.shape, complex_view=complex_view)

    def _engine_input(self, placements: Sequence[Placement]) -> tuple[Sequence[Placement], bool]:
        """The placements the engine decides from and whether the op is view_as_complex
        (whose Partials other than sum and avg are replicated first)."""
        complex_view = self.local_op is torch.view_as_complex
        if complex_view:
            placements = _allowed_partials(placements)
        return placements, complex_view


def _refused_where() -> str | None:
    """What a strict view refused in the backward adds to its message: that view is a reshape
    torch makes there (a view's backward reshapes the gradient back), which the program cannot
    redistribute itself; the dispatcher mode's kernels reach it. None outside the backward, or
    in the dispatcher mode (there the refused view is not such a reshape)."""
    node = torch._C._current_autograd_node()
    if node is None or (_saved is not None and _saved.mode == "dispatcher"):
        return None
    return (
        f"It was met in the backward ({node.name()}), where torch reshapes a gradient back: "
        'install(reshape_may_copy="dispatcher") lets such inner reshapes redistribute'
    )


def _allowed_partials(placements: Sequence[Placement]) -> tuple[Placement, ...]:
    return tuple(
        Replicate() if isinstance(p, Partial) and p.reduce_op not in _COMPLEX_PARTIALS else p
        for p in placements
    )


@dataclass(frozen=True, slots=True)
class ViewStrategy:
    """The strategy function ``install()`` registers for ``op``: cute_shard's propagation.

    It builds what torch's ``reshape_strategy`` builds: one ``OpSpec`` per input strategy,
    whose input spec holds the target placements (and the input's tensor_meta), whose output
    spec has no tensor_meta (DTensor adds it), both with
    ``use_strided_shard_as_shard_order=False``, and the cost from
    ``generate_redistribute_costs``.
    """

    op: ViewOp

    def __call__(self, op_schema: OpSchema) -> OpStrategy:
        input_strategy = op_schema.args_schema[0]
        if not isinstance(input_strategy, OpStrategy) or input_strategy.shape is None:
            raise ValueError(
                f"{self.op.overload}: expected the input's OpStrategy with a shape as the first "
                f"argument, got {input_strategy!r}"
            )
        shape = tuple(input_strategy.shape)
        rule = self.op.rule(
            input_strategy, shape, op_schema.args_schema[1:], op_schema.kwargs_schema
        )
        out = OpStrategy([])
        for src in input_strategy.strategies:
            spec = src.output_spec
            mesh = spec.mesh  # the caller's own mesh object: never copied or constructed
            target, output = self.op.decide(spec.placements, shape, rule, mesh)
            target_spec = DTensorSpec(
                mesh=mesh,
                placements=target,
                tensor_meta=spec.tensor_meta,
                use_strided_shard_as_shard_order=False,
            )
            output_spec = DTensorSpec(
                mesh=mesh, placements=output, use_strided_shard_as_shard_order=False
            )
            out.strategies.append(
                OpSpec(
                    output_specs=output_spec,
                    input_specs=(target_spec,),
                    redistribute_cost=[generate_redistribute_costs(input_strategy, target_spec)],
                )
            )
        return out


@dataclass(frozen=True, slots=True)
class Decompose:
    """The strategy ``install()`` registers for a CompositeImplicitAutograd view op.

    DTensor answers NotImplementedError from a strategy of such an op by running its
    decomposition on the DTensors themselves (``op.decompose``), so each view op inside it is
    propagated by a ``ViewStrategy`` on the real mesh.
    """

    overload: OpOverload

    def __call__(self, op_schema: OpSchema) -> OpStrategy:
        raise NotImplementedError(
            f"{self.overload} is decomposed into view ops that cute_shard propagates"
        )


# --------------------------------------------------------------------------------------------
# What an open trace is told


class Observer(Protocol):
    """What ``cute_shard.trace`` hears while one is open (``set_observer``): a view op's
    sharding is asked of cute_shard (a DTensor cache miss), and a reshape-family op
    redistributes its input before the view it ends in."""

    def asked(self, op_schema: OpSchema) -> None: ...

    def redistributes(self, x: DTensor, target: tuple[Placement, ...], method: str) -> None: ...


# None unless a trace is open: then one check on a miss and on a reshape-family
# redistribution is all tracing costs where it is off (a cache hit runs none of this module).
_observer: Observer | None = None


def set_observer(observer: Observer | None) -> Observer | None:
    """Make ``observer`` hear what ``Observer`` names (None: nothing); the previous one."""
    global _observer
    previous, _observer = _observer, observer
    return previous


# --------------------------------------------------------------------------------------------
# Misses without the fake run

# The output's global (shape, stride) from the input's and the op's other arguments, with
# torch's conventions (cute_shard.meta); None where torch would raise.
Geometry = Callable[..., "meta.Meta | None"]

_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_COMPLEX_OF[torch.float16] = torch.complex32
_REAL_OF = {c: r for r, c in _COMPLEX_OF.items()}


def _t_geometry(shape: Shape, stride: Shape) -> Any:
    return None if len(shape) > 2 else meta.transpose(shape, stride, *_t_dims(len(shape)))


def _expand(shape: Shape, stride: Shape, size: Sequence[int], *, implicit: bool = False) -> Any:
    return meta.expand(shape, stride, size)


# The overloads the fast path answers: the view ops torch registers with a strategy (the
# CompositeImplicitAutograd ones reach DTensor only under inference mode and take torch's
# path; the in-place squeeze_ ops too). Each with its geometry and, for the complex views,
# the output dtype by input dtype.
GEOMETRIES: dict[OpOverload, tuple[Geometry, Mapping[torch.dtype, torch.dtype] | None]] = {
    aten.view.default: (meta.view, None),
    aten._unsafe_view.default: (meta.view, None),
    aten.reshape.default: (meta.reshape, None),
    aten.view_copy.default: (meta.view_copy, None),
    aten.squeeze.default: (lambda shape, stride: meta.squeeze(shape, stride, None), None),
    aten.squeeze.dim: (lambda shape, stride, dim: meta.squeeze(shape, stride, (dim,)), None),
    aten.squeeze.dims: (meta.squeeze, None),
    aten.unsqueeze.default: (meta.unsqueeze, None),
    aten.expand.default: (_expand, None),
    aten.permute.default: (meta.permute, None),
    aten.transpose.int: (meta.transpose, None),
    aten.t.default: (_t_geometry, None),
    aten.repeat.default: (meta.repeat, None),
    aten.view_as_real.default: (meta.view_as_real, _REAL_OF),
    aten.view_as_complex.default: (meta.view_as_complex, _COMPLEX_OF),
}


@dataclass(frozen=True, slots=True)
class FastView:
    """How ``ViewPropagation`` answers one overload without torch's path.

    ``shape_arg``: the index of a global shape argument DTensor rewrites to the local output
    shape when the output is sharded (``op_to_shape_and_stride_idx``). ``squeeze_dims``: the
    ``squeeze.dims`` overload DTensor rewrites a squeeze to, with only its globally size-1
    dims (``squeeze_op_to_dims_variant``). Both read from the propagator at install time.
    """

    op: ViewOp
    geometry: Geometry
    dtypes: Mapping[torch.dtype, torch.dtype] | None
    shape_arg: int | None
    squeeze_dims: OpOverload | None

    def output_sharding(self, op_schema: OpSchema) -> OutputSharding | None:
        """What torch's ``propagate_op_sharding_non_cached`` returns for ``op_schema`` with the
        ViewStrategy registered, or None where this cannot produce it exactly."""
        args = op_schema.args_schema
        spec = args[0]
        if type(spec) is not DTensorSpec or spec.tensor_meta is None or _are_we_tracing():
            return None
        tensor_meta = spec.tensor_meta
        shape = tuple(tensor_meta.shape)
        stride = tuple(tensor_meta.stride)
        if not all(type(n) is int for n in (*shape, *stride)):
            return None  # symbolic sizes: torch's path guards as it must
        try:
            geometry = self.geometry(shape, stride, *args[1:], **op_schema.kwargs_schema)
        except TypeError:  # arguments this geometry does not take: torch's path says why
            return None
        if geometry is None:
            return None  # torch would raise: let its own path raise its own error
        dtype = tensor_meta.dtype
        if self.dtypes is not None:
            dtype = self.dtypes.get(dtype)  # type: ignore[assignment]
            if dtype is None:
                return None
        mesh = spec.mesh
        rule = self.op.rule(spec, shape, args[1:], op_schema.kwargs_schema)
        target, output = self.op.decide(spec.placements, shape, rule, mesh)
        out_shape, out_stride = geometry
        if self.shape_arg is not None and _any_shard(output):
            coordinate = mesh.get_coordinate()
            if coordinate is None or local_tensor_mode() is not None:
                return None  # a rank outside the mesh, or simulated ranks: torch's path
            local: Shape | None = _local_shape(out_shape, output, mesh.shape, coordinate)
        else:
            local = None
        return self._assemble(
            op_schema,
            spec,
            target,
            output,
            TensorMeta(torch.Size(out_shape), out_stride, dtype),
            local,
        )

    def _assemble(
        self,
        op_schema: OpSchema,
        spec: DTensorSpec,
        target: tuple[Placement, ...],
        output: tuple[Placement, ...],
        out_meta: TensorMeta,
        local_shape: Shape | None,
    ) -> OutputSharding:
        """The OutputSharding torch's path builds from the ViewStrategy's one OpSpec: the
        use_strided_shard_as_shard_order fix-up, the input's redistribution, the local shape
        argument, the squeeze rewrite, and the output spec with its tensor_meta."""
        mesh = spec.mesh
        # torch gives every spec holding a _StridedShard the input's reading of them (if the
        # input holds one); specs without one keep the strategy's False.
        strided_flag = (
            spec.use_strided_shard_as_shard_order if _any_strided(spec.placements) else None
        )
        suggestion: OpSchema | None = None
        needs_redistribute = use_args = False
        if target != spec.placements:
            target_spec = DTensorSpec(
                mesh,
                target,
                tensor_meta=spec.tensor_meta,
                use_strided_shard_as_shard_order=_flag(target, strided_flag),
            )
            suggestion = OpSchema(
                op_schema.op, (target_spec, *op_schema.args_schema[1:]), op_schema.kwargs_schema
            )
            needs_redistribute = True
        if local_shape is not None:
            schema = suggestion or op_schema
            rewritten = list(schema.args_schema)
            rewritten[self.shape_arg] = local_shape  # type: ignore[index]
            suggestion = OpSchema(schema.op, tuple(rewritten), schema.kwargs_schema)
            needs_redistribute = use_args = True
        if self.squeeze_dims is not None:
            schema = suggestion or op_schema
            dims = _global_singletons(schema, tuple(spec.shape))
            if not (
                schema.op == self.squeeze_dims
                and len(schema.args_schema) > 1
                and schema.args_schema[1] == dims
            ):
                suggestion = OpSchema(self.squeeze_dims, (schema.args_schema[0], dims), {})
                needs_redistribute = use_args = True
        output_spec = DTensorSpec(
            mesh,
            output,
            tensor_meta=out_meta,
            use_strided_shard_as_shard_order=_flag(output, strided_flag),
        )
        return OutputSharding(
            output_spec,
            suggestion,
            needs_redistribute=needs_redistribute,
            use_val_from_redistribute_schema=use_args,
        )


def _any_shard(placements: Sequence[Placement]) -> bool:
    return any(isinstance(p, Shard | _StridedShard) for p in placements)


def _any_strided(placements: Sequence[Placement]) -> bool:
    return any(type(p) is _StridedShard for p in placements)


def _flag(placements: Sequence[Placement], strided_flag: bool | None) -> bool:
    return bool(strided_flag) if strided_flag is not None and _any_strided(placements) else False


def _local_shape(
    shape: Shape, placements: Sequence[Placement], mesh_shape: Sequence[int], coord: Sequence[int]
) -> Shape:
    """This rank's local shape of a tensor of global ``shape`` under ``placements``."""
    local = list(shape)
    for m, p in enumerate(placements):
        if type(p) is _StridedShard:
            # (the fast path runs on int sizes only: the split factor is an int here)
            sf: Any = p.split_factor
            local[p.dim] = meta.local_size(local[p.dim], ((mesh_shape[m], coord[m], sf),))
        elif isinstance(p, Shard):
            local[p.dim] = meta.local_size(local[p.dim], ((mesh_shape[m], coord[m], 1),))
    return tuple(local)


def _global_singletons(schema: OpSchema, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The dims a squeeze in ``schema`` of an input of global ``shape`` drops: those of its
    dims that are size 1 globally (DTensor rewrites every squeeze to ``squeeze.dims`` of them,
    normalised)."""
    ndim = len(shape)

    def normal(d: int) -> int:
        return d if d >= 0 else d + ndim

    def singleton(d: int) -> bool:
        n = normal(d)
        return 0 <= n < ndim and shape[n] == 1

    args = schema.args_schema
    if schema.op in (aten.squeeze.default, aten.squeeze_.default) or len(args) < 2:
        return tuple(d for d, n in enumerate(shape) if n == 1)
    dims = args[1]  # squeeze.dim's int, squeeze.dims' list of ints
    listed = (dims,) if isinstance(dims, int) else cast(Sequence[int], dims)
    return tuple(normal(d) for d in listed if singleton(d))


@dataclass(frozen=True, slots=True)
class ViewPropagation:
    """What ``install()`` puts in place of the propagator's ``propagate_op_sharding_non_cached``
    (and under its LRU cache): view ops in ``fast`` are answered without running them on fake
    tensors; everything else, and whatever a ``FastView`` cannot answer exactly, goes to
    ``torch_path``, the propagator's own method."""

    torch_path: Callable[[OpSchema], OutputSharding]
    fast: Mapping[OpOverload, FastView]

    def __call__(self, op_schema: OpSchema) -> OutputSharding:
        if _observer is not None:  # (a miss: the one check tracing costs when off)
            _observer.asked(op_schema)
        view = self.fast.get(op_schema.op)
        if view is not None:
            answer = view.output_sharding(op_schema)
            if answer is not None:
                return answer
        return self.torch_path(op_schema)


def _fast_views(
    propagator: _sharding_prop.ShardingPropagator, ops: Sequence[ViewOp]
) -> dict[OpOverload, FastView]:
    shape_args = propagator.op_to_shape_and_stride_idx
    squeezes = propagator.squeeze_op_to_dims_variant
    fast: dict[OpOverload, FastView] = {}
    for op in ops:
        if op.overload not in GEOMETRIES:
            continue
        index = shape_args.get(op.overload)
        if isinstance(index, tuple):  # a stride argument too: not a view op's
            continue
        geometry, dtypes = GEOMETRIES[op.overload]
        fast[op.overload] = FastView(op, geometry, dtypes, index, squeezes.get(op.overload))
    return fast


# --------------------------------------------------------------------------------------------
# Finding torch's view ops


def torch_view_ops() -> tuple[ViewOp, ...]:
    """Every view-op overload torch registers in ``_view_ops``, read from its registry.

    While installed, the registry holds ours, so this returns the ops found at install time.
    """
    if _saved is not None:
        return _saved.ops
    return _find_view_ops()


# The overload torch registers as a strict view that cute_shard lets redistribute:
# ``_unsafe_view``, the view a composite op takes of its own fresh result (matmul and linear
# fold a batch back, reshape views the copy it made). Nothing else aliases it and autograd
# does not treat it as a view, so moving it first is safe. Strict, it broke programs
# install() makes cheaper: priced by their plans, DTensor picks ``_StridedShard`` strategies
# (an ``mm`` keeping a strided shard of its rows) that torch's pricing avoided, and ``x @ w``
# of a 3-D ``x`` then raised in the fold back where it ran without install().
# Every real view stays strict: ``view``, ``squeeze`` (torch 2.13-2.15 register it strict)
# and ``squeeze_``. Moving data inside one breaks its alias: ``y = x.squeeze(1); y.mul_(2)``
# would leave ``x`` as it was, and autograd, which still links them, would give a gradient
# for the aliased program (``test_install.py``).
_NOT_STRICT = frozenset({aten._unsafe_view.default})


def _find_view_ops() -> tuple[ViewOp, ...]:
    propagator = DTensor._op_dispatcher.sharding_propagator
    by_dim_map = {id(fn): local for local, fn in _view_ops.dim_maps.items()}
    by_name = {getattr(local, "__name__", None): local for local in _view_ops.dim_maps}
    ops: list[ViewOp] = []
    for overload, fn in propagator.op_strategy_funcs.items():
        if getattr(fn, "__module__", None) != _view_ops.__name__:
            continue
        # register_op_strategy_map's closure holds torch's builder and strictness; reading
        # them keeps the two in step with torch's own registration.
        closure = inspect.getclosurevars(fn).nonlocals
        dim_map = closure.get("dim_map")
        if dim_map is None or id(dim_map) not in by_dim_map:
            continue
        strict = bool(closure.get("strict_view")) and overload not in _NOT_STRICT
        ops.append(ViewOp(overload, by_dim_map[id(dim_map)], dim_map, strict))
    for overload, info in propagator.op_single_dim_strategy_funcs.items():
        if getattr(info.func, "__module__", None) != _view_ops.__name__:
            continue
        local = by_name.get(overload.overloadpacket.__name__)
        if local is not None:
            ops.append(ViewOp(overload, local, _view_ops.dim_maps[local], False))
    # t() is the transpose of a matrix, registered outside _view_ops (torch 2.13: a strategy
    # that keeps every shard; 2.14 and 2.15: a single-mesh-dim one that replicates a shard
    # of uneven size, an all-gather): cute_shard answers it as the view it is.
    ops.append(ViewOp(aten.t.default, torch.t, _t_dim_map, False))
    return tuple(ops)


# CompositeImplicitAutograd view ops whose arguments are dims or counts, never sizes: DTensor
# can run them on the local shard as given, so they get a ViewStrategy (flatten and ravel may
# copy, like reshape; the others never need communication). The rest (unflatten, broadcast_to,
# the Sequence overloads) are decomposed. torch's dim_maps has no entry for unflatten.
_SHAPE_FREE = ("flatten", "ravel", "movedim", "tile", "atleast_1d", "atleast_2d", "atleast_3d")
_DECOMPOSE_EXTRA = ("unflatten",)


def composite_view_ops() -> tuple[tuple[ViewOp, ...], tuple[OpOverload, ...]]:
    """The CompositeImplicitAutograd overloads of the view-op families in torch's ``dim_maps``
    (and unflatten) that have no strategy of their own; they reach DTensor only under
    inference mode. Returns (those that get a ViewStrategy, those that get Decompose)."""
    if _saved is not None:
        return _saved.composite, _saved.decomposed
    return _find_composite_view_ops()


def _find_composite_view_ops() -> tuple[tuple[ViewOp, ...], tuple[OpOverload, ...]]:
    propagator = DTensor._op_dispatcher.sharding_propagator
    registered = (
        propagator.op_strategy_funcs.keys()
        | propagator.op_single_dim_strategy_funcs.keys()
        | propagator.op_to_rules.keys()
    )
    by_name = {getattr(local, "__name__", ""): local for local in _view_ops.dim_maps}
    viewed: list[ViewOp] = []
    decomposed: list[OpOverload] = []
    for name in sorted(by_name.keys() | set(_DECOMPOSE_EXTRA)):
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for overload_name in packet.overloads():
            overload = getattr(packet, overload_name)
            composite = torch._C._dispatch_has_kernel_for_dispatch_key(
                overload.name(), torch._C.DispatchKey.CompositeImplicitAutograd
            )
            if not composite or overload in registered:
                continue
            returns = [str(r.type) for r in overload._schema.returns]
            if name in _SHAPE_FREE and returns == ["Tensor"]:
                local = by_name[name]
                viewed.append(ViewOp(overload, local, _view_ops.dim_maps[local], False))
            else:
                decomposed.append(overload)
    return tuple(viewed), tuple(decomposed)


# --------------------------------------------------------------------------------------------
# The reshape family: may copy, so it redistributes what must move


def redistribute_for_view(x: DTensor, out_shape: Sequence[Any], method: str = "reshape") -> DTensor:
    """``x`` with the mesh dims moved that a view to ``out_shape`` cannot keep (the engine's
    non-strict input target): after it the view needs no communication. ``x`` itself if
    nothing moves, or if the engine rejects the shapes (an illegal ``out_shape``: the view
    then raises the error it raises without this step). ``method``: the reshape-family op
    that views it next, as an open trace reports it."""
    spec = x._spec
    target = _move_to(spec, out_shape if type(out_shape) is tuple else tuple(out_shape))
    return x if target is None else _redistribute(x, target, method)


def _redistribute(x: DTensor, target: tuple[Placement, ...], method: str) -> DTensor:
    """``x`` redistributed to ``target`` for the view the reshape-family op ``method`` ends
    in; an open ``cute_shard.trace`` hears of it first (the view it then sees is free)."""
    if _observer is not None:
        _observer.redistributes(x, target, method)
    return x.redistribute(x._spec.mesh, target)


# (input spec, output shape) -> the input target, or None when nothing moves. The spec holds
# the mesh, the placements and the global shape, so this is a pure function of the key. A
# reshape that moves nothing is the common case, and the engine's answer would otherwise be
# most of the cost. Bounded: emptied when full (and by clear_dtensor_caches()). The methods
# key it by (spec, the method's shape function, its arguments) instead, which saves computing
# the output shape on every call.
_TARGETS_LIMIT = 4096
_targets: dict[tuple[Any, ...], tuple[Placement, ...] | None] = {}


def _move_to(spec: DTensorSpec, out_shape: tuple[Any, ...]) -> tuple[Placement, ...] | None:
    key = (spec, out_shape)
    try:
        return _targets[key]
    except KeyError:
        pass
    except TypeError:  # SymInt sizes are not hashable: no cache
        return _input_target(spec, out_shape)
    return _remember(key, _input_target(spec, out_shape))


def _remember(
    key: tuple[Any, ...], target: tuple[Placement, ...] | None
) -> tuple[Placement, ...] | None:
    if len(_targets) >= _TARGETS_LIMIT:
        _targets.clear()
    _targets[key] = target
    return target


def _input_target(spec: DTensorSpec, out_shape: tuple[Any, ...]) -> tuple[Placement, ...] | None:
    """The engine's non-strict input target for viewing ``spec``'s tensor as ``out_shape``;
    None if it equals the placements, or the engine rejects the shapes."""
    shape = tuple(spec.shape)
    try:
        rule = _view_rule(shape, out_shape)
        target, _ = propagate_shape_and_sharding(
            spec.placements, shape, rule, spec.mesh.shape, complex_view=False
        )
    except ValueError:  # a shape (or rule) the engine rejects: the op itself raises as before
        return None
    target = tuple(target)
    return None if target == tuple(spec.placements) else target


def _view_rule(shape: tuple[Any, ...], out_shape: tuple[Any, ...]) -> Sequence[object]:
    try:
        return rules.view_groups(shape, out_shape)
    except UndecidableRule:  # a SymInt comparison only a guard could settle: torch's builder
        return _view_ops.view_groups(shape, out_shape)


# The global shape each reshape-family op ends in, from the input's shape and the op's
# arguments; None for arguments torch rejects (the op then raises its own error).


def _reshaped(current: tuple[Any, ...], *new_shape: Any, **named: Any) -> tuple[Any, ...] | None:
    """``x.reshape(6, 4)``, ``x.reshape((6, 4))`` or ``x.reshape(shape=(6, 4))``."""
    if named:
        return tuple(named["shape"]) if not new_shape and named.keys() == {"shape"} else None
    return tuple(rules.shape_arg(new_shape))


def _reshaped_as(shape: tuple[Any, ...], *other_shape: Any) -> tuple[Any, ...]:
    """``x.reshape_as(other)``: the method passes ``other``'s shape, so that a cache key
    never holds (and keeps alive) the tensor itself."""
    return other_shape


def _flattened(
    shape: tuple[Any, ...], start_dim: int = 0, end_dim: int = -1
) -> tuple[Any, ...] | None:
    if not shape:
        return (1,)
    start, end = _dim(start_dim, len(shape)), _dim(end_dim, len(shape))
    if start is None or end is None or start > end:
        return None
    return (*shape[:start], math.prod(shape[start : end + 1]), *shape[end + 1 :])


def _unflattened(shape: tuple[Any, ...], dim: int, sizes: Sequence[Any]) -> tuple[Any, ...] | None:
    d = _dim(dim, len(shape))
    return None if d is None else (*shape[:d], *sizes, *shape[d + 1 :])


def _raveled(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    return (-1,)


def _dim(dim: object, ndim: int) -> int | None:
    if type(dim) is not int:
        return None  # a named dim: DTensor has no names, so the op raises torch's error
    return dim % ndim if -ndim <= dim < ndim else None


def _moved(
    x: DTensor, out_shape: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> DTensor:
    """``x`` redistributed so that the view a reshape-family method ends in is free.

    The common case (a seen input spec and arguments that move nothing) is one dict lookup.
    Lists and SymInts in the arguments are not hashable: those calls are not cached."""
    spec = x._spec
    key = (spec, out_shape, args, *kwargs.items()) if kwargs else (spec, out_shape, args)
    try:
        target = _targets[key]
    except KeyError:
        target = _remember(key, _method_target(spec, out_shape, args, kwargs))
    except TypeError:
        target = _method_target(spec, out_shape, args, kwargs)
    return x if target is None else _redistribute(x, target, _METHOD_NAMES[out_shape])


def _method_target(
    spec: DTensorSpec, out_shape: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> tuple[Placement, ...] | None:
    try:
        shape = out_shape(tuple(spec.shape), *args, **kwargs)
    except TypeError:  # arguments torch's method rejects: it raises its own error
        return None
    return None if shape is None else _input_target(spec, tuple(shape))


# The method each shape function serves, as a trace names it.
_METHOD_NAMES = {
    _reshaped: "reshape",
    _reshaped_as: "reshape_as",
    _flattened: "flatten",
    _unflattened: "unflatten",
    _raveled: "ravel",
}

_TENSOR_RESHAPE = torch.Tensor.reshape
_TENSOR_RESHAPE_AS = torch.Tensor.reshape_as
_TENSOR_FLATTEN = torch.Tensor.flatten
_TENSOR_UNFLATTEN: Callable[..., torch.Tensor] = torch.Tensor.unflatten  # (torch: unannotated)
_TENSOR_RAVEL = torch.Tensor.ravel


# The methods install() sets on the DTensor class. torch.compile records each as one call
# in the graph (allow_in_graph, at install time) instead of tracing into its caches; the call
# then runs on the traced DTensors, so a redistribution it makes is traced as the collectives
# eager runs.


def _reshape(self: DTensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return _TENSOR_RESHAPE(_moved(self, _reshaped, args, kwargs), *args, **kwargs)


def _reshape_as(self: DTensor, other: Any) -> torch.Tensor:
    shape = getattr(other, "shape", None)
    if type(shape) is not torch.Size:  # not a tensor: torch's method raises its own error
        return _TENSOR_RESHAPE_AS(self, other)
    return _TENSOR_RESHAPE_AS(_moved(self, _reshaped_as, tuple(shape), {}), other)


def _flatten(self: DTensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return _TENSOR_FLATTEN(_moved(self, _flattened, args, kwargs), *args, **kwargs)


def _unflatten(self: DTensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return _TENSOR_UNFLATTEN(_moved(self, _unflattened, args, kwargs), *args, **kwargs)


def _ravel(self: DTensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return _TENSOR_RAVEL(_moved(self, _raveled, args, kwargs), *args, **kwargs)


def may_copy_methods() -> dict[str, Callable[..., torch.Tensor]]:
    """The DTensor methods ``install()`` sets (the default ``reshape_may_copy="methods"``)."""
    return {
        "reshape": _reshape,
        "reshape_as": _reshape_as,
        "flatten": _flatten,
        "unflatten": _unflatten,
        "ravel": _ravel,
    }


# Below this key the dispatch continues exactly as the key's fallback would continue it.
_AFTER_SNAPSHOT = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.PythonTLSSnapshot)


@dataclass(frozen=True, slots=True)
class MayCopy:
    """The kernel ``install(reshape_may_copy="dispatcher")`` registers for a reshape-family
    overload at PythonTLSSnapshot.

    Each of these ops is CompositeImplicitAutograd and ends in a strict view of the global
    shape ``out_shape(input shape, *args)``. For a DTensor input the kernel first moves the
    mesh dims that view cannot keep (``redistribute_for_view``); then, for every input, the
    call goes on down the dispatcher as the key's fallback would send it. For example, on an
    8-mesh, ``x.reshape(1536)`` of a (6, 256) ``[Shard(0)]`` DTensor all-gathers ``x`` and
    returns a ``[Replicate()]`` view, where the strict view alone would raise. Unlike the
    methods it reaches every reshape of a DTensor, including ``torch.flatten(x)`` and those
    torch issues inside other ops, at the price of a round trip through Python on each.
    """

    overload: OpOverload
    out_shape: Callable[..., tuple[Any, ...] | None]  # None: illegal arguments
    _redispatch: Callable[..., Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_redispatch", self.overload._handle.redispatch_boxed)

    def __call__(self, keyset: torch._C.DispatchKeySet, x: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(x, DTensor):
            out_shape = self.out_shape(x._spec.shape, *args, **kwargs)
            if out_shape is not None:  # else the op below raises torch's own error
                x = redistribute_for_view(x, out_shape, self.overload.overloadpacket.__name__)
        return self._redispatch(keyset & _AFTER_SNAPSHOT, x, *args, **kwargs)


def may_copy_kernels() -> tuple[MayCopy, ...]:
    """The kernels ``install(reshape_may_copy="dispatcher")`` registers. ``reshape_as`` calls
    ``reshape`` through the dispatcher, so the reshape kernel covers it; the other ops call
    torch's reshape function directly, so each needs its own."""
    return (
        MayCopy(aten.reshape.default, _reshaped),
        MayCopy(aten.flatten.using_ints, _flattened),
        MayCopy(aten.unflatten.int, _unflattened),
        MayCopy(aten.ravel.default, _raveled),
    )


# --------------------------------------------------------------------------------------------
# _StridedShard under torch.compile: local sizes under fake tensors, specs rebuilt by AOT

_TORCH_STRIDED_LOCAL_SIZE = _StridedShard.local_shard_size_and_offset


def _strided_local_size(
    self: _StridedShard, curr_local_size: Any, num_chunks: int, rank: Any, *args: Any, **kwargs: Any
) -> Any:
    """``_StridedShard.local_shard_size_and_offset`` while installed.

    torch computes it by splitting an index tensor; under a fake mode (torch.compile) those
    are fake tensors whose ``tolist()`` mints an unbacked symbol per element, and the trace
    then fails on symbols no output holds. For plain int sizes and rank the answer is a
    plain int, so it is computed on real tensors: the same function, the same values.

    A symbolic size (dynamic shapes) with a hint, asked for the size and at most the first
    offset: where the split factor's pieces and their chunks are all exact (a guard, ``n %
    (split_factor * num_chunks) == 0``) each rank keeps ``n // num_chunks`` and starts at its
    chunk of the first piece, ``rank * n // (split_factor * num_chunks)``, for every such n;
    any other size is taken at its value (guarded) and computed as an int."""
    mode = getattr(args[0] if args else kwargs.get("offset_mode"), "name", "FIRST")
    if (
        isinstance(curr_local_size, torch.SymInt)
        and type(rank) is int
        and mode in ("FIRST", "NONE")
        and has_guarding_hint(curr_local_size)
    ):
        pieces = self.split_factor * num_chunks
        if curr_local_size % pieces == 0:
            chunk = curr_local_size // pieces
            first = None if mode == "NONE" else chunk * rank
            return chunk * self.split_factor, first
        curr_local_size = int(curr_local_size)
    if type(curr_local_size) is int and type(rank) is int:
        with unset_fake_temporarily():
            return _TORCH_STRIDED_LOCAL_SIZE(
                self, curr_local_size, num_chunks, rank, *args, **kwargs
            )
    return _TORCH_STRIDED_LOCAL_SIZE(self, curr_local_size, num_chunks, rank, *args, **kwargs)


_TORCH_UNFLATTEN = DTensor.__dict__["__tensor_unflatten__"]  # (a staticmethod object)


def _tensor_unflatten(
    inner_tensors: dict[str, Any], flatten_spec: Any, outer_size: Any, outer_stride: Any
) -> Any:
    """``DTensor.__tensor_unflatten__`` while installed.

    torch.compile's AOT tracing flattens a DTensor to its local tensor and the spec's
    placements, tensor meta and shard order, and rebuilds the spec from them. A view's output
    reads its ``_StridedShard`` by split factor (``use_strided_shard_as_shard_order=False``),
    so it keeps a shard order; rebuilt without that reading, a spec holding a
    ``_StridedShard`` takes the other one and refuses the shard order (torch 2.13, 2.14), so
    a compiled function returning a strided view's output failed to trace. Such a spec is
    rebuilt with the reading it had; any other goes to torch's function."""
    if len(flatten_spec) == 4:
        placements, meta, shard_order, requires_grad = flatten_spec
        if shard_order is not None and any(isinstance(p, _StridedShard) for p in placements):
            spec = DTensorSpec(
                inner_tensors["device_mesh"],
                placements,
                tensor_meta=TensorMeta(outer_size, outer_stride, meta.dtype),
                shard_order=shard_order,
                use_strided_shard_as_shard_order=False,
            )
            dtensor: Any = DTensor  # (typed in some releases, not in others)
            return dtensor(inner_tensors["_local_tensor"], spec, requires_grad=requires_grad)
    return _TORCH_UNFLATTEN.__func__(inner_tensors, flatten_spec, outer_size, outer_stride)


# --------------------------------------------------------------------------------------------
# install / uninstall

ReshapeMayCopy = Literal["methods", "dispatcher", "off"]


def _mode(reshape_may_copy: ReshapeMayCopy | bool) -> ReshapeMayCopy:
    if reshape_may_copy is True:
        return "methods"
    if reshape_may_copy is False:
        return "off"
    if reshape_may_copy not in ("methods", "dispatcher", "off"):
        raise ValueError(
            f"reshape_may_copy: expected 'methods', 'dispatcher' or 'off' (or True/False for "
            f"'methods'/'off'), got {reshape_may_copy!r}"
        )
    return reshape_may_copy


@dataclass(frozen=True, slots=True)
class _Saved:
    """What ``install()`` replaced, per overload (None: there was no entry)."""

    ops: tuple[ViewOp, ...]
    composite: tuple[ViewOp, ...]
    decomposed: tuple[OpOverload, ...]
    strategy_funcs: dict[OpOverload, Callable[..., Any] | None]
    single_dim_funcs: dict[OpOverload, Any]
    # The propagator's own entry points, put back by uninstall().
    propagate_cached: Any
    mode: ReshapeMayCopy
    # Holds the MayCopy kernels (mode "dispatcher"); destroying it deregisters them.
    kernels: torch.library.Library | None


# The propagator's registry is process-wide, so this is too. The lock makes install and
# uninstall atomic against each other.
_saved: _Saved | None = None
_lock = threading.Lock()


def is_installed() -> bool:
    """True while cute_shard propagates DTensor's view ops."""
    return _saved is not None


def may_copy_mode() -> ReshapeMayCopy | None:
    """How the reshape family may copy while installed (None: not installed)."""
    return None if _saved is None else _saved.mode


def install(
    *, reshape_may_copy: ReshapeMayCopy | bool = "methods", redistribute: bool = True
) -> None:
    """Make DTensor propagate every view op with cute_shard, and (``redistribute``, the
    default) run and price every redistribution with cute_shard's planner
    (``cute_shard.redistribute.dtensor``). Idempotent.

    ``reshape_may_copy`` says how reshape, flatten, unflatten and ravel (which may copy)
    redistribute what must move instead of failing as the strict view they decompose into:

    - ``"methods"`` (default, also ``True``): as DTensor methods (``x.reshape(...)``,
      ``x.flatten()``, ``nn.Flatten``): ~0.3 µs on those calls, nothing on any other.
    - ``"dispatcher"``: a dispatcher kernel that also reaches the function forms
      (``torch.flatten(x)``) and reshapes torch makes inside other ops (matmul, a view's
      backward), at ~3-5 µs per reshape-family call on a DTensor.
    - ``"off"`` (also ``False``): they stay the strict view, at torch's own cost.

    Installing again with another value switches."""
    global _saved
    mode = _mode(reshape_may_copy)
    if redistribute:
        redistribution.install()
    else:
        redistribution.uninstall()
    with _lock:
        if _saved is not None:
            if _saved.mode != mode:
                _set_may_copy(_saved.mode, "off", _saved.kernels)
                _saved = replace(_saved, mode=mode, kernels=_set_may_copy("off", mode, None))
            return
        propagator = DTensor._op_dispatcher.sharding_propagator
        ops = _find_view_ops()
        composite, decomposed = _find_composite_view_ops()
        replaced = [v.overload for v in ops + composite] + list(decomposed)
        saved = _Saved(
            ops=ops,
            composite=composite,
            decomposed=decomposed,
            strategy_funcs={op: propagator.op_strategy_funcs.get(op) for op in replaced},
            single_dim_funcs={
                op: propagator.op_single_dim_strategy_funcs.get(op) for op in replaced
            },
            propagate_cached=propagator.__dict__["propagate_op_sharding"],
            mode=mode,
            kernels=None,
        )
        clear_dtensor_caches()  # nothing torch's propagator answered may be reused
        for v in ops + composite:
            # A single-mesh-dim strategy takes precedence over op_strategy_funcs: drop it.
            propagator.op_single_dim_strategy_funcs.pop(v.overload, None)
            propagator.op_strategy_funcs[v.overload] = ViewStrategy(v)
        for op in decomposed:
            propagator.op_strategy_funcs[op] = Decompose(op)
        # DTensor calls these two by attribute on the instance; the class's method stays
        # torch's path.
        fast = ViewPropagation(
            _sharding_prop.ShardingPropagator.propagate_op_sharding_non_cached.__get__(propagator),
            _fast_views(propagator, ops),
        )
        propagator.propagate_op_sharding_non_cached = fast  # type: ignore[method-assign]
        propagator.propagate_op_sharding = _sharding_prop.LocalLRUCache(fast)
        _StridedShard.local_shard_size_and_offset = _strided_local_size  # type: ignore[method-assign]
        DTensor.__tensor_unflatten__ = staticmethod(_tensor_unflatten)  # type: ignore[method-assign]
        _saved = replace(saved, kernels=_set_may_copy("off", mode, None))
        clear_dtensor_caches()


def _set_may_copy(
    old: ReshapeMayCopy, new: ReshapeMayCopy, kernels: torch.library.Library | None
) -> torch.library.Library | None:
    """Switch the reshape family's mechanism from ``old`` to ``new``; the kernels' library
    while ``new`` is "dispatcher", else None."""
    if old == "methods":
        for name in may_copy_methods():
            delattr(DTensor, name)
    elif old == "dispatcher" and kernels is not None:
        kernels._destroy()  # type: ignore[no-untyped-call]  # (torch leaves it unannotated)
    if new == "methods":
        for name, method in may_copy_methods().items():
            setattr(DTensor, name, torch.compiler.allow_in_graph(method))  # type: ignore[no-untyped-call]
    elif new == "dispatcher":
        return _may_copy_library()
    return None


def _may_copy_library() -> torch.library.Library:
    kernels = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
    for kernel in may_copy_kernels():
        kernels.impl(kernel.overload, kernel, "PythonTLSSnapshot", with_keyset=True)  # type: ignore[no-untyped-call]
    return kernels


def uninstall() -> None:
    """Give DTensor back torch's own view-op strategies and redistribution (the same
    objects). Idempotent."""
    global _saved
    redistribution.uninstall()
    with _lock:
        if _saved is None:
            return
        propagator = DTensor._op_dispatcher.sharding_propagator
        _restore(propagator.op_strategy_funcs, _saved.strategy_funcs)
        _restore(propagator.op_single_dim_strategy_funcs, _saved.single_dim_funcs)
        del propagator.propagate_op_sharding_non_cached  # the class's method again
        propagator.propagate_op_sharding = _saved.propagate_cached
        _StridedShard.local_shard_size_and_offset = _TORCH_STRIDED_LOCAL_SIZE  # type: ignore[method-assign]
        DTensor.__tensor_unflatten__ = _TORCH_UNFLATTEN  # type: ignore[method-assign]
        _set_may_copy(_saved.mode, "off", _saved.kernels)
        _saved = None
        clear_dtensor_caches()


def _restore(registry: dict[OpOverload, Any], saved: dict[OpOverload, Any]) -> None:
    for overload, original in saved.items():
        if original is None:
            registry.pop(overload, None)
        else:
            registry[overload] = original


@contextmanager
def enabled(
    *, reshape_may_copy: ReshapeMayCopy | bool = "methods", redistribute: bool = True
) -> Iterator[None]:
    """``with cute_shard.enabled(): ...`` installs for the block (the arguments as in
    :func:`install`), then restores the state before it (reentrant: an inner block leaves an
    outer one installed, as it was)."""
    before = None if _saved is None else _saved.mode
    redistributed = redistribution.is_installed()
    install(reshape_may_copy=reshape_may_copy, redistribute=redistribute)
    try:
        yield
    finally:
        if before is None:
            uninstall()
        else:
            install(reshape_may_copy=before, redistribute=redistributed)


def clear_dtensor_caches() -> None:
    """Empty DTensor's sharding-propagation caches: the Python LRU cache and the C++
    fast-path cache (the latter is per thread; this clears the calling thread's), and the
    reshape family's cache of input targets."""
    propagator = DTensor._op_dispatcher.sharding_propagator
    propagator.propagate_op_sharding.cache.cache_clear()
    torch._C._clear_DTensor_sharding_propagator_cache()
    _targets.clear()

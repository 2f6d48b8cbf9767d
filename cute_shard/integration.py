"""DTensor integration: ``install()`` makes DTensor propagate every view op with cute_shard.

DTensor's ``ShardingPropagator`` keeps one strategy function per aten overload. torch 2.13
registers its view ops in ``torch.distributed.tensor._ops._view_ops``: most through
``register_op_strategy_map`` (a closure over torch's ``dim_map`` builder and a ``strict_view``
flag), and ``view_as_complex`` as a single-mesh-dim strategy. ``install()`` finds every one of
them in the propagator's registry (``torch_view_ops``), saves the originals and registers a
``ViewStrategy`` in their place. ``uninstall()`` puts the saved objects back, so torch's own
functions are registered again (the same objects). Both clear DTensor's sharding-propagation
caches (the Python LRU cache and the calling thread's C++ fast-path cache), so no answer of
the other propagator is reused. Other ops are untouched.

A ``ViewStrategy`` builds what torch's ``reshape_strategy`` builds: an ``OpStrategy`` with one
``OpSpec`` per input strategy, whose input spec holds the target placements (and the input's
tensor_meta) and whose redistribute cost comes from ``generate_redistribute_costs``. Only the
placements differ: they come from ``cute_shard.propagate_shape_and_sharding``. The rule comes
from ``cute_shard.rules`` (the builder for the op torch registered); where a builder cannot
decide a SymInt comparison without a guard, torch's own ``dim_map`` gives it. The mesh is the
input spec's own ``DeviceMesh`` object: nothing here copies or constructs a mesh, so
``out.device_mesh is dt.device_mesh``.

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

Strict views (``view``, ``_unsafe_view``, ``squeeze``) that need communication raise
``cute_shard.RedistributionRequired``; DTensor wraps it in a RuntimeError whose message starts
with ours (the tensor dim, the mesh dim and the redistribution that would work).

The CompositeImplicitAutograd view ops (reshape, flatten, unflatten, movedim, ravel,
broadcast_to, tile, atleast_*d) are decomposed before DTensor sees them, except under
inference mode: the dispatcher runs their decomposition at the Autograd key, above the Python
key where DTensor lives, so outside inference mode ``dt.reshape`` reaches DTensor as the strict
``aten.view`` (or ``clone`` + ``_unsafe_view``). The reshape family (reshape, flatten,
unflatten, ravel; reshape_as calls reshape) may copy, as torch.reshape may, so ``install()``
also registers a ``MayCopy`` kernel for each at ``DispatchKey.PythonTLSSnapshot``: the one key
above Autograd that only tensor subclasses (and active dispatch modes) carry, so a plain tensor
and every other DTensor op never reach it. For a DTensor it asks the engine (non-strict) which
mesh dims the view cannot keep, redistributes them (``DTensor.redistribute``: autograd and
torch.compile see an ordinary redistribute), and lets the call continue down the dispatcher as
before, where the view is now free; anything else continues unchanged. ``dt.view`` stays strict.

Under inference mode the ops arrive whole. ``aten.reshape`` has its own (non-strict)
strategy; for the others torch 2.13 propagates their decomposition one mesh dim at a time
(``DecompShardingStrategy``) and combines the answers, which is wrong for views on multi-dim
meshes (``flatten`` of a tensor sharded on two mesh dims gives wrong data; ``unflatten`` and
``broadcast_to`` fail on global sizes). While installed, those whose arguments are dims or
counts (flatten, ravel, movedim, tile, atleast_*d) get a ``ViewStrategy`` with their own rule,
and the others a ``Decompose`` strategy, which makes DTensor decompose the op for real so that
the view ops inside it go through the strategies above.
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch._ops import OpOverload
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import OpSchema, OpSpec, OpStrategy
from torch.distributed.tensor._ops import _view_ops
from torch.distributed.tensor._ops.utils import generate_redistribute_costs
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate

from . import rules
from .engine import propagate_shape_and_sharding
from .rules import UndecidableRule

__all__ = [
    "Decompose",
    "MayCopy",
    "ViewOp",
    "ViewStrategy",
    "composite_view_ops",
    "enabled",
    "install",
    "is_installed",
    "may_copy_kernels",
    "redistribute_for_view",
    "torch_view_ops",
    "uninstall",
]

RuleBuilder = Callable[..., rules.Rule]


def _one_shape(sizes: tuple[Any, ...]) -> Any:
    # aten passes a shape as one list; Tensor.view-style callers may pass sizes unpacked.
    return sizes[0] if len(sizes) == 1 else sizes


# cute_shard's builder for each local op torch keys its ``dim_maps`` by. The first argument is
# the input's OpStrategy (it has ``shape`` and ``ndim``), the rest are the aten op's arguments.
BUILDERS: dict[Callable[..., Any], RuleBuilder] = {
    torch.Tensor.view: lambda x, *shape: rules.view_groups(x.shape, _one_shape(shape)),
    torch.reshape: lambda x, shape: rules.view_groups(x.shape, shape),
    torch.squeeze: lambda x, dim=None: rules.squeeze(x.shape, dim),
    torch.unsqueeze: lambda x, dim: rules.unsqueeze(x.ndim, dim),
    torch.Tensor.expand: lambda x, *size, implicit=False: rules.expand(x.shape, _one_shape(size)),
    torch.permute: lambda x, dims: rules.permute(x.ndim, dims),
    torch.Tensor.repeat: lambda x, *sizes: rules.repeat(x.ndim, _one_shape(sizes)),
    torch.transpose: lambda x, dim0, dim1: rules.transpose(x.ndim, dim0, dim1),
    torch.view_as_real: lambda x: rules.view_as_real(x.shape),
    torch.view_as_complex: lambda x: rules.view_as_complex(x.shape),
    torch.flatten: lambda x, start_dim=0, end_dim=-1: rules.flatten(x.ndim, start_dim, end_dim),
    torch.ravel: lambda x: rules.ravel(x.ndim),
    torch.movedim: lambda x, source, destination: rules.movedim(x.ndim, source, destination),
    torch.tile: lambda x, dims: rules.tile(x.ndim, dims),
    torch.atleast_1d: lambda x: rules.atleast_1d(x.ndim),
    torch.atleast_2d: lambda x: rules.atleast_2d(x.ndim),
    torch.atleast_3d: lambda x: rules.atleast_3d(x.ndim),
}

# Complex numbers have no order: a pending max/min of (real, imag) pairs is not a pending
# max/min of complex values, so view_as_complex keeps only these Partials (as torch does).
_COMPLEX_PARTIALS = ("sum", "avg")


@dataclass(frozen=True, slots=True)
class ViewOp:
    """A view-op overload as torch registers it: its local op, torch's rule, strictness."""

    overload: OpOverload
    local_op: Callable[..., Any]
    torch_dim_map: Callable[..., Any]
    strict_view: bool

    def __str__(self) -> str:
        return f"{self.overload} ({'strict' if self.strict_view else 'may redistribute'})"


@dataclass(frozen=True, slots=True)
class ViewStrategy:
    """The strategy function ``install()`` registers for ``op``: cute_shard's propagation."""

    op: ViewOp

    def __call__(self, op_schema: OpSchema) -> OpStrategy:
        input_strategy = op_schema.args_schema[0]
        if not isinstance(input_strategy, OpStrategy) or input_strategy.shape is None:
            raise ValueError(
                f"{self.op.overload}: expected the input's OpStrategy with a shape as the first "
                f"argument, got {input_strategy!r}"
            )
        shape = tuple(input_strategy.shape)
        rule = self.rule(op_schema)
        complex_view = self.op.local_op is torch.view_as_complex
        out = OpStrategy([])
        for src in input_strategy.strategies:
            spec = src.output_spec
            mesh = spec.mesh  # the caller's own mesh object: never copied or constructed
            placements = _allowed_partials(spec.placements) if complex_view else spec.placements
            target, output = propagate_shape_and_sharding(
                placements,
                shape,
                rule,
                mesh.shape,
                self.op.strict_view,
                complex_view=complex_view,
            )
            target_spec = DTensorSpec(
                mesh=mesh,
                placements=tuple(target),
                tensor_meta=spec.tensor_meta,
                use_strided_shard_as_shard_order=False,
            )
            output_spec = DTensorSpec(
                mesh=mesh, placements=tuple(output), use_strided_shard_as_shard_order=False
            )
            out.strategies.append(
                OpSpec(
                    output_specs=output_spec,
                    input_specs=(target_spec,),
                    redistribute_cost=[generate_redistribute_costs(input_strategy, target_spec)],
                )
            )
        return out

    def rule(self, op_schema: OpSchema) -> object:
        """The op's DimMap rule: cute_shard's builder, or torch's where ours cannot decide."""
        args, kwargs = op_schema.args_schema, op_schema.kwargs_schema
        builder = BUILDERS.get(self.op.local_op)
        if builder is not None:
            try:
                return builder(*args, **kwargs)
            except UndecidableRule:
                # A SymInt comparison that only a guard could settle. torch's builder may
                # guard (backed sizes); the engine reads its DimSpecs directly.
                pass
        return self.op.torch_dim_map(*args, **kwargs)


def _allowed_partials(placements: Sequence[Placement]) -> tuple[Placement, ...]:
    return tuple(
        Replicate() if isinstance(p, Partial) and p.reduce_op not in _COMPLEX_PARTIALS else p
        for p in placements
    )


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
# Finding torch's view ops


def torch_view_ops() -> tuple[ViewOp, ...]:
    """Every view-op overload torch registers in ``_view_ops``, read from its registry.

    While installed, the registry holds ours, so this returns the ops found at install time.
    """
    if _saved is not None:
        return _saved.ops
    return _find_view_ops()


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
        ops.append(
            ViewOp(overload, by_dim_map[id(dim_map)], dim_map, bool(closure.get("strict_view")))
        )
    for overload, info in propagator.op_single_dim_strategy_funcs.items():
        if getattr(info.func, "__module__", None) != _view_ops.__name__:
            continue
        local = by_name.get(overload.overloadpacket.__name__)
        if local is not None:
            ops.append(ViewOp(overload, local, _view_ops.dim_maps[local], False))
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

# Below this key the dispatch continues exactly as the key's fallback would continue it.
_AFTER_SNAPSHOT = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.PythonTLSSnapshot)


@dataclass(frozen=True, slots=True)
class MayCopy:
    """The kernel ``install()`` registers for a reshape-family overload at PythonTLSSnapshot.

    Each of these ops is CompositeImplicitAutograd and ends in a strict view of the global
    shape ``out_shape(input shape, *args)``. For a DTensor input the kernel first moves the
    mesh dims that view cannot keep (``redistribute_for_view``); then, for every input, the
    call goes on down the dispatcher as the key's fallback would send it. For example, on an
    8-mesh, ``x.reshape(1536)`` of a (6, 256) ``[Shard(0)]`` DTensor all-gathers ``x`` and
    returns a ``[Replicate()]`` view, where the strict view alone would raise.

    Every reshape of a DTensor in a training step passes through here, so the common case (a
    seen spec and shape that moves nothing) is one dict lookup on top of the dispatcher's
    round trip through Python.
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
                x = redistribute_for_view(x, out_shape)
        return self._redispatch(keyset & _AFTER_SNAPSHOT, x, *args, **kwargs)


def redistribute_for_view(x: DTensor, out_shape: Sequence[Any]) -> DTensor:
    """``x`` with the mesh dims moved that a view to ``out_shape`` cannot keep (the engine's
    non-strict input target): after it the view needs no communication. ``x`` itself if
    nothing moves, or if the engine rejects the shapes (an illegal ``out_shape``: the view
    then raises the error it raises without this step)."""
    spec = x._spec
    target = _move_to(spec, out_shape if type(out_shape) is tuple else tuple(out_shape))
    return x if target is None else x.redistribute(spec.mesh, target)


# (input spec, output shape) -> the input target, or None when nothing moves. The spec holds
# the mesh, the placements and the global shape, so this is a pure function of the key. A
# reshape that moves nothing is the common case, and the engine's answer would otherwise be
# most of the kernel's cost. Bounded: emptied when full (and by clear_dtensor_caches()).
_TARGETS_LIMIT = 4096
_targets: dict[tuple[DTensorSpec, tuple[Any, ...]], tuple[Placement, ...] | None] = {}


def _move_to(spec: DTensorSpec, out_shape: tuple[Any, ...]) -> tuple[Placement, ...] | None:
    key = (spec, out_shape)
    try:
        return _targets[key]
    except KeyError:
        pass
    except TypeError:  # SymInt sizes are not hashable: no cache
        return _input_target(spec, out_shape)
    target = _input_target(spec, out_shape)
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


def _view_rule(shape: tuple[Any, ...], out_shape: tuple[Any, ...]) -> object:
    try:
        return rules.view_groups(shape, out_shape)
    except UndecidableRule:  # a SymInt comparison only a guard could settle: torch's builder
        return _view_ops.view_groups(shape, out_shape)


def _reshaped(shape: tuple[Any, ...], new_shape: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(new_shape)


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


def _dim(dim: int, ndim: int) -> int | None:
    return dim % ndim if -ndim <= dim < ndim else None


def may_copy_kernels() -> tuple[MayCopy, ...]:
    """The kernels ``install()`` registers. ``reshape_as`` calls ``reshape`` through the
    dispatcher, so the reshape kernel covers it; the other ops call torch's reshape function
    directly, so each needs its own."""
    aten = torch.ops.aten
    return (
        MayCopy(aten.reshape.default, _reshaped),
        MayCopy(aten.flatten.using_ints, _flattened),
        MayCopy(aten.unflatten.int, _unflattened),
        MayCopy(aten.ravel.default, _raveled),
    )


# --------------------------------------------------------------------------------------------
# install / uninstall


@dataclass(frozen=True, slots=True)
class _Saved:
    """What ``install()`` replaced, per overload (None: there was no entry)."""

    ops: tuple[ViewOp, ...]
    composite: tuple[ViewOp, ...]
    decomposed: tuple[OpOverload, ...]
    strategy_funcs: dict[OpOverload, Callable[..., Any] | None]
    single_dim_funcs: dict[OpOverload, Any]
    # Holds the MayCopy kernels (None: not registered); destroying it deregisters them.
    kernels: torch.library.Library | None


# The propagator's registry is process-wide, so this is too. The lock makes install and
# uninstall atomic against each other.
_saved: _Saved | None = None
_lock = threading.Lock()


def is_installed() -> bool:
    """True while cute_shard propagates DTensor's view ops."""
    return _saved is not None


def install(*, reshape_may_copy: bool = True) -> None:
    """Make DTensor propagate every view op with cute_shard. Idempotent.

    ``reshape_may_copy`` (default True) registers the ``MayCopy`` kernels: ``dt.reshape``,
    ``flatten``, ``unflatten`` and ``ravel`` then redistribute what must move and succeed.
    Each call of those ops on a DTensor pays one round trip through Python for it (about 4 µs
    on a DTensor cache hit of about 20 µs). With False they stay what torch makes them outside
    inference mode, a strict ``view`` (one that needs communication raises), at torch's own
    cost. Installing again with the other value switches."""
    global _saved
    with _lock:
        if _saved is not None:
            if (_saved.kernels is not None) != reshape_may_copy:
                if _saved.kernels is None:
                    _saved = replace(_saved, kernels=_may_copy_library())
                else:
                    _saved.kernels._destroy()
                    _saved = replace(_saved, kernels=None)
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
            kernels=_may_copy_library() if reshape_may_copy else None,
        )
        for v in ops + composite:
            # A single-mesh-dim strategy takes precedence over op_strategy_funcs: drop it.
            propagator.op_single_dim_strategy_funcs.pop(v.overload, None)
            propagator.op_strategy_funcs[v.overload] = ViewStrategy(v)
        for op in decomposed:
            propagator.op_strategy_funcs[op] = Decompose(op)
        _saved = saved
        clear_dtensor_caches()


def _may_copy_library() -> torch.library.Library:
    kernels = torch.library.Library("aten", "IMPL")
    for kernel in may_copy_kernels():
        kernels.impl(kernel.overload, kernel, "PythonTLSSnapshot", with_keyset=True)
    return kernels


def uninstall() -> None:
    """Give DTensor back torch's own view-op strategies (the same objects). Idempotent."""
    global _saved
    with _lock:
        if _saved is None:
            return
        propagator = DTensor._op_dispatcher.sharding_propagator
        _restore(propagator.op_strategy_funcs, _saved.strategy_funcs)
        _restore(propagator.op_single_dim_strategy_funcs, _saved.single_dim_funcs)
        if _saved.kernels is not None:
            _saved.kernels._destroy()
        _saved = None
        clear_dtensor_caches()


def _restore(registry: dict[OpOverload, Any], saved: dict[OpOverload, Any]) -> None:
    for overload, original in saved.items():
        if original is None:
            registry.pop(overload, None)
        else:
            registry[overload] = original


@contextmanager
def enabled(*, reshape_may_copy: bool = True) -> Iterator[None]:
    """``with cute_shard.enabled(): ...`` installs for the block (``reshape_may_copy`` as in
    :func:`install`), then restores the state before it (reentrant: an inner block leaves an
    outer one installed, with its own ``reshape_may_copy``)."""
    was_installed = is_installed()
    had_kernels = was_installed and _saved is not None and _saved.kernels is not None
    install(reshape_may_copy=reshape_may_copy)
    try:
        yield
    finally:
        if not was_installed:
            uninstall()
        else:
            install(reshape_may_copy=had_kernels)


def clear_dtensor_caches() -> None:
    """Empty DTensor's sharding-propagation caches: the Python LRU cache and the C++
    fast-path cache (the latter is per thread; this clears the calling thread's), and the
    MayCopy kernels' cache of input targets."""
    propagator = DTensor._op_dispatcher.sharding_propagator
    propagator.propagate_op_sharding.cache.cache_clear()
    torch._C._clear_DTensor_sharding_propagator_cache()
    _targets.clear()

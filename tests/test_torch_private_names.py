"""torch's private DTensor names cute_shard reads, on the installed release.

cute_shard supports torch 2.13, 2.14 and 2.15. Every private name it reads is checked here to
exist with the parameters cute_shard passes, so a release that renames or reshapes one fails
here, naming it, instead of deep inside a DTensor program. Across 2.13.0, 2.14.1 and 2.15.0
these are the same except where ``cute_shard._compat`` reads them (the tensor collectives'
``*_single`` names, LocalTensorMode's reading of a group) and where the integration reads
torch's registry (2.14 registers ``t()`` with a single-mesh-dim strategy, 2.13 with a plain
one: ``integration._find_view_ops``).
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

from cute_shard import _compat

# module -> {name: the parameters cute_shard passes by name or position (None: not a function)}
USED: dict[str, dict[str, tuple[str, ...] | None]] = {
    "torch.distributed.tensor._redistribute": {
        "redistribute_local_tensor": (
            "local_tensor",
            "current_spec",
            "target_spec",
            "async_op",
            "use_graph_based_transform",
            "is_explicit",
        ),
        "_gen_transform_infos_non_cached": ("src_spec", "dst_spec", "use_graph_based_transform"),
    },
    "torch.distributed.tensor._collective_utils": {
        "redistribute_cost": ("current_spec", "target_spec"),
        "MeshTopoInfo": None,
    },
    "torch.distributed.tensor._ops.utils": {
        "redistribute_cost": ("current_spec", "target_spec"),
        "generate_redistribute_costs": ("src_strategy", "dst_spec"),
    },
    "torch.distributed.tensor._utils": {"redistribute_cost": ("current_spec", "target_spec")},
    "torch.distributed.tensor._dispatch": {"redistribute_local_tensor": None},
    "torch.distributed.tensor._api": {"redistribute_local_tensor": None},
    "torch.distributed.tensor._ops._view_ops": {
        "propagate_shape_and_sharding": (
            "input_src_placements",
            "global_input_shape",
            "rule",
            "mesh_sizes",
            "strict_view",
        ),
        "view_groups": ("from_size", "to_size"),
        "dim_maps": None,
    },
    "torch.fx.experimental.symbolic_shapes": {
        "has_guarding_hint": ("a",),
        "optimization_hint": ("a",),
    },
    "torch.distributed._local_tensor": {
        "maybe_run_for_local_tensor": ("func",),
        "local_tensor_mode": (),
        "LocalTensorMode": None,
    },
    "torch.distributed._functional_collectives": {
        "_are_we_tracing": (),
        "all_to_all_single": ("self", "output_split_sizes", "input_split_sizes", "group"),
        "all_reduce": ("self", "reduceOp", "group"),
        "wait_tensor": ("tensor",),
    },
    "torch.distributed.tensor._dtensor_spec": {"DTensorSpec": None, "TensorMeta": None},
    "torch.distributed.tensor._sharding_prop": {"ShardingPropagator": None, "LocalLRUCache": None},
    "torch.distributed.tensor._op_schema": {
        "OpSchema": None,
        "OpSpec": None,
        "OpStrategy": None,
        "OutputSharding": None,
    },
}

CASES = [(m, n, p) for m, names in USED.items() for n, p in names.items()]


@pytest.mark.parametrize(("module", "name", "params"), CASES, ids=[f"{c[0]}.{c[1]}" for c in CASES])
def test_private_name_is_there(module: str, name: str, params: tuple[str, ...] | None) -> None:
    found = getattr(importlib.import_module(module), name, None)
    assert found is not None, f"torch {torch.__version__} has no {module}.{name}"
    if params is not None:
        have = list(inspect.signature(found).parameters)
        assert have[: len(params)] == list(params), f"{module}.{name}{have}"


def test_the_compat_collectives_are_the_installed_releases() -> None:
    """The gather and reduce-scatter cute_shard runs take (tensor, op?, dim, group)."""
    for fn, params in (
        (_compat.all_gather, ["self", "gather_dim", "group"]),
        (_compat.reduce_scatter, ["self", "reduceOp", "scatter_dim", "group"]),
    ):
        assert list(inspect.signature(fn).parameters)[: len(params)] == params


def test_the_registry_cute_shard_installs_into() -> None:
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor.placement_types import _StridedShard

    propagator = DTensor._op_dispatcher.sharding_propagator
    for registry in ("op_strategy_funcs", "op_single_dim_strategy_funcs", "op_to_rules"):
        assert isinstance(getattr(propagator, registry), dict), registry
    assert {
        "shard_order",
        "use_strided_shard_as_shard_order",
    } <= DTensorSpec.__dataclass_fields__.keys()
    params = list(inspect.signature(_StridedShard.local_shard_size_and_offset).parameters)
    assert params[:4] == ["self", "curr_local_size", "num_chunks", "rank"]
    # install() rebuilds what AOT tracing flattens: (placements, tensor meta, shard order,
    # requires_grad), with these parameters
    params = list(inspect.signature(DTensor.__tensor_unflatten__).parameters)
    assert params == ["inner_tensors", "flatten_spec", "outer_size", "outer_stride"]
    from torch.distributed.tensor.placement_types import _StridedShardOffsetMode

    assert {"FIRST", "NONE"} <= _StridedShardOffsetMode.__members__.keys()

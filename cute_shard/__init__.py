"""cute_shard: propagate PyTorch DTensor sharding through view ops with CuTe layout algebra.

Layers, each importing only the ones before it:

- ``cute_shard.layout``: a pure-Python CuTe layout algebra (standard library only).
- ``cute_shard.rules``: DimMap rules describing how each view op maps input dims to output dims.
- the propagation engine (placements <-> sharded layout, ``compose_view``, rule-tracing fallback).
- the DTensor integration and the ``cute-shard`` command line.

"""

__version__ = "0.1.0"

# The engine imports torch; keep ``import cute_shard.layout`` / ``cute_shard.rules`` torch-free
# by resolving these names on first use.
_ENGINE_NAMES = {
    "propagate_shape_and_sharding",
    "RedistributionRequired",
    "Blocked",
    "cache_clear",
    "placements_to_layout",
    "compose_view",
}

# The DTensor integration (``cute_shard/integration.py``), resolved lazily for the same reason.
_INTEGRATION_NAMES = {"install", "uninstall", "enabled"}

__all__ = sorted(_ENGINE_NAMES | _INTEGRATION_NAMES)


def __getattr__(name: str) -> object:
    if name in _ENGINE_NAMES:
        from . import engine as module
    elif name in _INTEGRATION_NAMES:
        from . import integration as module  # type: ignore[no-redef]
    else:
        raise AttributeError(f"module 'cute_shard' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value  # later lookups are plain attribute reads (the hot path)
    return value

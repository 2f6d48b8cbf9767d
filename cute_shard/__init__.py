"""cute_shard: propagate PyTorch DTensor sharding through view ops with CuTe layout algebra.

Public API (each name is imported on first use, so ``import cute_shard`` stays cheap and
torch-free until one that needs torch is touched):

- ``decide_view(placements, global_shape, rule, mesh_shape)``: the view decision, a
  ``ViewDecision`` (the input target, the output placements, and one ``Blocked`` with its
  reason per mesh dim that moves); it never raises for a view that must move.
- ``propagate_shape_and_sharding(placements, global_shape, rule, mesh_shape, strict_view)``:
  the same decision as a drop-in for torch's view propagator; ``RedistributionRequired`` is
  what a strict view raises, with one ``Blocked`` per mesh dim that would have to move;
  ``cache_clear()``.
- ``placements_to_layout``, ``compose_view``: a sharding as a CuTe layout, and its layout
  after a view.
- ``install()``, ``uninstall()``, ``enabled()``: make DTensor propagate view ops with
  cute_shard (``enabled`` is a context manager).
- ``explain(dtensor, op, *args)``: what ``dtensor.<op>(*args)`` does to the sharding and why;
  prints as ``cute-shard explain`` does for the same case (``.to_json()`` for ``--json``).
- ``visualize(dtensor)``: print which rank holds which block of a DTensor.
- ``trace()``: ``with cute_shard.trace() as log: model(x)`` records every view op DTensor
  propagates in the block (with ``install()``): placements before and after, what moved and
  why, cache hit or miss, the program's line; ``print(log)`` shows a table.
- Modules: ``layout`` (the CuTe layout algebra), ``rules`` (what each view op does to dims),
  ``engine``, ``oracle`` (an exact rank simulator), ``integration``, ``notation``; each is an
  attribute after ``import cute_shard`` alone (``cute_shard.rules.view_groups(...)``).

Example (``x`` a DTensor of global shape (8, 16, 32) on a (2, 4) mesh, ``[Shard(0), Shard(1)]``)::

    import cute_shard
    cute_shard.rules.view_groups((8, 16, 32), (128, 32))   # the rule: (flat(d0,d1), d2)
    cute_shard.install()                                    # DTensor views go through cute_shard
    print(cute_shard.explain(x, "view", 128, 32))           # output [S0, SS0:4], no communication
    cute_shard.visualize(x)                                 # which rank holds which block
    with cute_shard.trace() as log:                         # which view ops ran, and their cost
        model(x)
    print(log)

Layers, each importing only the ones before it: ``cute_shard.layout`` (standard library only)
-> ``cute_shard.rules`` -> the propagation engine -> the DTensor integration, the explainers
(``explanation``, ``ownership``) and the ``cute-shard`` command line.

"""

import importlib as _importlib
import typing as _typing

__version__ = "0.1.0"

if _typing.TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and editors
    from . import engine as engine
    from . import integration as integration
    from . import layout as layout
    from . import notation as notation
    from . import oracle as oracle
    from . import rules as rules
    from .engine import (
        Blocked,
        RedistributionRequired,
        ViewDecision,
        cache_clear,
        compose_view,
        decide_view,
        placements_to_layout,
        propagate_shape_and_sharding,
    )
    from .explanation import explain_dtensor as explain
    from .integration import enabled, install, uninstall
    from .ownership import visualize
    from .tracing import trace

# The engine imports torch; keep ``import cute_shard.layout`` / ``cute_shard.rules`` torch-free
# by resolving these names on first use. Each name maps to (module, attribute in it).
_LAZY: dict[str, tuple[str, str]] = {
    **{
        name: ("engine", name)
        for name in (
            "decide_view",
            "ViewDecision",
            "propagate_shape_and_sharding",
            "RedistributionRequired",
            "Blocked",
            "cache_clear",
            "placements_to_layout",
            "compose_view",
        )
    },
    **{name: ("integration", name) for name in ("install", "uninstall", "enabled")},
    "explain": ("explanation", "explain_dtensor"),
    "visualize": ("ownership", "visualize"),
    "trace": ("tracing", "trace"),
}

# Subpackages and modules reachable as attributes after ``import cute_shard`` alone.
_SUBMODULES = ("layout", "rules", "engine", "oracle", "integration", "notation")

__all__ = [
    "Blocked",
    "RedistributionRequired",
    "ViewDecision",
    "cache_clear",
    "compose_view",
    "decide_view",
    "enabled",
    "explain",
    "install",
    "placements_to_layout",
    "propagate_shape_and_sharding",
    "trace",
    "uninstall",
    "visualize",
]


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        return _importlib.import_module(f".{name}", __name__)  # the import binds the attribute
    if name not in _LAZY:
        raise AttributeError(f"module 'cute_shard' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(_importlib.import_module(f".{module}", __name__), attr)
    globals()[name] = value  # later lookups are plain attribute reads (the hot path)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})

"""cute_shard: propagate PyTorch DTensor sharding through view ops with CuTe layout algebra.

Layers, each importing only the ones before it:

- ``cute_shard.layout``: a pure-Python CuTe layout algebra (standard library only).
- ``cute_shard.rules``: DimMap rules describing how each view op maps input dims to output dims.
- the propagation engine (placements <-> sharded layout, ``compose_view``, rule-tracing fallback).
- the DTensor integration and the ``cute-shard`` command line.
"""

__version__ = "0.1.0"

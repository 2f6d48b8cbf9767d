"""A pure-Python CuTe layout algebra (standard library only).

A **layout** ``shape:stride`` is a function from coordinates to integers: the coordinate
``c`` (an IntTuple congruent with ``shape``) maps to ``sum(c_i * stride_i)`` over the leaves.
This package follows NVIDIA CuTe's semantics (as in CUTLASS and the CuTe DSL) exactly:

- **Coordinate order is colexicographic**: a flat index ``i`` becomes a coordinate with the
  *first* mode varying fastest (``idx2crd``). Layout evaluation, ``size``/``cosize``,
  composition and the inverses all use this order.
- Past its size a layout extends along its last leaf (CuTe does not reduce the last coordinate
  modulo its size); composition relies on this.
- Every operation keeps CuTe's name and argument order and raises ``ValueError`` where CuTe's
  divisibility conditions fail, naming the condition. Each docstring states Pre/Post
  predicates that the tests check over every coordinate.

A row-major tensor of shape ``(d0, ..., dn)`` is the layout ``(d0,...,dn):(d1*...*dn,...,1)``
evaluated at its natural coordinate ``(i0, ..., in)``: the *value* is the row-major element
index, while the layout's own flat index stays colexicographic. Code that speaks of tensor
elements (the sharding engine) always passes coordinates, never flat indices.

Worked example::

    >>> from cute_shard.layout import Layout, logical_divide
    >>> L = Layout((8, 4), (4, 1))        # an 8x4 row-major tensor
    >>> str(logical_divide(L, Layout(2, 1)))
    '(2,(4,4)):(4,(8,1))'
"""

from .algebra import (
    Tiler,
    coalesce,
    complement,
    composition,
    left_inverse,
    logical_divide,
    logical_product,
    right_inverse,
    zipped_divide,
)
from .inttuple import (
    IntTuple,
    ceil_div,
    compact_col_major,
    compact_row_major,
    congruent,
    crd2idx,
    depth,
    flatten,
    idx2crd,
    prefix_product,
    product,
    rank,
    shape_div,
    suffix_product,
    unflatten,
)
from .layout import Layout, concat, make_layout

__all__ = [
    "IntTuple",
    "Layout",
    "Tiler",
    "cache_clear",
    "ceil_div",
    "coalesce",
    "compact_col_major",
    "compact_row_major",
    "complement",
    "composition",
    "concat",
    "congruent",
    "crd2idx",
    "depth",
    "flatten",
    "idx2crd",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "make_layout",
    "prefix_product",
    "product",
    "rank",
    "right_inverse",
    "shape_div",
    "suffix_product",
    "unflatten",
    "zipped_divide",
]


def cache_clear() -> None:
    """Empty every cache of the algebra (benchmarks and tests need cold calls)."""
    from . import algebra

    algebra._compose.cache_clear()
    algebra._divide.cache_clear()

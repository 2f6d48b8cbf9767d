"""DimMap rules: how each output dim of a view op derives from the input dims.

A *rule* is a tuple with one :class:`DimSpec` per output dim, in the same
vocabulary torch's DTensor uses for view ops
(``torch.distributed.tensor._ops._view_ops``), but frozen, hashable and
canonical.  Printed notation (``str(spec)`` / :func:`format_rule`, read back by
:func:`parse_rule`):

=================  ====================================================
``d0``             input dim 0 unchanged (``InputDim(0)``)
``1``              a new size-1 dim (``Singleton()``)
``flat(d0,d1)``    input dims 0 and 1 merged, row-major (``Flatten``)
``split(x, (4,8), 1)``  piece 1 of ``x`` viewed as shape (4, 8) (``Split``)
``bcast(x, 8)``    size-1 ``x`` broadcast to 8 (``Broadcast``)
``new(4)``         a new size-4 dim unrelated to the input (``NewDim``)
``repeat(x, 3)``   ``x`` tiled 3 times (``Repeat``)
=================  ====================================================

Worked example: ``x.view(8, 4, 6)`` for ``x`` of shape ``(2, 16, 6)``::

    >>> from cute_shard.rules import view_groups, format_rule
    >>> format_rule(view_groups((2, 16, 6), (8, 4, 6)))
    '(split(flat(d0,d1), (8,4), 0), split(flat(d0,d1), (8,4), 1), d2)'

Neither 2 nor 16 equals 8, so dims 0 and 1 form one group (2*16 == 8*4): the
group is flattened and re-split as (8, 4).  Dim 2 is forwarded.

Builders (one per op family; ``shape`` = input shape, ``ndim`` = input rank)::

    view_groups(from_shape, to_shape)       view, reshape, _unsafe_view, view_copy
    flatten(ndim, start_dim=0, end_dim=-1)  torch.flatten (torch's dim_flatten)
    ravel(ndim)                             torch.ravel
    unflatten(shape, dim, sizes)            Tensor.unflatten (a view_groups)
    squeeze(shape, dim=None)                squeeze / squeeze.dim / squeeze.dims
    unsqueeze(ndim, dim)
    expand(input_shape, shape)              expand, expand_copy
    broadcast_to(input_shape, shape)
    permute(ndim, dims)
    transpose(ndim, dim0, dim1)
    t(ndim)
    movedim(ndim, source, destination)      movedim.int / movedim.intlist
    repeat(ndim, sizes)
    tile(ndim, dims)
    atleast_1d(ndim), atleast_2d(ndim), atleast_3d(ndim)
    view_as_real(shape), view_as_complex(shape)

Vocabulary helpers: the :class:`DimSpec` classes and their canonicalising
``new`` classmethods, :func:`format_rule`, :func:`parse_rule`,
:func:`parse_spec`, :func:`canonicalize`, :func:`map_sizes`.  Conversion to
and from torch's classes lives in :mod:`cute_shard.rules.torch_compat` (the
only module here that imports torch).  :func:`cache_clear` empties the
builders' bounded ``lru_cache``\\ s.

SymInt sizes: builders never guard.  Every size comparison is decided by the
sizes' monomial codes or with ``statically_known_true`` (both polarities); if
neither settles it they raise :class:`UndecidableRule` (not a ``ValueError``),
telling the engine to use its fallback.  A rule that *is* returned holds for
every admissible value of the symbols, in particular the hints.
``view_groups(..., sizes=...)`` takes the :class:`SizeComparator` that makes its
decisions (:class:`IntSizes`, :class:`CodedSizes`, :class:`AskedSizes`); by
default the first that fits.

Agreement with torch: for legal arguments every builder's rule equals torch's
after ``to_torch``, except where torch's builder is wrong or crashes:

* ``view_groups`` to a 0-d shape (``()``) -- torch raises IndexError; ours ``()``.
* ``view_groups`` with size-0 dims -- torch can raise ZeroDivisionError
  (``(0,3)->(3,0)``, ``(0,2)->(0,-1)``) or loop forever (``(0,)->(0,5)``,
  ``(2,0,3)->(0,)``); ours returns a rule (the dims equal at both ends move
  whole, the rest is one group holding a size-0 dim on each side) or a clean
  ValueError for an ambiguous -1.
* ``view_as_real`` of a 0-d tensor -- torch IndexError; ours ``(new(2),)``.
* ``view_as_complex`` of a ``(2,)`` tensor -- torch's ``dim_flatten(1, -1)``
  gives ``(d0,)`` for a 0-d output; ours ``()``.
* ``squeeze`` -- torch's ``dim_squeeze`` also drops size-0 dims, which
  ``torch.squeeze`` keeps; ours keeps them.
* ``flatten`` with a negative ``start_dim`` -- torch's ``dim_flatten`` does not
  normalise it and returns garbage (``InputDim(-2)``); ours normalises.
* 0-d inputs to ``transpose``/``t``/``movedim`` -- torch asserts or raises
  from ``max()``; ours returns ``()``.

Torch silently accepts some illegal arguments that ours rejects with
``ValueError``: negative sizes other than -1 in ``view``, negative repeat
counts, duplicate or out-of-range ``permute`` dims, out-of-range
``unsqueeze`` dims, ``flatten`` with ``start_dim > end_dim``.  Where torch's
builder raises AssertionError/IndexError/RuntimeError on bad arguments, ours
raises ``ValueError``.
"""

from ._sym import (
    LIMIT,
    AskedSizes,
    CodedSizes,
    Codes,
    CodesUndecided,
    IntSizes,
    Size,
    SizeComparator,
    UndecidableRule,
)
from .builders import (
    atleast_1d,
    atleast_2d,
    atleast_3d,
    broadcast_to,
    cache_clear,
    expand,
    flatten,
    movedim,
    permute,
    ravel,
    repeat,
    squeeze,
    t,
    tile,
    transpose,
    unflatten,
    unsqueeze,
    view_as_complex,
    view_as_real,
    view_groups,
)
from .ops import OP_RULES, shape_arg
from .specs import (
    Broadcast,
    ComplexRule,
    DimSpec,
    Flatten,
    InputDim,
    NewDim,
    Repeat,
    Rule,
    Singleton,
    Split,
    ViewRule,
    canonicalize,
    format_rule,
    map_sizes,
    parse_rule,
    parse_spec,
)

__all__ = [
    "LIMIT",
    "OP_RULES",
    "AskedSizes",
    "Broadcast",
    "CodedSizes",
    "Codes",
    "CodesUndecided",
    "ComplexRule",
    "DimSpec",
    "Flatten",
    "InputDim",
    "IntSizes",
    "NewDim",
    "Repeat",
    "Rule",
    "Singleton",
    "Size",
    "SizeComparator",
    "Split",
    "UndecidableRule",
    "ViewRule",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_to",
    "cache_clear",
    "canonicalize",
    "expand",
    "flatten",
    "format_rule",
    "map_sizes",
    "movedim",
    "parse_rule",
    "parse_spec",
    "permute",
    "ravel",
    "repeat",
    "shape_arg",
    "squeeze",
    "t",
    "tile",
    "transpose",
    "unflatten",
    "unsqueeze",
    "view_as_complex",
    "view_as_real",
    "view_groups",
]

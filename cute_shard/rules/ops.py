"""The op table: which builder gives each view op's rule, from what.

``OP_RULES[op](shape, *args, **kwargs)`` is the rule of ``torch.<op>(x, *args, **kwargs)``
(or ``x.<op>(*args, **kwargs)``) for an ``x`` of global ``shape``: ``args`` are the op's
arguments after the tensor, in torch's order and with torch's defaults. The builders want the
input's rank where the sizes do not matter (``permute(ndim, dims)``) and its shape where they
do (``view_groups(from_shape, to_shape)``); the table supplies which, so a caller only names
the op. The DTensor integration looks its ops up here (it maps each torch function to its
name) and so does the explainer (its CLI op names are these names).

Worked example: ``x.transpose(0, 2)`` and ``x.view(6, 4)`` for ``x`` of shape ``(2, 3, 4)``::

    >>> from cute_shard.rules import OP_RULES, format_rule
    >>> format_rule(OP_RULES["transpose"]((2, 3, 4), 0, 2))   # transpose(3, 0, 2)
    '(d2, d1, d0)'
    >>> format_rule(OP_RULES["view"]((2, 3, 4), 6, 4))        # view_groups((2,3,4), (6,4))
    '(flat(d0,d1), d2)'
    >>> OP_RULES["view"]((2, 3, 4), (6, 4)) == OP_RULES["view"]((2, 3, 4), 6, 4)
    True

``view``, ``expand`` and ``repeat`` take their sizes as torch's Tensor methods do, unpacked
(``x.view(6, 4)``) or as one sequence (``x.view((6, 4))``, as aten passes them):
:func:`shape_arg` reads either. ``expand``'s ``implicit`` flag (aten's) does not change the
rule. ``flatten`` is ``torch.flatten``'s own rule (``flat(...)`` of the dims it merges); a
caller that wants the ``view`` it decomposes to builds that from its output shape. Bad
arguments raise the builders' ValueError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from .builders import (
    atleast_1d,
    atleast_2d,
    atleast_3d,
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
from .specs import Rule

__all__ = ["OP_RULES", "shape_arg"]


def shape_arg(sizes: tuple[Any, ...]) -> Any:
    """A shape passed as torch's Tensor methods take one: ``(6, 4)`` from ``x.view(6, 4)``,
    or the one sequence of ``x.view((6, 4))`` (how aten passes it)."""
    return sizes[0] if len(sizes) == 1 and isinstance(sizes[0], Sequence) else sizes


# Op name -> its rule from (the input's shape, the op's arguments as torch takes them).
OP_RULES: Mapping[str, Callable[..., Rule]] = MappingProxyType(
    {
        "view": lambda shape, *size: view_groups(shape, shape_arg(size)),
        "reshape": lambda shape, new_shape: view_groups(shape, new_shape),
        "flatten": lambda shape, start_dim=0, end_dim=-1: flatten(len(shape), start_dim, end_dim),
        "unflatten": lambda shape, dim, sizes: unflatten(shape, dim, sizes),
        "ravel": lambda shape: ravel(len(shape)),
        "permute": lambda shape, dims: permute(len(shape), dims),
        "transpose": lambda shape, dim0, dim1: transpose(len(shape), dim0, dim1),
        "t": lambda shape: t(len(shape)),
        "movedim": lambda shape, source, destination: movedim(len(shape), source, destination),
        "squeeze": lambda shape, dim=None: squeeze(shape, dim),
        "unsqueeze": lambda shape, dim: unsqueeze(len(shape), dim),
        "expand": lambda shape, *size, implicit=False: expand(shape, shape_arg(size)),
        "repeat": lambda shape, *sizes: repeat(len(shape), shape_arg(sizes)),
        "tile": lambda shape, dims: tile(len(shape), dims),
        "atleast_1d": lambda shape: atleast_1d(len(shape)),
        "atleast_2d": lambda shape: atleast_2d(len(shape)),
        "atleast_3d": lambda shape: atleast_3d(len(shape)),
        "view_as_real": lambda shape: view_as_real(shape),
        "view_as_complex": lambda shape: view_as_complex(shape),
    }
)

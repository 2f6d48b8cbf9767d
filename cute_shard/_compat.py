"""torch's private DTensor names that differ between the releases cute_shard supports, read in
one place.

Each name here is looked up once, at import, by what it does; callers use these and never
the private modules' spellings, so a release that renames one changes only this file. Every
other private name cute_shard reads is the same in torch 2.13.0, 2.14.1 and 2.15.0
(``tests/test_torch_private_names.py`` checks each, with the parameters cute_shard passes, on
the installed release); the one registration that differs, ``t()``'s strategy, is read from
torch's registry where the integration installs its own (``integration._find_view_ops``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed._functional_collectives as funcol

__all__ = ["all_gather", "local_tensor_group", "reduce_scatter"]

# torch 2.13 renamed the tensor collectives ``*_tensor`` -> ``*_single`` (the old names warn).
all_gather: Callable[..., Any] = (
    getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
)
reduce_scatter: Callable[..., Any] = (
    getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
)


def local_tensor_group(group: Any) -> tuple[list[int], list[int]]:
    """How LocalTensorMode runs a process group (or its name): the group's ranks relative to
    its first, and the first rank of each copy of it over the world (a mesh dim's group runs
    once per coordinate of the other mesh dims). torch 2.13 and 2.14 also return the first
    rank; 2.15 does not."""
    from torch.distributed._local_tensor._c10d import (
        _prepare_collective_groups,
        _resolve_pg_or_name,
    )

    members, offsets, *_ = _prepare_collective_groups(_resolve_pg_or_name(group))
    return list(members), list(offsets)

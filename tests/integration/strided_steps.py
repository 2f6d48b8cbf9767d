"""Steps whose views keep sharding as ``_StridedShard``, for the torch.compile tests.

Used on a fake process group (``test_compile.py``) and on gloo ranks (``multirank_cases.py``),
on a 2-D mesh (dp, tp):

- ``strided_step``: x of shape (2*dp, 4*tp, 16) with ``[Shard(0), Shard(1)]``. A token flatten
  of the batch and the sequence (sharded after it) gives ``[Shard(0), _StridedShard(0, 2)]``;
  pointwise ops and a matmul keep it; ``unflatten`` gives the input's sharding back; a head
  split (``view`` + ``transpose``) and merge (``transpose`` + ``reshape``), then a redistribute
  to Replicate.
- ``attention_step``: the attention block of ``bench/attention_bench.py`` (column-sharded
  q/k/v projections over tp, heads split with unflatten/view and transpose, matmul attention,
  heads merged with flatten, a row-sharded output projection) with one sequence per dp rank
  and 2*tp heads, ending in a redistribute to Replicate.

With ``gather=False`` both stop before the redistribute (a fake process group's collectives
move no data, so only that part's values can be compared there). ``inputs(mesh, name)``
builds each step's DTensors from seeded global tensors (every rank computes the same global
tensor and keeps its shard, so no communication is needed).
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard

from cute_shard import oracle

HIDDEN_PER_HEAD = 4


def strided_step(x: torch.Tensor, w: torch.Tensor, gather: bool = True) -> torch.Tensor:
    b, s, h = x.shape
    tokens = x.view(b * s, h)  # [S(0), _S(0, 2)]
    tokens = (tokens.sin() * 2 + 1) @ w
    back = tokens.unflatten(0, (b, s))  # [S(0), S(1)] again
    heads = back.view(b, s, 4, -1).transpose(1, 2)  # head split
    merged = (heads * 0.5).transpose(1, 2).reshape(b, s, -1)  # head merge
    return _replicated(merged) if gather else merged


def attention_step(
    x: torch.Tensor,
    wq: torch.Tensor,
    wk: torch.Tensor,
    wv: torch.Tensor,
    wo: torch.Tensor,
    gather: bool = True,
) -> torch.Tensor:
    b, s, hidden = x.shape
    heads = hidden // HIDDEN_PER_HEAD
    q = (x @ wq).unflatten(-1, (heads, HIDDEN_PER_HEAD)).transpose(1, 2)
    k = (x @ wk).view(b, s, heads, HIDDEN_PER_HEAD).transpose(1, 2)
    v = (x @ wv).view(b, s, heads, HIDDEN_PER_HEAD).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(HIDDEN_PER_HEAD)
    out = torch.matmul(scores.softmax(dim=-1), v).transpose(1, 2).flatten(2) @ wo
    return _replicated(out) if gather else out


def _replicated(t: torch.Tensor) -> torch.Tensor:
    dt = cast(DTensor, t)
    return dt.redistribute(dt.device_mesh, [Replicate()] * dt.device_mesh.ndim)


STEPS = {"strided": strided_step, "attention": attention_step}


def _dtensor(mesh: DeviceMesh, g: torch.Tensor, placements: tuple[Any, ...]) -> DTensor:
    coord = mesh.get_coordinate()
    local = oracle.local_shard(g, placements, tuple(mesh.shape), coord).contiguous()
    return DTensor.from_local(
        local, mesh, placements, run_check=False, shape=g.shape, stride=g.stride()
    )


def global_inputs(mesh_shape: tuple[int, ...], name: str, seed: int = 0) -> list[torch.Tensor]:
    """The global tensors of ``STEPS[name]``'s arguments on a (dp, tp) mesh."""
    dp, tp = mesh_shape
    gen = torch.Generator().manual_seed(seed)
    if name == "strided":
        return [
            torch.randn(2 * dp, 4 * tp, 16, generator=gen),
            torch.randn(16, 8 * tp, generator=gen) / 4,
        ]
    hidden = 2 * tp * HIDDEN_PER_HEAD
    x = torch.randn(dp, 6, hidden, generator=gen)
    return [x, *(torch.randn(hidden, hidden, generator=gen) / math.sqrt(hidden) for _ in range(4))]


def inputs(mesh: DeviceMesh, name: str, seed: int = 0) -> tuple[DTensor, ...]:
    """The arguments of ``STEPS[name]`` on ``mesh`` (a 2-D (dp, tp) mesh)."""
    tensors = global_inputs(tuple(mesh.shape), name, seed)
    rep = (Replicate(), Replicate())
    if name == "strided":
        placements = [(Shard(0), Shard(1)), rep]
    else:
        column, row = (Replicate(), Shard(1)), (Replicate(), Shard(0))
        placements = [(Shard(0), Replicate()), column, column, column, row]
    return tuple(_dtensor(mesh, t, p) for t, p in zip(tensors, placements, strict=True))

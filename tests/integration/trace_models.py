"""Two small tensor-parallel blocks for the trace tests, on a (dp 2, tp 2) mesh of 4 ranks.

Each runs with plain DTensor ops, so every view op in it is one DTensor propagates (the
Linear layers are matmuls of DTensors; matmul's own folds of 4-D tensors are view ops too).
Both are chosen so that the only collectives are the ones their views need:

- ``mlp``: an odd batch, ``(3, 3, 8)`` as ``[S0, R]`` (2 and 1 sequences on the dp ranks),
  flattened to tokens by ``reshape`` (the uneven flatten cannot stay sharded: mesh dim 0 is
  all-gathered), a column-parallel and a row-parallel Linear, and the tokens unflattened
  again (a Partial, carried free).
- ``attention``: 3 heads of 4 over 2 tp ranks (``q.reshape(b, s, 3, 4)`` of a column-parallel
  projection cuts a head between ranks: each of q, k, v is all-gathered on tp), head
  transposes, ``q @ k.transpose(-2, -1)`` and ``attn @ v`` (matmul folds the heads into its
  batch: expand and view/_unsafe_view), and the head merge.

``run_traced`` runs both on a process group of 4 ranks that is already initialised (gloo or the
fake group) and returns what the tests compare: each record as JSON (without the file
path, which differs between the spawned ranks and the test process) and CommDebugMode's
collective counts.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode

import cute_shard
from cute_shard import integration

B, S, H, FFN = 2, 3, 8, 16
HEADS, HEAD_DIM = 3, 4
ODD_BATCH = 3  # the MLP's: 3 sequences over 2 dp ranks


def make_mesh() -> DeviceMesh:
    return init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))


class Blocks:
    """The weights and inputs, made once, outside any trace (distributing them communicates)."""

    def __init__(self, mesh: DeviceMesh) -> None:
        torch.manual_seed(0)  # the same on every rank: distribute_tensor keeps each rank's part
        width = HEADS * HEAD_DIM

        def weight(shape: tuple[int, int], dim: int) -> DTensor:
            w = torch.randn(shape) / shape[0] ** 0.5
            return distribute_tensor(w, mesh, [Replicate(), Shard(dim)])

        self.w1, self.w2 = weight((H, FFN), 1), weight((FFN, H), 0)  # column-, row-parallel
        self.wq, self.wk, self.wv = (weight((H, width), 1) for _ in range(3))
        self.wo = weight((width, H), 0)
        self.odd = distribute_tensor(torch.randn(ODD_BATCH, S, H), mesh, [Shard(0), Replicate()])
        self.x = distribute_tensor(torch.randn(B, S, H), mesh, [Shard(0), Replicate()])

    def mlp(self) -> DTensor:
        x = self.odd
        tokens = x.reshape(-1, H)  # (9, 8): 2 and 1 sequences per dp rank do not flatten evenly
        hidden = torch.nn.functional.gelu(tokens @ self.w1)
        return (hidden @ self.w2).view(x.shape)  # the row-parallel sum is pending: Partial

    def attention(self) -> DTensor:
        x = self.x
        b, s, _ = x.shape

        def heads(w: DTensor) -> DTensor:  # 3 heads over 2 tp ranks: a head would be cut
            return (x @ w).reshape(b, s, HEADS, HEAD_DIM).transpose(1, 2)

        q, k, v = heads(self.wq), heads(self.wk), heads(self.wv)
        scores = (q @ k.transpose(-2, -1)) / HEAD_DIM**0.5
        out = scores.softmax(dim=-1) @ v
        return out.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM) @ self.wo

    def both(self) -> list[DTensor]:
        return [self.mlp(), self.attention()]


def run_traced() -> dict[str, Any]:
    """Both blocks under a trace and CommDebugMode, again under a trace (DTensor's cache
    answers now), then without either: records, counts, and whether the outputs are equal."""
    blocks = Blocks(make_mesh())
    integration.clear_dtensor_caches()  # every first view op is a miss, in any process
    with cute_shard.trace() as log, CommDebugMode() as comm:
        outs = blocks.both()
    with cute_shard.trace() as again:
        blocks.both()
    plain = blocks.both()
    same = all(
        a.placements == b.placements and torch.equal(a.to_local(), b.to_local())
        for a, b in zip(outs, plain, strict=True)
    )
    return {
        "records": [_portable(r.to_json()) for r in log.records],
        "again": [_portable(r.to_json()) for r in again.records],
        "table": str(log),
        "collectives": {str(k): v for k, v in comm.get_comm_counts().items()},
        "counted": log.collectives(),
        "same_outputs": same,
    }


def _portable(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its file path (the line and function stay)."""
    source = record["source"]
    if source is not None:
        record["source"] = {"line": source["line"], "function": source["function"]}
    return record


def run_on_ranks() -> list[dict[str, Any]]:
    """``run_traced`` and ``trace_redistribute_cases.run_small`` (with its data checks) on
    every rank of the (gloo) group; each rank's results, on rank 0."""
    import torch.distributed as dist

    from .trace_redistribute_cases import run_small

    mine = {"blocks": run_traced(), "redistributions": run_small(check_data=True)}
    every: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
    dist.gather_object(mine, every if dist.get_rank() == 0 else None, dst=0)
    return every

"""torch's tensor-parallel styles on a small block, with cute_shard installed: the program a
TP + SP user writes, checked against the same block in one process.

The block is a transformer MLP as sequence + tensor parallelism shards it on a 1-D mesh:
``LayerNorm`` under ``SequenceParallel`` (activations sharded on the sequence dim),
``up = Linear(16, 32)`` under ``ColwiseParallel`` (input gathered from the sequence shards),
``down = Linear(32, 16)`` under ``RowwiseParallel`` with its output reduce-scattered back to
the sequence shards. Those styles redistribute with ``async_op=True`` (all-gather of the
sequence dim, reduce-scatter of the pending sum, and their backwards), so every one of those
redistributions is cute_shard's, some of them left in flight until read.

``check(mesh)``: every rank's output and every parameter's gradient equal the single-process
block's (float64, the same weights and input), and the redistributions cute_shard ran. It runs
wherever the caller's ranks are: every rank simulated under ``LocalTensorMode``, or one rank
each on real gloo ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

BATCH, SEQ, HIDDEN = 2, 8, 16


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 2 * HIDDEN)
        self.down = nn.Linear(2 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(self.norm(x))))


PLAN = {
    "norm": SequenceParallel(),
    "up": ColwiseParallel(input_layouts=Shard(1)),
    "down": RowwiseParallel(output_layouts=Shard(1)),
}


class Count:
    """An observer: how many redistributions cute_shard ran."""

    def __init__(self) -> None:
        self.runs = 0

    def redistributed(self, current: Any, target: Any, plan: Any, explicit: bool) -> None:
        self.runs += 1


def reference() -> tuple[Block, torch.Tensor, torch.Tensor]:
    """The block in one process: its weights, the input, the output (backward run)."""
    torch.manual_seed(0)
    block = Block().double()
    x = torch.randn(BATCH, SEQ, HIDDEN, dtype=torch.float64)
    out = block(x)
    out.sum().backward()
    return block, x, out.detach()


def check(mesh: DeviceMesh) -> dict[str, Any]:
    """The parallel block on ``mesh`` against ``reference()``: a list of what differs (empty:
    nothing) and how many redistributions cute_shard ran."""
    from cute_shard.redistribute import dtensor as rd

    ref, x, want = reference()
    block = Block().double()
    block.load_state_dict(ref.state_dict())
    parallelize_module(block, mesh, PLAN)
    count = Count()
    previous = rd.set_observer(count)
    try:
        xs = DTensor.from_local(x, mesh, [Replicate()], run_check=False).redistribute(
            mesh, [Shard(1)]
        )
        out = block(xs)  # (the row-wise style hands back the local tensor)
        full = DTensor.from_local(out, mesh, [Shard(1)], run_check=False).full_tensor()
        full.sum().backward()
    finally:
        rd.set_observer(previous)
    problems = []
    if not _close(full, want):
        problems.append(f"output {full} expected {want}")
    for (name, p), (_, q) in zip(block.named_parameters(), ref.named_parameters(), strict=True):
        grad = p.grad.full_tensor() if p.grad is not None else None
        if grad is None or not _close(grad, q.grad):
            problems.append(f"gradient of {name}: {grad} expected {q.grad}")
    return {"problems": problems, "runs": count.runs}


def _close(got: torch.Tensor, want: Any) -> bool:
    """Whether every rank's ``got`` (one tensor per simulated rank under ``LocalTensorMode``,
    this rank's otherwise) is ``want`` up to float64 rounding (the reduction order differs)."""
    ranks = getattr(got, "_local_tensors", None)
    return all(torch.allclose(t, want) for t in (ranks.values() if ranks else [got]))

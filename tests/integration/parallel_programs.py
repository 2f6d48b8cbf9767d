"""Whole parallel programs as DTensor users write them, with cute_shard installed, checked
against the same model in one process (float64, the same weights and input).

- ``check_styles(mesh)``: torch's tensor-parallel styles on a transformer MLP block, sequence
  + tensor parallel on a 1-D mesh: ``LayerNorm`` under ``SequenceParallel`` (activations
  sharded on the sequence dim), ``up`` under ``ColwiseParallel`` (input gathered from the
  sequence shards), ``down`` under ``RowwiseParallel`` with its output reduce-scattered back
  to the sequence shards. The styles redistribute with ``async_op=True`` (the sequence
  all-gather, the reduce-scatter of the pending sum, their backwards), so those
  redistributions are cute_shard's, some left in flight until read. Every rank's output and
  every parameter's gradient equal the one-process block's. Runs wherever the caller's ranks
  are: all simulated under ``LocalTensorMode``, or one each on real gloo ranks.
- ``check_fsdp2_tp(mesh)``: FSDP2 over TP on a mesh with dims named dp and tp (real ranks
  only: FSDP2 runs its own collectives): ``fully_shard`` over dp of an MLP whose
  ``up``/``down`` are column/row parallel over tp, so ``up``'s parameters are
  ``[_StridedShard(0, 2), Shard(0)]``. Forward and backward on each dp rank's half of the
  batch, then ``full_tensor()`` of every parameter and gradient (cute_shard's
  redistributions of the ``_StridedShard`` shardings): the parameters are the one-process
  model's, the gradients its gradients averaged over dp.

Each returns ``{"problems": [...], "runs": n}``: what differs (empty: nothing) and how many
redistributions cute_shard ran.
"""

from __future__ import annotations

from collections.abc import Callable
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
    def __init__(self, norm: bool = True) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN) if norm else nn.Identity()
        self.up = nn.Linear(HIDDEN, 2 * HIDDEN)
        self.down = nn.Linear(2 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(self.norm(x))))


class Count:
    """An observer: how many redistributions cute_shard ran."""

    def __init__(self) -> None:
        self.runs = 0

    def redistributed(self, current: Any, target: Any, plan: Any, explicit: bool) -> None:
        self.runs += 1


def _reference(shape: tuple[int, ...], norm: bool) -> tuple[Block, torch.Tensor]:
    """The block in one process, its backward of ``out.sum()`` run, and its input."""
    torch.manual_seed(0)
    block = Block(norm).double()
    x = torch.randn(*shape, dtype=torch.float64)
    block(x).sum().backward()
    return block, x


def _counted(run: Callable[[], list[str]]) -> dict[str, Any]:
    from cute_shard.redistribute import dtensor as rd

    count = Count()
    previous = rd.set_observer(count)
    try:
        problems = run()
    finally:
        rd.set_observer(previous)
    return {"problems": problems, "runs": count.runs}


def check_styles(mesh: DeviceMesh) -> dict[str, Any]:
    """The sequence + tensor parallel block on the 1-D ``mesh`` against one process."""
    ref, x = _reference((BATCH, SEQ, HIDDEN), norm=True)
    block = Block().double()
    block.load_state_dict(ref.state_dict())
    parallelize_module(
        block,
        mesh,
        {
            "norm": SequenceParallel(),
            "up": ColwiseParallel(input_layouts=Shard(1)),
            "down": RowwiseParallel(output_layouts=Shard(1)),
        },
    )

    def run() -> list[str]:
        xs = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
        out = block(xs.redistribute(mesh, [Shard(1)]))  # (the row-wise style hands back local)
        full = DTensor.from_local(out, mesh, [Shard(1)], run_check=False).full_tensor()
        full.sum().backward()
        want = ref(x).detach()
        problems = [] if _close(full, want) else [f"output {full} expected {want}"]
        return problems + _gradients(block, ref, 1)

    return _counted(run)


def check_fsdp2_tp(mesh: DeviceMesh) -> dict[str, Any]:
    """FSDP2 over "dp" of the tensor-parallel MLP over "tp" (``mesh``'s dim names)."""
    from torch.distributed.fsdp import fully_shard

    dp = mesh.size(0)
    ref, x = _reference((dp * 4, HIDDEN), norm=False)
    model = Block(norm=False).double()
    model.load_state_dict(ref.state_dict())
    parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    strided = str(model.up.weight.placements)  # type: ignore[union-attr]

    def run() -> list[str]:
        coord = mesh.get_coordinate()
        assert coord is not None
        rows = x[coord[0] * 4 : (coord[0] + 1) * 4]
        model(rows).sum().backward()
        problems = [] if "_StridedShard" in strided else [f"up.weight placed {strided}"]
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
            if not _close(p.full_tensor(), q.detach()):
                problems.append(f"parameter {name}")
        return problems + _gradients(model, ref, dp)

    return _counted(run)


def _gradients(model: nn.Module, ref: nn.Module, averaged: int) -> list[str]:
    """What differs between each parameter's full gradient times ``averaged`` and ``ref``'s."""
    problems = []
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        grad = p.grad.full_tensor() if p.grad is not None else None
        if grad is None or q.grad is None or not _close(grad * averaged, q.grad):
            problems.append(f"gradient of {name}: {grad} expected {q.grad} / {averaged}")
    return problems


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether every rank's ``got`` (one tensor per simulated rank under ``LocalTensorMode``,
    this rank's otherwise) is ``want`` up to float64 rounding (the reduction order differs)."""
    ranks = getattr(got, "_local_tensors", None)
    return all(torch.allclose(t, want) for t in (ranks.values() if ranks else [got]))

"""The programs of ``test_trace_redistribute.py``: what ``cute_shard.trace()`` records of the
redistributions a DTensor program runs, on whatever process group is initialised (the fake
one in the test process, or real gloo ranks through ``multirank.run_world``).

- ``run_small`` (4 ranks, mesh (dp 2, tp 2)): a view that keeps a ``_StridedShard``, the
  program's ``redistribute`` of it, its ``full_tensor()``, a matmul whose strategy
  all-gathers its weight, and the backward of all of them, under a trace and
  ``CommDebugMode``; then the same without either. Returns the records (as JSON, without file
  paths), the table, CommDebugMode's counts, ``log.collectives()``, whether the untraced run
  gave the same local tensors, and (``check_data``: real ranks) each result against the
  single-process answer: every local tensor equals the oracle's shard of it.
- ``run_attention`` (8 ranks, mesh (dp 2, tp 4)): the attention block of
  ``strided_steps.attention_step`` (two sequences per dp rank, so matmul's folds keep
  ``_StridedShard``), forward and backward, for a few sequence lengths, each under a trace
  and ``CommDebugMode`` with the gradients gathered by ``full_tensor()``: the output and
  every gradient against plain torch on the full tensors, CommDebugMode's counts against the
  trace's, and (the first length) the same step untraced for the bitwise comparison.

``run_attention_on_ranks`` runs it on every rank and hands every rank's result to rank 0
(``trace_models.run_on_ranks`` runs ``run_small`` in the spawn of ``test_trace.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode

import cute_shard
from cute_shard import integration, oracle

from .strided_steps import HIDDEN_PER_HEAD, _dtensor, attention_step

SMALL_MESH = (2, 2)
ATTENTION_MESH = (2, 4)
LENGTHS = (5, 8, 11)  # sequence lengths of the attention block: a new one each step
BATCH = 4  # two sequences per dp rank


def _mesh(shape: tuple[int, int]) -> DeviceMesh:
    return init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))


def _counts(comm: CommDebugMode) -> dict[str, int]:
    """CommDebugMode's counts by the functional collective's name (``all_gather_into_tensor``)."""
    return {str(k).split(".")[-1]: v for k, v in comm.get_comm_counts().items()}


def _portable(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its file path (the line and function stay)."""
    source = record["source"]
    if source is not None:
        record["source"] = {"line": source["line"], "function": source["function"]}
    return record


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _locals(ts: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.to_local() if isinstance(t, DTensor) else t for t in ts]


def _is_shard(t: DTensor, full: torch.Tensor) -> bool:
    """Whether ``t``'s local tensor is this rank's shard of ``full`` under its placements
    (none of them Partial)."""
    mesh = t.device_mesh
    want = oracle.local_shard(full, t.placements, tuple(mesh.shape), mesh.get_coordinate())
    return torch.equal(t.to_local(), want)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-5))


# --------------------------------------------------------------------------------------------
# Single redistributions on (dp 2, tp 2)


def small_inputs(mesh: DeviceMesh) -> tuple[list[torch.Tensor], list[DTensor]]:
    """The global tensors and the DTensors of ``small_program``: x (4, 8, 6) as
    ``[Shard(0), Shard(1)]`` and a weight (6, 4) column-sharded over tp."""
    gen = torch.Generator().manual_seed(0)
    full = [torch.randn(4, 8, 6, generator=gen), torch.randn(6, 4, generator=gen)]
    placements = [(Shard(0), Shard(1)), (Replicate(), Shard(1))]
    ds = [_dtensor(mesh, t, p).requires_grad_() for t, p in zip(full, placements, strict=True)]
    return full, ds


def small_program(mesh: DeviceMesh, x: DTensor, w: DTensor) -> list[torch.Tensor]:
    """Every kind of redistribution the trace names, forward and backward."""
    y = x.view(32, 6)  # [S0, SS0:2]: a token flatten keeps both mesh dims, free
    z = y.redistribute(mesh, [Shard(0), Shard(1)])  # the program's: tp's sub-mode moves
    full = y.full_tensor()  # gathered on both mesh dims
    o = y @ w  # mm keeps y's _StridedShard rows and all-gathers w's columns
    ((z * z).sum() + o.sum()).backward()
    assert x.grad is not None and w.grad is not None
    return [z, full, o, x.grad, w.grad]


def _small_expected(full: list[torch.Tensor]) -> list[torch.Tensor]:
    """``small_program`` in plain torch on the full tensors."""
    x, w = (t.detach().clone().requires_grad_() for t in full)
    y = x.view(32, 6)
    o = y @ w
    ((y * y).sum() + o.sum()).backward()
    assert x.grad is not None and w.grad is not None
    return [y.detach(), y.detach(), o.detach(), x.grad, w.grad]


def run_small(check_data: bool = False) -> dict[str, Any]:
    mesh = _mesh(SMALL_MESH)
    integration.clear_dtensor_caches()  # every view op a miss, in any process
    full, ds = small_inputs(mesh)
    with cute_shard.trace() as log, CommDebugMode() as comm:
        traced = small_program(mesh, *ds)
    _, plain_ds = small_inputs(mesh)
    plain = small_program(mesh, *plain_ds)
    result: dict[str, Any] = {
        "records": [_portable(r.to_json()) for r in log.records],
        "table": str(log),
        "collectives": _counts(comm),
        "counted": log.collectives(),
        "same": _same(_locals(traced), _locals(plain)),
    }
    if check_data:
        result["data"] = _small_data(traced, _small_expected(full))
    return result


def _small_data(got: list[torch.Tensor], want: list[torch.Tensor]) -> dict[str, bool]:
    z, full, o, x_grad, w_grad = got
    assert isinstance(z, DTensor) and isinstance(o, DTensor)
    assert isinstance(x_grad, DTensor) and isinstance(w_grad, DTensor)
    return {
        "redistribute": _is_shard(z, want[0]),  # exact: data only moves
        "full_tensor": torch.equal(full, want[1]),
        "mm": _close(o.full_tensor(), want[2]),
        "x.grad": _close(x_grad.full_tensor(), want[3]),
        "w.grad": _close(w_grad.full_tensor(), want[4]),
    }


# --------------------------------------------------------------------------------------------
# The attention block on (dp 2, tp 4)


def attention_globals(seq: int) -> list[torch.Tensor]:
    """x (BATCH, seq, hidden), wq, wk, wv, wo and the output's cotangent, seeded by ``seq``."""
    hidden = 2 * ATTENTION_MESH[1] * HIDDEN_PER_HEAD
    gen = torch.Generator().manual_seed(seq)
    x = torch.randn(BATCH, seq, hidden, generator=gen)
    ws = [torch.randn(hidden, hidden, generator=gen) / math.sqrt(hidden) for _ in range(4)]
    return [x, *ws, torch.randn(BATCH, seq, hidden, generator=gen)]


def attention_dtensors(mesh: DeviceMesh, full: list[torch.Tensor]) -> list[DTensor]:
    column, row, rep = (Replicate(), Shard(1)), (Replicate(), Shard(0)), (Replicate(),) * 2
    placements = [(Shard(0), Replicate()), column, column, column, row, rep]
    ds = [_dtensor(mesh, t, p) for t, p in zip(full, placements, strict=True)]
    return [d.requires_grad_() for d in ds[:5]] + [ds[5]]


def attention_train_step(args: list[DTensor]) -> list[torch.Tensor]:
    """Forward (ending in the block's redistribute to Replicate), backward against the
    cotangent, every gradient gathered: the output and the gradients, full."""
    *params, cotangent = args
    out = attention_step(*params)
    (out * cotangent).sum().backward()
    grads = [p.grad for p in params]
    assert all(isinstance(g, DTensor) for g in grads)
    return [out.to_local(), *(g.full_tensor() for g in grads if isinstance(g, DTensor))]


def attention_reference(full: list[torch.Tensor]) -> list[torch.Tensor]:
    """The same step in plain torch on one process."""
    *params, cotangent = (t.clone() for t in full)
    for p in params:
        p.requires_grad_()
    out = attention_step(*params, gather=False)
    (out * cotangent).sum().backward()
    return [out.detach(), *(p.grad for p in params if p.grad is not None)]


def run_attention() -> dict[str, Any]:
    mesh = _mesh(ATTENTION_MESH)
    steps, same = [], False
    for seq in LENGTHS:
        full = attention_globals(seq)
        with cute_shard.trace() as log, CommDebugMode() as comm:
            traced = attention_train_step(attention_dtensors(mesh, full))
        if seq == LENGTHS[0]:  # the same step untraced (DTensor's caches answer it now)
            same = _same(traced, attention_train_step(attention_dtensors(mesh, full)))
        want = attention_reference(full)
        steps.append(
            {
                "seq": seq,
                "close": [_close(a, b) for a, b in zip(traced, want, strict=True)],
                "collectives": _counts(comm),
                "counted": log.collectives(),
                "records": [_portable(r.to_json()) for r in log.redistributions],
                "views": len(log.views),
            }
        )
    return {"steps": steps, "same_untraced": same}


def run_attention_on_ranks() -> list[dict[str, Any]]:
    return _gathered(run_attention)


def _gathered(run: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    """``run()`` on every rank of the (gloo) group; each rank's result, on rank 0."""
    mine = run()
    every: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
    dist.gather_object(mine, every if dist.get_rank() == 0 else None, dst=0)
    return every

"""A tensor-parallel attention block on an 8-rank fake process group, with and without install().

The block is the attention half of a transformer layer as tensor parallelism shards it, on a
2-D mesh (2, 4): mesh dim 0 is data parallel (the batch is sharded over it), mesh dim 1 is
tensor parallel. The q/k/v projections are column-sharded over TP, so each rank holds whole
heads; the heads are split with ``unflatten``/``view`` and moved in front with
``transpose``, attention is ``softmax(q k^T / sqrt(d)) v`` (torch's matmul folds the 4-D
operands into a batched matmul with views), the heads are merged back with ``transpose`` and
``flatten``, and the row-sharded output projection leaves a pending sum over TP::

    x (B, S, H)            [Shard(0), Replicate()]
    q, k, v = x @ W         [Shard(0), Shard(2)]     W: [Replicate(), Shard(1)]
    heads (B, h, S, d)      [Shard(0), Shard(1)]     unflatten / view, transpose
    attention               [Shard(0), Shard(1)]     matmul, softmax, matmul
    merged (B, S, H)        [Shard(0), Shard(2)]     transpose, flatten / reshape
    out = merged @ Wo       [Shard(0), Partial()]    Wo: [Replicate(), Shard(0)]

A fake process group moves no data and the local tensors are small, so a step's time is
DTensor's own work: dispatch, sharding propagation and the local ops. Two cells, each a
forward step timed side by side with and without ``cute_shard.install()`` in interleaved
rounds (x = torch ms / cute_shard ms):

- **variable length**: every step has a new sequence length, so every op of the step misses
  DTensor's sharding caches (as in serving or packed training with varying lengths);
- **fixed length**: the same sequence length every step, so every op hits them.

``profile()`` prints where a variable-length step's time goes: the sharding propagation of
each op on DTensor's cache misses (with install() the view ops' is cute_shard's), and the
rest (DTensor's dispatch and the local ops).
"""

from __future__ import annotations

import gc
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

import cute_shard

from . import dtensor_bench
from .harness import interleave, speedup, table

HIDDEN, HEADS = 128, 8
HEAD_DIM = HIDDEN // HEADS
MESH = (2, 4)  # (data parallel, tensor parallel)
FIXED_SEQ = 64
# The global batch of each configuration: sequences per data-parallel rank times MESH[0].
CONFIGS = {"2 sequences per DP rank": 4, "1 sequence per DP rank": 2}
CELLS = ("variable length", "fixed length")


@dataclass(frozen=True)
class AttentionRow:
    config: str  # a name in CONFIGS
    cell: str  # a name in CELLS
    steps: int
    cute_shard_ms: float
    torch_ms: float | None  # None: torch's propagator raised (``torch_error``)
    speedup: float | None
    torch_error: str | None = None


def _weight(mesh: DeviceMesh, rows: int, cols: int, shard_dim: int, seed: int) -> DTensor:
    g = torch.Generator().manual_seed(seed)
    full = torch.randn(rows, cols, generator=g) / math.sqrt(rows)
    coordinate = mesh.get_coordinate()
    tp = 0 if coordinate is None else coordinate[1]
    local = full.chunk(mesh.shape[1], dim=shard_dim)[tp]
    return DTensor.from_local(
        local.contiguous(),
        mesh,
        [Replicate(), Shard(shard_dim)],
        run_check=False,
        shape=full.shape,
        stride=full.stride(),
    )


class Block:
    """The attention block's weights on ``mesh`` and its forward step, for a global ``batch``
    sharded over mesh dim 0."""

    def __init__(self, mesh: DeviceMesh, batch: int = 4) -> None:
        self.mesh = mesh
        self.batch = batch
        self.wq, self.wk, self.wv = (_weight(mesh, HIDDEN, HIDDEN, 1, s) for s in (1, 2, 3))
        self.wo = _weight(mesh, HIDDEN, HIDDEN, 0, 4)

    def input(self, seq: int) -> DTensor:
        """x of shape (batch, seq, HIDDEN), the batch sharded over data parallel."""
        g = torch.Generator().manual_seed(seq)
        local = torch.randn(self.batch // self.mesh.shape[0], seq, HIDDEN, generator=g)
        return DTensor.from_local(
            local,
            self.mesh,
            [Shard(0), Replicate()],
            run_check=False,
            shape=torch.Size((self.batch, seq, HIDDEN)),
            stride=(seq * HIDDEN, HIDDEN, 1),
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = (x @ self.wq).unflatten(-1, (HEADS, HEAD_DIM)).transpose(1, 2)
        k = (x @ self.wk).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        v = (x @ self.wv).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(HEAD_DIM)
        heads = torch.matmul(scores.softmax(dim=-1), v)
        merged = heads.transpose(1, 2).flatten(2)
        return merged @ self.wo


# --------------------------------------------------------------------------------------------
# Timing


class Lengths:
    """Sequence lengths never used before in this process: a variable-length step must miss
    every cache keyed by shapes, DTensor's and torch's redistribution planner's included."""

    def __init__(self, first: int = 33) -> None:
        self.next = first

    def take(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out


LENGTHS = Lengths()  # the process's: no two measurements share a length


def _measure(
    block: Block, cell: str, steps: int, lengths: Lengths, installed: bool
) -> Callable[[int], float]:
    """A measure for ``interleave``: mean ms per forward step. cute_shard's and DTensor's
    caches are emptied first (outside the timing); fixed-length steps then run twice untimed,
    so every timed op hits."""

    def measure(round_: int) -> float:
        (cute_shard.install if installed else cute_shard.uninstall)()
        seqs = lengths.take(steps) if cell == "variable length" else [FIXED_SEQ] * steps
        inputs = [block.input(s) for s in seqs]
        dtensor_bench.clear_all()
        if cell == "fixed length":
            block(inputs[0])
            block(inputs[0])
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            for x in inputs:
                block(x)
            t1 = time.perf_counter_ns()
        finally:
            gc.enable()
        return (t1 - t0) / 1e6 / len(inputs)

    return measure


def _raises(block: Block, installed: bool, lengths: Lengths) -> str | None:
    """The first line of what a step raises on this side, or None."""
    (cute_shard.install if installed else cute_shard.uninstall)()
    try:
        block(block.input(lengths.take(1)[0]))
    except Exception as e:  # reported in the table, not raised: torch 2.13 fails some
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def run(rounds: int, steps: int) -> list[AttentionRow]:
    """Time every configuration and cell (``steps`` forward steps per side per round) and
    print the table."""
    reason = dtensor_bench.unavailable()
    if reason:
        print(f"\nattention block: skipped ({reason})")
        return []
    rows: list[AttentionRow] = []
    lengths = LENGTHS
    try:
        with dtensor_bench.fake_world():
            mesh = init_device_mesh("cpu", MESH)
            for config, batch in CONFIGS.items():
                block = Block(mesh, batch)
                ours_error = _raises(block, True, lengths)
                if ours_error:
                    raise RuntimeError(f"attention block, {config}: {ours_error}")
                torch_error = _raises(block, False, lengths)
                for cell in CELLS:
                    sides = {"cute_shard": _measure(block, cell, steps, lengths, True)}
                    if torch_error is None:
                        sides["torch"] = _measure(block, cell, steps, lengths, False)
                    t = interleave(sides, rounds)
                    # (the harness names its medians µs; these measures return ms per step)
                    ours = t["cute_shard"].median_us
                    theirs = t["torch"].median_us if "torch" in t else None
                    rows.append(
                        AttentionRow(
                            config,
                            cell,
                            steps,
                            ours,
                            theirs,
                            None if theirs is None else speedup(theirs, ours),
                            torch_error,
                        )
                    )
                print(f"  attention {config}: done", file=sys.stderr, flush=True)
    finally:
        cute_shard.uninstall()
    print(format_table(rows, rounds))
    return rows


def format_table(rows: Sequence[AttentionRow], rounds: int) -> str:
    body = [
        [
            r.config,
            r.cell,
            r.steps,
            r.cute_shard_ms,
            "raises" if r.torch_ms is None else r.torch_ms,
            "" if r.speedup is None else f"{r.speedup:.2f}x",
        ]
        for r in rows
    ]
    out = [
        f"\nattention block forward, mesh {MESH} (dp, tp), hidden {HIDDEN}, {HEADS} heads, "
        f"8-rank fake process group: median of {rounds} rounds, ms per step "
        "(x = torch ms / cute_shard ms)",
        table(body, ["configuration", "cell", "steps", "cute_shard ms", "torch ms", "x"]),
    ]
    for config in CONFIGS:
        error = next((r.torch_error for r in rows if r.config == config and r.torch_error), None)
        if error:
            out.append(f"  {config}: torch's propagator raises: {error}")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Where the time goes


def profile(config: str, installed: bool = True, steps: int = 10) -> str:
    """Where a variable-length step of ``config`` (a name in CONFIGS) spends its time: the
    sharding propagation of each op (DTensor's cache misses; timed around the propagator's
    entry point, so the view ops' share is cute_shard's fast path with ``installed``), and
    the rest (DTensor's dispatch, the reshape-family methods, the local ops)."""
    lengths = LENGTHS
    spent: dict[str, float] = {}
    calls: dict[str, int] = {}
    with dtensor_bench.fake_world():
        block = Block(init_device_mesh("cpu", MESH), CONFIGS[config])
        (cute_shard.install if installed else cute_shard.uninstall)()
        propagator = DTensor._op_dispatcher.sharding_propagator
        entry = propagator.propagate_op_sharding_non_cached

        def timed(op_schema: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return entry(op_schema)
            finally:
                name = str(op_schema.op)
                spent[name] = spent.get(name, 0.0) + (time.perf_counter_ns() - t0) / 1e6
                calls[name] = calls.get(name, 0) + 1

        try:
            inputs = [block.input(s) for s in lengths.take(steps)]
            dtensor_bench.clear_all()
            propagator.propagate_op_sharding_non_cached = timed
            t0 = time.perf_counter_ns()
            for x in inputs:
                block(x)
            total = (time.perf_counter_ns() - t0) / 1e6
        finally:
            if installed:
                propagator.propagate_op_sharding_non_cached = entry
            else:
                del propagator.propagate_op_sharding_non_cached
            cute_shard.uninstall()
    side = "with install()" if installed else "torch's propagator"
    lines = [f"{config}, variable length, {side}: {total / steps:.2f} ms per step"]
    for name, ms in sorted(spent.items(), key=lambda kv: -kv[1]):
        lines.append(
            f"  {ms / total:6.1%}  {ms / steps:8.2f} ms  {calls[name] // steps:2d} x  "
            f"propagating {name}"
        )
    rest = total - sum(spent.values())
    lines.append(f"  {rest / total:6.1%}  {rest / steps:8.2f} ms        the rest")
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> None:
    if "--profile" in argv:
        for config in CONFIGS:
            print(profile(config, installed=True))
            try:
                print(profile(config, installed=False))
            except RuntimeError as e:
                print(f"{config}, torch's propagator: raises {str(e).splitlines()[0]}")
        return
    run(rounds=5, steps=3)


if __name__ == "__main__":
    main(sys.argv[1:])

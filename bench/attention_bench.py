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
DTensor's own work: dispatch, sharding propagation (with the redistribution pricing op
strategies do) and the local ops. Each cell is a step timed side by side with and without
``cute_shard.install()`` (which installs cute_shard's view propagation and redistribution) in
interleaved rounds (x = torch ms / cute_shard ms):

- **variable length**: every step has a new sequence length, so every op of the step misses
  DTensor's sharding caches and torch's redistribution planner caches (as in serving or
  packed training with varying lengths);
- **fixed length**: the same sequence length every step, so every op hits them.

Both cells run as a forward step and as a **forward and backward** step (the loss
``out.sum()``, gradients for the weights and the input). In the backward, DTensor's ``bmm``
strategies price ``_StridedShard`` inputs (the heads folded into the batch), which is where
torch's graph-based redistribution planner spends seconds per step.

The variable-length cells also run on a mesh of 1,024 ranks, (128, 8) with 256 sequences
(``LARGE_MESH``), where the redistribution planner's cost per rank would show.

``profile()`` prints where a variable-length forward step's time goes: the sharding
propagation of each op on DTensor's cache misses (with install() the view ops' is
cute_shard's), and the rest (DTensor's dispatch and the local ops). ``profile_step()``
cProfiles one variable-length forward and backward step and prints the top functions.
"""

from __future__ import annotations

import cProfile
import gc
import io
import math
import pathlib
import pstats
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
# The same block on a mesh of 1,024 ranks, as a large job lays out data x tensor parallel: the
# variable-length cells only (``run``'s ``large_rounds``), 2 sequences per DP rank.
LARGE_MESH = (128, 8)
LARGE_CONFIG = f"2 sequences per DP rank, mesh {LARGE_MESH}"
CELLS = ("variable length", "fixed length")
PASSES = ("forward", "forward+backward")


@dataclass(frozen=True)
class AttentionRow:
    config: str  # a name in CONFIGS
    cell: str  # a name in CELLS
    steps: int
    cute_shard_ms: float
    torch_ms: float | None  # None: torch's propagator raised (``torch_error``)
    speedup: float | None
    torch_error: str | None = None
    passes: str = "forward"  # a name in PASSES
    rounds: int = 0


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
    sharded over mesh dim 0. With ``grad`` the weights and inputs require gradients and
    ``step`` runs the backward of ``out.sum()`` too."""

    def __init__(self, mesh: DeviceMesh, batch: int = 4, grad: bool = False) -> None:
        self.mesh = mesh
        self.batch = batch
        self.grad = grad
        self.wq, self.wk, self.wv = (_weight(mesh, HIDDEN, HIDDEN, 1, s) for s in (1, 2, 3))
        self.wo = _weight(mesh, HIDDEN, HIDDEN, 0, 4)
        self.weights = (self.wq, self.wk, self.wv, self.wo)
        for w in self.weights:
            w.requires_grad_(grad)

    def input(self, seq: int) -> DTensor:
        """x of shape (batch, seq, HIDDEN), the batch sharded over data parallel."""
        g = torch.Generator().manual_seed(seq)
        local = torch.randn(self.batch // self.mesh.shape[0], seq, HIDDEN, generator=g)
        x = DTensor.from_local(
            local,
            self.mesh,
            [Shard(0), Replicate()],
            run_check=False,
            shape=torch.Size((self.batch, seq, HIDDEN)),
            stride=(seq * HIDDEN, HIDDEN, 1),
        )
        x.requires_grad_(self.grad)
        return x

    def step(self, x: torch.Tensor) -> None:
        """One training step's DTensor work: forward, and with ``grad`` the backward of
        ``out.sum()`` (the weights' gradients dropped first, so none accumulates)."""
        out = self(x)
        if self.grad:
            for w in self.weights:
                w.grad = None
            out.sum().backward()  # type: ignore[no-untyped-call]

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
    """A measure for ``interleave``: mean ms per step (``Block.step``). cute_shard's and
    DTensor's caches are emptied first (outside the timing); fixed-length steps then run
    twice untimed, so every timed op hits."""

    def measure(round_: int) -> float:
        (cute_shard.install if installed else cute_shard.uninstall)()
        seqs = lengths.take(steps) if cell == "variable length" else [FIXED_SEQ] * steps
        inputs = [block.input(s) for s in seqs]
        dtensor_bench.clear_all()
        if cell == "fixed length":
            block.step(inputs[0])
            block.step(inputs[0])
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            for x in inputs:
                block.step(x)
            t1 = time.perf_counter_ns()
        finally:
            gc.enable()
        return (t1 - t0) / 1e6 / len(inputs)

    return measure


def _raises(block: Block, installed: bool, lengths: Lengths) -> str | None:
    """The first line of what a step raises on this side, or None."""
    (cute_shard.install if installed else cute_shard.uninstall)()
    try:
        block.step(block.input(lengths.take(1)[0]))
    except Exception as e:  # reported in the table, not raised: torch 2.13 fails some
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def _cell(
    block: Block,
    config: str,
    cell: str,
    steps: int,
    rounds: int,
    torch_error: str | None,
) -> AttentionRow:
    """One cell timed side by side (torch left out if it raised before); a torch step that
    raises inside the timing is reported and the cell re-timed with cute_shard alone."""
    lengths = LENGTHS
    sides = {"cute_shard": _measure(block, cell, steps, lengths, True)}
    if torch_error is None:
        sides["torch"] = _measure(block, cell, steps, lengths, False)
    try:
        t = interleave(sides, rounds)
    except Exception as e:  # torch's side: reported in the table
        torch_error = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
        t = interleave({"cute_shard": sides["cute_shard"]}, rounds)
    # (the harness names its medians µs; these measures return ms per step)
    ours = t["cute_shard"].median_us
    theirs = t["torch"].median_us if "torch" in t else None
    return AttentionRow(
        config,
        cell,
        steps,
        ours,
        theirs,
        None if theirs is None else speedup(theirs, ours),
        torch_error,
        "forward+backward" if block.grad else "forward",
        rounds,
    )


def run(
    rounds: int,
    steps: int,
    *,
    grad_rounds: int | None = None,
    grad_steps: int = 1,
    grad_configs: Sequence[str] | None = None,
    fixed_rounds: int | None = None,
    large_rounds: int = 0,
) -> list[AttentionRow]:
    """Time every configuration and cell of the forward step (``steps`` steps per side per
    round, ``rounds`` rounds), then the forward and backward step for ``grad_configs`` (the
    first configuration by default; ``grad_steps`` steps, ``grad_rounds`` rounds, as a torch
    step takes seconds there), and print the table. The fixed-length cells, cheap on both
    sides and so the most exposed to a busy machine's noise, run ``fixed_rounds`` rounds
    (default: three times as many, at least 5) of at least 3 steps. ``large_rounds``: that
    many rounds of one variable-length step, forward and forward+backward, on ``LARGE_MESH``
    (none by default: a torch step takes seconds there)."""
    reason = dtensor_bench.unavailable()
    if reason:
        print(f"\nattention block: skipped ({reason})")
        return []
    rows: list[AttentionRow] = []
    grad_configs = list(CONFIGS)[:1] if grad_configs is None else list(grad_configs)
    try:
        with dtensor_bench.fake_world():
            mesh = init_device_mesh("cpu", MESH)
            for config, batch in CONFIGS.items():
                block = Block(mesh, batch)
                ours_error = _raises(block, True, LENGTHS)
                if ours_error:
                    raise RuntimeError(f"attention block, {config}: {ours_error}")
                torch_error = _raises(block, False, LENGTHS)
                for cell in CELLS:
                    n, r = steps, rounds
                    if cell == "fixed length":
                        n, r = max(n, 3), fixed_rounds or max(3 * rounds, 5)
                    rows.append(_cell(block, config, cell, n, r, torch_error))
                print(f"  attention {config}, forward: done", file=sys.stderr, flush=True)
                if config not in grad_configs:
                    continue
                block = Block(mesh, batch, grad=True)
                ours_error = _raises(block, True, LENGTHS)
                if ours_error:
                    raise RuntimeError(f"attention block, {config}, backward: {ours_error}")
                for cell in CELLS:
                    n, r = grad_steps, grad_rounds or rounds
                    if cell == "fixed length":
                        n, r = max(n, 3), fixed_rounds or max(3 * r, 5)
                    rows.append(_cell(block, config, cell, n, r, torch_error))
                print(f"  attention {config}, forward+backward: done", file=sys.stderr, flush=True)
        if large_rounds:
            rows += run_large(large_rounds)
    finally:
        cute_shard.uninstall()
    print(format_table(rows))
    return rows


def run_large(rounds: int) -> list[AttentionRow]:
    """The variable-length cells on ``LARGE_MESH`` (a fake world of its size)."""
    rows = []
    try:
        with dtensor_bench.fake_world(math.prod(LARGE_MESH)):
            mesh = init_device_mesh("cpu", LARGE_MESH)
            for grad in (False, True):
                block = Block(mesh, 2 * LARGE_MESH[0], grad=grad)
                ours_error = _raises(block, True, LENGTHS)
                if ours_error:
                    raise RuntimeError(f"attention block, {LARGE_CONFIG}: {ours_error}")
                torch_error = _raises(block, False, LENGTHS)
                rows.append(_cell(block, LARGE_CONFIG, "variable length", 1, rounds, torch_error))
                step = "forward+backward" if grad else "forward"
                print(f"  attention {LARGE_CONFIG}, {step}: done", file=sys.stderr, flush=True)
    finally:
        cute_shard.uninstall()
    return rows


def format_table(rows: Sequence[AttentionRow], rounds: int | None = None) -> str:
    body = [
        [
            r.config,
            r.passes,
            r.cell,
            r.rounds or rounds or "",
            r.steps,
            r.cute_shard_ms,
            "raises" if r.torch_ms is None else r.torch_ms,
            "" if r.speedup is None else f"{r.speedup:.2f}x",
        ]
        for r in rows
    ]
    out = [
        f"\nattention block, mesh {MESH} (dp, tp) unless the configuration names another, "
        f"hidden {HIDDEN}, {HEADS} heads, a fake process group of the mesh's ranks: median "
        "over interleaved rounds, ms per step "
        "(x = torch ms / cute_shard ms; cute_shard: install(), view propagation and "
        "redistribution)",
        table(
            body,
            ["configuration", "step", "cell", "rounds", "steps", "cute_shard ms", "torch ms", "x"],
        ),
    ]
    for config in (*CONFIGS, LARGE_CONFIG):
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


def profile_step(config: str, installed: bool = True, top: int = 15) -> str:
    """cProfile of one variable-length forward and backward step of ``config`` (after one
    untimed step of another length, so imports and first calls are not in it): the top
    functions by cumulative and by own time. The garbage collector is off during the step,
    as in the timed cells: a full collection of this process's ~350,000 objects takes
    ~150 ms, and the profile would charge it to whichever call allocated last."""
    with dtensor_bench.fake_world():
        block = Block(init_device_mesh("cpu", MESH), CONFIGS[config], grad=True)
        (cute_shard.install if installed else cute_shard.uninstall)()
        try:
            block.step(block.input(LENGTHS.take(1)[0]))
            x = block.input(LENGTHS.take(1)[0])
            profiler = cProfile.Profile()
            gc.collect()
            gc.disable()
            t0 = time.perf_counter()
            profiler.enable()
            block.step(x)
            profiler.disable()
            total = time.perf_counter() - t0
        finally:
            gc.enable()
            cute_shard.uninstall()
    side = "with install()" if installed else "torch alone"
    lines = [
        f"\ncProfile of one variable-length forward+backward step, {config}, {side}: "
        f"{total * 1000:.0f} ms (profiled)"
    ]
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        stats = pstats.Stats(profiler, stream=buf)
        stats.sort_stats(key).print_stats(top)
        text = buf.getvalue()
        body = text[text.index("ncalls") :] if "ncalls" in text else text
        lines.append(f"top {top} by {key}:")
        lines += [_short(line) for line in body.rstrip().splitlines()]
    return "\n".join(lines)


def _short(line: str) -> str:
    """A pstats line with the site-packages and repository prefixes cut from its path."""
    for prefix in (_SITE, _REPO):
        line = line.replace(prefix, "")
    return line


_SITE = str(pathlib.Path(torch.__file__).parent.parent) + "/"
_REPO = str(pathlib.Path(__file__).parent.parent) + "/"


def main(argv: Sequence[str] = ()) -> None:
    if "--profile" in argv:
        for config in CONFIGS:
            print(profile(config, installed=True))
            try:
                print(profile(config, installed=False))
            except RuntimeError as e:
                print(f"{config}, torch's propagator: raises {str(e).splitlines()[0]}")
        return
    if "--profile-step" in argv:
        print(profile_step(next(iter(CONFIGS)), installed=True))
        return
    run(rounds=5, steps=3, grad_rounds=3, large_rounds=3)


if __name__ == "__main__":
    main(sys.argv[1:])

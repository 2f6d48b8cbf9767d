"""Random DTensor programs: what a user runs, a few ops at a time, against one process.

A program is a global tensor on a mesh (1-3 dims, at most 8 ranks) with random placements
(Replicate, Shard, ``_StridedShard``), then 2-6 ops drawn from what models do between
collectives: ``view``/``reshape`` to a random regrouping of the same elements (a ``view`` that
must move is retried as ``reshape``, as a user would), ``transpose``, ``permute``,
``unsqueeze``, an affine map, a ``sum`` over a dim, ``@`` a replicated or sharded weight, and
an explicit ``redistribute`` to random placements; then ``(y * w).sum().backward()``. Values
are small integers in float64, so every result is exact whatever order the ranks add in.

``run_program`` runs it on every rank of a simulated world (``LocalTensorMode``) and says
whether ``full_tensor()`` of the output and of the input's gradient equal the one-process
program's on every rank, or what it raised.

Not drawn: ``@`` of a 1-D tensor. DTensor runs it as ``unsqueeze``, ``mm``, ``squeeze_``, and
its in-place ``squeeze_`` keeps the stale global size-1 dim when the placements do not change
(torch's dispatch returns the DTensor without its new spec), with or without cute_shard: the
program goes on with a global shape its local tensors do not have.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode, rank_map
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import Placement, _StridedShard
from torch.testing._internal.distributed.fake_pg import FakeStore

from bench.mix_bench import regrouping
from cute_shard import oracle

MESHES = ((2,), (3,), (4,), (8,), (2, 2), (2, 3), (2, 4), (4, 2), (2, 2, 2))
SIZES = (1, 2, 3, 4, 4, 6, 8, 8, 12, 16)
MAX_NUMEL = 4096

Op = tuple[Any, ...]


@dataclass(frozen=True)
class Program:
    mesh: tuple[int, ...]
    shape: tuple[int, ...]
    placements: tuple[Placement, ...]
    ops: tuple[Op, ...]
    seed: int

    def __str__(self) -> str:
        return f"seed {self.seed}: {self.shape} on {self.mesh} {list(self.placements)}, {self.ops}"


def _placement(rng: random.Random, ndim: int) -> Placement:
    r, d = rng.random(), rng.randrange(ndim)
    if r < 0.25:
        return Replicate()
    if r < 0.45:
        return _StridedShard(d, split_factor=rng.choice((2, 3, 4)))
    return Shard(d)


def random_program(seed: int) -> Program:
    rng = random.Random(seed)
    while True:
        mesh = rng.choice(MESHES)
        shape = tuple(rng.choice(SIZES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        if math.prod(shape) <= MAX_NUMEL:
            break
    placements = tuple(_placement(rng, len(shape)) for _ in mesh)
    ops: list[Op] = []
    sh = list(shape)
    for _ in range(rng.randint(2, 6)):
        k = rng.random()
        if k < 0.3:
            target = regrouping(rng, tuple(sh))
            ops.append(("view" if rng.random() < 0.5 else "reshape", target))
            sh = list(target)
        elif k < 0.4 and len(sh) >= 2:
            a, b = rng.sample(range(len(sh)), 2)
            ops.append(("transpose", a, b))
            sh[a], sh[b] = sh[b], sh[a]
        elif k < 0.5:
            d = rng.randrange(len(sh) + 1)
            ops.append(("unsqueeze", d))
            sh.insert(d, 1)
        elif k < 0.68 and len(sh) >= 2:
            d, keep = rng.randrange(len(sh)), rng.random() < 0.5
            ops.append(("sum", d, keep))
            if keep:
                sh[d] = 1
            else:
                sh.pop(d)
        elif k < 0.8 and len(sh) >= 2:  # (never a 1-D @: see the module docstring)
            n = rng.choice((2, 3, 4))
            ops.append(("matmul", sh[-1], n, rng.choice(("R", "S0", "S1"))))
            sh[-1] = n
        elif k < 0.9:
            ops.append(("redistribute", tuple(_placement(rng, len(sh)) for _ in mesh)))
        elif len(sh) >= 2:
            perm = list(range(len(sh)))
            rng.shuffle(perm)
            ops.append(("permute", tuple(perm)))
            sh = [sh[i] for i in perm]
        else:
            ops.append(("affine",))
    return Program(mesh, shape, placements, tuple(ops), seed)


def _apply(ops: tuple[Op, ...], x: Any, mesh: DeviceMesh | None) -> Any:
    """The program's ops on ``x`` (a DTensor on ``mesh``, or the global tensor)."""
    y = x
    for op in ops:
        name = op[0]
        if name == "view":
            try:
                y = y.view(op[1])
            except RuntimeError:  # a view that must move: the user reshapes instead
                y = y.reshape(op[1])
        elif name == "reshape":
            y = y.reshape(op[1])
        elif name == "transpose":
            y = y.transpose(op[1], op[2])
        elif name == "permute":
            y = y.permute(op[1])
        elif name == "unsqueeze":
            y = y.unsqueeze(op[1])
        elif name == "affine":
            y = y * 2 - 1
        elif name == "sum":
            y = y.sum(op[1], keepdim=op[2])
        elif name == "matmul":
            k, n, where = op[1:]
            w = torch.arange(k * n, dtype=torch.float64).reshape(k, n) % 5 - 2
            if mesh is not None:
                first = Replicate() if where == "R" else Shard(int(where[1]))
                w = distribute_tensor(
                    w, mesh, [first] + [Replicate()] * (mesh.ndim - 1), src_data_rank=None
                )
            y = y @ w
        elif name == "redistribute" and mesh is not None:
            placements = [p if p.is_replicate() or p.dim < y.dim() else Replicate() for p in op[1]]
            y = y.redistribute(mesh, placements)
    return y


@dataclass(frozen=True)
class Outcome:
    forward: bool = False  # full_tensor() equals the one-process output on every rank
    backward: bool = False  # and the input's gradient
    error: str | None = None

    @property
    def right(self) -> bool:
        return self.error is None and self.forward and self.backward


def run_program(p: Program) -> Outcome:
    """``p`` on every rank of a simulated world of the mesh's size, under whatever DTensor
    propagation is installed."""
    full = ((torch.arange(math.prod(p.shape), dtype=torch.float64) * 7) % 11 - 5).reshape(p.shape)
    plain = full.clone().requires_grad_()
    want = _apply(p.ops, plain, None)
    weights = torch.arange(want.numel(), dtype=torch.float64).reshape(want.shape) % 3 + 1
    (want * weights).sum().backward()
    want_grad: Any = plain.grad
    world = math.prod(p.mesh)
    coords = list(itertools.product(*map(range, p.mesh)))
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        with LocalTensorMode(frozenset(range(world))):
            mesh = init_device_mesh("cpu", p.mesh)
            local = rank_map(
                lambda r: oracle.local_shard(full, p.placements, p.mesh, coords[r]).clone()
            )
            x = DTensor.from_local(
                local, mesh, p.placements, shape=full.shape, stride=full.stride(), run_check=False
            )
            x.requires_grad_()
            y = _apply(p.ops, x, mesh)
            w = distribute_tensor(weights, mesh, [Replicate()] * mesh.ndim, src_data_rank=None)
            (y * w).sum().backward()
            grad_x: Any = x.grad
            out, grad = y.full_tensor(), grad_x.full_tensor()
            return Outcome(
                all(torch.equal(t, want.detach()) for t in out._local_tensors.values()),
                all(torch.equal(t, want_grad) for t in grad._local_tensors.values()),
            )
    except Exception as e:  # what the program raised is the outcome
        return Outcome(error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    finally:
        dist.destroy_process_group()

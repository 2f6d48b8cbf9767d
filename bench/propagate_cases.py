"""Seeded propagation cases for the benchmark: one generator per view-op family.

A :class:`Case` is one call of a view propagator: a rule-builder op and its arguments (the same
for cute_shard's and torch's builder), the global input shape, the mesh and the input
placements. Worked example, a flatten on a 2-D mesh::

    Case(op="view", args=((8, 16, 32), (128, 32)), shape=(8, 16, 32), mesh=(2, 4),
         placements=(Shard(0), Shard(1)))
    # cute_shard: rules.view_groups(...)     torch: _view_ops.view_groups(...)

Each case builds the rule DTensor builds for the op. ``flatten``, ``unflatten`` and
``movedim`` are CompositeImplicitAutograd: outside inference mode they reach DTensor as
``aten.view`` (flatten, unflatten) or ``aten.permute`` (movedim), so their cases are views and
permutes, and both sides build those rules (``view_groups``, the permute rule).

Families (each on 1-D, 2-D and 3-D meshes): ``flatten``, ``unflatten``, ``reshape`` (a view
regrouping the same factors: splits and flattens at once), ``permute`` (with ``transpose`` and
``movedim``), ``squeeze`` (with ``unsqueeze``), ``expand``, ``strided`` (_StridedShard inputs
and several mesh dims on one tensor dim), ``uneven`` (sizes the mesh does not divide) and
``symbolic`` (SymInt sizes). A symbolic family yields :class:`SymCase` templates instead:
SymInts belong to a ``ShapeEnv``, and a cold round needs fresh symbols so that the ShapeEnv's
own caches do not hit, so :func:`materialize` builds them (a ShapeEnv per case) for every
round, outside the timing.

Placements are mostly shards the sizes divide (the common case in training code), with some
Replicate and Partial; the ``strided`` and ``uneven`` families bias towards their own kind.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch._dynamo.source import ConstantSource
from torch.distributed.tensor._ops import _view_ops as V
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import cute_shard.rules as R

__all__ = [
    "BUILDERS",
    "FAMILIES",
    "MESHES",
    "Case",
    "SymCase",
    "make_pool",
    "materialize",
]

Size = Any  # int or torch.SymInt

# Mesh shapes by mesh rank; a pool mixes the shapes of one rank.
MESHES: dict[int, tuple[tuple[int, ...], ...]] = {
    1: ((2,), (4,), (8,), (6,)),
    2: ((2, 4), (4, 2), (2, 2), (2, 3)),
    3: ((2, 2, 2), (2, 2, 4), (2, 4, 2)),
}

# Dim sizes with many divisors (what models use) and factors for regrouping views.
SIZES = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 4096)
FACTORS = (2, 3, 4, 8, 16)
ODD = (3, 5, 7, 9, 11, 13, 15, 17, 33, 63)


@dataclass(frozen=True)
class Case:
    op: str  # a key of BUILDERS
    args: tuple[Any, ...]  # the builder's arguments, the same for both sides
    shape: tuple[Size, ...]
    mesh: tuple[int, ...]
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class SymCase:
    """A case whose dims are products of *atoms*, some of them SymInts (made by materialize).

    ``runs`` groups adjacent atoms into the input dims. ``view`` regroups the same atoms by
    ``op_args[0]`` (so every size comparison is statically decidable, as in real programs
    that reshape (B*S, H) back to (B, S, H)); the other ops take ``op_args`` after the
    shape or ndim.
    """

    hints: tuple[int, ...]
    symbolic: tuple[bool, ...]
    runs: tuple[int, ...]
    op: str
    op_args: tuple[Any, ...]
    mesh: tuple[int, ...]
    placements: tuple[Placement, ...]


# --------------------------------------------------------------------------------------------
# Builders: (cute_shard's, torch's), called with Case.args


def _torch_permute(ndim: int, dims: tuple[int, ...]) -> V.DimMap:
    # The body of torch's dim_maps[torch.permute], which takes a tensor rather than ndim.
    return tuple(V.InputDim(i) for i in V.normalize_dims(dims, ndim))


BUILDERS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "view": (R.view_groups, V.view_groups),
    "permute": (R.permute, _torch_permute),
    "transpose": (R.transpose, V.dim_transpose),
    "squeeze": (R.squeeze, V.dim_squeeze),
    "unsqueeze": (R.unsqueeze, V.dim_unsqueeze),
    "expand": (R.expand, V.expand),
}


# --------------------------------------------------------------------------------------------
# Placements


def _placements(
    rng: random.Random,
    shape: Sequence[int],
    mesh: tuple[int, ...],
    prefer: Sequence[int],
    *,
    even: bool = True,
    strided: float = 0.0,
) -> tuple[Placement, ...]:
    """One placement per mesh dim, mostly shards of a dim in ``prefer``.

    ``local`` follows DTensor's left-to-right sharding, so a later mesh dim on the same tensor
    dim divides what the earlier ones left. With ``even`` a shard is only placed where the
    mesh size divides the local size (a _StridedShard: where ``sf * M`` does). ``strided`` is
    the probability of a _StridedShard where one fits.
    """
    local = list(shape)
    out: list[Placement] = []
    for size in mesh:
        r = rng.random()
        if r < 0.1:
            out.append(Replicate())
            continue
        if r < 0.15:
            out.append(Partial())
            continue
        dims = list(prefer) if prefer and rng.random() < 0.85 else list(range(len(shape)))
        fits = [d for d in dims if local[d] >= size and (not even or local[d] % size == 0)]
        if not fits:
            out.append(Replicate())
            continue
        d = rng.choice(fits)
        factors = [f for f in range(2, local[d] // size + 1) if local[d] % (f * size) == 0]
        if factors and rng.random() < strided:
            out.append(_StridedShard(d, split_factor=rng.choice(factors)))
        else:
            out.append(Shard(d))
        local[d] //= size
    return tuple(out)


def _runs(rng: random.Random, n: int) -> tuple[int, ...]:
    """Lengths of a random partition of ``n`` items into adjacent runs."""
    runs: list[int] = []
    for _ in range(n):
        if runs and rng.random() < 0.5:
            runs[-1] += 1
        else:
            runs.append(1)
    return tuple(runs)


def _group(atoms: Sequence[Size], runs: Sequence[int]) -> tuple[Size, ...]:
    out, i = [], 0
    for r in runs:
        out.append(math.prod(atoms[i : i + r]))
        i += r
    return tuple(out)


def _shape(rng: random.Random, lo: int, hi: int) -> tuple[int, ...]:
    return tuple(rng.choice(SIZES) for _ in range(rng.randint(lo, hi)))


# --------------------------------------------------------------------------------------------
# Families: gen(rng, mesh) -> Case | SymCase


def _flatten(rng: random.Random, mesh: tuple[int, ...]) -> Case:
    shape = _shape(rng, 2, 4)
    n = len(shape)
    start = rng.randrange(n - 1)
    end = rng.randrange(start + 1, n)
    pl = _placements(rng, shape, mesh, range(start, end + 1))
    flat = (*shape[:start], math.prod(shape[start : end + 1]), *shape[end + 1 :])
    return Case("view", (shape, flat), shape, mesh, pl)


def _unflatten(rng: random.Random, mesh: tuple[int, ...]) -> Case:
    shape = list(_shape(rng, 1, 3))
    d = rng.randrange(len(shape))
    sizes = tuple(rng.choice(FACTORS) for _ in range(rng.randint(2, 3)))
    shape[d] = math.prod(sizes)
    pl = _placements(rng, shape, mesh, (d,))
    to = (*shape[:d], *sizes, *shape[d + 1 :])
    return Case("view", (tuple(shape), to), tuple(shape), mesh, pl)


def _reshape(rng: random.Random, mesh: tuple[int, ...]) -> Case:
    atoms = [rng.choice(FACTORS) for _ in range(rng.randint(3, 6))]
    shape = _group(atoms, _runs(rng, len(atoms)))
    to = list(_group(atoms, _runs(rng, len(atoms))))
    if rng.random() < 0.2:
        to.insert(rng.randint(0, len(to)), 1)
    if rng.random() < 0.3:
        to[rng.randrange(len(to))] = -1
    pl = _placements(rng, shape, mesh, range(len(shape)))
    return Case("view", (shape, tuple(to)), shape, mesh, pl)


def _permute(rng: random.Random, mesh: tuple[int, ...]) -> Case:
    shape = _shape(rng, 2, 5)
    n = len(shape)
    pl = _placements(rng, shape, mesh, range(n))
    kind = rng.choice(("permute", "transpose", "movedim"))
    if kind == "permute":
        dims = list(range(n))
        rng.shuffle(dims)
        return Case("permute", (n, tuple(dims)), shape, mesh, pl)
    if kind == "transpose":
        return Case("transpose", (n, rng.randrange(n), rng.randrange(n)), shape, mesh, pl)
    k = rng.randint(1, n - 1)
    src, dst = rng.sample(range(n), k), rng.sample(range(n), k)
    return Case("permute", (n, _moved(n, src, dst)), shape, mesh, pl)


def _moved(n: int, src: Sequence[int], dst: Sequence[int]) -> tuple[int, ...]:
    """The permutation ``movedim(src, dst)`` makes of n dims: input dim ``src[i]`` lands at
    ``dst[i]``, the other dims fill the other places in order."""
    order: list[int | None] = [None] * n
    for s, d in zip(src, dst, strict=True):
        order[d] = s
    rest = iter(d for d in range(n) if d not in src)
    return tuple(next(rest) if d is None else d for d in order)


def _squeeze(rng: random.Random, mesh: tuple[int, ...]) -> Case:
    shape = list(_shape(rng, 1, 4))
    if rng.random() < 0.5:
        n = len(shape)
        pl = _placements(rng, shape, mesh, range(n))
        return Case("unsqueeze", (n, rng.randint(-n - 1, n)), tuple(shape), mesh, pl)
    for _ in range(rng.randint(1, 2)):
        shape.insert(rng.randint(0, len(shape)), 1)
    ones = [i for i, s in enumerate(shape) if s == 1]
    kind = rng.random()
    dim: int | tuple[int, ...] | None
    if kind < 0.3:
        dim = None
    elif kind < 0.8:
        dim = rng.choice(ones)
    else:
        dim = tuple(rng.sample(range(len(shape)), rng.randint(1, 2)))
    pl = _placements(rng, shape, mesh, [i for i, s in enumerate(shape) if s != 1])
    return Case("squeeze", (tuple(shape), dim), tuple(shape), mesh, pl)


def _expand(rng: random.Random, mesh: tuple[int, ...]) -> Case:
    shape = list(_shape(rng, 1, 3))
    for _ in range(rng.randint(1, 2)):
        shape.insert(rng.randint(0, len(shape)), 1)
    sizes = [
        rng.choice(SIZES) if s == 1 and rng.random() < 0.8 else (-1 if rng.random() < 0.3 else s)
        for s in shape
    ]
    lead = [rng.choice(SIZES) for _ in range(rng.choice((0, 0, 1, 2)))]
    pl = _placements(rng, shape, mesh, [i for i, s in enumerate(shape) if s != 1])
    return Case("expand", (tuple(shape), (*lead, *sizes)), tuple(shape), mesh, pl)


def _strided(rng: random.Random, mesh: tuple[int, ...]) -> Case:
    # Dim t carries most mesh dims (Shard stacked on Shard, or _StridedShard, e.g. the output
    # of an earlier flatten); the view splits t or flattens it with a neighbour.
    atoms = [rng.choice((*FACTORS, 32, 64)) for _ in range(rng.randint(3, 5))]
    runs = _runs(rng, len(atoms))
    shape = _group(atoms, runs)
    t = max(range(len(shape)), key=lambda d: (runs[d], shape[d], rng.random()))
    pl = _placements(rng, shape, mesh, (t,), strided=0.6)
    to = _group(atoms, _runs(rng, len(atoms)))
    return Case("view", (shape, to), shape, mesh, pl)


def _uneven(rng: random.Random, mesh: tuple[int, ...]) -> Case:
    atoms = [rng.choice(ODD + FACTORS) for _ in range(rng.randint(2, 5))]
    shape = _group(atoms, _runs(rng, len(atoms)))
    n = len(shape)
    pl = _placements(rng, shape, mesh, range(n), even=False)
    kind = rng.random()
    if kind < 0.7:
        return Case("view", (shape, _group(atoms, _runs(rng, len(atoms)))), shape, mesh, pl)
    if kind < 0.85:
        dims = list(range(n))
        rng.shuffle(dims)
        return Case("permute", (n, tuple(dims)), shape, mesh, pl)
    return Case("unsqueeze", (n, rng.randint(0, n)), shape, mesh, pl)


def _symbolic(rng: random.Random, mesh: tuple[int, ...]) -> SymCase:
    n_atoms = rng.randint(2, 5)
    hints = tuple(rng.choice((2, 4, 6, 8, 16)) for _ in range(n_atoms))
    symbolic = [rng.random() < 0.5 for _ in hints]
    symbolic[rng.randrange(n_atoms)] = True
    runs = _runs(rng, n_atoms)
    hshape = _group(hints, runs)
    n = len(hshape)
    pl = _placements(rng, hshape, mesh, range(n))
    kind = rng.choice(("view", "view", "view", "permute", "transpose", "unsqueeze", "squeeze"))
    args: tuple[Any, ...]
    if kind == "view":
        args = (_runs(rng, n_atoms),)
    elif kind == "permute":
        dims = list(range(n))
        rng.shuffle(dims)
        args = (tuple(dims),)
    elif kind == "transpose":
        args = (rng.randrange(n), rng.randrange(n))
    elif kind == "unsqueeze":
        args = (rng.randint(0, n),)
    else:
        args = (None,)  # squeeze() of a shape with no size-1 dim: the rule is the identity
    return SymCase(hints, tuple(symbolic), runs, kind, args, mesh, pl)


FAMILIES: dict[str, Callable[[random.Random, tuple[int, ...]], Case | SymCase]] = {
    "flatten": _flatten,
    "unflatten": _unflatten,
    "reshape": _reshape,
    "permute": _permute,
    "squeeze": _squeeze,
    "expand": _expand,
    "strided": _strided,
    "uneven": _uneven,
    "symbolic": _symbolic,
}


def make_pool(family: str, mesh_rank: int, n: int, seed: int = 0) -> list[Case | SymCase]:
    """``n`` distinct cases of ``family`` on meshes of rank ``mesh_rank``, reproducibly."""
    rng = random.Random(f"{family}/{mesh_rank}/{seed}")
    gen = FAMILIES[family]
    seen: set[str] = set()
    pool: list[Case | SymCase] = []
    for _ in range(50 * n):
        case = gen(rng, rng.choice(MESHES[mesh_rank]))
        key = repr(case)
        if key not in seen:
            seen.add(key)
            pool.append(case)
            if len(pool) == n:
                break
    return pool


# --------------------------------------------------------------------------------------------
# SymInt cases


def materialize(items: Sequence[Case | SymCase]) -> list[Case]:
    """The cases, with fresh SymInts for the symbolic ones: a new ShapeEnv for each.

    One ShapeEnv per case, not per batch: guards and replacements pile up in a ShapeEnv, and
    later questions re-simplify against them, so a shared one would make a case's cost depend
    on the cases before it. ``duck_shape=False``: equal hints still get distinct symbols.
    """
    return [
        _materialize(c, ShapeEnv(duck_shape=False)) if isinstance(c, SymCase) else c for c in items
    ]


def _materialize(c: SymCase, env: ShapeEnv) -> Case:
    atoms: list[Size] = []
    for i, (h, sym) in enumerate(zip(c.hints, c.symbolic, strict=True)):
        if sym:
            s = env.create_symbol(h, source=ConstantSource(f"a{i}"))
            atoms.append(env.create_symintnode(s, hint=h))
        else:
            atoms.append(h)
    shape = _group(atoms, c.runs)
    n = len(shape)
    args: tuple[Any, ...]
    if c.op == "view":
        args = (shape, _group(atoms, c.op_args[0]))
    elif c.op == "squeeze":
        args = (shape, *c.op_args)
    else:
        args = (n, *c.op_args)
    return Case(c.op, args, shape, c.mesh, c.placements)

"""Seeded redistribution cases for the benchmark: the pairs users meet, and a few named ones.

A :class:`Pair` is one redistribution: a global shape, a mesh, and source and target
placements (``cute_shard.notation.PlacementSpec``, one per mesh dim). Categories:

- ``plain``: Shard / Replicate / Partial sources, Shard / Replicate targets, each tensor dim
  sharded by at most one mesh dim, sizes the mesh divides;
- ``stacked``: some tensor dim sharded by several mesh dims (``[S0, S0]``), even sizes;
- ``uneven``: plain or stacked placements on sizes the mesh does not divide;
- ``strided``: a ``_StridedShard`` (split factor 2, 3 or 4, as ``distribute_tensor`` reads
  it) in the source, the target or both, even sizes;
- ``view -> plain``: the sharding a view produces (cute_shard's engine on a random view of a
  random sharding) redistributed to a plain target;
- ``plain -> view``: a plain source redistributed to the sharding a view produces;
- ``named``: the FSDP2 + TP weight both ways, the activation after a head merge, and the
  smallest wrong case of torch's reading (a (12,) tensor on mesh (3, 2)).

The view categories keep only views whose output sharding has a ``_StridedShard`` or a tensor
dim sharded by several mesh dims: the shardings torch's redistribution meets only after a
view. Meshes are 1-3-D with up to 8 ranks; tensors are 2-D and 3-D (the named (12,) is 1-D).

Worked example, a view case::

    x: (4, 6, 16) on mesh (2, 4), [S0, S1]; view (24, 16)
    cute_shard: the output (24, 16) is [S0, SS0:2]   (d0 then d1 of x, merged)
    Pair("view -> plain", (24, 16), (2, 4), [S0, SS0:2], [S0, S1])

``planning_pairs`` draws from the same generators on the 8-rank meshes of the planning suite.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cute_shard
import cute_shard.rules as R
from cute_shard.notation import PlacementSpec, parse_placements, placements_str
from cute_shard.redistribute import plan_redistribution

from .mix_bench import factors

__all__ = [
    "CATEGORIES",
    "EIGHT_RANK_MESHES",
    "MESHES",
    "Pair",
    "bytes_pairs",
    "fsdp_pairs",
    "named_pairs",
    "planning_pairs",
]

MESHES = ((2,), (3,), (4,), (6,), (8,), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2), (2, 2, 2))
EIGHT_RANK_MESHES = ((8,), (2, 4), (4, 2), (2, 2, 2))
EVEN_SIZES = (12, 16, 24, 32, 48)
ODD_SIZES = (5, 7, 9, 10, 11, 13, 15, 18, 21)
SPLIT_FACTORS = (2, 3, 4)
#: Most elements a drawn tensor may have: every rank's data lives in one process.
MAX_ELEMENTS = 1 << 14

CATEGORIES = ("plain", "stacked", "uneven", "strided", "view -> plain", "plain -> view", "named")

Placements = tuple[PlacementSpec, ...]


@dataclass(frozen=True)
class Pair:
    category: str  # a name in CATEGORIES
    shape: tuple[int, ...]
    mesh: tuple[int, ...]
    src: Placements
    dst: Placements
    name: str = ""  # named cases only

    def __str__(self) -> str:
        label = f"{self.name}: " if self.name else ""
        return (
            f"{label}{self.shape} on {self.mesh} "
            f"{placements_str(self.src)} -> {placements_str(self.dst)}"
        )

    @property
    def strided(self) -> bool:
        """Whether either side has a ``_StridedShard`` (torch's graph planner engages)."""
        return any(p.kind == "SS" for p in (*self.src, *self.dst))

    @property
    def src_strided(self) -> bool:
        return any(p.kind == "SS" for p in self.src)


# ------------------------------------------------------------------------- placements


def _shard_counts(ps: Placements, mesh: tuple[int, ...], ndim: int) -> list[int]:
    """Per tensor dim, the product of the mesh sizes (times split factors) that chunk it."""
    out = [1] * ndim
    for p, m in zip(ps, mesh, strict=True):
        if p.shards:
            out[p.dim] *= m * p.split_factor
    return out


def _divides(shape: tuple[int, ...], mesh: tuple[int, ...], *sides: Placements) -> bool:
    return all(
        n % c == 0
        for ps in sides
        for n, c in zip(shape, _shard_counts(ps, mesh, len(shape)), strict=True)
    )


def _stacked(ps: Placements) -> bool:
    dims = [p.dim for p in ps if p.shards]
    return len(dims) != len(set(dims))


def _draw(
    rng: random.Random,
    ndim: int,
    mesh: tuple[int, ...],
    *,
    partial: float = 0.0,
    strided: float = 0.0,
    stack: bool = False,
) -> Placements:
    """One placement per mesh dim: Replicate, Partial (``partial``), _StridedShard
    (``strided``) or Shard; with ``stack`` the shards favour one tensor dim."""
    favourite = rng.randrange(ndim)
    out: list[PlacementSpec] = []
    for _ in mesh:
        r = rng.random()
        d = favourite if stack and rng.random() < 0.7 else rng.randrange(ndim)
        if r < 0.2:
            out.append(PlacementSpec("R"))
        elif r < 0.2 + partial:
            out.append(PlacementSpec("P"))
        elif r < 0.2 + partial + strided:
            out.append(PlacementSpec("SS", d, rng.choice(SPLIT_FACTORS)))
        else:
            out.append(PlacementSpec("S", d))
    return tuple(out)


def _plannable(pair: Pair) -> bool:
    try:
        plan_redistribution(pair.shape, pair.mesh, pair.src, pair.dst)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------- generators

Generator = Callable[[random.Random, Sequence[tuple[int, ...]]], Pair | None]


def _shape(rng: random.Random, sizes: Sequence[int]) -> tuple[int, ...]:
    return tuple(rng.choice(sizes) for _ in range(rng.randint(2, 3)))


def _plain(rng: random.Random, meshes: Sequence[tuple[int, ...]]) -> Pair | None:
    mesh = rng.choice(meshes)
    shape = _shape(rng, EVEN_SIZES)
    src = _draw(rng, len(shape), mesh, partial=0.15)
    dst = _draw(rng, len(shape), mesh)
    if _stacked(src) or _stacked(dst) or not _divides(shape, mesh, src, dst):
        return None
    return Pair("plain", shape, mesh, src, dst)


def _stacked_pair(rng: random.Random, meshes: Sequence[tuple[int, ...]]) -> Pair | None:
    mesh = rng.choice([m for m in meshes if len(m) > 1])
    shape = _shape(rng, EVEN_SIZES)
    src = _draw(rng, len(shape), mesh, partial=0.1, stack=True)
    dst = _draw(rng, len(shape), mesh, stack=True)
    if not (_stacked(src) or _stacked(dst)) or not _divides(shape, mesh, src, dst):
        return None
    return Pair("stacked", shape, mesh, src, dst)


def _uneven(rng: random.Random, meshes: Sequence[tuple[int, ...]]) -> Pair | None:
    mesh = rng.choice(meshes)
    shape = tuple(rng.choice(ODD_SIZES + EVEN_SIZES) for _ in range(rng.randint(2, 3)))
    stack = len(mesh) > 1 and rng.random() < 0.5
    src = _draw(rng, len(shape), mesh, partial=0.1, stack=stack)
    dst = _draw(rng, len(shape), mesh, stack=stack)
    if _divides(shape, mesh, src, dst):
        return None
    return Pair("uneven", shape, mesh, src, dst)


def _strided(rng: random.Random, meshes: Sequence[tuple[int, ...]]) -> Pair | None:
    mesh = rng.choice(meshes)
    shape = _shape(rng, EVEN_SIZES)
    which = rng.choice(("src", "dst", "both"))
    src = _draw(rng, len(shape), mesh, partial=0.1, strided=0.4 if which != "dst" else 0.0)
    dst = _draw(rng, len(shape), mesh, strided=0.4 if which != "src" else 0.0)
    pair = Pair("strided", shape, mesh, src, dst)
    if not pair.strided or not _divides(shape, mesh, src, dst):
        return None
    return pair


def _view_target(rng: random.Random, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A view of the same elements: merge two neighbouring dims, split one, or regroup all."""
    r = rng.random()
    n = len(shape)
    if r < 0.4 and n > 1:
        i = rng.randrange(n - 1)
        return (*shape[:i], shape[i] * shape[i + 1], *shape[i + 2 :])
    if r < 0.7:
        i = rng.randrange(n)
        fs = factors(shape[i])
        if len(fs) > 1:
            k = rng.randrange(1, len(fs))
            a = math.prod(fs[:k])
            return (*shape[:i], a, shape[i] // a, *shape[i + 1 :])
    fs = factors(math.prod(shape))
    rng.shuffle(fs)
    out = [1] * rng.randint(2, 3)
    for f in fs:
        out[rng.randrange(len(out))] *= f
    return tuple(out)


def _view_output(
    rng: random.Random, meshes: Sequence[tuple[int, ...]]
) -> tuple[tuple[int, ...], tuple[int, ...], Placements] | None:
    """A random view of a random sharding: (output shape, mesh, output placements), kept
    when the output sharding has a ``_StridedShard`` or a stacked tensor dim."""
    mesh = rng.choice(meshes)
    shape = tuple(rng.choice((2, 3, 4, 6, 8, 12, 16)) for _ in range(rng.randint(2, 4)))
    target = _view_target(rng, shape)
    if len(target) not in (2, 3) or math.prod(shape) > MAX_ELEMENTS:
        return None
    placements = _draw(rng, len(shape), mesh, strided=0.2, stack=len(mesh) > 1)
    try:
        _, out = cute_shard.propagate_shape_and_sharding(
            [p.to_torch() for p in placements],
            shape,
            R.view_groups(shape, target),
            mesh,
            False,
        )
    except (RuntimeError, ValueError):
        return None
    out_ps = tuple(PlacementSpec.of(p) for p in out)
    if not (any(p.kind == "SS" for p in out_ps) or _stacked(out_ps)):
        return None
    return target, mesh, out_ps


def _view_to_plain(rng: random.Random, meshes: Sequence[tuple[int, ...]]) -> Pair | None:
    got = _view_output(rng, meshes)
    if got is None:
        return None
    shape, mesh, src = got
    return Pair("view -> plain", shape, mesh, src, _draw(rng, len(shape), mesh))


def _plain_to_view(rng: random.Random, meshes: Sequence[tuple[int, ...]]) -> Pair | None:
    got = _view_output(rng, meshes)
    if got is None:
        return None
    shape, mesh, dst = got
    return Pair("plain -> view", shape, mesh, _draw(rng, len(shape), mesh, partial=0.1), dst)


GENERATORS: dict[str, Generator] = {
    "plain": _plain,
    "stacked": _stacked_pair,
    "uneven": _uneven,
    "strided": _strided,
    "view -> plain": _view_to_plain,
    "plain -> view": _plain_to_view,
}


def _drawn(
    n: int, seed: int, meshes: Sequence[tuple[int, ...]], categories: Sequence[str]
) -> list[Pair]:
    """``n`` distinct pairs, the categories taking turns, each a legal redistribution."""
    rng = random.Random(f"redistribute/{seed}")
    out: list[Pair] = []
    seen: set[Pair] = set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n + 1000:
            raise RuntimeError(f"drew only {len(out)} of {n} pairs from {list(categories)}")
        category = categories[len(out) % len(categories)]
        pair = GENERATORS[category](rng, meshes)
        if (
            pair is None
            or pair in seen
            or pair.src == pair.dst
            or math.prod(pair.shape) > MAX_ELEMENTS
            or not _plannable(pair)
        ):
            continue
        seen.add(pair)
        out.append(pair)
    return out


def _named(name: str, shape: tuple[int, ...], mesh: tuple[int, ...], a: str, b: str) -> Pair:
    """A named case, its placements in the notation (``"S0,SS0:2"``)."""
    ndim = len(shape)
    return Pair(
        "named", shape, mesh, parse_placements(a, ndim, mesh), parse_placements(b, ndim, mesh), name
    )


def named_pairs() -> list[Pair]:
    """The cases the issue names, at a size every rank can hold in one process."""

    return [
        *fsdp_pairs((64, 32)),
        _named("head merge", (8, 16, 32), (2, 4), "S0,SS0:2", "S0,S1"),
        _named("(12,) on (3, 2)", (12,), (3, 2), "R,S0", "S0,SS0:2"),
    ]


def fsdp_pairs(shape: tuple[int, int]) -> list[Pair]:
    """The FSDP2 + TP weight of ``shape`` on (2, 4), both ways."""
    mesh = (2, 4)
    strided = parse_placements("SS0:4,S0", 2, mesh)
    plain = parse_placements("S0,S0", 2, mesh)
    return [
        Pair("named", shape, mesh, strided, plain, "FSDP2+TP weight, to [S0, S0]"),
        Pair("named", shape, mesh, plain, strided, "FSDP2+TP weight, back"),
    ]


#: Meshes of 1,024 ranks, as large training jobs lay them out: data x tensor parallel, and
#: data x context x tensor parallel.
LARGE_MESHES = ((128, 8), (16, 8, 8), (8, 4, 32))


def large_mesh_pairs() -> list[Pair]:
    """A transformer's activations and weights at the sizes large jobs have, on meshes of
    1,024 ranks (planned and priced, never run): a sequence length (4001) and a vocabulary
    (128257) the mesh cuts unevenly, beside even ones (4096)."""

    dp_tp, dp_cp_tp, dp_sp_tp = LARGE_MESHES
    act, even, heads = (256, 4001, 4096), (256, 4096, 4096), (256, 4001, 32, 128)
    cp_act, cp_heads = (64, 4001, 4096), (64, 4001, 32, 128)
    vocab = (128257, 4096)
    return [
        _named("sequence parallel gather", act, dp_tp, "S0,S1", "S0,R"),
        _named("sequence parallel gather, even", even, dp_tp, "S0,S1", "S0,R"),
        _named("sequence to hidden", act, dp_tp, "S0,S1", "S0,S2"),
        _named("sequence to heads", heads, dp_tp, "S0,S1", "S0,S2"),
        _named("heads to sequence", heads, dp_tp, "S0,S2", "S0,S1"),
        _named("strided hidden to hidden", act, dp_tp, "S0,SS2:4", "S0,S2"),
        _named("vocabulary unshard", vocab, dp_tp, "S0,S0", "R,S0"),
        _named("vocabulary gather", vocab, dp_tp, "S0,R", "R,R"),
        _named("context parallel gather", cp_act, dp_cp_tp, "S0,S1,R", "S0,R,R"),
        _named("context to tensor parallel", cp_act, dp_cp_tp, "S0,S1,S1", "S0,S1,S2"),
        _named("context to heads (all-to-all)", cp_heads, dp_cp_tp, "S0,S1,S2", "S0,S2,S2"),
        _named("sequence and hidden gather", cp_act, dp_cp_tp, "S0,S1,S2", "S0,R,R"),
        _named("hidden gather", cp_act, dp_sp_tp, "S0,S1,S2", "S0,S1,R"),
        _named("hidden gather, even", (64, 4096, 4096), dp_sp_tp, "S0,S1,S2", "S0,S1,R"),
    ]


def bytes_pairs(n: int, seed: int = 0) -> list[Pair]:
    """``n`` drawn pairs (the categories in turn) and the named ones."""
    return [*_drawn(n, seed, MESHES, list(GENERATORS)), *named_pairs()]


def planning_pairs(n: int, seed: int = 0) -> list[Pair]:
    """``n`` drawn pairs on the 8-rank meshes, the categories in turn, and the named ones
    that fit 8 ranks."""
    named = [p for p in named_pairs() if math.prod(p.mesh) == 8]
    return [*_drawn(n, seed + 1, EIGHT_RANK_MESHES, list(GENERATORS)), *named]

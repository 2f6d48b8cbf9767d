"""The redistribution planner: what moves, along which mesh dims, read off the two shardings.

Each mesh dim m of the source and of the target is a gpu sub-mode of one tensor dim (or none:
Replicate, Partial). Read as a function, the sub-mode is ``owner_m(p)``, the coordinate on m
that holds position p of its dim (``labels.py``). A rank holds exactly the positions whose
owners are its coordinates, so what it holds and what it needs are sets of constraints, and
a redistribution replaces the source's constraints by the target's. Per mesh dim:

- the same owner function in both (same dim, same sub-mode): nothing moves;
- Replicate -> a shard: a new constraint, so each rank keeps part of what it holds (a local
  chunk, done first, so every later step moves less);
- Partial -> Replicate / a shard: all-reduce / reduce-scatter, after the chunks;
- a shard -> a different shard (another dim, or the same dim at another stride): the
  constraint is replaced, an all-to-all over m; all such mesh dims move in **one** exchange,
  so mesh dims whose sub-modes are interleaved (and any others that exchange) move together;
- a shard -> Replicate: the constraint is dropped, an all-gather over m, done last;
- -> Partial: a local step at the end (torch's own ``_partition_value``).

Why this order is at the physical limit: a rank ends holding T and starts holding S; a chunk
receives nothing, the exchange receives ``X \\ S`` for its result X, and the gathers then
receive ``T \\ X``. Since ``X`` is inside ``T`` and ``X ∩ S == T ∩ S`` (the gathers only drop
constraints S already satisfies), the total is ``|T| - |T ∩ S|``: exactly what the rank lacks.
Two exchanges in a row would not be (the second would re-send what the first brought), which
is why the exchanges are one step.

The exchange is one collective over several mesh dims when the caller has a process group for
them (``joint=True``; the DTensor integration asks the mesh); without one, it moves one mesh
dim at a time in the order that moves least, and the plan says so (``split``).

Worked example: the FSDP2 + TP weight, (64, 32) on mesh (2, 4), ``[_S(0, 4), S(0)] ->
[S(0), S(0)]``. Both mesh dims shard d0 in both, with other owners: rank (c0, c1) holds rows
``16*c1 + 8*c0 + [0, 8)`` and needs ``32*c0 + 8*c1 + [0, 8)``, so each rank's target comes
whole from one peer (ranks (0, 0) and (1, 3) keep theirs): one permutation over both mesh
dims, 8 rows per rank, at the limit (torch all-gathers all 64 rows).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

from ..notation import REDUCE_OPS, PlacementSpec
from .labels import DST, SRC, DimLabels, Ranks, dim_labels, mesh_ranks
from .types import Kind, Move, Plan, State, Step

__all__ = ["check_placements", "physical_limit", "plan_redistribution"]


def plan_redistribution(
    shape: Sequence[int],
    mesh: Sequence[int],
    src: Sequence[PlacementSpec],
    dst: Sequence[PlacementSpec],
    *,
    joint: bool = True,
) -> Plan:
    """The plan that redistributes a tensor of global ``shape`` on a mesh of ``mesh`` from the
    ``src`` placements to ``dst`` (one per mesh dim; ``_StridedShard`` read by its split
    factor, as ``distribute_tensor`` places it).

    Pre: ``shape`` ints >= 0, ``mesh`` ints >= 1, each placement list one per mesh dim with its
    shard dims in range and split factors >= 1; otherwise ValueError naming the mesh dim, the
    placement and why. ``dst`` may hold Partial only where the reduction it leaves pending is
    well defined (any op from Replicate, the same op from Partial).
    Post: every rank's local tensor after the steps is its ``dst`` shard; ``received`` ==
    ``physical_limit(plan)`` unless ``split``.
    """
    shape_t = _shape(shape)
    mesh_t = _mesh(mesh)
    src_t = check_placements(src, len(shape_t), mesh_t, "source")
    dst_t = check_placements(dst, len(shape_t), mesh_t, "target")
    _check_partials(src_t, dst_t)
    return _plan(shape_t, mesh_t, src_t, dst_t, joint)


# A pending reduction a target can start from a value every rank holds (torch's
# ``Partial._partition_value``): a product has no such split.
_PARTITIONABLE = ("sum", "avg", "max", "min")


def _check_partials(src: tuple[PlacementSpec, ...], dst: tuple[PlacementSpec, ...]) -> None:
    for m, (s, t) in enumerate(zip(src, dst, strict=True)):
        if t.kind == "P" and not (s == t or t.reduce_op in _PARTITIONABLE):
            raise ValueError(
                f"target placement {t} on mesh dim {m}: a pending {t.reduce_op} can only be "
                f"kept from a source {t}, not started from {s} (a value cannot be split into "
                f"factors; {', '.join(_PARTITIONABLE)} can)"
            )


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    out = tuple(shape)
    for d, n in enumerate(out):
        if type(n) is not int or n < 0:
            raise ValueError(f"global shape {out}: dim {d} has size {n!r}; sizes must be ints >= 0")
    return out


def _mesh(mesh: Sequence[int]) -> tuple[int, ...]:
    out = tuple(mesh)
    if not out:
        raise ValueError("the mesh has no dims: give at least one mesh size")
    for m, size in enumerate(out):
        if type(size) is not int or size < 1:
            raise ValueError(f"mesh {out}: mesh dim {m} has size {size!r}; sizes must be ints >= 1")
    return out


def check_placements(
    ps: Sequence[PlacementSpec], ndim: int, mesh: tuple[int, ...], what: str
) -> tuple[PlacementSpec, ...]:
    """``ps`` canonical (shard dims non-negative, ``SS<d>:1`` as ``S<d>``), or ValueError
    naming the mesh dim, the placement and why."""
    if len(ps) != len(mesh):
        raise ValueError(
            f"{what} placements: got {len(ps)} for a mesh of {len(mesh)} dims {mesh}; give "
            "exactly one placement per mesh dim"
        )
    out: list[PlacementSpec] = []
    for m, p in enumerate(ps):
        if p.kind in ("S", "SS"):
            if not -ndim <= p.dim < ndim:
                raise ValueError(
                    f"{what} placement {p} on mesh dim {m} shards tensor dim {p.dim}, which a "
                    f"tensor of {ndim} dims does not have (expected {-ndim} <= dim < {ndim})"
                )
            sf = p.split_factor
            if type(sf) is not int or sf < 1:
                raise ValueError(
                    f"{what} placement {p} on mesh dim {m}: a _StridedShard's split factor "
                    f"chunks the dim into that many pieces, so it must be an int >= 1, got {sf!r}"
                )
            kind = "S" if p.kind == "S" or sf == 1 else "SS"
            out.append(PlacementSpec(kind, p.dim % ndim, sf if kind == "SS" else 1))
        elif p.kind == "P":
            if p.reduce_op not in REDUCE_OPS:
                raise ValueError(
                    f"{what} placement {p} on mesh dim {m}: unknown reduce op "
                    f"{p.reduce_op!r}; expected one of {', '.join(REDUCE_OPS)}"
                )
            out.append(p)
        elif p.kind == "R":
            out.append(p)
        else:
            raise ValueError(f"{what} placement {p!r} on mesh dim {m}: unknown kind {p.kind!r}")
    return tuple(out)


# ------------------------------------------------------------------------------ the plan


@functools.lru_cache(maxsize=4096)
def _plan(
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    src: tuple[PlacementSpec, ...],
    dst: tuple[PlacementSpec, ...],
    joint: bool,
) -> Plan:
    src_levels, dst_levels = _levels(src, mesh, len(shape)), _levels(dst, mesh, len(shape))
    dims = tuple(dim_labels(n, a, b) for n, a, b in zip(shape, src_levels, dst_levels, strict=True))
    moves = tuple(m for m in (_move(dims, mesh, src, dst, i) for i in range(len(mesh))) if m)
    by_kind: dict[Kind, list[int]] = {}
    for move in moves:
        by_kind.setdefault(move.kind, []).append(move.mesh_dim)

    start = tuple(tuple(s for s in d.slots if s[0] == SRC) for d in dims)
    ranks = mesh_ranks(mesh)
    builder = _Builder(dims, ranks, start)
    builder.add(Kind.CHUNK, by_kind.get(Kind.CHUNK, []), add=DST)
    # Reduce-scatters before all-reduces: each one shrinks what the later reductions move.
    for move in moves:
        if move.kind is Kind.REDUCE_SCATTER:
            builder.add(Kind.REDUCE_SCATTER, [move.mesh_dim], add=DST, reduce_op=move.src.reduce_op)
    for move in moves:
        if move.kind is Kind.ALL_REDUCE or (move.kind is Kind.PARTITION and move.src.kind == "P"):
            builder.add(Kind.ALL_REDUCE, [move.mesh_dim], reduce_op=move.src.reduce_op)
    exchange = sorted(m for k in (Kind.ALL_TO_ALL, Kind.PERMUTE) for m in by_kind.get(k, []))
    split = len(exchange) > 1 and not joint
    if split:
        builder.exchange_one_by_one(exchange)
    else:
        builder.add(Kind.ALL_TO_ALL, exchange, add=DST, drop=SRC)
    gathers = [m.mesh_dim for m in moves if m.kind is Kind.ALL_GATHER or _gathers(m)]
    for m in sorted(gathers, reverse=True):
        builder.add(Kind.ALL_GATHER, [m], drop=SRC)
    for m in (m.mesh_dim for m in moves if m.dst.kind == "P"):
        builder.add(Kind.PARTITION, [m], reduce_op=dst[m].reduce_op)

    final = tuple(tuple(s for s in d.slots if s[0] == DST) for d in dims)
    return Plan(
        shape,
        mesh,
        src,
        dst,
        dims,
        start,
        final,
        _with_kinds(moves, builder.steps),
        tuple(builder.steps),
        max(builder.received, default=0),
        max(builder.reduced, default=0),
        split,
    )


def physical_limit(plan: Plan) -> int:
    """The least any plan can make its busiest rank receive: the most elements of its target
    shard a rank does not hold in the source (Partial counted as held), computed from the two
    shardings alone."""
    dims, ranks = plan.dims, mesh_ranks(plan.mesh)
    need = _sizes(dims, plan.final, ranks)
    held = _sizes(dims, _union(plan.final, plan.start), ranks)
    return max((a - b for a, b in zip(need, held, strict=True)), default=0)


def _levels(
    ps: tuple[PlacementSpec, ...], mesh: tuple[int, ...], ndim: int
) -> list[tuple[tuple[int, int, int], ...]]:
    """Per tensor dim, ``(mesh dim, mesh size, split factor)`` of each mesh dim sharding it,
    in mesh order; a mesh dim of size 1 holds everything and constrains nothing."""
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(ndim)]
    for m, p in enumerate(ps):
        if p.kind in ("S", "SS") and mesh[m] > 1:
            out[p.dim].append((m, mesh[m], p.split_factor))
    return [tuple(x) for x in out]


def _gathers(move: Move) -> bool:
    """A shard that becomes Partial is gathered first, then partitioned."""
    return move.kind is Kind.PARTITION and move.src.shards


def _move(
    dims: tuple[DimLabels, ...],
    mesh: tuple[int, ...],
    src: tuple[PlacementSpec, ...],
    dst: tuple[PlacementSpec, ...],
    m: int,
) -> Move | None:
    """What mesh dim ``m`` does, or None when it keeps its sub-mode (or has size 1)."""
    s, t = src[m], dst[m]
    if mesh[m] == 1:
        return None
    if s.shards:
        if t.shards:
            if s.dim == t.dim and _same_owner(dims[s.dim], m):
                return None
            where = (
                f"changes position within d{s.dim}"
                if s.dim == t.dim
                else f"moves from d{s.dim} to d{t.dim}"
            )
            return Move(m, s, t, Kind.ALL_TO_ALL, f"m{m}'s sub-mode {where}")
        if t.kind == "P":
            return Move(
                m,
                s,
                t,
                Kind.PARTITION,
                f"each rank needs all of d{s.dim} along m{m}, then a pending {t.reduce_op}",
            )
        return Move(m, s, t, Kind.ALL_GATHER, f"each rank needs all of d{s.dim} along m{m}")
    if s.kind == "R":
        if t.shards:
            return Move(
                m,
                s,
                t,
                Kind.CHUNK,
                f"every rank already holds its part of d{t.dim} along m{m}: it keeps that part",
            )
        if t.kind == "P":
            return Move(m, s, t, Kind.PARTITION, f"the value becomes a pending {t.reduce_op}")
        return None
    # a Partial source
    if t.kind == "P" and t.reduce_op == s.reduce_op:
        return None
    if t.shards:
        return Move(
            m,
            s,
            t,
            Kind.REDUCE_SCATTER,
            f"the pending {s.reduce_op} is reduced and each rank keeps its part of d{t.dim}",
        )
    if t.kind == "P":
        return Move(
            m,
            s,
            t,
            Kind.PARTITION,
            f"the pending {s.reduce_op} is reduced, then a pending {t.reduce_op}",
        )
    return Move(m, s, t, Kind.ALL_REDUCE, f"the pending {s.reduce_op} is reduced")


def _same_owner(labels: DimLabels, m: int) -> bool:
    """Whether mesh dim m's sub-mode gives every position the same owner in both."""
    a, b = labels.index(((SRC, m), (DST, m)))
    return all(lab[a] == lab[b] for _, _, lab in labels.segments)


def _with_kinds(moves: tuple[Move, ...], steps: list[Step]) -> tuple[Move, ...]:
    """Each exchanging move named by the collective its step became (a permutation or an
    all-to-all), and told which mesh dims moved with it."""
    out = []
    for move in moves:
        step = next((s for s in steps if move.mesh_dim in s.mesh_dims), None)
        if move.kind is Kind.ALL_TO_ALL and step is not None:
            reason = move.reason
            others = [f"m{o}" for o in step.mesh_dims if o != move.mesh_dim]
            if others:
                reason += f"; it moves together with {', '.join(others)}"
            move = Move(move.mesh_dim, move.src, move.dst, step.kind, reason)
        out.append(move)
    return tuple(out)


# ------------------------------------------------------------------------ sizes per rank


def _sizes(dims: tuple[DimLabels, ...], state: State, ranks: Ranks) -> list[int]:
    """How many elements each rank holds in ``state``, in the order of ``ranks``."""
    whole = 1  # the factor every rank shares
    out: list[int] | None = None
    for d, slots in zip(dims, state, strict=True):
        n = d.per_rank(slots, ranks)
        if isinstance(n, int):
            whole *= n
        elif out is None:
            out = list(n)
        else:
            out = [a * b for a, b in zip(out, n, strict=True)]
    if out is None:
        return [whole] * len(ranks.coords)
    return [a * whole for a in out] if whole != 1 else out


def _flat(sizes: list[int]) -> bool:
    return min(sizes, default=0) == max(sizes, default=0)


def _union(a: State, b: State) -> State:
    return tuple(tuple(sorted(set(x) | set(y))) for x, y in zip(a, b, strict=True))


class _Builder:
    """Appends steps from the current state, keeping each rank's running totals."""

    def __init__(self, dims: tuple[DimLabels, ...], ranks: Ranks, start: State) -> None:
        self.dims = dims
        self.ranks = ranks
        self.state = start
        self.steps: list[Step] = []
        self.received = [0] * len(ranks.coords)
        self.reduced = [0] * len(ranks.coords)
        self._sizes: dict[State, list[int]] = {}

    def sizes(self, state: State) -> list[int]:
        """``_sizes`` of ``state``, once per state (a step's result is the next one's start)."""
        out = self._sizes.get(state)
        if out is None:
            out = self._sizes[state] = _sizes(self.dims, state, self.ranks)
        return out

    def next_state(self, mesh_dims: Sequence[int], add: int | None, drop: int | None) -> State:
        out = []
        for d, slots in zip(self.dims, self.state, strict=True):
            if not any(m in mesh_dims for _, m in d.slots):
                out.append(slots)
                continue
            keep = [s for s in slots if not (s[0] == drop and s[1] in mesh_dims)]
            new = [s for s in d.slots if s[0] == add and s[1] in mesh_dims]
            out.append(tuple(sorted(set(keep) | set(new))))
        return tuple(out)

    def add(
        self,
        kind: Kind,
        mesh_dims: Sequence[int],
        *,
        add: int | None = None,
        drop: int | None = None,
        reduce_op: str | None = None,
    ) -> None:
        if not mesh_dims:
            return
        before = self.state
        after = self.next_state(mesh_dims, add, drop)
        received = reduced = peers = 0
        even = uniform = True  # a local step receives nothing: both hold trivially
        if kind.reduces:
            sizes = self.sizes(before)
            self.reduced = [a + b for a, b in zip(self.reduced, sizes, strict=True)]
            reduced = max(sizes, default=0)
            even = uniform = min(sizes, default=0) == reduced
        elif not kind.local:
            kind, got, peers = self._exchange(kind, tuple(mesh_dims), before, after)
            received = max(got, default=0)
            uniform = min(got, default=0) == received
            even = _flat(self.sizes(before)) and _flat(self.sizes(after))
        self.steps.append(
            Step(
                kind,
                tuple(mesh_dims),
                before,
                after,
                received,
                reduced,
                peers,
                reduce_op,
                even,
                uniform,
            )
        )
        self.state = after

    def _exchange(
        self, kind: Kind, mesh_dims: tuple[int, ...], before: State, after: State
    ) -> tuple[Kind, list[int], int]:
        """The step's name (an all-gather where every rank keeps what it held, a permutation
        where each rank's new part comes from one peer, otherwise an all-to-all), what each
        rank receives, and the most peers a rank receives from."""
        need = self.sizes(after)
        kept = self.sizes(_union(before, after))
        got = [a - b for a, b in zip(need, kept, strict=True)]
        self.received = [a + b for a, b in zip(self.received, got, strict=True)]
        peers = self._peers(mesh_dims, after, got)
        if kind is Kind.ALL_GATHER or kept == self.sizes(before):
            return Kind.ALL_GATHER, got, peers
        return (Kind.PERMUTE if peers <= 1 else Kind.ALL_TO_ALL), got, peers

    def _peers(self, mesh_dims: tuple[int, ...], after: State, got: list[int]) -> int:
        """The most peers a rank receives from: an element's sender is the rank whose source
        owners on ``mesh_dims`` hold it, so a rank's senders are the combinations of those
        owners among the positions it needs, less itself."""
        per_dim = []
        for d, slots in zip(self.dims, after, strict=True):
            sources = tuple(s for s in d.slots if s[0] == SRC and s[1] in mesh_dims)
            if sources:
                own = tuple(zip(*(self.ranks.column(m) for _, m in sources), strict=True))
                per_dim.append((d.senders(slots, sources, self.ranks), own))
        most = 0
        for i, n in enumerate(got):
            if not n:
                continue
            count, mine = 1, True
            for senders, own in per_dim:
                count *= len(senders[i])
                mine = mine and own[i] in senders[i]
            most = max(most, count - mine)
        return most

    def exchange_one_by_one(self, mesh_dims: list[int]) -> None:
        """Without a collective over several mesh dims, replace one constraint at a time, in
        the order whose busiest rank receives least."""

        def worst(order: tuple[int, ...]) -> int:
            trial = _Builder(self.dims, self.ranks, self.state)
            trial.received = list(self.received)
            trial._sizes = self._sizes
            for m in order:
                trial.add(Kind.ALL_TO_ALL, [m], add=DST, drop=SRC)
            return max(trial.received, default=0)

        for m in min(itertools.permutations(mesh_dims), key=worst):
            self.add(Kind.ALL_TO_ALL, [m], add=DST, drop=SRC)


def transfers(plan: Plan, step: Step) -> tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]:
    """Who sends what to whom in a data step: ``(receiver, sender, elements)`` for every pair
    of distinct ranks of a group that exchange something, receivers in rank order."""
    if step.kind.local or step.kind.reduces:
        return ()
    ranks = mesh_ranks(plan.mesh)
    out = []
    for to in ranks.coords:
        for frm in ranks.coords:
            if frm == to or any(
                a != b
                for m, (a, b) in enumerate(zip(to, frm, strict=True))
                if m not in step.mesh_dims
            ):
                continue
            n = _block(plan.dims, step.before, step.after, to, frm)
            if n:
                out.append((to, frm, n))
    return tuple(out)


def _block(
    dims: tuple[DimLabels, ...],
    before: State,
    after: State,
    to: tuple[int, ...],
    frm: tuple[int, ...],
) -> int:
    """How many elements rank ``frm`` holds (``before``) that rank ``to`` needs (``after``)."""
    size = 1
    for d, b, a in zip(dims, before, after, strict=True):
        slots = tuple(sorted(set(a) | set(b)))
        if not slots:
            size *= d.size
            continue
        key = tuple(to[m] if (side, m) in a else frm[m] for side, m in slots)
        size *= d.counts(slots).get(key, 0)
        if not size:
            return 0
    return size

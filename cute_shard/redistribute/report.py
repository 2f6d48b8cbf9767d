"""``cute-shard redistribute`` and ``cute_shard.explain(x, "redistribute", placements)``: the
plan that redistributes a DTensor, shown as ``cute-shard explain`` shows a view.

Given a global shape, a mesh, the source and target placements and a dtype, it shows:

- both shardings as CuTe layouts, with each mesh dim's gpu sub-mode (where a layout expresses
  the sharding; uneven shards have none, and the planner reads their runs of owners instead);
- each mesh dim that moves: how (chunk, all-to-all, permutation, all-gather, ...) and why;
- the plan's steps in order: the collective that runs each, every rank's local shape before and
  after, the bytes the busiest rank receives (or hands to a reduction), and who sends how much
  to whom;
- the bytes the busiest rank receives over the plan against the physical limit (the most of its
  target shard any rank lacks), as a ratio;
- which rank holds what before and after (``--no-grid`` leaves the grids out);
- with ``--compare-torch``, torch's plan for the same pair, its bytes against the limit and
  whether its result is right on every rank (``torch_reference``).

Placements are written in the notation of ``cute_shard.notation``. The data flow is one way, as
in ``explanation``: ``parse_request`` (the command line's strings to a ``Request``),
``explain_redistribution`` (a ``Request`` to a ``RedistributionReport``, the only step that
computes), then ``render_text`` / ``to_json``. ``explanation.explain_dtensor`` writes a live
DTensor and its target as those same strings, so the command line and ``cute_shard.explain``
print the same text. Bad input raises ``ValueError`` with a one-line message before torch is
imported (the command line prints it and exits with status 2).

Worked example (the rank grids are left out)::

    $ cute-shard redistribute --shape 64,32 --mesh 2,4 --from SS0:4,S0 --to S0,S0 --no-grid
    redistribute   (64,32) from [SS0:4, S0] to [S0, S0]
    mesh           (2,4), 8 ranks, float32
    from           [SS0:4, S0]
      layout       ((8,(2,4)),32):((32,(256,512)),1)
      gpu modes    m0 = 2:256 in d0   m1 = 4:512 in d0
    to             [S0, S0]
      layout       ((8,(2,4)),32):((32,(1024,256)),1)
      gpu modes    m0 = 2:1024 in d0   m1 = 4:256 in d0
    moves          m0, m1 move
      m0           SS0:4 -> S0: permutation
        why        m0's sub-mode changes position within d0; it moves together with m1
      m1           S0 -> S0: permutation
        why        m1's sub-mode changes position within d0; it moves together with m0
    plan           1 step, 1 collective
      step 1       permutation over m0,m1 (8 ranks): all_to_all_single
        local      (8,32) -> (8,32) on every rank
        receives   up to 1 KiB per rank, from 1 peer
        transfers  rank 1 <- rank 4: 1 KiB
                   ...
    received       1 KiB by the busiest rank (float32)
    limit          1 KiB, the most of its target shard a rank lacks: received / limit = 1.00x

Both mesh dims shard d0 in both, at other strides: in the source m0 steps 256 elements (8
rows) and m1 512 (16 rows); in the target m0 steps 1024 (32 rows) and m1 256 (8 rows). Each
rank's 8 target rows are a block one other rank holds whole (ranks 0 and 7 hold theirs
already), so the plan is one permutation over both mesh dims, and the busiest rank receives
exactly what it lacks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..notation import Placements, parse_placements, placements_str
from ..ownership import Picture, picture, rank_list
from ..render import (
    DTYPES,
    Printed,
    fmt_bytes,
    grid_rows,
    layout_json,
    layout_rows,
    parse_sizes,
    row,
    tuple_text,
)
from .plan import physical_limit, plan_redistribution, transfers
from .types import Plan, Step

if TYPE_CHECKING:
    from ..engine import ShardedLayout
    from .torch_reference import TorchReference

__all__ = [
    "TRANSFERS_MAX_RANKS",
    "RedistributionReport",
    "Request",
    "ShapeGroup",
    "StepReport",
    "Transfer",
    "explain_redistribution",
    "parse_request",
    "ratio",
    "render_text",
    "to_json",
]

# Listing who sends what to whom looks at every pair of ranks in a group: above this many
# ranks it takes seconds, and the list is too long to read anyway.
TRANSFERS_MAX_RANKS = 256
TRANSFER_LINES = 12  # receivers listed per step; past it the middle is elided
SHAPE_GROUPS = 4  # groups of ranks by local shape listed per step; past it, the largest


@dataclass(frozen=True, slots=True)
class Request:
    """One question: redistribute a tensor of ``shape`` and ``dtype`` on ``mesh`` from ``src``
    to ``dst`` (placements canonical: shard dims non-negative)."""

    shape: tuple[int, ...]
    mesh: tuple[int, ...]
    src: Placements
    dst: Placements
    dtype: str


def parse_request(shape: str, mesh: str, src: str, dst: str, dtype: str = "float32") -> Request:
    """A ``Request`` from the command line's strings; ValueError names the first bad one."""
    sizes = parse_sizes(shape, "--shape")
    mesh_sizes = parse_sizes(mesh, "--mesh", least=1)
    if not mesh_sizes:
        raise ValueError("--mesh: expected at least one mesh dim, e.g. 2,4")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return Request(
        sizes,
        mesh_sizes,
        _placements(src, "--from", sizes, mesh_sizes),
        _placements(dst, "--to", sizes, mesh_sizes),
        dtype,
    )


def _placements(text: str, flag: str, shape: tuple[int, ...], mesh: tuple[int, ...]) -> Placements:
    """``parse_placements`` with its messages naming ``flag`` (they name ``--placements``)."""
    try:
        return parse_placements(text, len(shape), mesh)
    except ValueError as e:
        raise ValueError(str(e).replace("--placements", flag, 1)) from None


# --------------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True, slots=True)
class ShapeGroup:
    """The ranks (global, row-major over the mesh) whose local shape goes from ``before`` to
    ``after`` in a step."""

    ranks: tuple[int, ...]
    before: tuple[int, ...]
    after: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Transfer:
    """Rank ``receiver`` gets ``elements`` elements from rank ``sender`` (global ranks)."""

    receiver: int
    sender: int
    elements: int


@dataclass(frozen=True, slots=True)
class StepReport:
    """One step of the plan as shown: the step, how many ranks each of its groups holds, the
    local shapes, who sends what to whom (None when the mesh has more than ``TRANSFERS_MAX_RANKS``
    ranks; empty for a local step or a reduction) and the most peers a rank receives from
    (counted from the transfers where they are listed: ``Step.peers`` counts a gather's whole
    group, also peers that hold nothing)."""

    step: Step
    group_size: int
    shapes: tuple[ShapeGroup, ...]
    transfers: tuple[Transfer, ...] | None
    peers: int


@dataclass(frozen=True, slots=True, repr=False)
class RedistributionReport(Printed):
    """Everything ``explain_redistribution`` computed; rendering reads it and computes
    nothing new. ``limit`` is ``physical_limit(plan)`` (elements). ``str`` (and ``repr``) is
    the text ``cute-shard redistribute`` prints and ``to_json()`` the object ``--json``
    prints."""

    request: Request
    plan: Plan
    limit: int
    src_layout: ShardedLayout | None
    dst_layout: ShardedLayout | None
    steps: tuple[StepReport, ...]
    pictures: tuple[Picture, ...]
    torch: TorchReference | None

    def lines(self, *, grid: bool = True) -> list[str]:
        return render_text(self, grid=grid)

    def to_json(self) -> dict[str, object]:
        """The object ``--json`` prints (``json.dumps(..., indent=2)`` gives the same text)."""
        return to_json(self)


def explain_redistribution(
    request: Request, *, compare_torch: bool = False
) -> RedistributionReport:
    """Plan the redistribution (``plan_redistribution``, steps over several mesh dims allowed)
    and gather what the report shows; ``compare_torch`` adds ``torch_reference``'s answer."""
    r = request
    plan = plan_redistribution(r.shape, r.mesh, r.src, r.dst)  # torch-free: checks come first
    from ..engine import placements_to_layout

    theirs = None
    if compare_torch:
        from .torch_reference import torch_reference

        theirs = torch_reference(r.shape, r.mesh, r.src, r.dst, r.dtype)
    return RedistributionReport(
        request=r,
        plan=plan,
        limit=physical_limit(plan),
        src_layout=placements_to_layout(r.shape, [p.to_torch() for p in r.src], r.mesh),
        dst_layout=placements_to_layout(r.shape, [p.to_torch() for p in r.dst], r.mesh),
        steps=tuple(_step_report(plan, s) for s in plan.steps),
        pictures=(
            picture(f"from {placements_str(r.src)}", r.shape, r.src, r.mesh),
            picture(f"to {placements_str(r.dst)}", r.shape, r.dst, r.mesh),
        ),
        torch=theirs,
    )


def _step_report(plan: Plan, step: Step) -> StepReport:
    coords = _coords(plan.mesh)
    rank_of = {c: r for r, c in enumerate(coords)}
    groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
    for r, c in enumerate(coords):
        key = (plan.local_shape(step.before, c), plan.local_shape(step.after, c))
        groups.setdefault(key, []).append(r)
    moved: tuple[Transfer, ...] | None = None
    peers = step.peers
    if len(coords) <= TRANSFERS_MAX_RANKS:
        moved = tuple(
            Transfer(rank_of[to], rank_of[frm], n) for to, frm, n in transfers(plan, step)
        )
        peers = max((len(sent) for _, sent in _by_receiver(moved)), default=0)
    return StepReport(
        step,
        math.prod(plan.mesh[m] for m in step.mesh_dims),
        tuple(ShapeGroup(tuple(rs), a, b) for (a, b), rs in groups.items()),
        moved,
        peers,
    )


def _coords(mesh: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every mesh coordinate, in global rank order (row-major, as ``init_device_mesh``)."""
    from ..oracle import mesh_coords

    return list(mesh_coords(mesh))


# --------------------------------------------------------------------------------------------
# Text


def render_text(rep: RedistributionReport, *, grid: bool = True) -> list[str]:
    """The human-readable report, one list entry per line."""
    r = rep.request
    lines = [
        *row("redistribute", f"{tuple_text(r.shape)} from {placements_str(r.src)} to "
              f"{placements_str(r.dst)}"),
        *row("mesh", f"{tuple_text(r.mesh)}, {math.prod(r.mesh)} ranks, {r.dtype}"),
        *_layout_rows("from", r.src, rep.src_layout, r.shape),
        *_layout_rows("to", r.dst, rep.dst_layout, r.shape),
        *_move_rows(rep.plan),
        *_plan_rows(rep),
        *_limit_rows(rep),
    ]  # fmt: skip
    if rep.torch is not None:
        lines += _torch_rows(rep, rep.torch)
    if grid:
        lines += grid_rows(rep.pictures)
    return lines


def _layout_rows(
    label: str, placements: Placements, sl: ShardedLayout | None, shape: tuple[int, ...]
) -> list[str]:
    empty = any(p.kind in ("S", "SS") and not shape[p.dim] for p in placements)
    why = "(a sharded dim of size 0)" if empty else "(uneven shards)"
    return layout_rows(
        label, placements, sl, f"{why}; the planner reads its runs of owners instead"
    )


def _dims(mesh_dims: Sequence[int]) -> str:
    return ",".join(f"m{m}" for m in mesh_dims)


def _move_rows(plan: Plan) -> list[str]:
    if not plan.moves:
        return row("moves", "none: every mesh dim keeps its sub-mode, so nothing moves")
    moving = [m.mesh_dim for m in plan.moves]
    kept = [m for m in range(len(plan.mesh)) if m not in moving]
    verb = "moves" if len(moving) == 1 else "move"
    head = f"{', '.join(f'm{m}' for m in moving)} {verb}"
    if kept:
        keeps = "keeps its sub-mode" if len(kept) == 1 else "keep their sub-modes"
        head += f"; {', '.join(f'm{m}' for m in kept)} {keeps}"
    lines = row("moves", head)
    for move in plan.moves:
        lines += row(f"m{move.mesh_dim}", f"{move.src} -> {move.dst}: {move.kind.value}", 2)
        lines += row("why", move.reason, 4)
    return lines


def _plan_rows(rep: RedistributionReport) -> list[str]:
    plan, itemsize = rep.plan, DTYPES[rep.request.dtype]
    if not plan.steps:
        return row("plan", "nothing to do: every rank already holds its target shard")
    n = len(plan.steps)
    colls = sum(1 for s in plan.steps if s.collective is not None)
    lines = row(
        "plan",
        f"{n} step{'s' if n != 1 else ''}, {colls} collective{'s' if colls != 1 else ''}"
        + (", in this order" if n > 1 else ""),
    )
    if plan.split:
        lines += row(
            "split", "no collective over several mesh dims: they exchange one at a time", 2
        )
    for i, sr in enumerate(rep.steps, 1):
        lines += _step_rows(i, sr, rep.request, itemsize)
    return lines


def _step_rows(i: int, sr: StepReport, r: Request, itemsize: int) -> list[str]:
    s = sr.step
    kind = s.kind.value + (f" ({s.reduce_op})" if s.reduce_op and s.kind.value != "chunk" else "")
    if s.collective is None:
        head = f"{kind} on {_dims(s.mesh_dims)}: local, nothing is sent"
    else:
        head = f"{kind} over {_dims(s.mesh_dims)} ({sr.group_size} ranks): {s.collective}"
    lines = row(f"step {i}", head, 2) + row("local", _shapes_text(sr.shapes), 4)
    upto = "" if s.uniform else "up to "
    if s.kind.reduces:
        lines += row(
            "reduces", f"{upto}{fmt_bytes(s.reduced * itemsize)} per rank, handed to the "
            f"{s.reduce_op}", 4
        )  # fmt: skip
    elif s.collective is not None:
        peers = f"{sr.peers} peer{'s' if sr.peers != 1 else ''}"
        lines += row(
            "receives", f"{upto}{fmt_bytes(s.received * itemsize)} per rank, from "
            f"{'up to ' if not s.uniform and sr.peers > 1 else ''}{peers}", 4
        )  # fmt: skip
        lines += _transfer_rows(sr, r, itemsize)
    return lines


def _shapes_text(groups: Sequence[ShapeGroup]) -> str:
    if len(groups) == 1:
        g = groups[0]
        return f"{tuple_text(g.before)} -> {tuple_text(g.after)} on every rank"
    if len(groups) <= SHAPE_GROUPS:
        return "; ".join(
            f"{_ranks(g.ranks)} {tuple_text(g.before)} -> {tuple_text(g.after)}" for g in groups
        )
    most_before = tuple(max(n) for n in zip(*(g.before for g in groups), strict=True))
    most_after = tuple(max(n) for n in zip(*(g.after for g in groups), strict=True))
    first = next(g for g in groups if 0 in g.ranks)
    return (
        f"at most {tuple_text(most_before)} -> {tuple_text(most_after)} (per dim, over ranks); "
        f"rank 0 {tuple_text(first.before)} -> {tuple_text(first.after)}"
    )


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"


def _transfer_rows(sr: StepReport, r: Request, itemsize: int) -> list[str]:
    if sr.transfers is None:
        return row(
            "transfers",
            f"not listed: {math.prod(r.mesh)} ranks (listed up to {TRANSFERS_MAX_RANKS})",
            4,
        )
    lines = [_receiver_text(to, sent, itemsize) for to, sent in _by_receiver(sr.transfers)]
    if len(lines) > TRANSFER_LINES:
        half = TRANSFER_LINES // 2
        lines = [*lines[:half], f"⋮ {len(lines) - 2 * half} more receivers", *lines[-half:]]
    out = row("transfers", lines[0], 4) if lines else row("transfers", "none", 4)
    for text in lines[1:]:
        out += row("", text, 4)
    return out


def _by_receiver(moved: Sequence[Transfer]) -> list[tuple[int, list[Transfer]]]:
    out: dict[int, list[Transfer]] = {}
    for t in moved:
        out.setdefault(t.receiver, []).append(t)
    return sorted(out.items())


def _receiver_text(to: int, sent: Sequence[Transfer], itemsize: int) -> str:
    """``rank 0 <- ranks 1-3: 384 B each``: the senders of one receiver, grouped by amount."""
    amounts: dict[int, list[int]] = {}
    for t in sent:
        amounts.setdefault(t.elements, []).append(t.sender)
    parts = []
    for n, senders in amounts.items():
        each = " each" if len(senders) > 1 else ""
        parts.append(f"{_ranks(sorted(senders))}: {fmt_bytes(n * itemsize)}{each}")
    return f"rank {to} <- " + ", ".join(parts)


def ratio(received: int, limit: int) -> float | None:
    """``received / limit``, or None when the limit is 0 (then 0 received is the limit)."""
    return received / limit if limit else None


def _ratio_text(received: int, limit: int) -> str:
    x = ratio(received, limit)
    if x is not None:
        return f"{x:.2f}x"
    return "1.00x" if not received else "above a limit of nothing"


def _limit_rows(rep: RedistributionReport) -> list[str]:
    plan, itemsize = rep.plan, DTYPES[rep.request.dtype]
    lines = row(
        "received",
        f"{fmt_bytes(plan.received * itemsize)} by the busiest rank ({rep.request.dtype})",
    )
    if plan.reduced:
        lines += row("reduced", f"{fmt_bytes(plan.reduced * itemsize)} handed to reductions")
    if not rep.limit:
        return lines + row(
            "limit", "0 B: every rank already holds its target shard (Partial counted as held)"
        )
    return lines + row(
        "limit",
        f"{fmt_bytes(rep.limit * itemsize)}, the most of its target shard a rank lacks: "
        f"received / limit = {_ratio_text(plan.received, rep.limit)}",
    )


def _torch_rows(rep: RedistributionReport, t: TorchReference) -> list[str]:
    itemsize = DTYPES[rep.request.dtype]
    label = f"torch {t.version}"
    if t.steps is None:
        return row(label, f"its planner raises {t.error}" if t.error else f"{t.skipped}")
    plan = ", ".join(str(s) for s in t.steps) or "nothing to do"
    lines = row(label, f"plan: {plan} (its transform infos, as it reads the specs)")
    if t.skipped is not None:
        return lines + row("run", t.skipped, 2)
    if t.error is not None:
        return lines + row("result", f"raises {t.error}", 2)
    colls = [
        f"{c.op} over {c.group_size} ranks: "
        + (f"reduces {fmt_bytes(c.reduced * itemsize)}" if c.reduced else
           f"receives {fmt_bytes(c.received * itemsize)}")
        for c in t.collectives
    ] or ["none"]  # fmt: skip
    lines += row("collectives", colls[0], 2)
    for text in colls[1:]:
        lines += row("", text, 2)
    if t.unmeasured:
        lines += row("unmeasured", ", ".join(t.unmeasured) + ": not counted below", 2)
    received = t.received or 0
    lines += row(
        "received",
        f"{fmt_bytes(received * itemsize)} by the busiest rank: "
        f"{_ratio_text(received, rep.limit)} the limit",
        2,
    )
    if t.reduced:
        lines += row("reduced", f"{fmt_bytes(t.reduced * itemsize)} handed to reductions", 2)
    ranks = math.prod(rep.request.mesh)
    if t.wrong_ranks:
        lines += row(
            "result",
            f"WRONG on ranks {list(t.wrong_ranks)}: their local tensors are not the target's "
            "shards, and no error is raised",
            2,
        )
    else:
        lines += row("result", f"right on all {ranks} ranks", 2)
    return lines


# --------------------------------------------------------------------------------------------
# JSON


def to_json(rep: RedistributionReport) -> dict[str, object]:
    """A machine-readable report. ``shape``, ``mesh``, ``from``, ``to`` and ``dtype`` are the
    inputs in command-line notation, so re-running with them gives the same object. Bytes
    are for ``dtype``; ranks are global, row-major over the mesh."""
    r, plan = rep.request, rep.plan
    itemsize = DTYPES[r.dtype]
    return {
        "shape": list(r.shape),
        "mesh": list(r.mesh),
        "from": [str(p) for p in r.src],
        "to": [str(p) for p in r.dst],
        "dtype": r.dtype,
        "from_layout": layout_json(rep.src_layout),
        "to_layout": layout_json(rep.dst_layout),
        "moves": [
            {
                "mesh_dim": m.mesh_dim,
                "from": str(m.src),
                "to": str(m.dst),
                "kind": m.kind.value,
                "reason": m.reason,
            }
            for m in plan.moves
        ],
        "steps": [_step_json(s, itemsize) for s in rep.steps],
        "received_bytes": plan.received * itemsize,
        "reduced_bytes": plan.reduced * itemsize,
        "limit_bytes": rep.limit * itemsize,
        "ratio": ratio(plan.received, rep.limit),
        "split": plan.split,
        "torch": None if rep.torch is None else _torch_json(rep.torch, rep.limit, itemsize),
    }


def _step_json(sr: StepReport, itemsize: int) -> dict[str, object]:
    s = sr.step
    return {
        "kind": s.kind.value,
        "mesh_dims": list(s.mesh_dims),
        "collective": s.collective,
        "group_size": sr.group_size,
        "received_bytes": s.received * itemsize,
        "reduced_bytes": s.reduced * itemsize,
        "reduce_op": s.reduce_op,
        "peers": sr.peers,
        "uniform": s.uniform,
        "local_shapes": [
            {"ranks": list(g.ranks), "before": list(g.before), "after": list(g.after)}
            for g in sr.shapes
        ],
        "transfers": None
        if sr.transfers is None
        else [
            {"to": t.receiver, "from": t.sender, "bytes": t.elements * itemsize}
            for t in sr.transfers
        ],
    }


def _torch_json(t: TorchReference, limit: int, itemsize: int) -> dict[str, object]:
    received = None if t.received is None else t.received * itemsize
    return {
        "version": t.version,
        "steps": None
        if t.steps is None
        else [{"mesh_dim": s.mesh_dim, "from": str(s.src), "to": str(s.dst)} for s in t.steps],
        "collectives": [
            {
                "op": c.op,
                "group_size": c.group_size,
                "received_bytes": c.received * itemsize,
                "reduced_bytes": c.reduced * itemsize,
            }
            for c in t.collectives
        ],
        "received_bytes": received,
        "reduced_bytes": None if t.reduced is None else t.reduced * itemsize,
        "ratio": None if t.received is None else ratio(t.received, limit),
        "right": t.right,
        "wrong_ranks": None if t.wrong_ranks is None else list(t.wrong_ranks),
        "error": t.error,
        "skipped": t.skipped,
        "unmeasured": list(t.unmeasured),
    }

"""Redistribution benchmarks: bytes against the physical limit, planning time, FSDP2 + TP.

Three suites (``python -m bench --suite redistribute`` runs all three):

- **redistribute-bytes**: a seeded mix of redistributions (``redistribute_cases``: plain,
  stacked, uneven, strided, the shardings views produce, and the named cases). For each,
  the busiest rank's bytes received under cute_shard's plan (``plan.received``), the physical
  limit (``physical_limit``: the most bytes of its target shard a rank lacks), and torch's,
  measured exactly: torch's own ``DTensor.redistribute`` (cute_shard not installed) runs under
  ``LocalTensorMode`` on a fake world of the mesh's size, and every collective it runs is
  metered per rank (the elements each rank receives, padding included; reductions counted
  apart). Each result is checked against the oracle (``cute_shard.oracle.local_shard``);
  cute_shard's plan is executed the same way, so its metered bytes check ``plan.received``.
  Reductions (all-reduce, reduce-scatter) are not data a rank lacks, so neither side's
  bytes count them; the table shows the elements each side hands to reductions beside.

  torch reads a ``_StridedShard`` in a source spec two ways: a DTensor made by
  ``distribute_tensor`` / ``from_local`` reads it as an encoded shard order (the spec's
  default ``use_strided_shard_as_shard_order``), a view's output by its split factor (the
  flag False). Where the source has one, both readings run: **from_local** and **view
  output**; each category is summarised in the reading users meet it in (view outputs for
  ``view -> plain``, from_local otherwise) and both are counted. A redistribution target is
  always built with the default flag, as ``DTensor.redistribute`` builds it.
- **redistribute-planning**: cold plan + price, ``cute_shard.redistribute.dtensor
  .redistribute_cost`` (its caches keyed by sizes emptied, its tables of meshes and
  placements warm: a known placement pair at a new size, ``clear_ours``; and **first
  sight**, the placement tables emptied too, ``clear_first_sight``) against torch's
  ``_collective_utils.redistribute_cost`` (its transform-info and planner caches emptied),
  per case, side by side in interleaved rounds, on ``DTensorSpec``s over a fake 8-rank world.
  Grouped by the planner torch runs: **graph** (a ``_StridedShard`` in either spec, read as a
  view's output as op strategies price it), **greedy** (plain and stacked shards), and
  **none** (a ``_StridedShard`` read as from_local: torch prices it infinite without
  planning). Also warm (cached) prices, and the plan alone (``plan_redistribution`` against
  torch's ``_gen_transform_infos_non_cached``), cold. Cold plan + price is also timed **back
  to back** (each side's calls on every case in a row, the side that goes first alternating
  by round), as an op's strategies price many pairs in a row: interleaved, each of our calls
  runs right after torch's graph search, which leaves our code and tables to be read back
  from memory. And **large meshes**: cold plan + price, interleaved, of a transformer's
  activations and weights on meshes of 1,024 ranks (``large_mesh_pairs``: (128, 8),
  (16, 8, 8), (8, 4, 32); uneven sequence lengths and vocabularies beside even ones) on a fake
  world of that size, where the planner counts one rank per class (``labels.rank_classes``).
- **redistribute-fsdp**: the FSDP2 + TP weight ``[_S(0, 4), S(0)] <-> [S(0), S(0)]`` on
  (2, 4) at a realistic size, both ways: bytes against the limit, the collectives, ours
  checked against the oracle (the suite raises if it differs).

    python -m bench --suite redistribute-bytes --cases 240
    python -m bench --suite redistribute --quick
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode, rank_map
from torch.distributed._local_tensor import _c10d as local_c10d
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor import _collective_utils as torch_collective_utils
from torch.distributed.tensor import _redistribute as torch_redistribute
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor.placement_types import Placement

import cute_shard
from cute_shard import oracle
from cute_shard._compat import local_tensor_group
from cute_shard.notation import PlacementSpec
from cute_shard.redistribute import Plan, physical_limit, plan_redistribution
from cute_shard.redistribute import dtensor as ours_dtensor
from cute_shard.redistribute import labels as ours_labels
from cute_shard.redistribute import plan as ours_plan

from .harness import clock_overhead_ns, geomean, interleave, table, time_loop
from .redistribute_cases import (
    CATEGORIES,
    Pair,
    bytes_pairs,
    fsdp_pairs,
    large_mesh_pairs,
    planning_pairs,
)

__all__ = ["Meter", "run_bytes", "run_fsdp", "run_planning"]

DTYPE = torch.float32
ITEMSIZE = torch.empty((), dtype=DTYPE).element_size()
FROM_LOCAL = "from_local"
VIEW_OUTPUT = "view output"
READINGS = (FROM_LOCAL, VIEW_OUTPUT)


# ------------------------------------------------------------------------------- metering


@dataclass
class Meter:
    """What each simulated rank receives from the collectives run while it is active.

    ``received[rank]``: elements that reach the rank from other ranks in data collectives
    (all-gather, all-to-all, shard-dim all-to-all): a collective's output on the rank less
    the part it contributed itself, so padding that travels counts. ``reduced[rank]``:
    elements the rank hands to reductions (all-reduce, reduce-scatter). ``ops``: the
    collectives, in order, by torch's functional op name. ``unmetered``: collectives seen
    but not measured (none of DTensor's redistribution paths uses them).
    """

    received: dict[int, int] = field(default_factory=dict)
    reduced: dict[int, int] = field(default_factory=dict)
    ops: list[str] = field(default_factory=list)
    unmetered: list[str] = field(default_factory=list)

    def busiest_received(self) -> int:
        return max(self.received.values(), default=0)

    def busiest_reduced(self) -> int:
        return max(self.reduced.values(), default=0)

    def _add(self, into: dict[int, int], rank: int, n: int) -> None:
        into[rank] = into.get(rank, 0) + n


_METERED: list[Meter] = []  # the active meter, if any (one at a time)


def _group_ranks(group: Any) -> list[list[int]]:
    """The global ranks of every copy of ``group`` (one per coordinate of the other dims)."""
    ranks, offsets = local_tensor_group(group)
    return [[o + r for r in ranks] for o in offsets]


def _per_rank_ints(sizes: Sequence[Any], rank: int) -> list[int]:
    """Split sizes as ints on ``rank`` (per-rank SymInts under LocalTensorMode)."""
    out = []
    for s in sizes:
        node = getattr(s, "node", None)
        local = getattr(node, "_local_ints", None)
        out.append(int(local[rank]) if local is not None else int(s))
    return out


def _all_gather(meter: Meter, out: Any, args: dict[str, Any]) -> None:
    inp = args["tensor"]._local_tensors
    for rank, t in out._local_tensors.items():
        meter._add(meter.received, rank, t.numel() - inp[rank].numel())


def _all_to_all(meter: Meter, out: Any, args: dict[str, Any]) -> None:
    inp = args["tensor"]._local_tensors
    for group in _group_ranks(args["group_name"]):
        for i, rank in enumerate(group):
            if rank not in out._local_tensors:
                continue
            own_rows = _per_rank_ints(args["input_split_sizes"], rank)[i]
            row = math.prod(inp[rank].shape[1:])
            meter._add(meter.received, rank, out._local_tensors[rank].numel() - own_rows * row)


def _shard_dim_all_to_all(meter: Meter, out: Any, args: dict[str, Any]) -> None:
    """``cat`` of the group's tensors along gather_dim, then piece i along shard_dim to the
    i-th rank: what a rank keeps of its own is its tensor's overlap with its piece."""
    inp = args["tensor"]._local_tensors
    gather_dim, shard_dim = args["gather_dim"], args["shard_dim"]
    for group in _group_ranks(args["group_name"]):
        for i, rank in enumerate(group):
            if rank not in out._local_tensors:
                continue
            mine = inp[rank]
            total = sum(inp[r].shape[shard_dim] for r in group) if gather_dim == shard_dim else 0
            piece = (total or mine.shape[shard_dim]) // len(group)
            lo, hi = i * piece, (i + 1) * piece
            if gather_dim == shard_dim:
                start = sum(inp[r].shape[shard_dim] for r in group[:i])
                keep = max(0, min(hi, start + mine.shape[shard_dim]) - max(lo, start))
            else:
                keep = max(0, min(hi, mine.shape[shard_dim]) - lo)
            own = mine.numel() // max(mine.shape[shard_dim], 1) * keep
            meter._add(meter.received, rank, out._local_tensors[rank].numel() - own)


def _reduction(meter: Meter, out: Any, args: dict[str, Any]) -> None:
    tensor = args["tensor"] if "tensor" in args else args["tensors"][0]
    for rank, t in tensor._local_tensors.items():
        meter._add(meter.reduced, rank, t.numel())


# LocalTensorMode's implementation of each collective, the name DTensor's code knows it by,
# and how to meter it.
_HOOKS: dict[str, tuple[str, Callable[[Meter, Any, dict[str, Any]], None] | None]] = {
    "_local_functional_all_gather_into_tensor": ("all_gather_into_tensor", _all_gather),
    "_local_functional_all_to_all_single": ("all_to_all_single", _all_to_all),
    "_local_functional_shard_dim_alltoall": ("shard_dim_alltoall", _shard_dim_all_to_all),
    "_local_functional_reduce_scatter_tensor": ("reduce_scatter_tensor", _reduction),
    "_local_all_reduce_": ("all_reduce", _reduction),
    "_local_broadcast_": ("broadcast", None),
    "_local_all_gather_": ("all_gather", None),
    "_local_allgather_base_": ("all_gather_base", None),
    "_local_reduce_scatter_base_": ("reduce_scatter_base", None),
    "_local_alltoall_": ("all_to_all", None),
    "_local_alltoall_base_": ("all_to_all_base", None),
    "_local_scatter_": ("scatter", None),
    "_local_send": ("send", None),
    "_local_recv_": ("recv", None),
}


def _hooked(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    op, meter_fn = _HOOKS[name]
    signature = inspect.signature(original)

    @functools.wraps(original)
    def hook(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if _METERED:
            meter = _METERED[-1]
            meter.ops.append(op)
            if meter_fn is None:
                meter.unmetered.append(op)
            else:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                meter_fn(meter, out, dict(bound.arguments))
        return out

    return hook


@contextmanager
def metered() -> Iterator[Meter]:
    """Meter the collectives LocalTensorMode runs in the block."""
    meter = Meter()
    saved = {name: getattr(local_c10d, name) for name in _HOOKS if hasattr(local_c10d, name)}
    for name, original in saved.items():
        setattr(local_c10d, name, _hooked(name, original))
    _METERED.append(meter)
    try:
        yield meter
    finally:
        _METERED.pop()
        for name, original in saved.items():
            setattr(local_c10d, name, original)


# ------------------------------------------------------------------------ simulated worlds


def unavailable() -> str | None:
    """Why the simulated suites cannot run here, or None."""
    if dist.is_initialized():
        return (
            f"a {dist.get_backend()!r} process group is already initialised; these suites "
            "make fake ones of each mesh's size"
        )
    return None


@contextmanager
def simulated_world(size: int) -> Iterator[None]:
    """A fake process group of ``size`` ranks, every rank simulated in this process."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
    try:
        with LocalTensorMode(frozenset(range(size))):
            yield
    finally:
        dist.destroy_process_group()


def _torch(ps: Sequence[PlacementSpec]) -> tuple[Placement, ...]:
    return tuple(p.to_torch() for p in ps)


def _full(shape: tuple[int, ...]) -> torch.Tensor:
    # Small integers: float32 holds them, and Partial's parts, exactly.
    return torch.arange(math.prod(shape), dtype=DTYPE).reshape(shape)


def _source_local(full: torch.Tensor, pair: Pair, coord: tuple[int, ...]) -> torch.Tensor:
    """The rank's source shard; a Partial mesh dim splits each value into parts that sum
    to it (coordinate 0 keeps the remainder), exactly in float32."""
    t = oracle.local_shard(full, _torch(pair.src), pair.mesh, coord)
    for m, p in enumerate(pair.src):
        if p.kind == "P":
            size = pair.mesh[m]
            base = torch.floor(t / size)
            t = base + (t - base * size if coord[m] == 0 else 0)
    return t.contiguous()


def _source(pair: Pair, mesh: DeviceMesh, reading: str) -> DTensor:
    full = _full(pair.shape)
    coords = list(itertools.product(*(range(n) for n in pair.mesh)))
    local = rank_map(lambda r: _source_local(full, pair, coords[r]))
    if reading == FROM_LOCAL:
        return DTensor.from_local(
            local,
            mesh,
            _torch(pair.src),
            run_check=False,
            shape=full.shape,
            stride=full.stride(),
        )
    spec = DTensorSpec(
        mesh,
        _torch(pair.src),
        tensor_meta=TensorMeta(full.shape, full.stride(), DTYPE),
        use_strided_shard_as_shard_order=False,
    )
    return DTensor(local, spec, requires_grad=False)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Run:
    """One side's redistribution of a pair, run on every simulated rank."""

    reading: str
    received: int | None  # elements, the busiest rank; None: it raised
    reduced: int | None
    ops: tuple[str, ...]
    correct: bool | None
    error: str | None = None
    unmetered: tuple[str, ...] = ()


def run_pair(pair: Pair, mesh: DeviceMesh, reading: str, ours: bool) -> Run:
    """Redistribute ``pair`` with ``DTensor.redistribute`` (cute_shard's redistribution
    installed with ``ours``, torch's otherwise), metered, and check every rank's result."""
    (ours_dtensor.install if ours else ours_dtensor.uninstall)()
    try:
        x = _source(pair, mesh, reading)
        with metered() as meter:
            try:
                y = x.redistribute(mesh, _torch(pair.dst))
            except Exception as e:  # reported, not raised: torch 2.13 fails some
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                error = f"{type(e).__name__}: {first}"
                return Run(reading, None, None, tuple(meter.ops), None, error)
    finally:
        ours_dtensor.uninstall()
    full = _full(pair.shape)
    got: dict[int, torch.Tensor] = y._local_tensor._local_tensors  # type: ignore[attr-defined]
    correct = all(
        got[r].shape == want.shape and torch.equal(got[r], want)
        for r, coord in enumerate(itertools.product(*(range(n) for n in pair.mesh)))
        for want in [oracle.local_shard(full, _torch(pair.dst), pair.mesh, coord)]
    )
    return Run(
        reading,
        meter.busiest_received(),
        meter.busiest_reduced(),
        tuple(meter.ops),
        correct,
        unmetered=tuple(meter.unmetered),
    )


# ------------------------------------------------------------------------------ bytes


@contextmanager
def _quiet_torch() -> Iterator[None]:
    """Silence torch's advice to flatten meshes (printed per redistribution it splits)."""
    import logging

    log = logging.getLogger(torch_redistribute.__name__)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _steps(plan: Plan) -> tuple[str, ...]:
    """Each step as ``kind(mesh dims)=collective`` (``local`` for a local step)."""
    return tuple(
        f"{s.kind.value}({','.join(f'm{m}' for m in s.mesh_dims)})={s.collective or 'local'}"
        for s in plan.steps
    )


def _reading(pair: Pair) -> str:
    """The reading users meet the pair's source in: a view's output is read by its split
    factor; a DTensor made by from_local / distribute_tensor by its default."""
    return VIEW_OUTPUT if pair.category == "view -> plain" else FROM_LOCAL


@dataclass(frozen=True)
class TorchBytes:
    reading: str
    bytes: int | None  # None: it raised
    reduced_bytes: int | None
    ops: tuple[str, ...]
    correct: bool | None
    error: str | None


@dataclass(frozen=True)
class BytesRow:
    case: str
    category: str
    name: str
    reading: str  # the reading users meet it in (``_reading``)
    limit: int  # bytes: the physical limit
    ours: int  # bytes the busiest rank receives under the plan
    ours_measured: int  # the same, metered while the plan ran
    ours_reduced: int
    ours_correct: bool
    ours_steps: tuple[str, ...]
    split: bool
    torch: tuple[TorchBytes, ...]  # one per reading (two where the source is strided)
    ours_error: str | None = None  # what cute_shard's redistribution raised, if it did

    def torch_in(self, reading: str | None = None) -> TorchBytes:
        want = reading or self.reading
        return next((t for t in self.torch if t.reading == want), self.torch[0])


def measure_bytes(pair: Pair, mesh: DeviceMesh) -> BytesRow:
    """Plan, limit, ours executed and metered (once, in the pair's reading), torch's in
    each reading the source has."""
    plan = plan_redistribution(pair.shape, pair.mesh, pair.src, pair.dst)
    reading = _reading(pair)
    ours = run_pair(pair, mesh, reading, ours=True)
    readings = READINGS if pair.src_strided else (FROM_LOCAL,)
    torch_runs = []
    for r in readings:
        run = run_pair(pair, mesh, r, ours=False)
        torch_runs.append(
            TorchBytes(
                r,
                None if run.received is None else run.received * ITEMSIZE,
                None if run.reduced is None else run.reduced * ITEMSIZE,
                run.ops,
                run.correct,
                run.error,
            )
        )
    return BytesRow(
        str(pair),
        pair.category,
        pair.name,
        reading if pair.src_strided else FROM_LOCAL,
        physical_limit(plan) * ITEMSIZE,
        plan.received * ITEMSIZE,
        (ours.received or 0) * ITEMSIZE,
        (ours.reduced or 0) * ITEMSIZE,
        bool(ours.correct) and ours.error is None,
        _steps(plan),
        plan.split,
        tuple(torch_runs),
        ours.error,
    )


def _by_world(pairs: Sequence[Pair]) -> dict[int, list[Pair]]:
    out: dict[int, list[Pair]] = {}
    for p in pairs:
        out.setdefault(math.prod(p.mesh), []).append(p)
    return dict(sorted(out.items()))


def measure_all(pairs: Sequence[Pair], progress: bool = True) -> list[BytesRow]:
    """``measure_bytes`` of every pair, each world size in its own simulated world; the
    rows come back in the order of ``pairs``."""
    rows: dict[int, BytesRow] = {}
    index = {id(p): i for i, p in enumerate(pairs)}
    cute_shard.uninstall()
    with _quiet_torch():
        for size, group in _by_world(pairs).items():
            t0 = time.perf_counter()
            with simulated_world(size):
                meshes: dict[tuple[int, ...], DeviceMesh] = {}
                for p in group:
                    if p.mesh not in meshes:
                        meshes[p.mesh] = init_device_mesh("cpu", p.mesh)
                    rows[index[id(p)]] = measure_bytes(p, meshes[p.mesh])
            if progress:
                print(
                    f"  redistribute-bytes: {len(group)} cases on {size} simulated ranks, "
                    f"{time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    return [rows[i] for i in range(len(pairs))]


def _ratio(a: float, b: float) -> float:
    return a / b if b else (1.0 if a == 0 else math.inf)


def _x(v: float) -> str:
    return "n/a" if math.isnan(v) else ("inf" if math.isinf(v) else f"{v:.2f}x")


@dataclass(frozen=True)
class BytesSummary:
    category: str
    cases: int
    limit_bytes: int
    ours_x: float  # sum of ours / sum of limits
    torch_x: float  # sum of torch's / sum of limits, over the cases torch ran
    ours_max_x: float  # the largest ours / limit (cases with a limit > 0)
    torch_max_x: float
    torch_wrong: int
    torch_raises: int
    torch_unsimulated: int  # torch's path needs values LocalTensorMode cannot give per rank
    ours_above_limit: int
    ours_above_torch: int
    ours_wrong: int  # a wrong result, or metered bytes other than the plan's


# What LocalTensorMode raises where the code it runs computes a Python value (not a tensor or
# an int) that differs between ranks: the simulation's limit, not the code's error.
_SIMULATION_LIMIT = "Non Tensor or int rank results must be equal for all ranks"


def _unsimulated(error: str) -> bool:
    return _SIMULATION_LIMIT in error


def summarise(category: str, rows: Sequence[BytesRow], reading: str | None = None) -> BytesSummary:
    ran = [(r, r.torch_in(reading)) for r in rows]
    ok = [(r, t) for r, t in ran if t.bytes is not None]
    limits = sum(r.limit for r in rows)
    return BytesSummary(
        category,
        len(rows),
        limits,
        _ratio(sum(r.ours for r in rows), limits),
        _ratio(sum(t.bytes or 0 for _, t in ok), sum(r.limit for r, _ in ok)),
        max((r.ours / r.limit for r in rows if r.limit), default=1.0),
        max(((t.bytes or 0) / r.limit for r, t in ok if r.limit), default=1.0),
        sum(1 for _, t in ok if t.correct is False),
        sum(1 for _, t in ran if t.error and not _unsimulated(t.error)),
        sum(1 for _, t in ran if t.error and _unsimulated(t.error)),
        sum(1 for r in rows if r.ours > r.limit),
        sum(1 for r, t in ok if r.ours > (t.bytes or 0)),
        sum(1 for r in rows if not r.ours_correct or r.ours_measured != r.ours),
    )


def bytes_tables(rows: Sequence[BytesRow], seed: int) -> str:
    categories = [c for c in CATEGORIES if any(r.category == c for r in rows)]
    sums = [summarise(c, [r for r in rows if r.category == c]) for c in categories]
    sums.append(summarise("all", rows))
    header = [
        "category",
        "cases",
        "limit KiB",
        "ours/limit",
        "torch/limit",
        "ours max",
        "torch max",
        "torch wrong",
        "torch raises",
        "unsim.",
        "ours>limit",
        "ours>torch",
        "ours wrong",
    ]
    body = [
        [
            s.category,
            s.cases,
            f"{s.limit_bytes / 1024:.1f}",
            _x(s.ours_x),
            _x(s.torch_x),
            _x(s.ours_max_x),
            _x(s.torch_max_x),
            s.torch_wrong,
            s.torch_raises,
            s.torch_unsimulated,
            s.ours_above_limit,
            s.ours_above_torch,
            s.ours_wrong,
        ]
        for s in sums
    ]
    out = [
        f"\nredistribute-bytes: {len(rows)} redistributions (seed {seed}), float32, bytes the "
        "busiest rank receives / the physical limit (summed per category; max over cases "
        "with a limit > 0). torch: its own DTensor.redistribute, metered on every simulated "
        "rank, the source read as users meet it (view output for 'view -> plain', "
        "from_local otherwise); wrong / raises: against the oracle; unsim.: torch's path "
        "computes per-rank Python values LocalTensorMode cannot simulate (no bytes measured)",
        table(body, header),
    ]
    strided = [r for r in rows if len(r.torch) > 1]
    if strided:
        body = []
        for reading in READINGS:
            s = summarise(reading, strided, reading)
            body.append(
                [
                    reading,
                    s.cases,
                    _x(s.torch_x),
                    _x(s.torch_max_x),
                    s.torch_wrong,
                    s.torch_raises,
                    s.torch_unsimulated,
                ]
            )
        out += [
            f"\ntorch on the {len(strided)} cases whose source has a _StridedShard, in each "
            "reading (from_local: use_strided_shard_as_shard_order by default, the split factor "
            "read as a shard order; view output: the flag False)",
            table(
                body,
                ["reading", "cases", "torch/limit", "torch max", "wrong", "raises", "unsim."],
            ),
        ]
    named = [r for r in rows if r.name]
    if named:
        body = [
            [
                r.name,
                r.limit,
                r.ours,
                r.torch_in().bytes if r.torch_in().bytes is not None else "raises",
                _x(_ratio(r.torch_in().bytes or 0, r.limit))
                if r.torch_in().bytes is not None
                else "",
                _verdict(r.torch_in()),
                " ".join(s.split("=")[0] for s in r.ours_steps if not s.endswith("local")),
                " ".join(r.torch_in().ops),
            ]
            for r in named
        ]
        out += [
            "\nnamed cases (bytes; torch in the from_local reading)",
            table(
                body,
                ["case", "limit", "ours", "torch", "torch/limit", "torch", "ours", "torch ops"],
            ),
        ]
    out.append(_collective_counts(rows))
    worst = sorted(
        (r for r in rows if r.limit and r.torch_in().bytes is not None),
        key=lambda r: -(r.torch_in().bytes or 0) / r.limit,
    )[:5]
    out.append("\ntorch's largest bytes / limit:")
    for r in worst:
        t = r.torch_in()
        out.append(
            f"  {_x((t.bytes or 0) / r.limit)}  {r.case} ({t.reading}): torch "
            f"{' '.join(t.ops)}; ours {' '.join(r.ours_steps)}"
        )
    odd = [r for r in rows if r.ours > r.limit or not r.ours_correct or r.ours_measured != r.ours]
    for r in odd:
        out.append(
            f"  CHECK {r.case}: ours {r.ours} B (metered {r.ours_measured} B), limit "
            f"{r.limit} B, correct {r.ours_correct}, split {r.split}"
            + (f", raises {r.ours_error}" if r.ours_error else "")
        )
    raises = [(r, t) for r in rows for t in r.torch if t.error]
    if raises:
        out.append("\ntorch raises or cannot be simulated (first line of each distinct error):")
        seen: dict[str, str] = {}
        for r, t in raises:
            seen.setdefault(t.error or "", f"{r.case} ({t.reading})")
        for error, case in seen.items():
            out.append(f"  {error[:110]}  e.g. {case}")
    return "\n".join(out)


def _verdict(t: TorchBytes) -> str:
    if t.correct is not None:
        return "ok" if t.correct else "WRONG"
    return "unsim." if t.error and _unsimulated(t.error) else "raises"


def _collective_counts(rows: Sequence[BytesRow]) -> str:
    ours: dict[str, int] = {}
    theirs: dict[str, int] = {}
    for r in rows:
        for s in r.ours_steps:
            name = s.split("=")[1]
            if name != "local":
                ours[name] = ours.get(name, 0) + 1
        for op in r.torch_in().ops:
            theirs[op] = theirs.get(op, 0) + 1
    names = sorted(set(ours) | set(theirs))
    body = [[n, ours.get(n, 0), theirs.get(n, 0)] for n in names]
    body.append(["total", sum(ours.values()), sum(theirs.values())])
    return "\ncollectives run over all cases (ours: the plan's steps; torch: metered)\n" + table(
        body, ["collective", "ours", "torch"]
    )


def run_bytes(n: int = 120, seed: int = 0, pairs: Sequence[Pair] | None = None) -> dict[str, Any]:
    """The bytes suite: ``n`` drawn pairs and the named ones (or ``pairs``); prints the
    tables and returns the rows (JSON-ready)."""
    reason = unavailable()
    if reason:
        print(f"\nredistribute-bytes: skipped ({reason})")
        return {"skipped": reason}
    pairs = bytes_pairs(n, seed) if pairs is None else pairs
    rows = measure_all(pairs)
    print(bytes_tables(rows, seed))
    categories = [c for c in CATEGORIES if any(r.category == c for r in rows)]
    return {
        "seed": seed,
        "itemsize": ITEMSIZE,
        "summary": [
            asdict(summarise(c, [r for r in rows if r.category == c])) for c in [*categories]
        ]
        + [asdict(summarise("all", rows))],
        "rows": [asdict(r) for r in rows],
    }


# ------------------------------------------------------------------------------ planning

GRAPH = "graph (view-output specs)"
GREEDY = "greedy"
NONE = "none (from_local specs: torch prices inf)"
GROUPS = (GRAPH, GREEDY, NONE)
FIRST_SIGHT = "plan + price, first sight"
#: The large meshes' row: cold plan + price of ``large_mesh_pairs`` on a fake world of
#: ``LARGE_WORLD`` ranks.
LARGE = "plan + price, large meshes"
LARGE_WORLD = 1024
BACK_TO_BACK = "plan + price, back to back"


def clear_ours() -> None:
    """Empty cute_shard's redistribution caches: everything keyed by a tensor's sizes (the
    DTensor side's plans and prices, the planner's plans and the ownership labels). The
    tables keyed by a mesh or by placements alone stay warm, as torch's per-mesh
    ``MeshTopoInfo`` does: the per-mesh tables (``labels.mesh_ranks``, a mesh's shape and
    group, a step's link costs) and the planner's tables of placement lists (a list's
    canonical form, each tensor dim's levels and slots, what each mesh dim does, the plan's
    shape: its moves, states and steps; the dims' units, each dim's labels at its unit, which
    a dim of any multiple of it reads scaled, and the unit plan every even shape scales). A
    program fills them once per mesh or pair of placement lists, whatever its sizes: a new
    sequence length every step plans cold, and an even one is the unit plan scaled.
    ``clear_first_sight`` empties the placement tables too."""
    ours_dtensor.cache_clear(tables=False)
    for module, names in ((ours_plan, ("_plan",)), (ours_labels, ("dim_labels", "dim_runs"))):
        for name in names:
            getattr(module, name).cache_clear()


#: The planner's tables of placement lists (see ``clear_ours``).
PLACEMENT_TABLES = (
    (ours_plan, ("_checked", "_checked_pair", "_pair")),
    (ours_labels, ("side",)),
)


def clear_first_sight() -> None:
    """``clear_ours`` and every table of placements too: the first plan a program makes for
    a pair of placement lists (the per-mesh tables stay warm, as torch's do)."""
    clear_ours()
    for module, names in PLACEMENT_TABLES:
        for name in names:
            getattr(module, name).cache_clear()
    ours_dtensor._torch_bans.cache_clear()


def clear_torch() -> None:
    """Empty torch's redistribution planner caches (transform infos and planners)."""
    torch_redistribute._gen_transform_infos.cache_clear()
    torch_redistribute.clear_redistribute_planner_cache()


@dataclass(frozen=True)
class SpecPair:
    group: str  # a name in GROUPS
    category: str
    case: str
    current: DTensorSpec
    target: DTensorSpec
    pair: Pair


def _spec(mesh: DeviceMesh, pair: Pair, ps: Sequence[PlacementSpec], flag: bool | None) -> Any:
    stride = torch.empty(pair.shape, device="meta").stride()
    return DTensorSpec(
        mesh,
        _torch(ps),
        tensor_meta=TensorMeta(torch.Size(pair.shape), stride, DTYPE),
        use_strided_shard_as_shard_order=flag,
    )


def spec_pairs(pairs: Sequence[Pair], meshes: dict[tuple[int, ...], DeviceMesh]) -> list[SpecPair]:
    """Each pair as the specs DTensor prices: a strided pair twice, read as view outputs (as
    op strategies price a view's output; torch's graph planner) and as from_local (torch
    prices it inf without planning); any other once (torch's greedy planner)."""
    out = []
    for p in pairs:
        mesh = meshes[p.mesh]
        readings = ((GRAPH, False), (NONE, None)) if p.strided else ((GREEDY, None),)
        for group, flag in readings:
            out.append(
                SpecPair(
                    group,
                    p.category,
                    str(p),
                    _spec(mesh, p, p.src, flag),
                    _spec(mesh, p, p.dst, flag),
                    p,
                )
            )
    return out


def _ours_cost(s: SpecPair) -> float:
    return ours_dtensor.redistribute_cost(s.current, s.target)


def _torch_cost(s: SpecPair) -> float:
    return torch_collective_utils.redistribute_cost(s.current, s.target)


def _ours_plan(s: SpecPair) -> object:
    return plan_redistribution(s.pair.shape, s.pair.mesh, s.pair.src, s.pair.dst)


def _torch_plan(s: SpecPair) -> object:
    return torch_redistribute._gen_transform_infos_non_cached(s.current, s.target)


Side = Callable[[SpecPair], object]


def _cold(fn: Side, s: SpecPair, clear: Callable[[], None]) -> float:
    """µs of one call after emptying the side's caches (outside the timing)."""
    clock = time.perf_counter_ns
    clear()
    t0 = clock()
    fn(s)
    return max(clock() - t0 - clock_overhead_ns(), 1.0) / 1000


@dataclass(frozen=True)
class CaseTime:
    """One case's cold µs over the rounds: the medians, and the fastest round (a round a
    busy machine preempted shows in the median's neighbours, never in the minimum)."""

    ours: float
    torch: float
    ours_min: float
    torch_min: float


def time_cold(
    cases: Sequence[SpecPair],
    ours: Side,
    theirs: Side,
    rounds: int,
    clear: Callable[[], None] = clear_ours,
    back_to_back: bool = False,
) -> list[CaseTime]:
    """Per case, ours and torch's µs over ``rounds``, each call cold (ours after ``clear``).

    Interleaved (the default), the sides alternate call by call, the side that goes first
    alternating by case and round: each of our calls runs right after one of torch's, whose
    graph search reads megabytes and leaves our code and tables to be read back from memory.
    ``back_to_back``: each round runs one side's calls on every case, then the other's (the
    side that goes first alternating by round), as an op's strategies price many pairs in a
    row (a ``bmm`` on a (2, 4) mesh prices 160) and as a program runs with one planner."""
    import gc

    samples: list[tuple[list[float], list[float]]] = [([], []) for _ in cases]
    sides = ((0, ours, clear), (1, theirs, clear_torch))
    for r in range(rounds):
        gc.disable()
        try:
            if back_to_back:
                for k, fn, cleared in sides if r % 2 else sides[::-1]:
                    for i, s in enumerate(cases):
                        samples[i][k].append(_cold(fn, s, cleared))
                continue
            for i, s in enumerate(cases):
                for k, fn, cleared in sides if (r + i) % 2 else sides[::-1]:
                    samples[i][k].append(_cold(fn, s, cleared))
        finally:
            gc.enable()
    return [
        CaseTime(statistics.median(o), statistics.median(t), min(o), min(t)) for o, t in samples
    ]


def time_warm(cases: Sequence[SpecPair], rounds: int, passes: int = 5) -> tuple[float, float]:
    """Mean µs per call with every cache warm, ours and torch's, medians over interleaved
    rounds."""
    calls = {"cute_shard": _ours_cost, "torch": _torch_cost}
    for fn in calls.values():
        for s in cases:
            fn(s)

    def measure(fn: Side) -> Callable[[int], float]:
        def m(_: int) -> float:
            return time_loop([(fn, (s,)) for s in cases], passes)

        return m

    t = interleave({k: measure(v) for k, v in calls.items()}, rounds)
    return t["cute_shard"].median_us, t["torch"].median_us


@dataclass(frozen=True)
class PlanningRow:
    what: str  # "plan + price", FIRST_SIGHT or "plan alone"
    group: str
    cases: int
    ours_total_us: float
    torch_total_us: float
    total_x: float  # torch total / ours total
    geomean_x: float
    worst_x: float  # the smallest per-case torch / ours
    worst_case: str
    ours_slowest_us: float
    ours_slowest_x: float  # torch / ours on ours' slowest case
    ours_slowest_case: str
    torch_slowest_us: float
    torch_slowest_x: float
    torch_slowest_case: str
    ours_over_1ms: int  # cases whose median is above 1 ms
    ours_over_1ms_every_round: int  # cases above 1 ms in every round (the minimum too)
    warm_ours_us: float | None = None
    warm_torch_us: float | None = None


def _row(
    what: str, group: str, cases: Sequence[SpecPair], times: Sequence[CaseTime]
) -> PlanningRow:
    ratios = [c.torch / c.ours for c in times]
    worst = min(range(len(times)), key=lambda i: ratios[i])
    slow_o = max(range(len(times)), key=lambda i: times[i].ours)
    slow_t = max(range(len(times)), key=lambda i: times[i].torch)
    ours_total = sum(c.ours for c in times)
    theirs_total = sum(c.torch for c in times)
    return PlanningRow(
        what,
        group,
        len(times),
        ours_total,
        theirs_total,
        theirs_total / ours_total,
        geomean(ratios),
        ratios[worst],
        cases[worst].case,
        times[slow_o].ours,
        ratios[slow_o],
        cases[slow_o].case,
        times[slow_t].torch,
        ratios[slow_t],
        cases[slow_t].case,
        sum(1 for c in times if c.ours > 1000),
        sum(1 for c in times if c.ours_min > 1000),
    )


def _screen(cases: Sequence[SpecPair]) -> tuple[list[SpecPair], list[str]]:
    """The cases both sides price and both planners plan; what the others raised."""
    kept, dropped = [], []
    for s in cases:
        try:
            _ours_cost(s)
            _ours_plan(s)
        except Exception as e:
            raise RuntimeError(f"cute_shard cannot price {s.case}: {e}") from e
        try:
            _torch_cost(s)
            if s.group != NONE:
                _torch_plan(s)
        except Exception as e:  # counted and reported: torch 2.13 fails some
            dropped.append(f"{s.case}: {type(e).__name__}: {str(e).strip()[:80]}")
            continue
        kept.append(s)
    return kept, dropped


def run_planning(
    n: int = 120,
    rounds: int = 7,
    seed: int = 0,
    pairs: Sequence[Pair] | None = None,
    large: Sequence[Pair] | None = None,
) -> dict[str, Any]:
    """The planning suite: ``n`` drawn pairs on 8-rank meshes and the named ones that fit
    (or ``pairs``), then the large meshes' pairs (``large``: by default
    ``large_mesh_pairs()``, none when ``pairs`` is given); prints the table and returns the
    rows."""
    from .dtensor_bench import fake_world

    reason = unavailable()
    if reason:
        print(f"\nredistribute-planning: skipped ({reason})")
        return {"skipped": reason}
    rows: list[PlanningRow] = []
    slow: list[str] = []
    cute_shard.uninstall()
    if large is None:
        large = large_mesh_pairs() if pairs is None else ()
    with fake_world(), _quiet_torch():
        pairs = planning_pairs(n, seed) if pairs is None else pairs
        meshes = {m: init_device_mesh("cpu", m) for m in {p.mesh for p in pairs}}
        cases, dropped = _screen(spec_pairs(pairs, meshes))
        for group in GROUPS:
            chosen = [s for s in cases if s.group == group]
            if not chosen:
                continue
            times = time_cold(chosen, _ours_cost, _torch_cost, rounds)
            warm = time_warm(chosen, rounds)
            row = _row("plan + price", group, chosen, times)
            rows.append(
                PlanningRow(**{**asdict(row), "warm_ours_us": warm[0], "warm_torch_us": warm[1]})
            )
            if group != NONE:
                together = time_cold(chosen, _ours_cost, _torch_cost, rounds, back_to_back=True)
                rows.append(_row(BACK_TO_BACK, group, chosen, together))
            slow += [
                f"{s.case} ({group}): median {c.ours:.0f} µs, fastest round {c.ours_min:.0f} µs"
                for s, c in zip(chosen, times, strict=True)
                if c.ours > 1000
            ]
            if group != NONE:
                first = time_cold(chosen, _ours_cost, _torch_cost, rounds, clear_first_sight)
                rows.append(_row(FIRST_SIGHT, group, chosen, first))
                plan_times = time_cold(chosen, _ours_plan, _torch_plan, rounds)
                rows.append(_row("plan alone", group, chosen, plan_times))
            print(f"  redistribute-planning: {group} done", file=sys.stderr, flush=True)
    if large:
        with fake_world(LARGE_WORLD), _quiet_torch():
            meshes = {m: init_device_mesh("cpu", m) for m in {p.mesh for p in large}}
            cases, more = _screen(spec_pairs(large, meshes))
            dropped = [*dropped, *more]
            for group in GROUPS:
                chosen = [s for s in cases if s.group == group]
                if chosen:
                    times = time_cold(chosen, _ours_cost, _torch_cost, rounds)
                    rows.append(_row(LARGE, f"{group}, {LARGE_WORLD:,} ranks", chosen, times))
        print("  redistribute-planning: 1,024 ranks done", file=sys.stderr, flush=True)
    print(planning_table(rows, rounds, dropped))
    for line in slow:
        print(f"  ours above 1 ms cold: {line}")
    return {
        "seed": seed,
        "rounds": rounds,
        "torch_raises": dropped,
        "ours_over_1ms": slow,
        "rows": [asdict(r) for r in rows],
    }


def planning_table(rows: Sequence[PlanningRow], rounds: int, dropped: Sequence[str]) -> str:
    body = [
        [
            r.what,
            r.group,
            r.cases,
            r.ours_total_us / 1000,
            r.torch_total_us / 1000,
            _x(r.total_x),
            _x(r.geomean_x),
            _x(r.worst_x),
            f"{r.ours_slowest_us:.0f} ({_x(r.ours_slowest_x)})",
            f"{r.torch_slowest_us:.0f} ({_x(r.torch_slowest_x)})",
            "" if r.warm_ours_us is None else f"{r.warm_ours_us:.2f}",
            "" if r.warm_torch_us is None else f"{r.warm_torch_us:.2f}",
            "" if r.warm_ours_us is None else _x((r.warm_torch_us or 0) / r.warm_ours_us),
            f"{r.ours_over_1ms} ({r.ours_over_1ms_every_round})",
        ]
        for r in rows
    ]
    header = [
        "what",
        "torch's planner",
        "cases",
        "ours ms",
        "torch ms",
        "total x",
        "geomean x",
        "worst x",
        "ours slowest µs (x)",
        "torch slowest µs (x)",
        "warm ours µs",
        "warm torch µs",
        "warm x",
        "ours >1ms (all rounds)",
    ]
    out = [
        "\nredistribute-planning: cold, the side's plan and price caches emptied before each "
        f"call, 8-rank fake world, median of {rounds} interleaved rounds per case; ms = the sum "
        "over cases; x = torch / ours (total: of the sums; worst: the smallest per-case x); "
        "slowest: each side's slowest case, with the x there; warm: mean µs per cached call; "
        "ours >1ms: cases whose median is above 1 ms (in brackets: above 1 ms in every round). "
        "plan alone: plan_redistribution vs torch's _gen_transform_infos_non_cached. Rows are "
        "interleaved call by call (each of our calls right after one of torch's) but back to "
        "back: each side's calls on every case in a row, the sides alternating by round",
        table(body, header),
    ]
    for r in rows:
        out.append(
            f"  {r.what}, {r.group}: worst x on {r.worst_case}; ours slowest "
            f"{r.ours_slowest_case}; torch slowest {r.torch_slowest_case}"
        )
    if dropped:
        out.append(f"  left out, torch raises on {len(dropped)}: {dropped[0]}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------- FSDP

FSDP_SHAPE = (4096, 1024)


def run_fsdp(shape: tuple[int, int] = FSDP_SHAPE) -> dict[str, Any]:
    """The FSDP2 + TP weight both ways on (2, 4): bytes, limit, collectives; ours must equal
    the oracle (raises otherwise)."""
    reason = unavailable()
    if reason:
        print(f"\nredistribute-fsdp: skipped ({reason})")
        return {"skipped": reason}
    pairs = fsdp_pairs(shape)
    rows = measure_all(pairs, progress=False)
    bad = [r.case for r in rows if not r.ours_correct or r.ours_measured != r.ours]
    if bad:
        raise RuntimeError(f"cute_shard's FSDP2 + TP resharding differs from the oracle: {bad}")
    body = []
    for r in rows:
        for t in r.torch:
            body.append(
                [
                    r.name,
                    t.reading,
                    f"{r.limit / 2**20:.2f}",
                    f"{r.ours / 2**20:.2f}",
                    "raises" if t.bytes is None else f"{t.bytes / 2**20:.2f}",
                    _x(_ratio(r.ours, r.limit)),
                    "" if t.bytes is None else _x(_ratio(t.bytes, r.limit)),
                    "ok" if t.correct else ("WRONG" if t.correct is False else t.error or ""),
                    " ".join(s.split("=")[0] for s in r.ours_steps if not s.endswith("local")),
                    " ".join(t.ops),
                ]
            )
    print(
        f"\nredistribute-fsdp: the FSDP2 + TP weight {shape} float32 on mesh (2, 4), 8 "
        "simulated ranks; MiB the busiest rank receives (ours equals the oracle on every rank, "
        "and its metered bytes equal the plan's)"
    )
    print(
        table(
            body,
            [
                "direction",
                "torch reading",
                "limit MiB",
                "ours MiB",
                "torch MiB",
                "ours/limit",
                "torch/limit",
                "torch result",
                "ours",
                "torch ops",
            ],
        )
    )
    return {"shape": list(shape), "rows": [asdict(r) for r in rows]}

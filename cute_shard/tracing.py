"""``cute_shard.trace()``: which view ops and which redistributions a DTensor program ran, what
each did to the sharding, what it cost, what asked for it, and where in the program.

``with cute_shard.trace() as log: model(x)`` records, while the block runs (``install()``
must be active), forward and backward:

- every **view op** DTensor propagates (a :class:`TraceRecord`): the op and its arguments, the
  input's global shape, mesh and dtype, its placements, the input target (the input after the
  least redistribution that makes the view valid), the output placements, each mesh dim that
  had to move (the collective, the bytes each rank receives, and why), whether DTensor's
  sharding-propagation cache answered or cute_shard was asked;
- every **redistribution** cute_shard's planner runs that no view op's record holds (a
  :class:`RedistributionRecord`): what asked for it (:class:`AskedBy`: an op bringing an input
  to its strategy, ``mm (input 0)``; the program's ``redistribute()`` or ``full_tensor()``; a
  gradient on its way back), the global shape, dtype and mesh, the source and target
  placements, the plan's steps (kind, mesh dims, the functional collective, the bytes the
  busiest rank receives or hands to a reduction), the physical limit, and why each mesh dim
  moved;

each with the program's own line (the first frame outside torch and cute_shard).
``print(log)`` shows one table in the order things ran, ``log.records`` holds the records,
``log.to_json()`` the same as JSON. Every collective appears once: a view op that moved its
input (a ``reshape`` redistributing first, matmul's fold back gathering) holds that
redistribution's plan in its ``moves``, so there is no separate record of it. Worked example
(on a (2, 4) mesh, ``x`` of global shape (8, 16, 32) as ``[Shard(0), Shard(1)]``)::

    with cute_shard.trace() as log:
        y = x.view(128, 32)           # free: [S0, SS0:4]
        z = x.reshape(16, 8, 32)      # mesh dim 1 all-gathered first: [S0, R]
        r = y.redistribute(mesh, [Shard(0), Shard(1)])  # a record asked by redistribute()
    print(log)
    log.collectives()                 # what CommDebugMode counts: {"all_gather_into_tensor": 1,
                                      #  "all_to_all_single": 1}

How it sees the view ops. DTensor's dispatch (C++) looks each op up in its dispatcher's
``_custom_op_handlers`` before anything else, on cache hits and misses alike. While a trace is
open, every view overload ``install()`` gave a strategy has a handler there: it notes the
input's spec and the caller's line, takes itself out, runs the op again through DTensor's
own path (cache, propagation, redistribution, local op: everything as without the trace),
puts itself back and records the result. ``install()``'s propagator tells an open trace that
cute_shard was asked on a cache miss (``integration.set_observer``). A reshape-family method
(``x.reshape`` with ``install()``) that redistributes before the view it ends in tells the
trace too, and the view's record then shows the method, the input as it was and what moved.

How it sees the redistributions. ``cute_shard.redistribute.dtensor`` tells its observer
(``set_observer``) of every redistribution it ran, with the specs and the plan; what asked is
read off the Python stack at that moment (DTensor's dispatcher redistributing an op's input,
``full_tensor``, a ``Redistribute`` or ``from_local`` backward, the reshape-family method) and
torch's current autograd node says whether it ran in backward. A redistribution between equal
placements (a backward that normalises Partial back to what it was) moves nothing and is not
a record; one torch's own function runs (placements the planner does not model, or
``install(redistribute=False)``) is not cute_shard's and is not seen.

Cost when no trace is open: nothing on a cache hit; one ``is not None`` check on a view op's
cache miss and one after each redistribution (the observers are None then). What a record says
about a view's sharding is cute_shard's own decision for the op (the function the strategy
calls, pure, so asking it again changes nothing); the output placements are the output
DTensor's, the moves the executed plan's. Under torch.compile's tracing nothing is recorded.
The handlers and the records belong to the process, so on real ranks each rank keeps its own
log; ops of other threads run untraced.
"""

from __future__ import annotations

import enum
import json
import os
import sys
import textwrap
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import CodeType, FrameType
from typing import Any

import torch
from torch._ops import OpOverload
from torch.distributed._functional_collectives import _are_we_tracing
from torch.distributed.tensor import DTensor, _dispatch, _redistribute
from torch.distributed.tensor import _api as _dtensor_api
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import OpSchema
from torch.distributed.tensor.placement_types import Placement

from . import integration
from .explanation import Step, communication, plan_moves, step_json
from .notation import Placements, PlacementSpec, placements_str
from .redistribute import Kind, Move, Plan, physical_limit
from .redistribute import dtensor as redistribution
from .render import fmt_bytes

__all__ = [
    "AskedBy",
    "Asker",
    "PlanStep",
    "Record",
    "RedistributionRecord",
    "Source",
    "TraceLog",
    "TraceRecord",
    "trace",
]

TEXT_WIDTH = 100


@dataclass(frozen=True, slots=True)
class Source:
    """Where the program called the op: the first frame outside torch and cute_shard."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "function": self.function}


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One view op DTensor propagated while the trace was open.

    - ``op``: the aten op's name (``view``, ``transpose``, ...; ``x.reshape`` reaches DTensor
      as ``view`` or ``_unsafe_view``), ``overload`` the overload DTensor propagated, and
      ``args`` its arguments after the input;
    - ``method``: the reshape-family method (``reshape``, ``flatten``, ...) that redistributed
      the input for this view first, or None;
    - ``shape``, ``out_shape``: global shapes (``out_shape`` None if the op raised);
    - ``input``, ``target``, ``output``: placements in CLI notation (``output`` None if it
      raised); ``moves``: one :class:`~cute_shard.explanation.Step` per mesh dim that moved
      from ``input`` to ``target`` (collective, bytes per rank, reason), from the plan that
      ran; for an op that raised, what would have to move;
    - ``strict``: the op raises rather than communicate; ``error``: what it raised, or None;
    - ``cache``: ``"hit"`` if DTensor's sharding-propagation cache answered, ``"miss"`` if
      cute_shard was asked; ``source``: the program's line.
    """

    index: int
    op: str
    overload: str
    method: str | None
    args: tuple[object, ...]
    shape: tuple[int, ...]
    out_shape: tuple[int, ...] | None
    dtype: str
    mesh: tuple[int, ...]
    mesh_dim_names: tuple[str, ...] | None
    input: Placements
    target: Placements
    output: Placements | None
    moves: tuple[Step, ...]
    strict: bool
    cache: str
    source: Source | None
    error: str | None

    @property
    def bytes_per_rank(self) -> int:
        """What the moves cost: the bytes a rank receives (the most any rank does)."""
        return sum(s.bytes_per_rank for s in self.moves)

    @property
    def collectives(self) -> tuple[str, ...]:
        """The functional collectives the moves ran (none if the op raised)."""
        return () if self.error is not None else tuple(s.op for s in self.moves if s.op)

    def to_json(self) -> dict[str, object]:
        """The record as JSON values (placements as strings in CLI notation)."""
        return {
            "index": self.index,
            "record": "view",
            "op": self.op,
            "overload": self.overload,
            "method": self.method,
            "args": [_json_value(a) for a in self.args],
            "shape": list(self.shape),
            "out_shape": None if self.out_shape is None else list(self.out_shape),
            "dtype": self.dtype,
            "mesh": list(self.mesh),
            "mesh_dim_names": None if self.mesh_dim_names is None else list(self.mesh_dim_names),
            "input": [str(p) for p in self.input],
            "target": [str(p) for p in self.target],
            "output": None if self.output is None else [str(p) for p in self.output],
            "moves": [step_json(s) for s in self.moves],
            "bytes_per_rank": self.bytes_per_rank,
            "strict": self.strict,
            "cache": self.cache,
            "source": None if self.source is None else self.source.to_json(),
            "error": self.error,
        }


def _json_value(x: object) -> object:
    return [_json_value(v) for v in x] if isinstance(x, tuple) else x


class Asker(enum.Enum):
    """What kind of caller asked for a redistribution (``AskedBy.kind``)."""

    OP = "op"  # an op's input brought to the placements its sharding strategy chose
    REDISTRIBUTE = "redistribute"  # DTensor.redistribute, called by the program
    FULL_TENSOR = "full_tensor"  # DTensor.full_tensor
    METHOD = "method"  # a reshape-family method whose view was not recorded
    GRADIENT = "gradient"  # a redistribute's backward: the gradient to the source placements
    FROM_LOCAL = "from_local"  # from_local's backward: the gradient to the placements it had
    OTHER = "other"  # none of these: ``name`` is the function that called


@dataclass(frozen=True, slots=True)
class AskedBy:
    """What asked for a redistribution: ``kind``, and ``name`` (the op, ``mm``; the method,
    ``reshape``; or the call, ``redistribute``), for an op the input (its index among the
    op's flattened arguments) and overload, and ``backward``: the autograd node that was
    running (``MmBackward0``), None in forward. ``str`` is what the table prints:
    ``mm (input 0)``, ``mm (input 1) in MmBackward0``, ``full_tensor()``,
    ``redistribute()'s backward``."""

    kind: Asker
    name: str
    input: int | None = None
    overload: str | None = None
    backward: str | None = None

    def __str__(self) -> str:
        if self.kind in (Asker.GRADIENT, Asker.FROM_LOCAL):
            return f"{self.name}()'s backward"
        if self.kind is Asker.OP:
            text = self.name if self.input is None else f"{self.name} (input {self.input})"
        elif self.kind is Asker.OTHER:
            text = self.name
        else:
            text = f"{self.name}()"
        return text if self.backward is None else f"{text} in {self.backward}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "name": self.name,
            "input": self.input,
            "overload": self.overload,
            "backward": self.backward,
            "text": str(self),
        }


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a redistribution's plan: its ``kind`` on ``mesh_dims``, the functional
    ``collective`` that runs it as ``CommDebugMode`` counts it (None for a local step), the
    bytes the busiest rank receives (``received``) or hands to a reduction (``reduced``),
    the most peers a rank receives from, and whether every rank moves as much as the
    busiest (``uniform``)."""

    kind: Kind
    mesh_dims: tuple[int, ...]
    collective: str | None
    received: int
    reduced: int
    peers: int
    uniform: bool

    @property
    def bytes_per_rank(self) -> int:
        """The step's cost for its busiest rank: what it receives, or for a reduction what
        it reduces (as a view's moves count it)."""
        return self.reduced if self.kind.reduces else self.received

    def __str__(self) -> str:
        dims = ",".join(f"m{m}" for m in self.mesh_dims)
        if self.kind.local:
            return f"{dims} {self.kind.value}"
        return f"{dims} {self.kind.value} {fmt_bytes(self.bytes_per_rank)}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "mesh_dims": list(self.mesh_dims),
            "collective": self.collective,
            "bytes_received": self.received,
            "bytes_reduced": self.reduced,
            "bytes_per_rank": self.bytes_per_rank,
            "peers": self.peers,
            "uniform": self.uniform,
        }


@dataclass(frozen=True, slots=True)
class RedistributionRecord:
    """One redistribution cute_shard's planner ran while the trace was open, that no view
    op's record holds.

    - ``asked_by``: what asked for it (:class:`AskedBy`); ``explicit``: torch called it an
      explicit redistribution (the ``Redistribute`` autograd function's forward);
    - ``shape``, ``dtype``, ``mesh``: the tensor's global shape, dtype and mesh;
    - ``input``, ``target``: source and target placements in CLI notation;
    - ``steps``: the plan's steps (:class:`PlanStep`), in the order they ran; ``moves``: per
      mesh dim that changes, its source and target placement, how and why
      (``cute_shard.redistribute.Move``); ``received``: the most bytes any rank receives over
      all steps; ``limit``: the physical limit in bytes (the most of its target shard any rank
      lacks: the least any plan can make its busiest rank receive); ``split``: the plan
      moved mesh dims one at a time (no process group spans them), so it may receive more
      than the limit; ``plan``: the plan itself;
    - ``source``: the program's line.
    """

    index: int
    asked_by: AskedBy
    shape: tuple[int, ...]
    dtype: str
    mesh: tuple[int, ...]
    mesh_dim_names: tuple[str, ...] | None
    input: Placements
    target: Placements
    steps: tuple[PlanStep, ...]
    moves: tuple[Move, ...]
    received: int
    limit: int
    split: bool
    explicit: bool
    source: Source | None
    plan: Plan = field(repr=False, compare=False)

    @property
    def op(self) -> str:
        """``"redistribute"``: the name the table gives every redistribution."""
        return "redistribute"

    @property
    def bytes_per_rank(self) -> int:
        """What the steps cost: the bytes the busiest rank receives (or reduces), summed."""
        return sum(s.bytes_per_rank for s in self.steps)

    @property
    def collectives(self) -> tuple[str, ...]:
        """The functional collectives the plan ran, in order."""
        return tuple(s.collective for s in self.steps if s.collective)

    def to_json(self) -> dict[str, object]:
        """The record as JSON values (placements as strings in CLI notation)."""
        return {
            "index": self.index,
            "record": "redistribution",
            "op": self.op,
            "asked_by": self.asked_by.to_json(),
            "shape": list(self.shape),
            "dtype": self.dtype,
            "mesh": list(self.mesh),
            "mesh_dim_names": None if self.mesh_dim_names is None else list(self.mesh_dim_names),
            "input": [str(p) for p in self.input],
            "target": [str(p) for p in self.target],
            "steps": [s.to_json() for s in self.steps],
            "moves": [_move_json(m) for m in self.moves],
            "bytes_per_rank": self.bytes_per_rank,
            "received_bytes": self.received,
            "limit_bytes": self.limit,
            "split": self.split,
            "explicit": self.explicit,
            "source": None if self.source is None else self.source.to_json(),
        }


def _move_json(m: Move) -> dict[str, object]:
    return {
        "mesh_dim": m.mesh_dim,
        "from": str(m.src),
        "to": str(m.dst),
        "kind": m.kind.value,
        "reason": m.reason,
    }


Record = TraceRecord | RedistributionRecord


class TraceLog:
    """The records of one ``trace()`` block, in the order they ran: a :class:`TraceRecord`
    per view op and a :class:`RedistributionRecord` per other redistribution."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    @property
    def views(self) -> list[TraceRecord]:
        """The view ops' records."""
        return [r for r in self.records if isinstance(r, TraceRecord)]

    @property
    def redistributions(self) -> list[RedistributionRecord]:
        """The redistributions' records."""
        return [r for r in self.records if isinstance(r, RedistributionRecord)]

    def collectives(self) -> dict[str, int]:
        """How many times each functional collective ran (``all_gather_into_tensor``, ...):
        what ``CommDebugMode`` counts for cute_shard's redistributions in the block."""
        return dict(Counter(c for r in self.records for c in r.collectives))

    def to_json(self, path: str | os.PathLike[str] | None = None) -> list[dict[str, object]]:
        """The records as JSON values; with ``path``, also written there (``json.dumps``
        with indent 2)."""
        out = [r.to_json() for r in self.records]
        if path is not None:
            with open(path, "w") as f:
                json.dump(out, f, indent=2)
                f.write("\n")
        return out

    def text(self) -> str:
        """The table ``print(log)`` prints: a summary line, one row per record, then a note
        per mesh dim that moved (why) or per op that raised (what)."""
        return "\n".join(render(self.records))

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        views = len(self.views)
        return (
            f"<TraceLog: {_count(views, 'view op')}, "
            f"{_count(len(self.records) - views, 'redistribution')}>"
        )


# --------------------------------------------------------------------------------------------
# The table


_COLUMNS = (
    "#",
    "op",
    "args",
    "shape",
    "mesh",
    "input",
    "target",
    "output",
    "moves",
    "cache",
    "source",
)


def render(records: Sequence[Record]) -> list[str]:
    """``print(log)``'s lines."""
    rows = [_COLUMNS, *(_row(r) for r in records)]
    meshes = {row[4] for row in rows[1:]}
    mesh = ""
    if len(meshes) == 1:  # one mesh for every record: said once, above the table
        mesh = f" on mesh {meshes.pop()}"
        rows = [row[:4] + row[5:] for row in rows]
    lines = [_summary(records, mesh)]
    if not records:
        return lines
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    notes = _note_lines(records)
    if notes:
        lines += ["", *notes]
    return lines


def _note_lines(records: Sequence[Record]) -> list[str]:
    """The notes below the table. A note already written (a layer repeats) points to the
    first record that has it; a record whose notes all repeat one record is one line."""
    lines: list[str] = []
    said: dict[_Note, int] = {}
    for r in records:
        notes = _notes(r)
        firsts = [said.setdefault(n, r.index) for n in notes]
        head = f"[{r.index}] "
        if notes and len(set(firsts)) == 1 and firsts[0] != r.index:
            lines += _wrapped(head, f"as [{firsts[0]}]")
            continue
        for note, first in zip(notes, firsts, strict=True):
            text = str(note) if first == r.index else f"{note.subject}: as [{first}]"
            lines += _wrapped(head, text)
    return lines


def _summary(records: Sequence[Record], mesh: str) -> str:
    """The line above the table: what was recorded, then what it cost (the view ops' part
    only when there were view ops, or nothing at all)."""
    views = [r for r in records if isinstance(r, TraceRecord)]
    others = _redistributions(records)
    n, misses = len(views), sum(r.cache == "miss" for r in views)
    counted, said = [], []
    if views or not others:
        counted.append(_count(n, "view op"))
        said.append(f"{misses} asked cute_shard, {n - misses} answered by DTensor's cache")
    if others:
        counted.append(_count(len(others), "redistribution"))
    ran = [r for r in views if r.error is None]
    moved = sum(bool(r.moves) for r in ran)
    if moved:
        said.append(f"{moved} view op{'' if moved == 1 else 's'} redistributed first")
    collectives = sum(len(r.collectives) for r in records)
    if collectives:
        total = sum(r.bytes_per_rank for r in ran) + sum(r.bytes_per_rank for r in others)
        said.append(
            f"{_count(collectives, 'collective')}, {fmt_bytes(total)} received per rank at most"
        )
    if len(ran) < n:
        said.append(f"{n - len(ran)} raised")
    head = f"cute_shard.trace: {' and '.join(counted)}{mesh}"
    return f"{head}: {'; '.join(said)}" if said else head


def _redistributions(records: Sequence[Record]) -> list[RedistributionRecord]:
    return [r for r in records if isinstance(r, RedistributionRecord)]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _row(r: Record) -> tuple[str, ...]:
    if isinstance(r, RedistributionRecord):
        return (
            str(r.index),
            r.op,
            f"by {r.asked_by}",
            _tuple_text(r.shape),
            _mesh_text(r.mesh, r.mesh_dim_names),
            placements_str(r.input),
            placements_str(r.target),
            placements_str(r.target),
            ", ".join(str(s) for s in r.steps) or "-",
            "-",
            "?" if r.source is None else str(r.source),
        )
    return (
        str(r.index),
        r.op if r.method is None else f"{r.op} ({r.method})",
        _args_text(r.args),
        _tuple_text(r.shape),
        _mesh_text(r.mesh, r.mesh_dim_names),
        placements_str(r.input),
        placements_str(r.target),
        "raised" if r.output is None else placements_str(r.output),
        _moves_text(r),
        r.cache,
        "?" if r.source is None else str(r.source),
    )


def _moves_text(r: TraceRecord) -> str:
    if not r.moves:
        return "-"
    text = ", ".join(f"m{s.mesh_dim} {s.collective} {fmt_bytes(s.bytes_per_rank)}" for s in r.moves)
    return text if r.error is None else f"would {text}"  # (it raised: nothing moved)


@dataclass(frozen=True, slots=True)
class _Note:
    """A note below the table: what it is about (``m1 S1 -> R``, ``raised``) and what it
    says."""

    subject: str
    text: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.text}"


def _notes(r: Record) -> list[_Note]:
    """What the table's row cannot hold: why each mesh dim moved, or what the op raised."""
    if isinstance(r, RedistributionRecord):
        notes = [_Note(f"m{m.mesh_dim} {m.src} -> {m.dst}", m.reason) for m in r.moves]
        if r.split:
            notes.append(
                _Note(
                    "the mesh dims moved one at a time (no process group spans them)",
                    f"{fmt_bytes(r.received)} received per rank at most, the limit is "
                    f"{fmt_bytes(r.limit)}",
                )
            )
        return notes
    if r.error is not None:  # (its message says why; nothing moved)
        return [_Note("raised", r.error)]
    return [
        _Note(f"m{s.mesh_dim} {s.before} -> {s.after}", s.reason or "the view cannot keep it")
        for s in r.moves
    ]


def _wrapped(head: str, text: str) -> list[str]:
    return textwrap.wrap(
        text,
        TEXT_WIDTH,
        initial_indent=head,
        subsequent_indent=" " * len(head),
        break_on_hyphens=False,
        break_long_words=False,
    )


def _tuple_text(xs: Sequence[object]) -> str:
    return "(" + ",".join(str(x) for x in xs) + ")"


def _args_text(args: Sequence[object]) -> str:
    return ", ".join(_tuple_text(a) if isinstance(a, tuple) else str(a) for a in args)


def _mesh_text(mesh: tuple[int, ...], names: tuple[str, ...] | None) -> str:
    if names is None:
        return _tuple_text(mesh)
    return ",".join(f"{name}={n}" for name, n in zip(names, mesh, strict=True))


# --------------------------------------------------------------------------------------------
# Recording


@dataclass(frozen=True, slots=True)
class _Redistributed:
    """A reshape-family method redistributes ``spec``'s tensor to ``target`` for its view;
    once cute_shard's plan ran, ``plan`` and the record it would have if no view followed."""

    method: str
    spec: DTensorSpec
    target: tuple[Placement, ...]
    plan: Plan | None = None
    record: RedistributionRecord | None = None


@dataclass(frozen=True, slots=True)
class _Call:
    """A view op as the handler met it: the call, the input's spec before it ran, the
    redistribution of a reshape-family method that came before it, the program's line."""

    op: OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    spec: DTensorSpec
    pending: _Redistributed | None
    source: Source | None


class _State(threading.local):
    """The recording thread's state: the view op being recorded (while it runs), whether
    cute_shard was asked for it, the plans that moved its input, and a reshape-family
    method's redistribution waiting for its view."""

    def __init__(self) -> None:
        self.current: OpOverload | None = None
        self.asked = False
        self.plans: list[Plan] = []
        self.pending: _Redistributed | None = None


class _Recorder(redistribution.Observer):
    """The handlers and the observers of the open traces (one process-wide recorder)."""

    def __init__(self) -> None:
        self.logs: list[tuple[TraceLog, int]] = []  # (log, the thread that opened it)
        self.ops: dict[OpOverload, integration.ViewOp] = {}
        self.state = _State()
        # A handler takes itself out of the dispatcher's table while its op runs again, so
        # ops of other threads wait for it to be back (reentrant: the op may view again).
        self.running = threading.RLock()
        self.lock = threading.Lock()

    # -- the integration's observer

    def asked(self, op_schema: OpSchema) -> None:
        state = self.state
        if state.current is not None and op_schema.op is state.current:
            state.asked = True

    def redistributes(self, x: DTensor, target: tuple[Placement, ...], method: str) -> None:
        logs = self._logs()
        if logs:
            self._flush(logs)
            self.state.pending = _Redistributed(method, x._spec, target)

    # -- the redistribution's observer

    def redistributed(
        self, current: DTensorSpec, target: DTensorSpec, plan: Plan, explicit: bool
    ) -> None:
        logs = self._logs()
        if not logs or _are_we_tracing() or tuple(current.placements) == tuple(target.placements):
            return  # (equal placements: a backward's normalised Partial; nothing moved)
        try:
            self._redistributed(logs, current, target, plan, explicit)
        except Exception as e:  # a trace must never change what the program does
            warnings.warn(
                f"cute_shard.trace: could not record the redistribution {plan}: {e!r}",
                stacklevel=2,
            )

    def _redistributed(
        self,
        logs: list[TraceLog],
        current: DTensorSpec,
        target: DTensorSpec,
        plan: Plan,
        explicit: bool,
    ) -> None:
        """Where the redistribution goes: the method's pending view, the view op being
        recorded, or a record of its own."""
        state, pending = self.state, self.state.pending
        frame = sys._getframe(2)
        if pending is not None and pending.plan is None and _is_pending(pending, current, target):
            asked = AskedBy(Asker.METHOD, pending.method, backward=_autograd_node())
            record = _redistribution(current, target, plan, explicit, asked, _source(frame))
            state.pending = replace(pending, plan=plan, record=record)
            return
        asked = _asker(frame, explicit)
        if state.current is not None and asked.overload == str(state.current):
            state.plans.append(plan)  # the view op's own input: its record holds the moves
            return
        record = _redistribution(current, target, plan, explicit, asked, _source(frame))
        _append(logs, record)

    def _flush(self, logs: list[TraceLog]) -> None:
        """A method's redistribution that no view of it followed gets its own record."""
        pending, self.state.pending = self.state.pending, None
        if pending is not None and pending.record is not None:
            _append(logs, pending.record)

    # -- opening and closing

    def open(self, log: TraceLog) -> None:
        with self.lock, self.running:
            if not self.logs:
                self.ops = _view_ops()
                handlers = _handlers()
                for op in self.ops:
                    handlers[op] = self.handle
                integration.set_observer(self)
                redistribution.set_observer(self)
            self.logs.append((log, threading.get_ident()))

    def close(self, log: TraceLog) -> None:
        with self.lock, self.running:
            self._flush(self._logs())
            self.logs = [(g, t) for g, t in self.logs if g is not log]
            if not self.logs:
                integration.set_observer(None)
                redistribution.set_observer(None)
                handlers = _handlers()
                for op in self.ops:
                    if handlers.get(op) == self.handle:
                        del handlers[op]
                self.ops = {}

    def _logs(self) -> list[TraceLog]:
        me = threading.get_ident()
        return [log for log, thread in self.logs if thread == me]

    # -- the handler DTensor's dispatch calls for each view op

    def handle(self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        state = self.state
        x = args[0] if args else None
        logs = self._logs()
        if not logs or state.current is not None or not isinstance(x, DTensor) or _are_we_tracing():
            return self._run(op, args, kwargs)  # untraced: another thread, a nested view, ...
        pending = state.pending
        if pending is not None and not _continues(pending, x._spec):
            self._flush(logs)  # (not this view's redistribution)
            pending = None
        call = _Call(op, args, kwargs, x._spec, pending, _caller())
        state.pending, state.current, state.asked, state.plans = None, op, False, []
        try:
            out = self._run(op, args, kwargs)
        except Exception as e:
            self._record(logs, call, None, e)
            raise
        finally:
            state.current = None
        self._record(logs, call, out, None)
        return out

    def _run(self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The op through DTensor's own dispatch, as without a trace."""
        handlers = _handlers()
        with self.running:
            handler = handlers.pop(op, None)
            try:
                return op(*args, **kwargs)
            finally:
                if handler is not None:
                    handlers[op] = handler

    def _record(self, logs: list[TraceLog], call: _Call, out: Any, error: Exception | None) -> None:
        """Append the op's record to ``logs``. A record that cannot be made is a warning, not
        an error: the program runs on as it would without the trace."""
        plans, self.state.plans = self.state.plans, []
        try:
            record = self._make(call, out, error, plans)
        except Exception as e:  # a trace must never change what the program does
            warnings.warn(f"cute_shard.trace: could not record {call.op}: {e!r}", stacklevel=2)
            return
        _append(logs, record)

    def _make(
        self, call: _Call, out: Any, error: Exception | None, plans: list[Plan]
    ) -> TraceRecord:
        op, args, kwargs, spec, source = call.op, call.args, call.kwargs, call.spec, call.source
        pending = call.pending
        if pending is not None and pending.plan is not None:
            plans = [pending.plan]  # (the method's redistribution is this view's move)
        facts = _decide(self.ops[op], spec, args[1:], kwargs, pending, plans)
        output = out._spec if isinstance(out, DTensor) else None
        return TraceRecord(
            index=0,
            op=op.overloadpacket.__name__,
            overload=str(op),
            method=None if pending is None else pending.method,
            args=(*(_plain(a) for a in args[1:]), *(f"{k}={_plain(v)}" for k, v in kwargs.items())),
            shape=tuple(int(n) for n in spec.shape),
            out_shape=None if output is None else tuple(int(n) for n in output.shape),
            dtype=_dtype(spec),
            mesh=tuple(spec.mesh.shape),
            mesh_dim_names=spec.mesh.mesh_dim_names,
            input=facts.input,
            target=facts.target,
            output=None if output is None else _specs(output.placements),
            moves=facts.moves,
            strict=facts.strict,
            cache="miss" if self.state.asked else "hit",
            source=source,
            error=None if error is None else str(error).split("\n\n")[0],
        )


def _append(logs: list[TraceLog], record: Record) -> None:
    for log in logs:
        log.records.append(replace(record, index=len(log.records)))


def _continues(pending: _Redistributed, spec: DTensorSpec) -> bool:
    """Whether ``spec`` is the tensor ``pending`` redistributed (the view that follows it)."""
    before = pending.spec
    return (
        spec.mesh is before.mesh
        and tuple(spec.shape) == tuple(before.shape)
        and tuple(spec.placements) == tuple(pending.target)
    )


def _is_pending(pending: _Redistributed, current: DTensorSpec, target: DTensorSpec) -> bool:
    """Whether the redistribution from ``current`` to ``target`` is the method's."""
    return (current is pending.spec or current == pending.spec) and tuple(
        target.placements
    ) == tuple(pending.target)


def _redistribution(
    current: DTensorSpec,
    target: DTensorSpec,
    plan: Plan,
    explicit: bool,
    asked: AskedBy,
    source: Source | None,
) -> RedistributionRecord:
    """The record of a redistribution: the plan's steps in bytes of the tensor's dtype."""
    itemsize = _itemsize(current)
    steps = tuple(
        PlanStep(
            kind=s.kind,
            mesh_dims=s.mesh_dims,
            collective=s.collective,
            received=s.received * itemsize,
            reduced=s.reduced * itemsize,
            peers=s.peers,
            uniform=s.uniform,
        )
        for s in plan.steps
    )
    return RedistributionRecord(
        index=0,
        asked_by=asked,
        shape=plan.shape,
        dtype=_dtype(current),
        mesh=tuple(current.mesh.shape),
        mesh_dim_names=current.mesh.mesh_dim_names,
        input=_specs(current.placements),
        target=_specs(target.placements),
        steps=steps,
        moves=plan.moves,
        received=plan.received * itemsize,
        limit=physical_limit(plan) * itemsize,
        split=plan.split,
        explicit=explicit,
        source=source,
        plan=plan,
    )


def _dtype(spec: DTensorSpec) -> str:
    return str(spec.tensor_meta.dtype).removeprefix("torch.") if spec.tensor_meta else "?"


def _itemsize(spec: DTensorSpec) -> int:
    return spec.tensor_meta.dtype.itemsize if spec.tensor_meta is not None else 1


@dataclass(frozen=True, slots=True)
class _Facts:
    input: Placements
    target: Placements
    moves: tuple[Step, ...]
    strict: bool


def _decide(
    view_op: integration.ViewOp,
    spec: DTensorSpec,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    pending: _Redistributed | None,
    plans: Sequence[Plan],
) -> _Facts:
    """What cute_shard decides for the op: the input target and each move with its reason.
    After a reshape-family method's redistribution the input is the method's. The moves are
    those of the plans that ran (``plans``); without one, the plan that would."""
    given = tuple(spec.placements) if pending is None else tuple(pending.spec.placements)
    shape = tuple(spec.shape)
    mesh = spec.mesh
    rule = view_op.rule(spec, shape, args, kwargs)
    decision = view_op.decision(given, shape, rule, mesh)
    target = decision.target
    blocked = decision.blocked
    itemsize = _itemsize(spec)
    if plans:
        moves = tuple(s for plan in plans for s in plan_moves(plan, itemsize, blocked))
    elif all(type(n) is int for n in shape):
        moves = communication(
            shape, tuple(mesh.shape), _specs(given), _specs(target), itemsize, blocked
        )
    else:
        moves = ()
    return _Facts(_specs(given), _specs(target), moves, view_op.strict_view and pending is None)


def _specs(placements: Sequence[Placement]) -> Placements:
    return tuple(PlacementSpec.of(p) for p in placements)


def _plain(x: object) -> object:
    """An op argument as a plain value: ints, tuples of them, or text."""
    if isinstance(x, (list, tuple, torch.Size)):
        return tuple(_plain(v) for v in x)
    if isinstance(x, (int, float, bool, str)) or x is None:
        return x
    return str(x)


def _handlers() -> dict[OpOverload, Callable[..., Any]]:
    """The table DTensor's dispatch looks every op up in first."""
    return DTensor._op_dispatcher._custom_op_handlers


def _view_ops() -> dict[OpOverload, integration.ViewOp]:
    """Every overload ``install()`` gave a ViewStrategy, with its ViewOp. (The ops it
    decomposes are not propagated themselves: the views inside them are recorded.)"""
    viewed, _ = integration.composite_view_ops()
    taken = _handlers()
    return {
        v.overload: v for v in (*integration.torch_view_ops(), *viewed) if v.overload not in taken
    }


# --------------------------------------------------------------------------------------------
# Who asked, and where: read off the Python stack


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _program(frame: FrameType) -> bool:
    return not frame.f_code.co_filename.startswith((_PACKAGE, _TORCH, "<frozen"))


def _caller() -> Source | None:
    """The first frame outside torch and cute_shard: the program's line."""
    return _source(sys._getframe(1))


def _source(frame: FrameType | None) -> Source | None:
    """The first frame from ``frame`` outward that is the program's."""
    while frame is not None:
        if _program(frame):
            return Source(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


def _codes(*functions: object) -> frozenset[CodeType]:
    """The code objects of the torch functions below (those a torch release lacks are left
    out: its callers then read as ``OTHER``)."""
    return frozenset(
        code for f in functions if isinstance(code := getattr(f, "__code__", None), CodeType)
    )


# The functions of torch 2.13 that call ``redistribute_local_tensor``, by what they ask for.
_OP_INPUT = _codes(getattr(_dispatch.OpDispatcher, "redistribute_local_args", None))
_GRADIENT = _codes(
    getattr(_redistribute, "_redistribute_backward", None),
    getattr(getattr(_redistribute, "NestedRedistribute", None), "forward", None),
)
_FROM_LOCAL = _codes(getattr(getattr(_dtensor_api, "_FromTorchTensor", None), "backward", None))
_FULL_TENSOR = _codes(DTensor.full_tensor)
_METHOD = _codes(integration._redistribute)


def _asker(frame: FrameType | None, explicit: bool) -> AskedBy:
    """What asked for the redistribution the observer hears of, read from its caller's
    ``frame`` outward (the innermost frame that says wins; the walk stops at the program's).
    ``explicit``: torch's ``is_explicit`` (only the ``Redistribute`` autograd function sets
    it)."""
    backward = _autograd_node()
    caller = frame
    while caller is not None and caller.f_code.co_filename.startswith(_PACKAGE):
        caller = caller.f_back
    called_by = "?" if caller is None else caller.f_code.co_qualname
    while frame is not None and not _program(frame):
        code = frame.f_code
        if code in _OP_INPUT and (overload := _op_of(frame)) is not None:
            index = frame.f_locals.get("i")
            i = index if type(index) is int else None
            name = overload.overloadpacket.__name__
            return AskedBy(Asker.OP, name, i, str(overload), backward)
        if code in _GRADIENT:
            return AskedBy(Asker.GRADIENT, "redistribute", backward=backward)
        if code in _FROM_LOCAL:
            return AskedBy(Asker.FROM_LOCAL, "from_local", backward=backward)
        if code in _FULL_TENSOR:
            return AskedBy(Asker.FULL_TENSOR, "full_tensor", backward=backward)
        if code in _METHOD:
            method = frame.f_locals.get("method")
            name = method if isinstance(method, str) else "reshape"
            return AskedBy(Asker.METHOD, name, backward=backward)
        frame = frame.f_back
    if explicit:
        return AskedBy(Asker.REDISTRIBUTE, "redistribute", backward=backward)
    return AskedBy(Asker.OTHER, called_by, backward=backward)


def _op_of(frame: FrameType) -> OpOverload | None:
    """The op whose inputs DTensor's dispatcher is redistributing in ``frame``: its schema's,
    or on a sharding-cache hit (which makes no schema) the one its strategy asked for."""
    found = frame.f_locals
    schema = getattr(found.get("op_info"), "schema", None) or found.get("suggested_input_schema")
    op = getattr(schema, "op", None)
    return op if isinstance(op, OpOverload) else None


def _autograd_node() -> str | None:
    """The autograd node running now (``MmBackward0``), or None outside backward."""
    node = torch._C._current_autograd_node()
    return None if node is None else str(node.name())


_recorder = _Recorder()


@contextmanager
def trace() -> Iterator[TraceLog]:
    """Record every view op DTensor propagates and every redistribution cute_shard runs in
    the block (``cute_shard.install()`` must be active): ``with cute_shard.trace() as log:
    model(x)``, then ``print(log)``, ``log.records`` or ``log.to_json()``. Traces nest; each
    keeps its own records. Raises RuntimeError if cute_shard is not installed (the records
    are cute_shard's decisions)."""
    if not integration.is_installed():
        raise RuntimeError(
            "cute_shard.trace() records the view ops cute_shard propagates, but cute_shard is "
            "not installed: call cute_shard.install() first, or trace inside "
            "`with cute_shard.enabled():`"
        )
    log = TraceLog()
    _recorder.open(log)
    try:
        yield log
    finally:
        _recorder.close(log)

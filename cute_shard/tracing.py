"""``cute_shard.trace()``: which view ops a DTensor program ran, what each did to the sharding,
what it cost, and where in the program.

``with cute_shard.trace() as log: model(x)`` records every view op DTensor propagates while
the block runs (``install()`` must be active), forward and backward: the op and its
arguments, the input's global shape, mesh and dtype, its placements, the input target (the
input after the least redistribution that makes the view valid), the output placements, each
mesh dim that had to move (the collective, the bytes each rank receives, and why), whether
DTensor's sharding-propagation cache answered or cute_shard was asked, and the program's own
line (the first frame outside torch and cute_shard). ``print(log)`` shows a table,
``log.records`` holds one frozen :class:`TraceRecord` per op, ``log.to_json()`` the same as
JSON. Worked example (on a (2, 4) mesh, ``x`` of global shape (8, 16, 32) as
``[Shard(0), Shard(1)]``)::

    with cute_shard.trace() as log:
        y = x.view(128, 32)           # free: [S0, SS0:4]
        z = x.reshape(16, 8, 32)      # mesh dim 1 all-gathered first: [S0, R]
    print(log)

How it sees the ops. DTensor's dispatch (C++) looks each op up in its dispatcher's
``_custom_op_handlers`` before anything else, on cache hits and misses alike. While a trace is
open, every view overload ``install()`` gave a strategy has a handler there: it notes the
input's spec and the caller's line, takes itself out, runs the op again through DTensor's
own path (cache, propagation, redistribution, local op: everything as without the trace),
puts itself back and records the result. Nothing of this exists while no trace is open, so
tracing costs a DTensor program nothing then, except one check on a cache miss, where
``install()``'s propagator tells an open trace that cute_shard was asked (``integration.
set_observer``). A reshape-family method (``x.reshape`` with ``install()``) that
redistributes before the view it ends in tells the trace too, and the view's record then
shows the method, the input as it was and what moved.

What a record says about the sharding is cute_shard's own decision for the op (the function
the strategy calls, pure, so asking it again changes nothing); the output placements are the
output DTensor's. Under torch.compile's tracing nothing is recorded. The handlers and the
records belong to the process, so on real ranks each rank keeps its own log; ops of other
threads run untraced.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch._ops import OpOverload
from torch.distributed._functional_collectives import _are_we_tracing
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import OpSchema
from torch.distributed.tensor.placement_types import Placement

from . import integration
from .engine import Blocked, RedistributionRequired
from .explanation import Step, communication, fmt_bytes, step_json
from .notation import Placements, PlacementSpec, placements_str

__all__ = ["Source", "TraceLog", "TraceRecord", "trace"]

TEXT_WIDTH = 100


@dataclass(frozen=True, slots=True)
class Source:
    """Where the program called the op: the first frame outside torch and cute_shard."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


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
      from ``input`` to ``target`` (collective, bytes per rank, reason); for an op that
      raised, what would have to move;
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

    def to_json(self) -> dict[str, object]:
        """The record as JSON values (placements as strings in CLI notation)."""
        return {
            "index": self.index,
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
            "source": None
            if self.source is None
            else {
                "file": self.source.file,
                "line": self.source.line,
                "function": self.source.function,
            },
            "error": self.error,
        }


def _json_value(x: object) -> object:
    return [_json_value(v) for v in x] if isinstance(x, tuple) else x


class TraceLog:
    """The records of one ``trace()`` block, in the order the ops ran."""

    def __init__(self) -> None:
        self.records: list[TraceRecord] = []

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
        """The table ``print(log)`` prints: a summary line, one row per op, then a note per op
        that moved mesh dims (why) or raised (what)."""
        return "\n".join(render(self.records))

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<TraceLog: {len(self.records)} view ops>"


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


def render(records: Sequence[TraceRecord]) -> list[str]:
    """``print(log)``'s lines."""
    rows = [_COLUMNS, *(_row(r) for r in records)]
    meshes = {row[4] for row in rows[1:]}
    mesh = ""
    if len(meshes) == 1:  # one mesh for every op: said once, above the table
        mesh = f" on mesh {meshes.pop()}"
        rows = [row[:4] + row[5:] for row in rows]
    lines = [_summary(records, mesh)]
    if not records:
        return lines
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    notes: list[str] = []
    said: dict[str, int] = {}  # a note already written (a layer repeats): its record
    for r in records:
        for text in _notes(r):
            first = said.setdefault(text, r.index)
            head = f"[{r.index}] "
            notes += _wrapped(head, text if first == r.index else f"as [{first}]")
    if notes:
        lines += ["", *notes]
    return lines


def _summary(records: Sequence[TraceRecord], mesh: str) -> str:
    n, misses = len(records), sum(r.cache == "miss" for r in records)
    text = (
        f"cute_shard.trace: {_count(n, 'view op')}{mesh}: {misses} asked cute_shard, "
        f"{n - misses} answered by DTensor's cache"
    )
    ran = [r for r in records if r.error is None]
    steps = [s for r in ran for s in r.moves]
    if steps:
        moved = sum(bool(r.moves) for r in ran)
        total = sum(s.bytes_per_rank for s in steps)
        text += (
            f"; {moved} redistributed ({_count(len(steps), 'collective')}, {fmt_bytes(total)} "
            "received per rank at most)"
        )
    if len(ran) < n:
        text += f"; {n - len(ran)} raised"
    return text


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _row(r: TraceRecord) -> tuple[str, ...]:
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


def _notes(r: TraceRecord) -> list[str]:
    """What the table's row cannot hold: why each mesh dim moved, or what the op raised."""
    if r.error is not None:  # (its message says why; nothing moved)
        return [f"raised: {r.error}"]
    return [
        f"m{s.mesh_dim} {s.before} -> {s.after}: {s.reason or 'the view cannot keep it'}"
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
    """A reshape-family method redistributed ``spec``'s tensor to ``target`` for its view."""

    method: str
    spec: DTensorSpec
    target: tuple[Placement, ...]


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
    """The recording thread's state: the op being recorded (while it runs), whether
    cute_shard was asked for it, and a redistribution waiting for its view."""

    def __init__(self) -> None:
        self.current: OpOverload | None = None
        self.asked = False
        self.pending: _Redistributed | None = None


class _Recorder:
    """The handlers and the observer of the open traces (one process-wide recorder)."""

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
        if self._logs():
            self.state.pending = _Redistributed(method, x._spec, target)

    # -- opening and closing

    def open(self, log: TraceLog) -> None:
        with self.lock, self.running:
            if not self.logs:
                self.ops = _view_ops()
                handlers = _handlers()
                for op in self.ops:
                    handlers[op] = self.handle
                integration.set_observer(self)
            self.logs.append((log, threading.get_ident()))

    def close(self, log: TraceLog) -> None:
        with self.lock, self.running:
            self.state.pending = None  # (a redistribution no view of this trace followed)
            self.logs = [(g, t) for g, t in self.logs if g is not log]
            if not self.logs:
                integration.set_observer(None)
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
        call = _Call(op, args, kwargs, x._spec, state.pending, _caller())
        state.pending, state.current, state.asked = None, op, False
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
        try:
            record = self._make(call, out, error)
        except Exception as e:  # a trace must never change what the program does
            warnings.warn(f"cute_shard.trace: could not record {call.op}: {e!r}", stacklevel=2)
            return
        for log in logs:
            log.records.append(replace(record, index=len(log.records)))

    def _make(self, call: _Call, out: Any, error: Exception | None) -> TraceRecord:
        op, args, kwargs, spec, source = call.op, call.args, call.kwargs, call.spec, call.source
        pending = call.pending
        if pending is not None and not _continues(pending, spec):
            pending = None  # (not this view's redistribution)
        facts = _decide(self.ops[op], spec, args[1:], kwargs, pending)
        output = out._spec if isinstance(out, DTensor) else None
        return TraceRecord(
            index=0,
            op=op.overloadpacket.__name__,
            overload=str(op),
            method=None if pending is None else pending.method,
            args=(*(_plain(a) for a in args[1:]), *(f"{k}={_plain(v)}" for k, v in kwargs.items())),
            shape=tuple(int(n) for n in spec.shape),
            out_shape=None if output is None else tuple(int(n) for n in output.shape),
            dtype=str(spec.tensor_meta.dtype).removeprefix("torch.") if spec.tensor_meta else "?",
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


def _continues(pending: _Redistributed, spec: DTensorSpec) -> bool:
    """Whether ``spec`` is the tensor ``pending`` redistributed (the view that follows it)."""
    before = pending.spec
    return (
        spec.mesh is before.mesh
        and tuple(spec.shape) == tuple(before.shape)
        and tuple(spec.placements) == tuple(pending.target)
    )


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
) -> _Facts:
    """What cute_shard decides for the op: the input target and each move with its reason.
    After a reshape-family method's redistribution the input is the method's."""
    given = tuple(spec.placements) if pending is None else tuple(pending.spec.placements)
    shape = tuple(spec.shape)
    mesh = spec.mesh
    rule = view_op.rule(spec, shape, args, kwargs)
    target, _ = replace(view_op, strict_view=False).decide(given, shape, rule, mesh)
    blocked: tuple[Blocked, ...] = ()
    if target != given:
        try:
            replace(view_op, strict_view=True).decide(given, shape, rule, mesh)
        except RedistributionRequired as e:
            blocked = e.blocked
    itemsize = spec.tensor_meta.dtype.itemsize if spec.tensor_meta is not None else 1
    ints = all(type(n) is int for n in shape)
    moves = (
        communication(shape, tuple(mesh.shape), _specs(given), _specs(target), itemsize, blocked)
        if ints
        else ()
    )
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


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _caller() -> Source | None:
    """The first frame outside torch and cute_shard: the program's line."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((_PACKAGE, _TORCH, "<frozen")):
            return Source(name, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back  # type: ignore[assignment]
    return None


_recorder = _Recorder()


@contextmanager
def trace() -> Iterator[TraceLog]:
    """Record every view op DTensor propagates in the block (``cute_shard.install()`` must be
    active): ``with cute_shard.trace() as log: model(x)``, then ``print(log)``,
    ``log.records`` or ``log.to_json()``. Traces nest; each keeps its own records. Raises
    RuntimeError if cute_shard is not installed (the records are cute_shard's decisions)."""
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

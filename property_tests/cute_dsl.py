"""Batch harness around NVIDIA's CuTe DSL (``cutlass.cute``) used as a differential oracle.

The CuTe DSL computes the layout algebra of *static* layouts while it traces a
``@cute.jit`` function, on the CPU, without a GPU.  Tracing one function costs
~0.05-0.1 s, so this module runs a whole batch of cases for one operation inside
ONE ``@cute.jit`` call and hands back plain Python values, one per case:

* :class:`DslLayout` ``(shape, stride)`` of nested ``int`` tuples / ``int`` when the
  DSL returned a layout;
* :class:`Rejected` when the DSL raised while building the operation (typically
  ``MLIRError: ... unable to compute the following composition``);
* :class:`Crashed` when the DSL killed the process while computing the case (the
  native code divides by zero -- SIGFPE -- on some inputs, e.g. layouts with a
  0-size mode produced by an invalid complement);
* :class:`HarnessError` for anything that is neither (a harness bug, a timeout).

Robustness: every op runs inside a ``try``.  The DSL itself runs in a worker process
(``python cute_dsl.py --worker``) that imports ``cutlass`` once and forks one child per
batch; the child streams one result per case.  A hard crash of the DSL therefore only
loses the case being computed: the harness marks it :class:`Crashed` and resubmits the
rest of the batch (cost: one fork, ~0.1 s).  The test process never imports ``cutlass``.

Cases are described with plain values -- :class:`Spec` for a layout, a ``tuple`` of
:class:`Spec` for a by-mode tiler, ``int`` / tuples of ``int`` otherwise -- and this
module never imports ``cute_shard``.

If ``cutlass`` cannot be imported, :data:`DSL_AVAILABLE` is ``False``,
:data:`DSL_IMPORT_ERROR` says why, and :func:`require_dsl` skips the calling test
with that reason.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

IntTuple = int | tuple

# Availability is decided without importing cutlass in this (test) process: the DSL runs
# in the worker.  ``find_spec`` failing means "not installed"; a broken install is caught
# when the worker starts (see _Worker.start) and reported the same way.
try:
    _SPEC_FOUND = importlib.util.find_spec("cutlass") is not None
except Exception as _exc:  # pragma: no cover
    _SPEC_FOUND = False
DSL_AVAILABLE: bool = _SPEC_FOUND
DSL_IMPORT_ERROR: str | None = (
    None
    if _SPEC_FOUND
    else ("ModuleNotFoundError: No module named 'cutlass' (pip install nvidia-cutlass-dsl)")
)

CASE_TIMEOUT_S = 120.0  # parent: max seconds without any message from the worker
BATCH_TIMEOUT_S = 100.0  # worker: max seconds for one forked batch


@dataclass(frozen=True)
class Spec:
    """A layout given as plain nested-int ``shape`` and ``stride`` (CuTe notation ``shape:stride``).

    (A dataclass, not a tuple, so that a by-mode tiler -- a ``tuple`` of Specs --
    can never be confused with a single layout.)
    """

    shape: IntTuple
    stride: IntTuple

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"


@dataclass(frozen=True)
class DslLayout:
    """A layout returned by the DSL, converted to plain nested ints."""

    shape: IntTuple
    stride: IntTuple

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"


@dataclass(frozen=True)
class Rejected:
    """The DSL raised while computing the operation (the case is inadmissible for the DSL)."""

    error_type: str
    message: str

    def __str__(self) -> str:
        lines = [ln.strip() for ln in self.message.strip().splitlines() if ln.strip()]
        return f"<rejected {self.error_type}: {' '.join(lines[:3])[:200]}>"


@dataclass(frozen=True)
class Crashed:
    """The DSL killed its process while computing this case (e.g. SIGFPE)."""

    detail: str

    def __str__(self) -> str:
        return f"<DSL crashed: {self.detail[:200]}>"


@dataclass(frozen=True)
class HarnessError:
    """The case could not be evaluated for a reason that is not the DSL's answer."""

    message: str

    def __str__(self) -> str:
        return f"<harness error: {self.message[:300]}>"


DslResult = DslLayout | Rejected | Crashed | HarnessError

OPERATIONS = (
    "coalesce",
    "coalesce_profile",
    "composition",
    "complement",
    "logical_divide",
    "zipped_divide",
    "logical_product",
    "right_inverse",
    "left_inverse",
)


def _fmt(t: IntTuple) -> str:
    if isinstance(t, tuple):
        return "(" + ",".join(_fmt(x) for x in t) + ")"
    return str(t)


def require_dsl() -> None:
    """Skip the calling pytest test (visibly) when the CuTe DSL is unavailable."""
    if DSL_AVAILABLE:
        try:
            _worker()  # imports cutlass in the worker: a broken install also skips
        except RuntimeError:
            pass
    if not DSL_AVAILABLE:
        import pytest

        pytest.skip(
            "NVIDIA CuTe DSL (package nvidia-cutlass-dsl, `import cutlass.cute`) "
            f"unavailable: {DSL_IMPORT_ERROR}"
        )


# --------------------------------------------------------------------------------------
# JSON encoding of cases and results (tuples must survive the round trip).
# --------------------------------------------------------------------------------------


def _enc(x: Any) -> Any:
    if isinstance(x, Spec):
        return {"spec": [_enc(x.shape), _enc(x.stride)]}
    if isinstance(x, tuple):
        return {"t": [_enc(e) for e in x]}
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"cannot encode {x!r} ({type(x).__name__}) as a case argument")
    return int(x)


def _dec(x: Any) -> Any:
    if isinstance(x, dict):
        if "spec" in x:
            return Spec(_dec(x["spec"][0]), _dec(x["spec"][1]))
        return tuple(_dec(e) for e in x["t"])
    return x


def _enc_result(r: DslResult) -> dict:
    if isinstance(r, DslLayout):
        return {"layout": [_enc(r.shape), _enc(r.stride)]}
    if isinstance(r, Rejected):
        return {"rejected": [r.error_type, r.message]}
    return {"harness": str(getattr(r, "message", r))}


def _dec_result(d: dict) -> DslResult:
    if "layout" in d:
        return DslLayout(_dec(d["layout"][0]), _dec(d["layout"][1]))
    if "rejected" in d:
        return Rejected(d["rejected"][0], d["rejected"][1])
    return HarnessError(d.get("harness", repr(d)))


# --------------------------------------------------------------------------------------
# Worker side: runs inside the subprocess, where cutlass is imported.
# --------------------------------------------------------------------------------------


def _worker_ops(cute: Any) -> dict[str, Callable[..., Any]]:
    return {
        "coalesce": lambda a: cute.coalesce(a),
        # (layout, profile): profile is a plain int tuple like (1, 1)
        "coalesce_profile": lambda a, p: cute.coalesce(a, target_profile=p),
        # rhs: a Layout, or a tuple of Layouts (by-mode)
        "composition": lambda a, b: cute.composition(a, b),
        "complement": lambda a, m: cute.complement(a, m),
        "logical_divide": lambda a, t: cute.logical_divide(a, t),
        "zipped_divide": lambda a, t: cute.zipped_divide(a, t),
        "logical_product": lambda a, b: cute.logical_product(a, b),
        "right_inverse": lambda a: cute.right_inverse(a),
        "left_inverse": lambda a: cute.left_inverse(a),
    }


def _to_py(x: Any) -> IntTuple:
    """A static DSL IntTuple (python ints / tuples) as plain ints; raises if not static."""
    if isinstance(x, tuple):
        return tuple(_to_py(e) for e in x)
    if isinstance(x, int) and not isinstance(x, bool):
        return int(x)
    raise TypeError(f"non-static value in DSL result: {x!r} ({type(x).__name__})")


def _run_one(cute: Any, fn: Callable[..., Any], case: Sequence[Any]) -> DslResult:
    def to_dsl(a: Any) -> Any:
        if isinstance(a, Spec):
            return cute.make_layout(a.shape, stride=a.stride)
        if isinstance(a, tuple) and any(isinstance(e, Spec) for e in a):
            return tuple(to_dsl(e) for e in a)
        return a  # int, or int tuple (a profile)

    try:
        args = [to_dsl(a) for a in case]
    except Exception as exc:
        return HarnessError(f"building the arguments failed: {type(exc).__name__}: {exc}")
    try:
        res = fn(*args)
    except Exception as exc:
        return Rejected(type(exc).__name__, str(exc))
    try:
        return DslLayout(_to_py(res.shape), _to_py(res.stride))
    except Exception as exc:
        return HarnessError(f"converting the result failed: {type(exc).__name__}: {exc}")


def _worker_main() -> None:  # pragma: no cover - runs in the subprocess
    """Zygote: import cutlass once, then fork one child per request.

    The child traces the whole batch in one ``@cute.jit`` call, writing one JSON line
    per case as soon as it is computed, then ``{"done": true}``.  If the child dies
    (the DSL's native code raises SIGFPE on some inputs), the zygote reports
    ``{"child_died": ...}``: the parent then knows the case that was being computed
    and resubmits the rest.  A crash thus costs one fork (~0.1 s), not a re-import.
    """
    # Keep the protocol channel private: anything the DSL (or native code) prints goes
    # to stderr instead of corrupting the result stream.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        import cutlass  # noqa: F401
        import cutlass.cute as cute
    except Exception as exc:
        proto.write(json.dumps({"fatal": f"{type(exc).__name__}: {exc}"}) + "\n")
        return
    ops = _worker_ops(cute)
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                fn = ops[req["op"]]
                cases = [tuple(_dec(a) for a in c) for c in req["cases"]]

                # (a closure, not default arguments: the DSL treats parameters as jit inputs;
                # the child runs exactly one trace, so late binding is harmless)
                def body() -> None:
                    for case in cases:  # noqa: B023
                        res = _run_one(cute, fn, case)  # noqa: B023
                        proto.write(json.dumps(_enc_result(res)) + "\n")

                try:
                    # preprocess=False: the body runs as plain Python (no AST rewriting).
                    cute.jit(preprocess=False)(body)()
                    proto.write(json.dumps({"done": True}) + "\n")
                except Exception as exc:
                    proto.write(
                        json.dumps({"done": True, "error": f"{type(exc).__name__}: {exc}"}) + "\n"
                    )
                proto.flush()
            except BaseException:
                code = 3
            finally:
                os._exit(code)
        deadline = time.monotonic() + BATCH_TIMEOUT_S
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                status = -1
                break
            time.sleep(0.002)
        if status == -1:
            proto.write(json.dumps({"child_died": f"no result within {BATCH_TIMEOUT_S}s"}) + "\n")
        elif os.WIFSIGNALED(status):
            import signal

            sig = os.WTERMSIG(status)
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = str(sig)
            proto.write(json.dumps({"child_died": f"killed by {name}"}) + "\n")
        elif os.WEXITSTATUS(status) != 0:
            proto.write(json.dumps({"child_died": f"exit status {os.WEXITSTATUS(status)}"}) + "\n")


# --------------------------------------------------------------------------------------
# Parent side.
# --------------------------------------------------------------------------------------


class _Worker:
    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.stderr_file = tempfile.TemporaryFile(mode="w+b")
        self.buf = b""

    def start(self) -> None:
        global DSL_AVAILABLE, DSL_IMPORT_ERROR
        self.stderr_file.seek(0)
        self.stderr_file.truncate()
        self.buf = b""
        # The DSL would otherwise write one .mlir file per trace into its file cache.
        env = {**os.environ, "CUTE_DSL_DISABLE_FILE_CACHING": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            cwd=os.path.dirname(os.path.abspath(__file__)),
            env=env,
        )
        msg = self.read(timeout=120.0)
        if msg is None or "fatal" in msg:
            why = (msg or {}).get("fatal") or f"worker did not start: {self.stderr_tail()}"
            self.stop()
            DSL_AVAILABLE = False
            DSL_IMPORT_ERROR = why
            raise RuntimeError(f"CuTe DSL unavailable: {why}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def read(self, timeout: float) -> dict | None:
        """Next protocol message, or None if the worker died / timed out."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # EOF: the worker exited
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def stderr_tail(self, n: int = 600) -> str:
        self.stderr_file.flush()
        self.stderr_file.seek(0)
        data = self.stderr_file.read().decode(errors="replace")
        return data[-n:].strip()

    def death_reason(self) -> str:
        if self.proc is None:
            return "no worker"
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "no progress within the timeout"
        if rc < 0:
            import signal

            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = str(-rc)
            return f"killed by {name}"
        return f"exited with status {rc}"

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None


_WORKER: _Worker | None = None


def _worker() -> _Worker:
    global _WORKER
    if _WORKER is None:
        _WORKER = _Worker()
        atexit.register(_WORKER.stop)
    if not _WORKER.alive():
        _WORKER.start()
    return _WORKER


def run_batch(op: str, cases: Sequence[Sequence[Any]]) -> list[DslResult]:
    """Run every case of one operation inside one ``@cute.jit`` trace (in the worker).

    ``cases`` is a sequence of argument tuples, e.g. for ``"composition"``
    ``[(Spec((3,5),(5,1)), Spec(4,2)), (Spec((6,8),(1,6)), (Spec(3,2), Spec(4,2))), ...]``.
    Returns one :class:`DslLayout` / :class:`Rejected` / :class:`Crashed` /
    :class:`HarnessError` per case, in order.
    """
    if not DSL_AVAILABLE:
        raise RuntimeError(f"CuTe DSL unavailable: {DSL_IMPORT_ERROR}")
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}; expected one of {OPERATIONS}")
    cases = [tuple(c) for c in cases]
    results: list[DslResult] = []
    while len(results) < len(cases):
        w = _worker()
        todo = cases[len(results) :]
        assert w.proc is not None and w.proc.stdin is not None
        req = json.dumps({"op": op, "cases": [[_enc(a) for a in c] for c in todo]}) + "\n"
        try:
            w.proc.stdin.write(req.encode())
            w.proc.stdin.flush()
        except BrokenPipeError:
            pass
        n_before = len(results)
        died: str | None = None
        while True:
            msg = w.read(timeout=CASE_TIMEOUT_S)
            if msg is None:  # the worker (zygote) itself died or hung: restart it
                died = w.death_reason()
                w.stop()
                break
            if "done" in msg:
                break
            if "child_died" in msg:
                died = msg["child_died"]
                break
            results.append(_dec_result(msg))
        if died is None:
            if len(results) != len(cases):
                raise RuntimeError(
                    f"DSL worker returned {len(results) - n_before} results for {len(todo)} cases"
                )
            break
        # The DSL died while computing case number len(results).
        if len(results) < len(cases):
            if "no result within" in died or "timeout" in died:
                results.append(HarnessError(f"DSL made no progress: {died}"))
            else:
                results.append(Crashed(died))
    return results


def run_batches(op: str, cases: Sequence[Sequence[Any]], batch_size: int = 1000) -> list[DslResult]:
    """:func:`run_batch` over consecutive chunks of ``batch_size`` cases (one trace each)."""
    out: list[DslResult] = []
    for i in range(0, len(cases), batch_size):
        out.extend(run_batch(op, cases[i : i + batch_size]))
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker_main()
    else:  # smoke test: python property_tests/cute_dsl.py
        t0 = time.perf_counter()
        for r in run_batch(
            "composition",
            [
                (Spec((3, 5), (5, 1)), Spec(4, 2)),
                (Spec((3, 5), (5, 1)), Spec(3, 2)),
                (Spec((6, 8), (1, 6)), (Spec(3, 2), Spec(4, 2))),
            ],
        ):
            print(r)
        print(f"{time.perf_counter() - t0:.3f}s")

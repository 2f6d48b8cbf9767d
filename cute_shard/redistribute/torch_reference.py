"""torch's own redistribution of a pair of placements, planned, run and judged: what
``cute-shard redistribute --compare-torch`` shows and the benchmarks compare against.

``torch_reference(shape, mesh, src, dst, dtype)`` reads the pair as a DTensor program meets it:
the source spec is the one ``distribute_tensor`` / ``DTensor.from_local`` give a DTensor, the
target spec the one ``DTensor.redistribute`` builds, both from the raw placements (so torch
reads a ``_StridedShard`` as it does by default there). Then, with every rank of the mesh
simulated in this process (a fake process group of the mesh's size and
``torch.distributed._local_tensor.LocalTensorMode``), it answers three questions:

- **torch's plan**: the transform infos of its planner (``_gen_transform_infos_non_cached``),
  one ``TorchStep`` (mesh dim, placement before and after) each; the planner may raise, and
  the error is the answer.
- **its bytes**: torch's own ``redistribute_local_tensor`` (torch's even while
  ``cute_shard.install()`` is active) runs on every rank's source shard, and a dispatch mode
  stacked on ``LocalTensorMode`` measures what each collective delivers to each rank: an
  all-gather the blocks of the others (padding included), an all-to-all everything but the
  rank's own block, a reduction the elements a rank hands to it (``reduced``, kept apart, as
  the planner keeps them). ``received`` is the busiest rank's total.
- **its result**: each rank's local tensor against the target's local shard of the global
  tensor (``cute_shard.oracle``); ``wrong_ranks`` are the global ranks whose tensor differs.

The data are float64 identities (an element's value is its flat index), whatever ``dtype``
says; ``dtype`` is what the specs tell torch's planner. A Partial source holds exact pieces
that reduce to the identity (see ``_piece``); a Partial target expects torch's own
``Partial._partition_value`` of the target shard, where a mesh dim becomes Partial.
Simulating costs a copy of the global tensor per rank, so pairs above ``TORCH_MAX_ELEMENTS``
elements are planned but not run, and meshes above ``TORCH_MAX_RANKS`` ranks not even
planned; ``skipped`` says which.

If this process already has a process group other than a fake one of the mesh's size (a live
DTensor program), the comparison runs in a fresh Python process instead
(``python -m cute_shard.redistribute.torch_reference``), so no collective ever reaches real
ranks.

Worked example, the FSDP2 + TP weight: torch all-gathers the whole tensor and chunks it, 7x the
256 elements a rank lacks, and gets the data right::

    >>> from cute_shard.notation import parse_placements
    >>> ps = lambda text: parse_placements(text, 2, (2, 4))
    >>> ref = torch_reference((64, 32), (2, 4), ps("SS0:4,S0"), ps("S0,S0"))
    >>> [str(s) for s in ref.steps]
    ['m0 S0 -> R', 'm1 S0 -> R', 'm0 R -> S0', 'm1 R -> S0']
    >>> ref.received, ref.right
    (1792, True)
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._redistribute import _gen_transform_infos_non_cached
from torch.utils._python_dispatch import TorchDispatchMode

from .. import oracle
from .._compat import local_tensor_group
from ..notation import PlacementSpec, parse_placement, to_notation
from .plan import check_placements

__all__ = [
    "TORCH_MAX_ELEMENTS",
    "TORCH_MAX_RANKS",
    "Collective",
    "TorchReference",
    "TorchStep",
    "torch_reference",
]

# Simulating builds the global tensor and a shard of it per rank, and LocalTensorMode runs
# every op once per rank: above these it is too slow for an interactive command.
TORCH_MAX_ELEMENTS = 1 << 20
TORCH_MAX_RANKS = 64

# Functional collectives (and DTensor's own) whose deliveries are measured, by op name.
_GATHERS = frozenset({"all_gather_into_tensor", "all_gather_into_tensor_out"})
_REDUCTIONS = frozenset({"all_reduce", "reduce_scatter_tensor"})
_EXCHANGES = frozenset({"all_to_all_single", "shard_dim_alltoall"})
# Bookkeeping ops of the collective namespaces: they move nothing.
_NOT_COLLECTIVES = frozenset({"wait_tensor", "_wrap_tensor_autograd", "barrier"})


@dataclass(frozen=True, slots=True)
class TorchStep:
    """One transform info of torch's plan: mesh dim ``mesh_dim`` goes from ``src`` to ``dst``."""

    mesh_dim: int
    src: PlacementSpec
    dst: PlacementSpec

    def __str__(self) -> str:
        return f"m{self.mesh_dim} {self.src} -> {self.dst}"


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective torch ran: its op (the functional collective's name, as
    ``CommDebugMode`` counts it), the ranks in its group, the most elements a rank received
    from it and the most a rank handed to it for reduction."""

    op: str
    group_size: int
    received: int
    reduced: int


@dataclass(frozen=True, slots=True)
class TorchReference:
    """torch's redistribution of one pair (see the module docstring).

    ``steps`` is None when torch's planner raised (``error`` says what). ``received`` and
    ``reduced`` (elements, the busiest rank's totals) and ``wrong_ranks`` (global ranks,
    row-major over the mesh) are None when the redistribution was not run: skipped for size
    (``skipped`` says why) or raised (``error``). ``unmeasured`` names collectives whose
    deliveries could not be read; ``received`` leaves them out.
    """

    version: str
    steps: tuple[TorchStep, ...] | None
    collectives: tuple[Collective, ...] = ()
    received: int | None = None
    reduced: int | None = None
    error: str | None = None
    wrong_ranks: tuple[int, ...] | None = None
    skipped: str | None = None
    unmeasured: tuple[str, ...] = ()

    @property
    def right(self) -> bool | None:
        """Whether every rank ended with its target shard; None when not run."""
        return None if self.wrong_ranks is None else not self.wrong_ranks

    def to_json(self) -> dict[str, object]:
        """The reference as JSON (placements in CLI notation); ``from_json`` reads it back."""
        return {
            "version": self.version,
            "steps": None
            if self.steps is None
            else [
                {"mesh_dim": s.mesh_dim, "from": str(s.src), "to": str(s.dst)} for s in self.steps
            ],
            "collectives": [
                {
                    "op": c.op,
                    "group_size": c.group_size,
                    "received": c.received,
                    "reduced": c.reduced,
                }
                for c in self.collectives
            ],
            "received": self.received,
            "reduced": self.reduced,
            "error": self.error,
            "wrong_ranks": None if self.wrong_ranks is None else list(self.wrong_ranks),
            "skipped": self.skipped,
            "unmeasured": list(self.unmeasured),
        }

    @staticmethod
    def from_json(d: dict[str, Any], ndim: int) -> TorchReference:
        """``to_json`` undone, for a tensor of ``ndim`` dims."""
        steps = d["steps"]
        wrong = d["wrong_ranks"]
        return TorchReference(
            version=str(d["version"]),
            steps=None
            if steps is None
            else tuple(
                TorchStep(
                    int(s["mesh_dim"]),
                    parse_placement(s["from"], ndim),
                    parse_placement(s["to"], ndim),
                )
                for s in steps
            ),
            collectives=tuple(
                Collective(
                    str(c["op"]), int(c["group_size"]), int(c["received"]), int(c["reduced"])
                )
                for c in d["collectives"]
            ),
            received=d["received"],
            reduced=d["reduced"],
            error=d["error"],
            wrong_ranks=None if wrong is None else tuple(int(r) for r in wrong),
            skipped=d["skipped"],
            unmeasured=tuple(str(u) for u in d["unmeasured"]),
        )


def torch_reference(
    shape: Sequence[int],
    mesh: Sequence[int],
    src: Sequence[PlacementSpec],
    dst: Sequence[PlacementSpec],
    dtype: str = "float32",
    *,
    max_elements: int = TORCH_MAX_ELEMENTS,
    max_ranks: int = TORCH_MAX_RANKS,
) -> TorchReference:
    """torch's plan, bytes and result for redistributing a tensor of global ``shape`` (dtype
    named as torch names it, ``"bfloat16"``) on ``mesh`` from ``src`` to ``dst`` (see the
    module docstring). Bad placements raise the planner's ValueError before anything runs;
    whatever torch raises is reported in ``error``."""
    shape_t, mesh_t = tuple(int(n) for n in shape), tuple(int(n) for n in mesh)
    src_t = check_placements(src, len(shape_t), mesh_t, "source")
    dst_t = check_placements(dst, len(shape_t), mesh_t, "target")
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise ValueError(f"dtype: torch has no dtype named {dtype!r}")
    version = torch.__version__.split("+")[0]
    ranks, numel = math.prod(mesh_t), math.prod(shape_t)
    if ranks > max_ranks:
        return TorchReference(
            version,
            None,
            skipped=f"not run: {ranks} ranks is too many to simulate (at most {max_ranks})",
        )
    simulate = numel <= max_elements
    if not _world_is_ours(ranks):
        return _in_subprocess(shape_t, mesh_t, src_t, dst_t, dtype, max_elements, max_ranks)
    with _fake_world(ranks), _quiet():
        ref = _run(shape_t, mesh_t, src_t, dst_t, getattr(torch, dtype), simulate)
    if simulate:
        return ref
    skipped = (
        f"not run: {numel} elements is too large to simulate (at most {max_elements}); "
        "only torch's plan is shown"
    )
    return TorchReference(ref.version, ref.steps, error=ref.error, skipped=skipped)


# ----------------------------------------------------------------------------- the world


def _world_is_ours(ranks: int) -> bool:
    """Whether this process may simulate here: no process group yet, or a fake one of the
    mesh's size (then every collective is simulated and none reaches a real rank)."""
    if not dist.is_initialized():
        return True
    return bool(dist.get_backend() == "fake" and dist.get_world_size() == ranks)


@contextlib.contextmanager
def _fake_world(ranks: int) -> Iterator[None]:
    """A fake process group of ``ranks`` ranks for the block, unless one is already there."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        yield
        return
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=ranks)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch's warnings about its own plan (e.g. "2 sequential all_gather operations") are
    about torch's internals, not the user's program: keep them off the user's terminal."""
    log = logging.getLogger("torch.distributed.tensor._redistribute")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


def _in_subprocess(
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    src: tuple[PlacementSpec, ...],
    dst: tuple[PlacementSpec, ...],
    dtype: str,
    max_elements: int,
    max_ranks: int,
) -> TorchReference:
    """``torch_reference`` in a fresh process (this one has a process group of its own)."""
    request = {
        "shape": list(shape),
        "mesh": list(mesh),
        "src": [str(p) for p in src],
        "dst": [str(p) for p in dst],
        "dtype": dtype,
        "max_elements": max_elements,
        "max_ranks": max_ranks,
    }
    run = subprocess.run(
        [sys.executable, "-m", __name__, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if run.returncode != 0:
        lines = run.stderr.strip().splitlines()
        raise RuntimeError(
            "torch_reference: the comparison process failed: " + (lines[-1] if lines else "")
        )
    return TorchReference.from_json(json.loads(run.stdout), len(shape))


def _main(argv: Sequence[str]) -> int:
    request = json.loads(argv[0])
    ndim = len(request["shape"])
    ref = torch_reference(
        request["shape"],
        request["mesh"],
        [parse_placement(t, ndim) for t in request["src"]],
        [parse_placement(t, ndim) for t in request["dst"]],
        request["dtype"],
        max_elements=request["max_elements"],
        max_ranks=request["max_ranks"],
    )
    print(json.dumps(ref.to_json()))
    return 0


# ------------------------------------------------------------------------------- the run


def _run(
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    src: tuple[PlacementSpec, ...],
    dst: tuple[PlacementSpec, ...],
    dtype: torch.dtype,
    simulate: bool,
) -> TorchReference:
    """Plan (and with ``simulate`` run and judge) on every rank of the fake world."""
    version = torch.__version__.split("+")[0]
    ranks = math.prod(mesh)
    coords = list(oracle.mesh_coords(mesh))
    src_t, dst_t = [p.to_torch() for p in src], [p.to_torch() for p in dst]
    with LocalTensorMode(frozenset(range(ranks))) as mode:
        device_mesh = init_device_mesh("cpu", mesh)
        strides = torch.empty(shape, device="meta").stride()
        meta = TensorMeta(torch.Size(shape), strides, dtype)
        # As DTensor.from_local / distribute_tensor and DTensor.redistribute build them.
        src_spec = DTensorSpec(device_mesh, tuple(src_t), tensor_meta=meta)
        dst_spec = DTensorSpec(device_mesh, tuple(dst_t), tensor_meta=meta)
        try:
            infos = _gen_transform_infos_non_cached(src_spec, dst_spec)
        except Exception as e:  # torch's planner may raise anything: that is the answer
            return TorchReference(version, None, error=_error_text(e))
        steps = tuple(
            TorchStep(
                i.mesh_dim,
                PlacementSpec.of(i.src_dst_placements[0]),
                PlacementSpec.of(i.src_dst_placements[1]),
            )
            for i in infos
        )
        if not simulate:
            return TorchReference(version, steps)
        full = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
        local = mode.rank_map(lambda r: _source_shard(full, src, mesh, coords[r]))
        meter = _Meter(ranks)
        try:
            with meter:
                out = _torch_redistribute()(local, src_spec, dst_spec)
        except Exception as e:  # torch's execution may raise anything: that is the answer
            return TorchReference(version, steps, error=_error_text(e))
        with mode.disable():
            wrong = tuple(
                r
                for r in range(ranks)
                if not _matches(
                    _rank_tensor(out, r), _target_shard(full, src, dst, mesh, coords[r]), dst, src
                )
            )
    return TorchReference(
        version,
        steps,
        collectives=tuple(meter.collectives),
        received=max(meter.received_by_rank, default=0),
        reduced=max(meter.reduced_by_rank, default=0),
        wrong_ranks=wrong,
        unmeasured=tuple(meter.unmeasured),
    )


def _torch_redistribute() -> Callable[..., torch.Tensor]:
    """torch's own ``redistribute_local_tensor``, also while ``cute_shard.install()`` has put
    the planner's in its place."""
    from .dtensor import torch_redistribute_local_tensor

    return torch_redistribute_local_tensor()


def _error_text(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    text = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return to_notation(text)


def _rank_tensor(t: Any, rank: int) -> torch.Tensor:
    """The rank's tensor of a LocalTensor (a plain tensor is every rank's)."""
    tensors = getattr(t, "_local_tensors", None)
    out: torch.Tensor = t if tensors is None else tensors[rank]
    return out


# ------------------------------------------------------------------------- the data


def _piece(x: torch.Tensor, op: str, size: int, c: int) -> torch.Tensor:
    """The partial value coordinate ``c`` of a mesh dim of ``size`` holds of ``x``: pieces
    that reduce by ``op`` to ``x`` exactly (float64, small integer or half-integer values),
    and that commute with the reductions of other mesh dims, so pieces of pieces reduce to
    the same values in any order: a sum's pieces are ``x`` times integer weights that add up
    to 1 (linear), an average's ``x`` plus offsets that add up to 0, a max's (min's) ``x`` on
    coordinate 0 and less (more) elsewhere, a product's ``x`` on coordinate 0 and 1
    elsewhere."""
    if op == "sum":
        return x * (size if c == 0 else -1)
    if op == "avg":
        return x + (c - (size - 1) / 2)
    if op == "max":
        return x - c
    if op == "min":
        return x + c
    return x if c == 0 else x * 0 + 1  # product


def _source_shard(
    full: torch.Tensor,
    src: tuple[PlacementSpec, ...],
    mesh: tuple[int, ...],
    coord: tuple[int, ...],
) -> torch.Tensor:
    """The rank's source local tensor: its shard, split into partial pieces on each Partial
    mesh dim (in mesh order)."""
    x = oracle.local_shard(full, [p.to_torch() for p in src], mesh, coord)
    for m, p in enumerate(src):
        if p.kind == "P":
            x = _piece(x, p.reduce_op, mesh[m], coord[m])
    return x.contiguous()


def _target_shard(
    full: torch.Tensor,
    src: tuple[PlacementSpec, ...],
    dst: tuple[PlacementSpec, ...],
    mesh: tuple[int, ...],
    coord: tuple[int, ...],
) -> torch.Tensor:
    """The rank's target local tensor: its shard; the pieces of the Partial mesh dims the
    redistribution keeps; then, on each mesh dim it makes Partial, torch's own
    ``_partition_value`` (a sum divides by the mesh dim's size, other ops keep the value)."""
    x = oracle.local_shard(full, [p.to_torch() for p in dst], mesh, coord)
    for m, (a, b) in enumerate(zip(src, dst, strict=True)):
        if b.kind == "P" and a == b:
            x = _piece(x, b.reduce_op, mesh[m], coord[m])
    for m, (a, b) in enumerate(zip(src, dst, strict=True)):
        if b.kind == "P" and a != b and b.reduce_op == "sum":
            x = x / mesh[m]
    return x


def _matches(
    got: torch.Tensor,
    want: torch.Tensor,
    dst: tuple[PlacementSpec, ...],
    src: tuple[PlacementSpec, ...],
) -> bool:
    """Bit for bit, except where the target divides a sum among ranks: then the order of the
    divisions may change the last bit, and a relative 1e-12 is allowed."""
    if tuple(got.shape) != tuple(want.shape):
        return False
    got = got.to(want.dtype)
    divides = any(
        b.kind == "P" and a != b and b.reduce_op == "sum" for a, b in zip(src, dst, strict=True)
    )
    if divides:
        return bool(torch.allclose(got, want, rtol=1e-12, atol=1e-12))
    return bool(torch.equal(got, want))


# -------------------------------------------------------------------------- the meter


def _numels(t: Any, ranks: int) -> list[int]:
    """Each rank's element count of a (Local)Tensor."""
    tensors = getattr(t, "_local_tensors", None)
    if tensors is None:
        return [int(t.numel())] * ranks
    return [int(tensors[r].numel()) if r in tensors else 0 for r in range(ranks)]


def _int_on(x: Any, rank: int) -> int:
    """A size as the rank at ``rank`` sees it (a LocalTensor SymInt differs per rank)."""
    node = getattr(x, "node", None)
    local = getattr(node, "_local_ints", None)
    return int(local[rank]) if local is not None else int(x)


class _Meter(TorchDispatchMode):  # type: ignore[no-untyped-call]  # untyped in torch
    """A dispatch mode over ``LocalTensorMode`` that measures each collective's deliveries
    per rank. It sees a collective before ``LocalTensorMode`` runs it (once, for every rank)
    and is off the mode stack while it does, so nothing is counted twice."""

    def __init__(self, ranks: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # untyped in torch
        self.ranks = ranks
        self.collectives: list[Collective] = []
        self.received_by_rank = [0] * ranks
        self.reduced_by_rank = [0] * ranks
        self.unmeasured: list[str] = []

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.namespace in ("_c10d_functional", "_dtensor", "c10d"):
            self._record(func._opname, args, out)
        return out

    def _record(self, name: str, args: tuple[Any, ...], out: Any) -> None:
        if name in _NOT_COLLECTIVES:
            return
        try:
            size, received, reduced = self._deliveries(name, args, out)
        except (LookupError, TypeError, ValueError, AttributeError):
            self.unmeasured.append(name)
            return
        self.received_by_rank = [
            a + b for a, b in zip(self.received_by_rank, received, strict=True)
        ]
        self.reduced_by_rank = [a + b for a, b in zip(self.reduced_by_rank, reduced, strict=True)]
        self.collectives.append(Collective(name, size, max(received), max(reduced)))

    def _deliveries(
        self, name: str, args: tuple[Any, ...], out: Any
    ) -> tuple[int, list[int], list[int]]:
        """The group size, and per rank the elements received and handed to a reduction."""
        n = self.ranks
        nothing = [0] * n
        inputs, outputs = _numels(args[0], n), _numels(out, n)
        if name in _GATHERS:  # all but its own block (padding included) is received
            return int(args[1]), [b - a for a, b in zip(inputs, outputs, strict=True)], nothing
        if name in _REDUCTIONS:
            size = int(args[2]) if name == "reduce_scatter_tensor" else _group(args[2]).size
            return size, nothing, inputs
        if name == "shard_dim_alltoall":  # equal blocks, one of them the rank's own
            size = _group(args[3]).size
            return size, [b - b // size for b in outputs], nothing
        if name == "all_to_all_single":  # all but the block it sends itself
            group = _group(args[3])
            return group.size, _all_to_all_received(out, outputs, args[1], group), nothing
        raise LookupError(name)


@dataclass(frozen=True, slots=True)
class _Group:
    """A process group as LocalTensorMode runs it: its size, and the global ranks of each
    copy (a mesh dim's group runs once per coordinate of the other mesh dims)."""

    size: int
    copies: tuple[tuple[int, ...], ...]


def _group(name: Any) -> _Group:
    members, offsets = local_tensor_group(name)
    return _Group(len(members), tuple(tuple(o + r for r in members) for o in offsets))


def _all_to_all_received(
    out: Any, outputs: list[int], output_splits: Any, group: _Group
) -> list[int]:
    """Per rank, its all-to-all output less the block it sent itself (the rows its own
    split names, at its index in its group)."""
    received = [0] * len(outputs)
    for copy in group.copies:
        for i, rank in enumerate(copy):
            if rank >= len(outputs) or not outputs[rank]:
                continue
            if output_splits is None or not len(output_splits):
                own = outputs[rank] // group.size
            else:
                per_row = outputs[rank] // _rank_tensor(out, rank).shape[0]
                own = _int_on(output_splits[i], rank) * per_row
            received[rank] = outputs[rank] - own
    return received


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

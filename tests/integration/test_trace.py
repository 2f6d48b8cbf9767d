"""``cute_shard.trace()``: the view ops a DTensor program ran, as the program ran them.

The two blocks of ``trace_models.py`` (a tensor-parallel MLP on an odd batch and an attention
block with 3 heads over 2 tp ranks) run on a fake process group of 4 ranks in this process and
on 4 real gloo ranks; both give every view op and redistribution of the blocks with the
placements and moves below (``GOLDEN``), and the moves and steps are the collectives
CommDebugMode counts. The same spawn of 4 ranks runs ``test_trace_redistribute.py``'s small
program (its records, checked there, and its answers on real data). The rest checks
what the trace records of single ops (strict refusals, the reshape family, backward, the
in-place squeeze_), that a trace changes no answer, and that it leaves nothing behind.
"""

from __future__ import annotations

import json
import linecache
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode

import cute_shard
from cute_shard import integration
from cute_shard.tracing import TraceRecord

from . import trace_models
from .conftest import fake_world
from .multirank import run_world
from .test_install import dtensor
from .test_trace_redistribute import check_small

ALL_GATHER = "c10d_functional.all_gather_into_tensor"
ALL_TO_ALL = "c10d_functional.all_to_all_single"

# Every record of Blocks.both(), in order. A view op: op [method] args of shape: input ->
# target -> output; moves; cache; the function of the program's line. A redistribution:
# redistribute by what asked of shape: input -> target; steps; the function.
# fmt: off
GOLDEN = [
    # mlp: 2 and 1 sequences per dp rank do not flatten to even token shards: mesh dim 0 moves
    "view [reshape] (-1, 8) of (3, 3, 8): S0,R -> R,R -> R,R; m0 all-gather; miss; mlp",
    "view (3, 3, 8) of (9, 8): R,P -> R,P -> R,P; -; miss; mlp",
    # attention: q, k, v (matmul's fold and unfold, the head split that cuts a head, the
    # transpose); k and v hit the cache q filled
    "view (6, 8) of (2, 3, 8): S0,R -> S0,R -> S0,R; -; miss; heads",
    "_unsafe_view (2, 3, 12) of (6, 12): S0,S1 -> S0,S1 -> S0,S2; -; miss; heads",
    "view [reshape] (2, 3, 3, 4) of (2, 3, 12): S0,S2 -> S0,R -> S0,R; m1 all-gather; miss; heads",
    "transpose 1 2 of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; miss; heads",
    "view (6, 8) of (2, 3, 8): S0,R -> S0,R -> S0,R; -; hit; heads",
    "_unsafe_view (2, 3, 12) of (6, 12): S0,S1 -> S0,S1 -> S0,S2; -; hit; heads",
    "view [reshape] (2, 3, 3, 4) of (2, 3, 12): S0,S2 -> S0,R -> S0,R; m1 all-gather; hit; heads",
    "transpose 1 2 of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; hit; heads",
    "view (6, 8) of (2, 3, 8): S0,R -> S0,R -> S0,R; -; hit; heads",
    "_unsafe_view (2, 3, 12) of (6, 12): S0,S1 -> S0,S1 -> S0,S2; -; hit; heads",
    "view [reshape] (2, 3, 3, 4) of (2, 3, 12): S0,S2 -> S0,R -> S0,R; m1 all-gather; hit; heads",
    "transpose 1 2 of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; hit; heads",
    # q @ k^T and attn @ v: matmul folds (batch, heads) into bmm's batch and unfolds it
    "transpose -2 -1 of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; miss; attention",
    "expand (2, 3, 3, 4) of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; miss; attention",
    "_unsafe_view (6, 3, 4) of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; miss; attention",
    "expand (2, 3, 4, 3) of (2, 3, 4, 3): S0,R -> S0,R -> S0,R; -; miss; attention",
    "_unsafe_view (6, 4, 3) of (2, 3, 4, 3): S0,R -> S0,R -> S0,R; -; miss; attention",
    "_unsafe_view (2, 3, 3, 3) of (6, 3, 3): S0,R -> S0,R -> S0,R; -; miss; attention",
    "expand (2, 3, 3, 3) of (2, 3, 3, 3): S0,R -> S0,R -> S0,R; -; miss; attention",
    "view (6, 3, 3) of (2, 3, 3, 3): S0,R -> S0,R -> S0,R; -; miss; attention",
    "expand (2, 3, 3, 4) of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; hit; attention",
    "_unsafe_view (6, 3, 4) of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; hit; attention",
    "_unsafe_view (2, 3, 3, 4) of (6, 3, 4): S0,R -> S0,R -> S0,R; -; miss; attention",
    # the head merge (a reshape of a transposed tensor: clone, then _unsafe_view) and wo
    "transpose 1 2 of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; hit; attention",
    "_unsafe_view (2, 3, 12) of (2, 3, 3, 4): S0,R -> S0,R -> S0,R; -; miss; attention",
    "view (6, 12) of (2, 3, 12): S0,R -> S0,R -> S0,R; -; miss; attention",
    # wo is row-parallel: mm takes each rank's columns of the replicated heads (no collective)
    "redistribute by mm (input 0) of (6, 12): S0,R -> S0,S1; m1 chunk; attention",
    "_unsafe_view (2, 3, 8) of (6, 8): S0,P -> S0,P -> S0,P; -; miss; attention",
]
# fmt: on


def brief(r: dict[str, Any]) -> str:
    """A record (as JSON) in GOLDEN's notation."""
    where = r["source"]["function"]
    if r["record"] == "redistribution":
        steps = ",".join(
            f"{','.join(f'm{m}' for m in s['mesh_dims'])} {s['kind']}" for s in r["steps"]
        )
        move = " -> ".join(",".join(p) for p in (r["input"], r["target"]))
        return (
            f"redistribute by {r['asked_by']['text']} of {tuple(r['shape'])}: {move}; "
            f"{steps or '-'}; {where}"
        )
    args = " ".join(str(tuple(a)) if isinstance(a, list) else str(a) for a in r["args"])
    moves = ",".join(f"m{m['mesh_dim']} {m['collective']}" for m in r["moves"]) or "-"
    op = r["op"] if r["method"] is None else f"{r['op']} [{r['method']}]"
    flow = " -> ".join(",".join(p) for p in (r["input"], r["target"], r["output"]))
    return f"{op} {args} of {tuple(r['shape'])}: {flow}; {moves}; {r['cache']}; {where}"


def check_run(result: dict[str, Any]) -> None:
    """One process's run_traced(): the golden records, the moves CommDebugMode counts, the
    cache answering the repeat, the same outputs as without a trace."""
    records = result["records"]
    assert [brief(r) for r in records] == GOLDEN
    views = [r for r in records if r["record"] == "view"]
    moves = [m for r in views for m in r["moves"]]
    # Each move's plan step runs as the functional collective the record names: three
    # all-gathers of equal blocks, and one of the odd batch's unequal blocks as an all-to-all
    # (an all-gather would pad the short blocks and move the padding too); the one
    # redistribution record is a local chunk.
    ops = Counter(f"c10d_functional.{m['op']}" for m in moves if m["op"])
    ops.update(
        f"c10d_functional.{s['collective']}"
        for r in records
        if r["record"] == "redistribution"
        for s in r["steps"]
        if s["collective"]
    )
    assert result["collectives"] == dict(ops)
    assert ops == {ALL_GATHER: 3, ALL_TO_ALL: 1}
    assert result["counted"] == {k.removeprefix("c10d_functional."): n for k, n in ops.items()}
    assert all(m["collective"] == "all-gather" and m["reason"] for m in moves)
    again = result["again"]
    assert [brief(r) for r in again] == [g.replace("; miss;", "; hit;") for g in GOLDEN]
    strip = [{k: v for k, v in r.items() if k not in ("index", "cache")} for r in records]
    assert strip == [{k: v for k, v in r.items() if k not in ("index", "cache")} for r in again]
    assert result["same_outputs"]


@pytest.fixture
def world4() -> Iterator[None]:
    with fake_world(4):
        cute_shard.install()
        yield


def test_a_trace_of_the_blocks_on_a_fake_process_group(world4: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a record that cannot be made warns
        result = trace_models.run_traced()
    check_run(result)
    # the program's line: the code that called each op
    for r in result["records"]:
        line = linecache.getline(trace_models.__file__, r["source"]["line"])
        assert r["source"]["function"] in ("mlp", "heads", "attention")
        assert "@" in line or "reshape" in line or "view" in line or "transpose" in line, line


@pytest.fixture(scope="module")
def gloo4(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """One spawn of 4 gloo ranks (spawning is the slow part) runs the blocks and
    ``test_trace_redistribute.py``'s small program: each rank's results."""
    path = tmp_path_factory.mktemp("trace4")
    ranks: list[dict[str, Any]] = run_world(4, "tests.integration.trace_models:run_on_ranks", path)
    assert len(ranks) == 4
    return ranks


def test_a_trace_on_four_gloo_ranks(gloo4: list[dict[str, Any]]) -> None:
    """Each rank keeps its own log; every rank's is the golden one."""
    for result in gloo4:
        check_run(result["blocks"])


def test_redistribution_records_on_four_gloo_ranks(gloo4: list[dict[str, Any]]) -> None:
    """Every rank records each redistribution of the small program once, as on the fake
    group; the answers are the single-process ones, and the same without the trace."""
    for result in gloo4:
        small = result["redistributions"]
        check_small(small)
        assert small["same"]
        assert small["data"] == dict.fromkeys(small["data"], True)


# --------------------------------------------------------------------------------------------
# Single ops


@pytest.fixture
def mesh24(world8: None) -> Iterator[DeviceMesh]:
    cute_shard.install()
    yield init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))


def test_what_a_record_holds(mesh24: DeviceMesh, tmp_path: Path) -> None:
    x = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1)))
    integration.clear_dtensor_caches()
    with cute_shard.trace() as log:
        y = x.view(128, 32)
    [r] = log.records
    assert isinstance(r, TraceRecord)
    assert (r.op, r.overload, r.method, r.args) == ("view", "aten.view.default", None, ((128, 32),))
    assert (r.shape, r.out_shape, r.dtype) == ((8, 16, 32), (128, 32), "float32")
    assert (r.mesh, r.mesh_dim_names) == ((2, 4), ("dp", "tp"))
    assert [str(p) for p in (*r.input, *r.target, *(r.output or ()))] == [
        *("S0", "S1"),
        *("S0", "S1"),
        *("S0", "SS0:4"),
    ]
    assert r.moves == () and r.strict and r.cache == "miss" and r.error is None
    assert (
        r.source is not None
        and r.source.file == __file__
        and r.source.function.startswith("test_what")
    )
    assert "x.view(128, 32)" in linecache.getline(r.source.file, r.source.line)
    assert tuple(str(p) for p in r.output or ()) == tuple(str(p) for p in _specs(y))
    with pytest.raises(AttributeError):
        r.op = "reshape"  # type: ignore[misc]  # records are frozen
    path = tmp_path / "trace.json"
    assert log.to_json(path) == json.loads(path.read_text())
    assert json.loads(path.read_text())[0]["output"] == ["S0", "SS0:4"]


def _specs(x: DTensor) -> list[str]:
    from cute_shard.notation import PlacementSpec

    return [str(PlacementSpec.of(p)) for p in x.placements]


def test_a_strict_refusal_is_recorded_and_raised(mesh24: DeviceMesh) -> None:
    x = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1)))
    with cute_shard.trace() as log, pytest.raises(RuntimeError, match="view needs communication"):
        x.view(16, 8, 32)
    [r] = log.records
    assert r.output is None and r.out_shape is None
    assert r.error is not None and r.error.startswith("view needs communication: tensor dim 1")
    assert "\n" not in r.error  # (DTensor's "Sharding propagation failed for" schema dump left out)
    assert [str(p) for p in r.target] == ["S0", "R"]  # what a reshape would do
    assert [(s.mesh_dim, s.collective) for s in r.moves] == [(1, "all-gather")]
    text = str(log)
    assert "1 raised" in text and "would m1 all-gather" in text and "[0] raised: view needs" in text


@pytest.mark.parametrize("mode", ["methods", "dispatcher"])
def test_a_reshape_that_redistributes_first(mesh24: DeviceMesh, mode: str) -> None:
    cute_shard.install(reshape_may_copy=mode)  # type: ignore[arg-type]
    x = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1)))
    with cute_shard.trace() as log, CommDebugMode() as comm:
        x.reshape(16, 8, 32)
        x.flatten(0, 1)
    reshape, flatten = log.records
    assert (reshape.op, reshape.method) == ("view", "reshape")
    assert [str(p) for p in reshape.input] == ["S0", "S1"]  # as the program passed it
    assert [str(p) for p in reshape.target] == ["S0", "R"]
    assert [(s.mesh_dim, s.collective, s.bytes_per_rank) for s in reshape.moves] == [
        (1, "all-gather", 3 * 4 * 128 * 4)  # the 3/4 of a (4, 16, 32) float32 shard it lacks
    ]
    assert not reshape.strict and comm.get_total_counts() == 1
    assert (flatten.method, flatten.moves) == (None, ())  # free: nothing redistributed
    # the method's redistribution is the view's move (from the plan that ran), not a row
    assert not log.redistributions and log.collectives() == {"all_gather_into_tensor": 1}


def test_backward_views_are_recorded_at_the_backward_call(mesh24: DeviceMesh) -> None:
    x = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(2))).requires_grad_()
    with cute_shard.trace() as log:
        y = x.view(8, 16, 4, 8)
        y.sum().backward()
    forward, *backward = log.records
    assert forward.source is not None and backward
    assert all(r.source is not None and r.source.line == forward.source.line + 1 for r in backward)
    assert x.grad is not None and [str(p) for p in backward[-1].output or ()] == ["R", "R"]


def test_squeeze_and_the_in_place_squeeze_are_strict(mesh24: DeviceMesh) -> None:
    x = dtensor((8, 1, 6), mesh24, (Shard(0), Shard(1)))
    with cute_shard.trace() as log:
        for squeeze in (lambda t: t.squeeze(1), lambda t: t.squeeze_(1)):
            with pytest.raises(RuntimeError, match="would remove or reshape sharded dimension 1"):
                squeeze(x)  # views: moving the sharded size-1 dim would break the alias
    squeeze, in_place = log.records
    assert (squeeze.op, in_place.op) == ("squeeze", "squeeze_")
    assert squeeze.strict and in_place.strict and squeeze.error and in_place.error
    assert [(s.mesh_dim, s.collective) for s in squeeze.moves] == [(1, "all-gather")]


def test_inference_mode_composite_views(mesh24: DeviceMesh) -> None:
    x = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1)))
    with torch.inference_mode(), cute_shard.trace() as log:
        x.flatten(0, 1)
        x.unflatten(2, (4, 8))  # decomposed: the views inside it are recorded
    assert [r.overload for r in log.records] == ["aten.flatten.using_ints", "aten.view.default"]


def test_traces_nest_and_leave_nothing_behind(mesh24: DeviceMesh) -> None:
    handlers = DTensor._op_dispatcher._custom_op_handlers
    before = dict(handlers)
    x = dtensor((8, 16), mesh24, (Shard(0), Replicate()))
    with cute_shard.trace() as outer:
        x.view(128)
        with cute_shard.trace() as inner:
            x.transpose(0, 1)
        x.unsqueeze(0)
    assert [r.op for r in outer.records] == ["view", "transpose", "unsqueeze"]
    assert [(r.index, r.op) for r in inner.records] == [(0, "transpose")]
    assert handlers == before and integration._observer is None
    with pytest.raises(ValueError, match="boom"), cute_shard.trace():
        raise ValueError("boom")
    assert handlers == before and integration._observer is None


def test_a_trace_changes_no_answer(mesh24: DeviceMesh) -> None:
    x = dtensor((8, 16, 32), mesh24, (Shard(0), Shard(1))).requires_grad_()

    def step() -> tuple[DTensor, torch.Tensor]:
        x.grad = None
        y = x.reshape(16, 8, 32).transpose(0, 1).flatten(1, 2).view(8, 16, 32)
        (y * y).sum().backward()
        assert x.grad is not None
        return y, x.grad.to_local()

    plain_y, plain_grad = step()
    with cute_shard.trace():
        y, grad = step()
    assert y._spec == plain_y._spec and torch.equal(y.to_local(), plain_y.to_local())
    assert torch.equal(grad, plain_grad)


def test_a_trace_needs_install(world8: None) -> None:
    cute_shard.uninstall()
    with pytest.raises(RuntimeError, match=r"cute_shard.install\(\) first"), cute_shard.trace():
        pass


def test_an_empty_trace_prints_its_summary(mesh24: DeviceMesh) -> None:
    with cute_shard.trace() as log:
        pass
    assert log.records == [] and log.to_json() == []
    assert str(log) == (
        "cute_shard.trace: 0 view ops: 0 asked cute_shard, 0 answered by DTensor's cache"
    )

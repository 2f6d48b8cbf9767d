"""``cute_shard.trace()`` records every redistribution cute_shard runs: what asked for it, its
plan's steps and bytes, and why each mesh dim moved.

``trace_redistribute_cases.run_small`` (a ``_StridedShard`` the program redistributes and
gathers with ``full_tensor()``, a matmul that all-gathers its weight, and their backward) runs
on the fake process group here and on 4 gloo ranks (in ``test_trace.py``'s spawn, whose world
runs its blocks too: spawning is the slow part). Both give the records in ``GOLDEN``, one per
redistribution with its asker and steps; their collectives are what CommDebugMode counts; the
bytes are the plan's, at the physical limit; on real ranks every answer is the
single-process one and the same as without the trace. The attention block
(``run_attention``) runs forward and backward on 8 gloo ranks at three sequence lengths: its
output and gradients equal plain torch's on the full tensors, and CommDebugMode counts the
collectives of the plans the trace shows. The rest checks single behaviours on the fake
group: a record's fields and JSON, the table, a reshape's redistribution held by its view's
record, nested traces, torch's own redistribution (not recorded), a record that cannot be
made, from_local's backward, and nothing left behind.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed._local_tensor import LocalTensorMode, rank_map
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.placement_types import _StridedShard

import cute_shard
from cute_shard import oracle, tracing
from cute_shard.notation import parse_placements
from cute_shard.redistribute import Kind, physical_limit, plan_redistribution
from cute_shard.redistribute import dtensor as redistribution
from cute_shard.tracing import AskedBy, Asker, RedistributionRecord, TraceRecord

from . import trace_redistribute_cases as cases
from .conftest import fake_world
from .multirank import run_world
from .test_install import dtensor

# Every record of run_small, in order. A redistribution: by what asked, of shape: source ->
# target; its steps (mesh dims, kind, bytes the busiest rank receives or reduces). A view op:
# op args of shape: input -> output; moves.
# fmt: off
GOLDEN = [
    "view (32, 6) of (4, 8, 6): S0,S1 -> S0,SS0:2; -",
    # the program's redistribute of the _StridedShard: tp's rows go from strided to blocked
    "by redistribute() of (32, 6): S0,SS0:2 -> S0,S1; m1 permutation 96",
    "by full_tensor() of (32, 6): S0,SS0:2 -> R,R; m1 all-gather 192, m0 all-gather 384",
    # mm keeps the _StridedShard rows of y and gathers the column-sharded weight
    "by mm (input 1) of (6, 4): R,S1 -> R,R; m1 all-gather 48",
    # backward: (z * z).sum() + o.sum()
    "expand (32, 4) of (): R,R -> R,R; -",  # sum's backward
    "expand (32, 6) of (): R,R -> R,R; -",
    "by mul (input 0) in MulBackward0 of (32, 6): R,R -> S0,S1; m0,m1 chunk 0",
    "by mul (input 0) in MulBackward0 of (32, 6): R,R -> S0,S1; m0,m1 chunk 0",
    # mm's backward transposes y and w: views that keep every shard
    "t of (32, 6): S0,SS0:2 -> S1,SS1:2; -",
    "by mm (input 1) in MmBackward0 of (32, 4): R,R -> S0,SS0:2; m0,m1 chunk 0",
    "t of (6, 4): R,S1 -> R,S0; -",
    "by mm (input 0) in MmBackward0 of (32, 4): R,R -> R,S1; m1 chunk 0",
    "by redistribute()'s backward of (32, 6): S0,S1 -> S0,SS0:2; m1 permutation 96",
    # y's two gradients (mm's, Partial over tp; the redistribute's) summed as they arrive
    "by add (input 0) in RedistributeBackward of (32, 6): R,P -> S0,SS0:2; "
    "m0 chunk 0, m1 reduce-scatter 384",
    "view (4, 8, 6) of (32, 6): S0,SS0:2 -> S0,S1; -",
]
# fmt: on


def brief(r: dict[str, Any]) -> str:
    """A record (as JSON) in GOLDEN's notation."""
    if r["record"] == "view":
        args = " ".join(str(tuple(a)) if isinstance(a, list) else str(a) for a in r["args"])
        flow = " -> ".join(",".join(p) for p in (r["input"], r["output"]))
        moves = ",".join(f"m{m['mesh_dim']} {m['collective']}" for m in r["moves"]) or "-"
        return f"{r['op']} {args}".rstrip() + f" of {tuple(r['shape'])}: {flow}; {moves}"
    steps = ", ".join(
        f"{','.join(f'm{m}' for m in s['mesh_dims'])} {s['kind']} {s['bytes_per_rank']}"
        for s in r["steps"]
    )
    flow = " -> ".join(",".join(p) for p in (r["input"], r["target"]))
    return f"by {r['asked_by']['text']} of {tuple(r['shape'])}: {flow}; {steps}"


def commdebug_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """The functional collectives the records' plans list: the view ops' moves and the
    redistributions' steps."""
    ops: Counter[str] = Counter()
    for r in records:
        if r["record"] == "view":
            ops.update(m["op"] for m in r["moves"] if m["op"])
        else:
            ops.update(s["collective"] for s in r["steps"] if s["collective"])
    return dict(ops)


def check_small(result: dict[str, Any]) -> None:
    """One process's run_small(): the golden records, the bytes of the plans, the
    collectives CommDebugMode counts."""
    records = result["records"]
    assert [brief(r) for r in records] == GOLDEN
    assert result["collectives"] == commdebug_counts(records) == result["counted"]
    assert result["collectives"] == {
        "all_to_all_single": 2,  # the permutations
        "all_gather_into_tensor": 3,
        "reduce_scatter_tensor": 1,
    }
    for r in records:
        if r["record"] == "redistribution":
            check_bytes(r)
            assert r["source"]["function"] == "small_program"
            assert r["asked_by"]["kind"] != "other"


def check_bytes(r: dict[str, Any]) -> None:
    """A redistribution record's steps and bytes are its plan's, for float32: the busiest
    rank receives the physical limit (every mesh here has a group for several mesh dims)."""
    mesh = tuple(r["mesh"])
    shape = tuple(r["shape"])
    plan = plan_redistribution(
        shape,
        mesh,
        parse_placements(",".join(r["input"]), len(shape), mesh),
        parse_placements(",".join(r["target"]), len(shape), mesh),
    )
    assert [(s["kind"], tuple(s["mesh_dims"])) for s in r["steps"]] == [
        (s.kind.value, s.mesh_dims) for s in plan.steps
    ]
    assert [s["bytes_received"] for s in r["steps"]] == [4 * s.received for s in plan.steps]
    assert [s["bytes_reduced"] for s in r["steps"]] == [4 * s.reduced for s in plan.steps]
    assert [s["collective"] for s in r["steps"]] == [s.collective for s in plan.steps]
    assert r["received_bytes"] == r["limit_bytes"] == 4 * physical_limit(plan)
    assert {m["mesh_dim"] for m in r["moves"]} == {m.mesh_dim for m in plan.moves}
    assert all(m["reason"] for m in r["moves"])


@pytest.fixture
def world4() -> Iterator[None]:
    with fake_world(4):
        cute_shard.install()
        yield


def test_the_redistributions_of_a_program_on_a_fake_process_group(world4: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a record that cannot be made warns
        result = cases.run_small()
    check_small(result)


def test_the_attention_block_on_eight_gloo_ranks(tmp_path: Path) -> None:
    """The whole program stays right: forward and backward at three sequence lengths give
    plain torch's output and gradients on every rank, the trace changes no answer, and
    CommDebugMode counts exactly the collectives of the plans the trace shows."""
    ranks = run_world(
        8, "tests.integration.trace_redistribute_cases:run_attention_on_ranks", tmp_path
    )
    assert len(ranks) == 8
    for rank, result in enumerate(ranks):
        assert [s["seq"] for s in result["steps"]] == list(cases.LENGTHS)
        for step in result["steps"]:
            where = f"rank {rank}, length {step['seq']}"
            assert step["close"] == [True] * 6, where  # the output and 5 gradients
            assert step["collectives"] == step["counted"] == commdebug_counts(step["records"])
            askers = Counter(r["asked_by"]["text"] for r in step["records"])
            # the block's final redistribute to Replicate, its backward, the gathers of the
            # gradients; the matmuls take the _StridedShard folds as they are
            assert askers == {
                "redistribute()": 1,
                "redistribute()'s backward": 1,
                "full_tensor()": 5,
            }, where
            for r in step["records"]:
                check_bytes(r)
        assert result["same_untraced"], f"rank {rank}"
        assert result["steps"] == ranks[0]["steps"]  # every rank recorded the same


# --------------------------------------------------------------------------------------------
# Single behaviours on the fake process group


@pytest.fixture
def mesh22(world4: None) -> DeviceMesh:
    return init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))


def test_what_a_redistribution_record_holds(mesh22: DeviceMesh) -> None:
    x = dtensor((32, 6), mesh22, (Shard(0), _StridedShard(0, split_factor=2)))
    with cute_shard.trace() as log:
        y = x.redistribute(mesh22, [Shard(0), Shard(1)])
    [r] = log.records
    assert isinstance(r, RedistributionRecord) and log.redistributions == [r] and not log.views
    assert r.asked_by == AskedBy(Asker.REDISTRIBUTE, "redistribute")
    assert str(r.asked_by) == "redistribute()" and r.explicit and r.op == "redistribute"
    assert (r.shape, r.dtype, r.mesh, r.mesh_dim_names) == (
        (32, 6),
        "float32",
        (2, 2),
        ("dp", "tp"),
    )
    assert [str(p) for p in (*r.input, *r.target)] == ["S0", "SS0:2", "S0", "S1"]
    assert y.placements == (Shard(0), Shard(1))
    [step] = r.steps
    assert (step.kind, step.mesh_dims, step.collective) == (Kind.PERMUTE, (1,), "all_to_all_single")
    # each rank's 8 rows of 6 floats: half of them are already where they belong
    assert step.received == r.received == r.limit == r.bytes_per_rank == 4 * 6 * 4
    [move] = r.moves
    assert move.mesh_dim == 1 and move.kind is Kind.PERMUTE and "d0 to d1" in move.reason
    assert r.collectives == ("all_to_all_single",) and not r.split
    assert r.source is not None and r.source.file == __file__
    assert str(r.plan) == "[S0, SS0:2] -> [S0, S1]: permutation on m1"
    j = r.to_json()
    assert j["record"] == "redistribution" and j["asked_by"]["kind"] == "redistribute"
    assert j["steps"][0]["collective"] == "all_to_all_single"
    assert j["moves"][0]["from"] == "SS0:2" and j["moves"][0]["to"] == "S1"
    assert log.to_json() == [j]
    with pytest.raises(AttributeError):
        r.index = 3  # type: ignore[misc]  # records are frozen


def test_the_table_tells_one_story(mesh22: DeviceMesh) -> None:
    x = dtensor((4, 8, 6), mesh22, (Shard(0), Shard(1)))
    w = dtensor((6, 4), mesh22, (Replicate(), Shard(1)))
    with cute_shard.trace() as log, CommDebugMode() as comm:
        y = x.view(32, 6)
        y @ w
        y.full_tensor()
    text = str(log)
    head, _, view, mm, gather, *notes = text.splitlines()
    assert head == (
        "cute_shard.trace: 1 view op and 2 redistributions on mesh dp=2,tp=2: 1 asked "
        "cute_shard, 0 answered by DTensor's cache; 3 collectives, 624 B received per rank "
        "at most"
    )
    assert view.split()[:2] == ["0", "view"]
    assert mm.split()[:5] == ["1", "redistribute", "by", "mm", "(input"]
    assert "m1 all-gather 48 B" in mm and gather.split()[3] == "full_tensor()"
    assert notes == [
        "",
        "[1] m1 S1 -> R: each rank needs all of d1 along m1",
        "[2] m0 S0 -> R: each rank needs all of d0 along m0",
        "[2] m1 SS0:2 -> R: each rank needs all of d0 along m1",
    ]
    assert comm.get_total_counts() == sum(log.collectives().values()) == 3
    assert repr(log) == "<TraceLog: 1 view op, 2 redistributions>"


def test_a_reshape_holds_its_redistribution(mesh22: DeviceMesh) -> None:
    """The method's redistribution is the view's move, recorded once, with the plan that
    ran; an ``_unsafe_view`` (matmul's fold back) that replicates a dim holds its own."""
    x = dtensor((4, 3, 12), mesh22, (Shard(0), Shard(2)))
    s = dtensor((4, 3, 6), mesh22, (Shard(0), Shard(1)))
    with cute_shard.trace() as log, CommDebugMode() as comm:
        x.reshape(4, 3, 3, 4)  # 3 heads over 2 tp ranks: a head is cut, tp is gathered
        torch.ops.aten._unsafe_view(s, (4, 18))  # 3 rows over 2 tp ranks: tp is gathered
    reshape, fold = log.records
    assert isinstance(reshape, TraceRecord) and isinstance(fold, TraceRecord)
    assert reshape.method == "reshape" and not log.redistributions
    assert [(m.mesh_dim, m.collective, m.op) for m in reshape.moves] == [
        (1, "all-gather", "all_gather_into_tensor")
    ]
    # (one tp rank holds 2 rows, the other 1: unequal blocks, an all-to-all)
    assert [(m.mesh_dim, m.collective, m.op) for m in fold.moves] == [
        (1, "all-gather", "all_to_all_single")
    ]
    assert log.collectives() == {"all_gather_into_tensor": 1, "all_to_all_single": 1}
    assert comm.get_total_counts() == 2


def test_traces_nest_and_leave_no_observer(mesh22: DeviceMesh) -> None:
    x = dtensor((8, 8), mesh22, (Shard(0), Shard(1)))
    with cute_shard.trace() as outer:
        x.redistribute(mesh22, [Replicate(), Shard(1)])
        with cute_shard.trace() as inner:
            x.full_tensor()
    assert [str(r.asked_by) for r in outer.redistributions] == ["redistribute()", "full_tensor()"]
    assert [(r.index, str(r.asked_by)) for r in inner.redistributions] == [(0, "full_tensor()")]
    assert redistribution._observer is None  # no trace open: nothing but the None check
    with cute_shard.trace() as after:
        pass
    x.full_tensor()  # outside any trace: no record anywhere
    assert after.records == [] and len(outer.records) == 2


def test_torch_redistribution_is_not_recorded(mesh22: DeviceMesh) -> None:
    cute_shard.install(redistribute=False)
    x = dtensor((8, 8), mesh22, (Shard(0), Shard(1)))
    with cute_shard.trace() as log:
        x.full_tensor()
    assert log.records == []


def test_a_record_that_cannot_be_made_warns(
    mesh22: DeviceMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = dtensor((8, 8), mesh22, (Shard(0), Shard(1)))
    want = x.redistribute(mesh22, [Replicate(), Shard(0)])

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(tracing, "_redistribution", broken)
    with cute_shard.trace() as log, pytest.warns(UserWarning, match="could not record"):
        got = x.redistribute(mesh22, [Replicate(), Shard(0)])
    assert log.records == [] and got.placements == want.placements
    assert got.to_local().shape == want.to_local().shape


def test_the_asker_of_each_kind_reads_as_the_table_prints_it() -> None:
    texts: dict[str, Callable[[], AskedBy]] = {
        "mm (input 1)": lambda: AskedBy(Asker.OP, "mm", 1, "aten.mm.default"),
        "mm (input 0) in MmBackward0": lambda: AskedBy(Asker.OP, "mm", 0, None, "MmBackward0"),
        "full_tensor()": lambda: AskedBy(Asker.FULL_TENSOR, "full_tensor"),
        "reshape()": lambda: AskedBy(Asker.METHOD, "reshape"),
        "redistribute()'s backward": lambda: AskedBy(
            Asker.GRADIENT, "redistribute", backward="RedistributeBackward"
        ),
        "from_local()'s backward": lambda: AskedBy(Asker.FROM_LOCAL, "from_local"),
        "DTensor.foo": lambda: AskedBy(Asker.OTHER, "DTensor.foo"),
    }
    assert {text: str(make()) for text, make in texts.items()} == {t: t for t in texts}


def test_from_local_backward_is_recorded(mesh22: DeviceMesh) -> None:
    """sum's gradient arrives replicated; from_local's backward takes each rank's shard."""
    local = torch.ones(4, 3, requires_grad=True)
    with cute_shard.trace() as log:
        x = DTensor.from_local(local, mesh22, [Shard(0), Shard(1)])
        x.sum().backward()
    [r] = log.redistributions
    assert str(r.asked_by) == "from_local()'s backward" and r.asked_by.backward is not None
    assert [str(p) for p in (*r.input, *r.target)] == ["R", "R", "S0", "S1"]
    assert [str(s) for s in r.steps] == ["m0,m1 chunk"] and r.collectives == ()
    assert local.grad is not None and torch.equal(local.grad, torch.ones(4, 3))


def test_simulated_ranks_make_one_record() -> None:
    """Under LocalTensorMode one call redistributes every simulated rank's data: one record,
    and every rank's local tensor is the target's shard (real data, in one process)."""
    shape, mesh_shape = (32, 24), (2, 4)
    src, dst = [Shard(0), _StridedShard(0, split_factor=2)], [Shard(0), Shard(1)]
    full = torch.arange(float(math.prod(shape))).reshape(shape)
    coords = list(itertools.product(*(range(n) for n in mesh_shape)))
    with fake_world(8), LocalTensorMode(frozenset(range(8))):
        cute_shard.install()
        mesh = init_device_mesh("cpu", mesh_shape)
        local = rank_map(lambda r: oracle.local_shard(full, src, mesh_shape, coords[r]))
        x = DTensor.from_local(
            local, mesh, src, shape=torch.Size(shape), stride=full.stride(), run_check=False
        )
        with cute_shard.trace() as log, CommDebugMode() as comm:
            y = x.redistribute(mesh, dst)
        shards = y._local_tensor._local_tensors  # type: ignore[attr-defined]
        for r, coord in enumerate(coords):
            assert torch.equal(shards[r], oracle.local_shard(full, dst, mesh_shape, coord))
    [r] = log.records
    assert isinstance(r, RedistributionRecord) and r.collectives == ("all_to_all_single",)
    assert comm.get_total_counts() == 1
    assert str(log).splitlines()[0] == (
        "cute_shard.trace: 1 redistribution on mesh (2,4): 1 collective, 288 B received per "
        "rank at most"
    )

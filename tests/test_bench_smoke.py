"""Smoke tests of the benchmarks (bench/): each suite runs end to end on a few cases.

Only that the suite runs and reports is checked, never a timing: timings belong to
``python -m bench``, on a machine quiet enough to mean something.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from bench import (
    attention_bench,
    dtensor_bench,
    execute_bench,
    propagate_bench,
    redistribute_bench,
)
from bench.propagate_cases import FAMILIES, make_pool, materialize
from bench.redistribute_cases import (
    CATEGORIES,
    Pair,
    bytes_pairs,
    large_mesh_pairs,
    named_pairs,
    planning_pairs,
)
from cute_shard.notation import PlacementSpec

TINY = propagate_bench.Settings(
    rounds=1,
    pool=3,
    batch=2,
    sym_pool=2,
    sym_batch=2,
    passes=1,
    cell_budget_s=0.0,
    dtensor_cases=3,
    dtensor_batch=2,
)


# Symbolic sizes on 2-D and 3-D meshes can take seconds per call (sympy); 1-D is enough here.
STATIC = [f for f in FAMILIES if f != "symbolic"]


def test_propagate_suite_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    results = propagate_bench.run(TINY, families=[*STATIC, "dtensor"])
    json.dumps(results)  # what python -m bench writes
    rows = results["rows"]
    cells = {(r["family"], r["mesh"], r["temp"], r["mode"]) for r in rows}
    for family in STATIC:
        for rank in propagate_bench.MESH_RANKS:
            for temp in propagate_bench.TEMPS:
                for mode in propagate_bench.MODES:
                    assert (family, f"{rank}-D", temp, mode) in cells
    assert set(results["overall_speedup"]) == {
        f"{t} {m}" for t in propagate_bench.TEMPS for m in propagate_bench.MODES
    }
    out = capsys.readouterr().out
    assert "overall speed-up" in out
    if dtensor_bench.unavailable() is None:
        assert {(r["mesh"], r["cell"]) for r in results["dtensor"]} >= {("1-D", "hit")}
    else:
        assert "dtensor end-to-end: skipped" in out


def test_symbolic_family_runs() -> None:
    results = propagate_bench.run(TINY, families=["symbolic"], mesh_ranks=(1,))
    assert {(r["temp"], r["mode"]) for r in results["rows"]} == {
        (t, m) for t in propagate_bench.TEMPS for m in propagate_bench.MODES
    }


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pools_are_distinct_and_build_on_both_sides(family: str) -> None:
    for rank in propagate_bench.MESH_RANKS:
        pool = make_pool(family, rank, 6)
        assert len({repr(c) for c in pool}) == len(pool) == 6
        for c in materialize(pool):
            assert len(c.placements) == len(c.mesh) == rank
            for side in propagate_bench.sides():
                propagate_bench.calls(side, [c], "prop")  # both sides' builders accept the args


def test_profile_prints_the_top_functions() -> None:
    report = propagate_bench.profile("permute", calls_n=10, top=5, pool=4)
    assert "cold cute_shard calls of permute" in report
    assert "tottime" in report


# --------------------------------------------------------------------------- redistribution


def _tiny_pairs() -> list[Pair]:
    """A plain pair on 2 ranks and the named case torch gets wrong on 6."""
    plain = Pair("plain", (4, 6), (2,), (PlacementSpec("S", 0),), (PlacementSpec("S", 1),))
    return [plain, next(p for p in named_pairs() if p.mesh == (3, 2))]


def test_redistribute_bytes_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    results = redistribute_bench.run_bytes(pairs=_tiny_pairs())
    json.dumps(results)
    rows = results["rows"]
    assert [r["category"] for r in rows] == ["plain", "named"]
    for r in rows:
        assert r["limit"] > 0 and r["ours"] > 0 and r["torch"]
        assert r["ours_steps"] and r["torch"][0]["ops"]
        assert r["ours_correct"] is True
    out = capsys.readouterr().out
    assert "ours/limit" in out and "named cases" in out
    assert {s["category"] for s in results["summary"]} == {"plain", "named", "all"}


def test_redistribute_cases_are_legal_and_cover_the_categories() -> None:
    pairs = bytes_pairs(12, seed=3)
    assert {p.category for p in pairs} == set(CATEGORIES)
    assert len(set(pairs)) == len(pairs)
    assert any(p.strided for p in pairs if p.category == "view -> plain")
    assert all(math.prod(p.mesh) <= 8 for p in pairs)
    assert all(math.prod(p.mesh) == 8 for p in planning_pairs(6))


def test_redistribute_planning_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    pairs = [p for p in named_pairs() if math.prod(p.mesh) == 8]
    large = [p for p in large_mesh_pairs() if p.mesh == (128, 8)][:2]
    results = redistribute_bench.run_planning(rounds=1, pairs=pairs, large=large)
    json.dumps(results)
    groups = {(r["what"], r["group"]) for r in results["rows"]}
    assert (redistribute_bench.LARGE, f"{redistribute_bench.GREEDY}, 1,024 ranks") in groups
    assert ("plan + price", redistribute_bench.GRAPH) in groups
    assert ("plan alone", redistribute_bench.GRAPH) in groups
    assert (redistribute_bench.FIRST_SIGHT, redistribute_bench.GRAPH) in groups
    assert (redistribute_bench.BACK_TO_BACK, redistribute_bench.GRAPH) in groups
    assert "redistribute-planning" in capsys.readouterr().out


def test_redistribute_execute_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    results = execute_bench.run_execute(n=4, rounds=1)
    json.dumps(results)
    rows = {r["category"]: r for r in results["rows"]}
    assert rows[execute_bench.ALL]["cases"] == len(results["cases"]) > 0
    assert "redistribute-execute" in capsys.readouterr().out
    from cute_shard.redistribute import dtensor

    assert not dtensor.is_installed()  # the suite leaves torch's own redistribution


@pytest.mark.parametrize("back_to_back", [False, True])
def test_cold_timing_orders_the_sides(back_to_back: bool) -> None:
    """Interleaved, the sides alternate call by call; back to back, each side runs every
    case in a row; either way the side that goes first alternates, and each call is cold."""
    calls: list[tuple[str, str]] = []
    cases = [SimpleNamespace(case=str(i)) for i in range(3)]

    def side(name: str) -> redistribute_bench.Side:
        return lambda s: calls.append((name, s.case))

    cleared: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(redistribute_bench, "clear_torch", lambda: cleared.append("torch"))
        times = redistribute_bench.time_cold(
            cases,  # type: ignore[arg-type]
            side("ours"),
            side("torch"),
            2,
            lambda: cleared.append("ours"),
            back_to_back=back_to_back,
        )
    assert len(times) == 3 and len(calls) == len(cleared) == 12
    assert [n for n, _ in calls] == cleared  # every call after its side's clear
    if back_to_back:
        blocks = [calls[k : k + 3] for k in range(0, 12, 3)]
        assert [b[0][0] for b in blocks] == ["torch", "ours", "ours", "torch"]
        assert all(len({n for n, _ in b}) == 1 for b in blocks)
        assert all([c for _, c in b] == ["0", "1", "2"] for b in blocks)
    else:
        pairs = [calls[k : k + 2] for k in range(0, 12, 2)]
        assert [p[0][1] == p[1][1] for p in pairs] == [True] * 6  # one case, both sides
        assert [p[0][0] for p in pairs] == ["torch", "ours", "torch", "ours", "torch", "ours"]


def test_first_sight_empties_the_placement_tables_and_cold_keeps_them() -> None:
    from cute_shard.redistribute import plan as ours_plan

    pair = next(p for p in named_pairs() if math.prod(p.mesh) == 8)
    ours_plan.plan_redistribution(pair.shape, pair.mesh, pair.src, pair.dst)
    tables = [
        getattr(module, name)
        for module, names in redistribute_bench.PLACEMENT_TABLES
        for name in names
    ]
    assert all(t.cache_info().currsize for t in tables)
    redistribute_bench.clear_ours()
    assert ours_plan._plan.cache_info().currsize == 0
    assert all(t.cache_info().currsize for t in tables)
    redistribute_bench.clear_first_sight()
    assert not any(t.cache_info().currsize for t in tables)


def test_redistribute_fsdp_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    results = redistribute_bench.run_fsdp((32, 4))
    rows = results["rows"]
    assert len(rows) == 2 and all(r["ours"] == r["limit"] for r in rows)
    assert "redistribute-fsdp" in capsys.readouterr().out


def test_metering_counts_what_each_rank_receives() -> None:
    """An all-gather of 4 ranks' 3 elements: each receives the other 9."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    pair = Pair("plain", (12,), (4,), (PlacementSpec("S", 0),), (PlacementSpec("R"),))
    with redistribute_bench.simulated_world(4):
        run = redistribute_bench.run_pair(
            pair, init_device_mesh("cpu", (4,)), redistribute_bench.FROM_LOCAL, ours=False
        )
    assert run.received == 9 and run.correct and run.ops == ("all_gather_into_tensor",)
    assert torch.distributed.is_initialized() is False


def test_attention_backward_step_profiles() -> None:
    report = attention_bench.profile_step(next(iter(attention_bench.CONFIGS)), top=5)
    assert "forward+backward" in report and "top 5 by cumulative" in report


def test_attention_runs_on_a_mesh_of_1024_ranks() -> None:
    rows = attention_bench.run_large(1)
    assert [r.passes for r in rows] == ["forward", "forward+backward"]
    for r in rows:
        assert r.config == attention_bench.LARGE_CONFIG and r.cell == "variable length"
        assert r.cute_shard_ms > 0 and r.torch_ms and r.torch_ms > 0

"""Smoke test of the propagation benchmark (bench/): it runs end to end on a few cases.

Only that the suite runs and reports is checked, never a timing: timings belong to
``python -m bench``, on a machine quiet enough to mean something.
"""

from __future__ import annotations

import json

import pytest

from bench import dtensor_bench, propagate_bench
from bench.propagate_cases import FAMILIES, make_pool, materialize

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

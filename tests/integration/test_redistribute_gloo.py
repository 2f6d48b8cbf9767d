"""cute_shard's redistribution on real gloo ranks: world sizes 4 and 8, with cute_shard
installed (``redistribute_cases.py`` says what each case checks: the local data, the
collectives counted against the plan's, the gradient), plus, on 4 ranks, whole parallel
programs (``parallel_programs.py``: torch's tensor-parallel styles, FSDP2 over TP) and the
compiled step with ``_StridedShard`` redistributions. One spawn per world size runs all its cases;
each case is its own test item here, and a crash on any rank fails every item of its world
with that rank's traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .multirank import run_world
from .redistribute_cases import CALLS, COMPILE_BACKENDS, HAND_PICKED, RANDOM_CASES, cases

WORLDS = (4, 8)
TARGET = "tests.integration.redistribute_cases:run_all"

CASES = [(world, name) for world in WORLDS for name, _ in cases(world)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict[str, Any]]:
    """Runs each world once, on first use, and hands out its results."""
    results: dict[int, Any] = {}

    def get(size: int) -> dict[str, Any]:
        if size not in results:
            try:
                results[size] = run_world(
                    size, TARGET, tmp_path_factory.mktemp(f"redistribute{size}")
                )
            except Exception as e:  # every case of this world reports the same crash
                results[size] = e
        if isinstance(results[size], Exception):
            raise results[size]
        return results[size]

    return get


def test_case_counts() -> None:
    for size in WORLDS:
        assert len(cases(size)) == len(HAND_PICKED[size]) + RANDOM_CASES[size]
        assert len({name for name, _ in cases(size)}) == len(cases(size))


@pytest.mark.parametrize(("size", "name"), CASES, ids=[f"w{s}-{n}" for s, n in CASES])
def test_case(world: Callable[[int], dict[str, Any]], size: int, name: str) -> None:
    verdict = world(size)["cases"][name]
    assert verdict["ok"], verdict["error"]


@pytest.mark.parametrize("backend", COMPILE_BACKENDS)
def test_compiled_strided_step_compiles_once_and_equals_eager(
    world: Callable[[int], dict[str, Any]], backend: str
) -> None:
    report = world(4)["compiled"][backend]
    assert report["ok"], report["error"]
    assert report["frames"] == 1, f"{report['frames']} graphs over {CALLS} calls"


@pytest.mark.parametrize("backend", COMPILE_BACKENDS)
def test_compiled_strided_step_with_dynamic_shapes_is_one_graph_per_unit_multiple(
    world: Callable[[int], dict[str, Any]], backend: str
) -> None:
    """The same step compiled with dynamic shapes over first dims 16, 24, 40, 56 (multiples
    of the unit 8) and 12: one graph for the multiples, one more for 12; every result and
    gradient equals plain torch's."""
    report = world(4)["compiled"][f"{backend}, dynamic"]
    assert report["ok"], report["error"]
    assert report["frames"] == [1, 1, 1, 1, 2], report["frames"]


def test_random_redistributions_compiled_with_dynamic_shapes_are_exact_in_one_graph(
    world: Callable[[int], dict[str, Any]],
) -> None:
    """Seeded random pairs on the 4-rank world, each redistributed in a function compiled
    with dynamic shapes at three shapes that are multiples of its units: every rank's local
    tensor is the oracle's target shard, and each pair compiles one graph."""
    report = world(4)["compiled"]["random, dynamic"]
    assert report["ok"], report["error"]
    assert set(report["frames"].values()) == {1}, report["frames"]


@pytest.mark.parametrize("program", ["styles", "fsdp2+tp"])
def test_parallel_programs_on_real_ranks(
    world: Callable[[int], dict[str, Any]], program: str
) -> None:
    """``parallel_programs.py`` on 4 gloo ranks: torch's tensor-parallel styles (their
    ``async_op`` redistributions really in flight) and FSDP2 over TP (``_StridedShard``
    parameters and gradients gathered by cute_shard)."""
    report = world(4)["programs"][program]
    assert not report["problems"], "\n".join(report["problems"])
    assert report["runs"] > 0

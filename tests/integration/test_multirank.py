"""Real multi-rank DTensor over gloo: world sizes 4, 6 and 8, with cute_shard installed.

One spawn per world size runs every case of that world (``multirank_cases.py`` says what each
case checks) and the transformer-style step; each case is its own test item here. A crash on
any rank fails every item of its world with that rank's traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cute_shard import oracle

from .multirank import run_world
from .multirank_cases import COMPILE_BACKENDS, COMPILED_WORLDS, OPS, Case, cases

WORLDS = (4, 6, 8)
TARGET = "tests.integration.multirank_cases:run_all"

CASES = [(world, case) for world in WORLDS for case in cases(world)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict[str, Any]]:
    """Runs each world once, on first use, and hands out its results."""
    results: dict[int, Any] = {}

    def get(size: int) -> dict[str, Any]:
        if size not in results:
            # (run_world runs a crashed spawn once more; a second crash fails every case)
            try:
                results[size] = run_world(size, TARGET, tmp_path_factory.mktemp(f"world{size}"))
            except Exception as e:  # every case of this world reports the same crash
                results[size] = e
        if isinstance(results[size], Exception):
            raise results[size]
        return results[size]

    return get


@pytest.mark.parametrize(
    ("size", "case"), CASES, ids=[f"w{size}-{case.name}" for size, case in CASES]
)
def test_case(world: Callable[[int], dict[str, Any]], size: int, case: Case) -> None:
    verdict = world(size)["cases"][case.name]
    assert verdict["ok"], verdict["error"]


def _missed(world: Callable[[int], dict[str, Any]], size: int) -> tuple[list[str], list[str]]:
    """Cases that communicated or refused although the oracle's brute-force search finds output
    placements that make the view valid with the input left as it is: (those whose input
    shards a size-1 dim, the others)."""
    size_one, others = [], []
    for case in cases(size):
        verdict = world(size)["cases"][case.name]
        question = _oracle_question(case)
        if question is None or not (verdict["comm"] or verdict["raised"]):
            continue
        op, args, strict = question
        answer = oracle.find_zero_comm_answer(
            case.shape, case.placements, case.mesh, op, args, strict_view=strict
        )
        if answer is not None:
            sharded = {getattr(p, "dim", None) for p in case.placements} - {None}
            where = size_one if any(case.shape[d] == 1 for d in sharded) else others
            where.append(f"{case.name}: {answer} needs no communication")
    return size_one, others


@pytest.mark.parametrize("size", WORLDS)
def test_communicates_only_where_no_zero_comm_answer_exists(
    world: Callable[[int], dict[str, Any]], size: int
) -> None:
    _, missed = _missed(world, size)
    assert not missed, "\n".join(missed)


@pytest.mark.parametrize("size", WORLDS)
def test_sharded_size_one_dims_need_no_communication(
    world: Callable[[int], dict[str, Any]], size: int
) -> None:
    missed, _ = _missed(world, size)
    assert not missed, "\n".join(missed)


def _oracle_question(case: Case) -> tuple[str, tuple[Any, ...], bool] | None:
    """The oracle's name for a case's op, its arguments and strictness (None: not asked)."""
    if any(getattr(p, "reduce_op", "sum") != "sum" for p in case.placements):
        return None  # a pending max is reduced first on purpose (view_as_complex)
    name = case.op.removesuffix("_inference").removesuffix("_no_grad")
    strict = OPS[case.op].strict
    if name in ("view", "reshape", "_unsafe_view", "view_copy"):
        return "view" if strict else "reshape", case.args, strict
    if name.startswith("squeeze"):
        dims = case.args[0] if case.args else tuple(range(len(case.shape)))
        return "squeeze", (dims if isinstance(dims, tuple) else (dims,),), strict
    if name in ("expand", "expand_copy"):
        return "expand", case.args, strict
    if name in ("permute", "repeat", "transpose", "movedim", "unsqueeze", "unflatten"):
        return name, case.args, strict
    if name in ("view_as_real", "view_as_complex"):
        return name, (), strict
    if name == "flatten":
        return "flatten", case.args, strict
    return None


@pytest.mark.parametrize("size", WORLDS)
def test_transformer_step_under_tp_and_sequence_sharding(
    world: Callable[[int], dict[str, Any]], size: int
) -> None:
    """Head split/merge and a token-flattened MLP on a 2-D mesh (sequence on mesh dim 0, tensor
    parallel on mesh dim 1): equal to plain torch, and never more collectives than torch's
    propagator. Under inference mode torch's reshape replicates the sequence; ours does not."""
    report = world(size)["transformer"]
    for key, run in report.items():
        if key.endswith("cute_shard"):
            assert run["ok"], f"{key}: {run['error'] or 'differs from plain torch'}"
    for mode in ("grad", "inference"):
        ours = report[f"seq+tp / {mode} / cute_shard"]["collectives"]
        theirs = report[f"seq+tp / {mode} / torch"]
        if theirs["ok"]:
            assert ours <= theirs["collectives"], (mode, ours, theirs)
    ours = report["seq+tp / inference / cute_shard"]["collectives"]
    assert ours < report["seq+tp / inference / torch"]["collectives"]
    # With the sequence sharded over both mesh dims, the shardings the views keep
    # ([_S(0), _S(0)] after the token flatten) move by cute_shard's redistribution: fewer
    # collectives than torch's in grad mode (6 against 10: one all-gather per _StridedShard
    # mesh dim instead of gathers torch repeats), as many under inference mode (6; with the
    # view engine alone, torch's redistribution of those _StridedShards took 12).
    grad = report["seq over both / grad / cute_shard"]["collectives"]
    assert grad < report["seq over both / grad / torch"]["collectives"]


@pytest.mark.parametrize("size", WORLDS)
def test_transformer_step_sequence_over_both_mesh_dims_under_inference(
    world: Callable[[int], dict[str, Any]], size: int
) -> None:
    report = world(size)["transformer"]
    ours = report["seq over both / inference / cute_shard"]["collectives"]
    assert ours <= report["seq over both / inference / torch"]["collectives"]


@pytest.mark.parametrize("size", [w for w in WORLDS if w in COMPILED_WORLDS])
@pytest.mark.parametrize("backend", COMPILE_BACKENDS)
@pytest.mark.parametrize("step", ["strided", "attention"])
def test_views_that_keep_sharding_compile_on_every_rank(
    world: Callable[[int], dict[str, Any]], size: int, backend: str, step: str
) -> None:
    """torch.compile(fullgraph=True) of a step whose views give _StridedShard outputs (and of
    the attention block), on real gloo ranks: one graph for five steps, each output equal to
    eager's and to plain torch's on every rank."""
    run = world(size)["compiled"][f"{step} / {backend}"]
    assert run["ok"], run["error"]
    assert run["frames"] == 1

"""The hot path (``cute_shard.engine.fast``) against the general engine it short-cuts.

Wherever ``fast_propagate`` or ``leaf_propagate`` answers, the general engine (placements ->
layout -> compose_view -> read-back, run with the hot path bypassed) must return exactly the
same output placements and keep the input as it is; wherever ``fast_answer`` answers a view
that must move, the same input target and output; wherever ``uneven_answer`` answers an
uneven view, the uneven fallback's input target and output. The oracle suites then cover the
hot paths too, since ``propagate_shape_and_sharding`` runs them first. The hit rate is
reported with ``event``.
"""

from __future__ import annotations

from hypothesis import event, given

from cute_shard.engine import propagate as P
from cute_shard.engine.fast import fast_answer, fast_propagate, leaf_propagate
from cute_shard.engine.fast_uneven import uneven_answer
from cute_shard.engine.sharded import normalize_placements, to_torch_placement
from property_tests.engine_strategies import ENGINE, Case, cases, even_view_cases, view_cases


def _general(case: Case, complex_view: bool | None) -> tuple[object, object]:
    norm = normalize_placements(case.placements, len(case.shape), case.mesh)
    target, out, _ = P._propagate(norm, case.shape, case.rule, case.mesh, complex_view)
    return (
        tuple(P._merge_target(case.placements, target)),
        tuple(to_torch_placement(p) for p in out),
    )


def _check(case: Case) -> None:
    for complex_view in (None, False, True):
        fast = fast_propagate(case.placements, case.shape, case.rule, case.mesh, complex_view)
        event(f"hot path answered: {fast is not None}")
        if fast is None:
            continue
        assert _general(case, complex_view) == (case.placements, fast), str(case)
    for complex_view in (None, False, True):
        args = (case.placements, case.shape, case.rule, case.mesh, complex_view)
        if fast_propagate(*args) is not None:
            continue
        read = leaf_propagate(*args)
        event(f"leaf pass answered where the hot path did not: {read is not None}")
        if read is not None:
            assert _general(case, complex_view) == (case.placements, read), str(case)
    for complex_view in (None, False, True):
        answer = fast_answer(case.placements, case.shape, case.rule, case.mesh, complex_view)
        moved = answer is not None and answer[0] != case.placements
        event(f"hot path answered with communication: {moved}")
        if answer is None:
            continue
        assert _general(case, complex_view) == answer, str(case)
    for complex_view in (None, False, True):
        for strict in (False, True):
            answer = uneven_answer(
                case.placements, case.shape, case.rule, case.mesh, complex_view, strict
            )
            event(f"uneven hot path answered: {answer is not None}")
            if answer is None:
                continue
            assert not strict or answer[0] == case.placements, str(case)
            assert _general(case, complex_view) == answer, str(case)


@ENGINE
@given(cases())
def test_fast_path_equals_general_engine(case: Case) -> None:
    _check(case)


@ENGINE
@given(view_cases())
def test_fast_path_equals_general_engine_on_views(case: Case) -> None:
    _check(case)


@ENGINE
@given(even_view_cases())
def test_fast_path_equals_general_engine_on_even_views(case: Case) -> None:
    _check(case)

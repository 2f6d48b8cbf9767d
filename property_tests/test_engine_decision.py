"""The returned decision (``decide_view``) is the one ``propagate_shape_and_sharding`` raises
or returns: the same input target and output placements, the same mesh dims blocked with the
same reasons as a strict view's error, and ``refusal()`` exactly when something moves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cute_shard
from cute_shard.engine import RedistributionRequired, decide_view
from property_tests.engine_strategies import ENGINE, Case, cases, even_view_cases


@ENGINE
@given(st.one_of(cases(), even_view_cases()))
def test_the_returned_decision_is_the_raised_one(case: Case) -> None:
    complex_view = case.op == "view_as_complex"
    decision = decide_view(
        case.placements, case.shape, case.rule, case.mesh, complex_view=complex_view
    )
    target, output = cute_shard.propagate_shape_and_sharding(
        case.placements, case.shape, case.rule, case.mesh, False, complex_view=complex_view
    )
    assert (decision.target, decision.output) == (tuple(target), tuple(output)), case
    moved = {m.mesh_dim for m in decision.moved}
    changed = zip(case.placements, target, strict=True)
    assert moved == {m for m, (a, b) in enumerate(changed) if a != b}, case
    refusal = decision.refusal()
    try:
        cute_shard.propagate_shape_and_sharding(
            case.placements, case.shape, case.rule, case.mesh, True, complex_view=complex_view
        )
    except RedistributionRequired as e:
        assert refusal is not None, case
        assert e.blocked == decision.blocked, case
        assert str(e) == str(refusal), case
        assert tuple(e.suggestion or ()) == decision.target, case
    else:
        assert refusal is None and not decision.moved and decision.blocked == (), case


@ENGINE
@given(st.one_of(cases(), even_view_cases()))
def test_integers_of_another_type_decide_as_ints(case: Case) -> None:
    """Sizes given as numpy's integers (torch takes them as sizes) are the ints they equal,
    not symbols: the same target, output placements (``Shard``, not ``_StridedShard(sf=1)``)
    and mesh dims blocked for the same reasons."""
    np = pytest.importorskip("numpy")
    complex_view = case.op == "view_as_complex"
    ints = decide_view(case.placements, case.shape, case.rule, case.mesh, complex_view=complex_view)
    shape = tuple(np.int64(n) for n in case.shape)
    other = decide_view(case.placements, shape, case.rule, case.mesh, complex_view=complex_view)
    assert (other.target, other.output) == (ints.target, ints.output), case
    assert [(b.mesh_dim, b.tensor_dim, b.reason) for b in other.blocked] == [
        (b.mesh_dim, b.tensor_dim, b.reason) for b in ints.blocked
    ], case

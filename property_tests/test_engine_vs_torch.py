"""The engine against torch 2.13's reference propagator (property 3: never worse than torch).

torch's ``_view_ops.propagate_shape_and_sharding`` is a reference, not an oracle: it sometimes
crashes (KeyError, AssertionError, ...) or returns an output that the oracle rejects.  Its answer
is only used when the oracle accepts it.  For each example and each mode:

* torch's answer is valid and needs no communication (its input target == the input)
  => ours needs none either, and is valid.
* torch's answer is valid and communicates, and ours communicates too => ours moves no more.

"Moves no more" -- the criterion.  Both propagators only ever turn input mesh dims into
``Replicate()`` (an all-gather on that mesh dim; checked for ours in ``test_engine_oracle.py``,
true for torch by construction), so each answer is a set of replicated mesh dims, ``U`` (ours)
and ``T`` (torch's).  We fail a case iff

    U is a strict superset of T   and   received(ours) > received(torch),

where ``received`` is ``oracle.communication_cost(...).elements_received`` (elements summed over
ranks that a rank must fetch because it does not hold them).  Rationale: a strict superset means
we gathered a mesh dim that torch has just shown need not move, and the element count confirms
it cost more; that is unambiguously worse.  When the sets are incomparable, neither is a
refinement of the other and "least" depends on the cost model, so we only count
(``event``) how often our element count is higher, lower or equal.  In strict mode a refusal of
ours (``RedistributionRequired``) against a communicating torch answer is not worse: strict must
not communicate.

Events record torch crash / refuse / wrong counts, so ``pytest --hypothesis-show-statistics``
shows how often torch fails on the generated cases.
"""

from __future__ import annotations

from hypothesis import event, given
from torch.distributed.tensor.placement_types import Placement

from cute_shard import oracle as O
from property_tests.engine_strategies import (
    ENGINE,
    Case,
    Outcome,
    cases,
    oracle_ok,
    run_engine,
    run_torch,
    view_cases,
)

MODES = (False, True)


def _moved(src: tuple[Placement, ...], tgt: tuple[Placement, ...]) -> frozenset[int]:
    return frozenset(i for i, (a, b) in enumerate(zip(src, tgt, strict=True)) if a != b)


def _say(case: Case, strict: bool, ours: Outcome, theirs: Outcome) -> str:
    def fmt(o: Outcome) -> str:
        if o.error is not None:
            return f"raised {type(o.error).__name__}: {o.error}"
        return f"input_target={list(o.in_tgt or ())} output={list(o.out or ())}"

    mode = "strict" if strict else "non-strict"
    return f"[{mode}] {case}\n  ours:  {fmt(ours)}\n  torch: {fmt(theirs)}"


def _compare(case: Case, strict: bool) -> None:
    mode = "strict" if strict else "non-strict"
    theirs = run_torch(case, strict)
    ours = run_engine(case, strict)
    if theirs.crashed:
        event(f"{mode}: torch crash ({type(theirs.error).__name__})")
        return
    if theirs.refused:
        event(f"{mode}: torch refuses")
        return
    assert theirs.in_tgt is not None and theirs.out is not None
    verdict = oracle_ok(case, theirs.in_tgt, theirs.out, strict)
    if not verdict.ok:
        event(f"{mode}: torch wrong")
        return
    torch_moved = _moved(case.placements, theirs.in_tgt)
    if not torch_moved:
        event(f"{mode}: torch valid, zero-comm")
        assert ours.ok, f"{_say(case, strict, ours, theirs)}\n  torch needs no communication"
        assert ours.in_tgt == case.placements, (
            f"{_say(case, strict, ours, theirs)}\n  torch needs no communication, ours does"
        )
        assert ours.out is not None
        v = oracle_ok(case, ours.in_tgt, ours.out, strict)
        assert v.ok, f"{_say(case, strict, ours, theirs)}\n  ours invalid: {v.reason}"
        return
    event(f"{mode}: torch valid, communicates")
    if not ours.ok:
        # strict may refuse where torch's strict path silently redistributes; non-strict may not.
        assert strict, _say(case, strict, ours, theirs)
        return
    assert ours.in_tgt is not None
    our_moved = _moved(case.placements, ours.in_tgt)
    if not our_moved:
        event(f"{mode}: ours zero-comm where torch communicates")
        return
    ours_cost = O.communication_cost(case.placements, ours.in_tgt, case.shape, case.mesh)
    torch_cost = O.communication_cost(case.placements, theirs.in_tgt, case.shape, case.mesh)
    a, b = ours_cost.elements_received, torch_cost.elements_received
    event(f"{mode}: both communicate, ours {'<' if a < b else '==' if a == b else '>'} torch")
    assert not (our_moved > torch_moved and a > b), (
        f"{_say(case, strict, ours, theirs)}\n  ours gathers mesh dims {sorted(our_moved)} "
        f"({a} elements), a strict superset of torch's {sorted(torch_moved)} ({b} elements)"
    )


@ENGINE
@given(cases())
def test_never_worse_than_torch(case: Case) -> None:
    for strict in MODES:
        _compare(case, strict)


@ENGINE
@given(view_cases())
def test_never_worse_than_torch_on_views(case: Case) -> None:
    for strict in MODES:
        _compare(case, strict)

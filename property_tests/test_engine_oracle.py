"""The engine against the exact rank simulator (``cute_shard.oracle``), the ground truth.

Every example is a :class:`~property_tests.engine_strategies.Case` (shape, view op, the matching
rule, mesh, input placements); see ``engine_strategies`` for what is generated.  Properties, each
checked in both modes (``strict_view`` False and True):

1. every returned output is valid by the oracle when the input is first redistributed to the
   returned input target;
2. whenever a zero-communication answer exists (the oracle's brute force with the input left as
   it is; examples where the capped search cannot tell are skipped and counted as an event),
   the engine returns one without communication: ``input_target == input``;
4. strict raises ``RedistributionRequired`` only when no zero-comm answer exists, and never
   returns a communicating input target; non-strict never raises on legal input;
5. outputs are canonical (``oracle.is_canonical``) and deterministic: equal, hash-equal tuples on
   a second call and after ``cache_clear()``;

plus: the input target differs from the input only by mesh dims set to ``Replicate()``, and a
``Partial`` mesh dim is carried unchanged into both the input target and the output; the strict
error lists exactly the mesh dims that non-strict moves.

(Property 3, never worse than torch, is in ``test_engine_vs_torch.py``; property 6, SymInt sizes,
in ``test_engine_symint.py``.)  Known exceptions: none.
"""

from __future__ import annotations

from hypothesis import event, given
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

import cute_shard
import cute_shard.rules as R
from cute_shard import oracle as O
from cute_shard.oracle import _make_op
from property_tests.engine_strategies import (
    ENGINE,
    Case,
    Outcome,
    cases,
    engine,
    oracle_ok,
    run_engine,
    view_cases,
    whole_dim_cases,
    zero_comm_exists,
)

MODES = (False, True)


def _say(case: Case, strict: bool, outcome: Outcome | None = None) -> str:
    mode = "strict" if strict else "non-strict"
    if outcome is None:
        return f"[{mode}] {case}"
    if outcome.error is not None:
        return f"[{mode}] {case}\n  engine raised {type(outcome.error).__name__}: {outcome.error}"
    return (
        f"[{mode}] {case}\n  engine returned input_target={list(outcome.in_tgt or ())} "
        f"output={list(outcome.out or ())}"
    )


def _expect_result(case: Case, strict: bool) -> Outcome:
    """Run the engine; non-strict must not raise; strict may only raise RedistributionRequired."""
    got = run_engine(case, strict)
    if got.error is not None:
        allowed = strict and isinstance(got.error, cute_shard.RedistributionRequired)
        assert allowed, _say(case, strict, got)
    return got


# --------------------------------------------------------------------------- pairing sanity


@ENGINE
@given(cases())
def test_case_pairing_is_consistent(case: Case) -> None:
    """The generator's (op, args) and rule describe the same view: with every sharded mesh dim
    replicated the oracle accepts it, and the op's output rank is the rule's length."""
    rep = tuple(p if isinstance(p, Partial) else Replicate() for p in case.placements)
    v = oracle_ok(case, rep, rep, True)
    assert v.ok, f"{case}: {v.reason}"
    spec = _make_op(case.op, case.args, case.shape, True)
    out = spec.global_fn(O.identifiable_tensor(case.shape, spec.dtype))
    assert out.dim() == len(case.rule), str(case)


# --------------------------------------------------------------------------- property 1


@ENGINE
@given(cases())
def test_outputs_are_valid_by_oracle(case: Case) -> None:
    for strict in MODES:
        got = _expect_result(case, strict)
        if not got.ok:
            event("strict raised")
            continue
        assert got.in_tgt is not None and got.out is not None
        v = oracle_ok(case, got.in_tgt, got.out, strict)
        assert v.ok, f"{_say(case, strict, got)}\n  oracle: {v.reason}"


# --------------------------------------------------------------------------- property 2


def _check_zero_comm_found(case: Case) -> None:
    exists = zero_comm_exists(case)
    if exists is None:
        event("zero-comm search capped: skipped")
        return
    event(f"zero-comm answer exists: {exists}")
    if not exists:
        return
    for strict in MODES:
        got = run_engine(case, strict)
        assert got.ok, f"{_say(case, strict, got)}\n  but a zero-comm answer exists"
        assert got.in_tgt == case.placements, (
            f"{_say(case, strict, got)}\n  communicates, but a zero-comm answer exists: "
            f"{O.find_zero_comm_answer(case.shape, case.placements, case.mesh, case.op, case.args)}"
        )
        v = oracle_ok(case, got.in_tgt, got.out, strict)
        assert v.ok, f"{_say(case, strict, got)}\n  oracle: {v.reason}"


@ENGINE
@given(cases())
def test_zero_comm_answer_found_whenever_one_exists(case: Case) -> None:
    _check_zero_comm_found(case)


@ENGINE
@given(view_cases())
def test_zero_comm_answer_found_for_views(case: Case) -> None:
    """Property 2 on view/reshape only (flatten, unflatten, factorisations with sharded dims)."""
    _check_zero_comm_found(case)


# --------------------------------------------------------------------------- property 4


@ENGINE
@given(cases())
def test_strict_raises_only_without_zero_comm_answer(case: Case) -> None:
    loose = _expect_result(case, False)  # non-strict never raises on legal input
    strict = run_engine(case, True)
    if strict.ok:
        assert strict.in_tgt == case.placements, (
            f"{_say(case, True, strict)}\n  strict returned a communicating input target"
        )
        return
    assert isinstance(strict.error, cute_shard.RedistributionRequired), _say(case, True, strict)
    assert isinstance(strict.error, RuntimeError)
    exists = zero_comm_exists(case)
    if exists is None:
        event("zero-comm search capped: skipped")
    else:
        assert not exists, f"{_say(case, True, strict)}\n  but a zero-comm answer exists"
    # The error lists exactly the mesh dims that non-strict moves, each with its tensor dim.
    blocked = strict.error.blocked
    assert blocked, _say(case, True, strict)
    assert loose.in_tgt is not None
    moved = {
        i for i, (a, b) in enumerate(zip(case.placements, loose.in_tgt, strict=True)) if a != b
    }
    assert {b.mesh_dim for b in blocked} == moved, (
        f"{_say(case, True, strict)}\n  blocked={blocked}; "
        f"non-strict moved mesh dims {sorted(moved)}"
    )
    for b in blocked:
        p = case.placements[b.mesh_dim]
        assert isinstance(p, Shard | _StridedShard) and p.dim == b.tensor_dim, (
            f"{_say(case, True, strict)}\n  {b} does not match input placement {p}"
        )


# --------------------------------------------------------------------------- property 5


@ENGINE
@given(cases())
def test_outputs_canonical_and_deterministic(case: Case) -> None:
    for strict in MODES:
        first = _expect_result(case, strict)
        if not first.ok:
            continue
        in_tgt, out = first.in_tgt, first.out
        assert type(in_tgt) is tuple and type(out) is tuple, _say(case, strict, first)
        assert len(in_tgt) == len(out) == len(case.mesh), _say(case, strict, first)
        # (the input target keeps the caller's own objects, e.g. a _StridedShard with split
        # factor 1, so only the output must be canonical)
        assert O.is_canonical(out, len(case.rule)), _say(case, strict, first)
        again = engine()(case.placements, case.shape, case.rule, case.mesh, strict_view=strict)
        cute_shard.cache_clear()
        cold = engine()(case.placements, case.shape, case.rule, case.mesh, strict_view=strict)
        # a list input must give the same answer as a tuple
        listed = engine()(
            list(case.placements), case.shape, case.rule, case.mesh, strict_view=strict
        )
        for other in (again, cold, listed):
            assert other == (in_tgt, out), f"{_say(case, strict, first)}\n  then {other}"
            assert hash(other) == hash((in_tgt, out))


# --------------------------------------------------------------------------- input target shape


@ENGINE
@given(cases())
def test_input_target_only_replicates_and_partial_is_carried(case: Case) -> None:
    for strict in MODES:
        got = _expect_result(case, strict)
        if not got.ok:
            continue
        assert got.in_tgt is not None and got.out is not None
        for i, (src, tgt, out) in enumerate(zip(case.placements, got.in_tgt, got.out, strict=True)):
            assert tgt == src or tgt == Replicate(), (
                f"{_say(case, strict, got)}\n  mesh dim {i}: {src} -> {tgt}"
            )
            if isinstance(src, Partial):
                assert tgt == src and out == src, (
                    f"{_say(case, strict, got)}\n  mesh dim {i}: Partial not carried"
                )
            else:
                assert not isinstance(out, Partial), _say(case, strict, got)


# --------------------------------------------------------------------------- whole-dim rules


def _carried(case: Case) -> tuple[Placement, ...] | None:
    """The input placements with every shard dim renamed to its output position, canonical;
    None if a sharded dim is dropped by the rule."""
    home = {spec.input_dim: o for o, spec in enumerate(case.rule) if isinstance(spec, R.InputDim)}
    out: list[Placement] = []
    for p in case.placements:
        if isinstance(p, Shard | _StridedShard):
            if p.dim not in home:
                return None
            sf = int(p.split_factor) if isinstance(p, _StridedShard) else 1
            out.append(
                Shard(home[p.dim]) if sf == 1 else _StridedShard(home[p.dim], split_factor=sf)
            )
        else:
            out.append(p)
    return tuple(out)


def _same_on_size_one_mesh_dims(
    case: Case, got: tuple[Placement, ...], want: tuple[Placement, ...]
) -> bool:
    """``got == want``, except that on a size-1 mesh dim (where sharding splits nothing) any
    Shard/_StridedShard of the same output dim counts as equal."""
    for m, g, w in zip(case.mesh, got, want, strict=True):
        if g == w:
            continue
        sharded = isinstance(g, Shard | _StridedShard) and isinstance(w, Shard | _StridedShard)
        if not (m == 1 and sharded and g.dim == w.dim):
            return False
    return True


@ENGINE
@given(whole_dim_cases())
def test_whole_dim_rules_carry_placements(case: Case) -> None:
    """A rule that only moves, adds or drops whole dims (InputDim / Singleton) chunks nothing
    locally, so the input placements, renamed, are always exact (``_carried``; checked by the
    oracle below).  The engine must return exactly them -- not an equivalent re-spelling such
    as ``_StridedShard(d, sf)`` where a rank's local length is 1 -- and no communication."""
    assert all(isinstance(s, R.InputDim | R.Singleton) for s in case.rule), str(case)
    want = _carried(case)
    if want is None:
        event("a sharded dim is dropped: skipped")
        return
    assert oracle_ok(case, case.placements, want, True).ok, str(case)
    for strict in MODES:
        got = run_engine(case, strict)
        assert got.ok and got.in_tgt == case.placements, _say(case, strict, got)
        assert got.out is not None
        assert _same_on_size_one_mesh_dims(case, got.out, want), (
            f"{_say(case, strict, got)}\n  expected output {list(want)}"
        )

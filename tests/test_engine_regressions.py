"""Regression and golden cases for ``cute_shard.propagate_shape_and_sharding``.

Part 1 is the torch-failure table of the design brief (section 3): each row is checked in both
modes against the oracle (``cute_shard.oracle``, the exact rank simulator) and against the
table's expected answer.  ``test_torch_still_fails_as_documented`` pins what torch 2.13 does on
the same rows, so the table stays honest if torch changes.

Part 2 holds golden cases: exact expected answers for common views.  Every golden answer is
also validated by the oracle, so a wrong golden cannot hide.

Part 3 holds engine failures found by the property tests, minimised, each with the oracle's
verdict (a zero-communication answer exists that the engine did not find).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch.distributed.tensor._ops import _view_ops as tv
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
from cute_shard.rules.torch_compat import to_torch

Rep = Replicate()


def SS(dim: int, sf: int) -> _StridedShard:
    return _StridedShard(dim, split_factor=sf)


def propagate(
    placements: Sequence[Placement],
    shape: tuple[int, ...],
    rule: Any,
    mesh: tuple[int, ...],
    strict: bool,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    return cute_shard.propagate_shape_and_sharding(
        placements, shape, rule, mesh, strict_view=strict
    )


def assert_valid(
    shape: tuple[int, ...],
    op: str,
    args: tuple[Any, ...],
    in_tgt: Sequence[Placement],
    out: Sequence[Placement],
    mesh: tuple[int, ...],
    strict: bool = True,
) -> None:
    v = O.check_op(shape, op, args, in_tgt, out, mesh, strict_view=strict)
    assert v.ok, f"{shape} {op}{args} mesh={mesh} {list(in_tgt)} -> {list(out)}: {v.reason}"


def zero_comm(
    shape: tuple[int, ...],
    op: str,
    args: tuple[Any, ...],
    pl: Sequence[Placement],
    mesh: tuple[int, ...],
) -> bool:
    return O.find_zero_comm_answer(shape, pl, mesh, op, args) is not None


# =========================================================================== 1. torch-failure table

# (id, global shape, view target, mesh, input, expected output or None when no zero-comm answer)
# fmt: off
TABLE: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...], list[Placement],
                  tuple[Placement, ...] | None]] = [
    ("strided-to-3d silently wrong", (18,), (3, 1, 6), (2, 3), [Rep, SS(0, 2)], None),
    ("double shard local view dies", (512,), (4, 128), (2, 4), [Shard(0), Shard(0)], None),
    ("double shard refused", (24,), (2, 12), (2, 3), [Shard(0), Shard(0)], (Shard(0), Shard(1))),
    ("flatten all-gathers", (8, 16, 32), (128, 32), (2, 4), [Shard(0), Shard(1)],
     (Shard(0), SS(0, 4))),
    ("transpose-like view KeyError", (12, 20), (20, 12), (2, 4), [Shard(0), SS(1, 2)], None),
    ("uneven inner flatten", (4, 15, 128), (60, 128), (4,), [Shard(1)], (SS(0, 4),)),
    ("uneven flatten", (6, 256), (1536,), (8,), [Shard(0)], None),
    ("uneven unflatten", (10,), (2, 5), (4,), [Shard(0)], None),
    ("uneven flatten 2", (5, 4), (20,), (2,), [Shard(0)], None),
    ("uneven unflatten 2d", (2, 7), (2, 7, 1), (4,), [Shard(1)], (Shard(1),)),
]
# fmt: on


@pytest.mark.parametrize(
    ("shape", "target", "mesh", "placements", "expected"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
@pytest.mark.parametrize("strict", [False, True], ids=["reshape", "view"])
def test_torch_failure_table(
    shape: tuple[int, ...],
    target: tuple[int, ...],
    mesh: tuple[int, ...],
    placements: list[Placement],
    expected: tuple[Placement, ...] | None,
    strict: bool,
) -> None:
    args = (target,)
    # the table's claim about existence is itself checked by brute force
    assert zero_comm(shape, "view", args, placements, mesh) == (expected is not None)
    rule = R.view_groups(shape, target)
    if expected is not None:
        in_tgt, out = propagate(placements, shape, rule, mesh, strict)
        assert in_tgt == tuple(placements)
        assert out == expected
        assert_valid(shape, "view", args, in_tgt, out, mesh, strict)
        return
    if strict:
        with pytest.raises(cute_shard.RedistributionRequired) as info:
            propagate(placements, shape, rule, mesh, strict)
        assert isinstance(info.value, RuntimeError)
        assert info.value.blocked
        return
    in_tgt, out = propagate(placements, shape, rule, mesh, strict)  # reshape redistributes
    assert in_tgt != tuple(placements)
    assert all(t == p or t == Rep for p, t in zip(placements, in_tgt, strict=True))
    assert_valid(shape, "view", args, in_tgt, out, mesh, strict)


def _torch(
    placements: list[Placement],
    shape: tuple[int, ...],
    target: tuple[int, ...],
    mesh: tuple[int, ...],
    strict: bool,
) -> Any:
    rule = tv.view_groups(shape, target)
    try:
        return tv.propagate_shape_and_sharding(placements, shape, rule, mesh, strict)
    except Exception as exc:
        return exc


def test_torch_still_fails_as_documented() -> None:
    """What torch 2.13 does on the table's rows (section 3 of the design brief)."""
    # (18,) -> (3,1,6): torch returns an output the oracle rejects (full_tensor() is wrong)
    in_tgt, out = _torch([Rep, SS(0, 2)], (18,), (3, 1, 6), (2, 3), True)
    assert list(out) == [Rep, SS(2, 2)]
    assert not O.check_reshape((18,), (3, 1, 6), in_tgt, out, (2, 3)).ok
    # (512,) -> (4,128): torch keeps [S(0), S(0)]; the local view dies
    in_tgt, out = _torch([Shard(0), Shard(0)], (512,), (4, 128), (2, 4), True)
    assert list(out) == [Shard(0), Shard(0)]
    assert (
        "invalid for input of size" in O.check_reshape((512,), (4, 128), in_tgt, out, (2, 4)).reason
    )
    # (24,) -> (2,12): strict refuses
    assert isinstance(_torch([Shard(0), Shard(0)], (24,), (2, 12), (2, 3), True), RuntimeError)
    # (8,16,32) -> (128,32): non-strict all-gathers mesh dim 1
    in_tgt, _ = _torch([Shard(0), Shard(1)], (8, 16, 32), (128, 32), (2, 4), False)
    assert list(in_tgt) == [Shard(0), Rep]
    # (12,20) -> (20,12): KeyError
    assert isinstance(_torch([Shard(0), SS(1, 2)], (12, 20), (20, 12), (2, 4), False), KeyError)
    # (6,256) -> (1536,): strict raises "Cannot flatten unevenly sharded tensor"
    err = _torch([Shard(0)], (6, 256), (1536,), (8,), True)
    assert isinstance(err, RuntimeError) and "Cannot flatten unevenly" in str(err)
    # uneven unflatten: strict raises "Cannot unflatten unevenly sharded tensor"
    err = _torch([Shard(0)], (10,), (2, 5), (4,), True)
    assert isinstance(err, RuntimeError) and "Cannot unflatten unevenly" in str(err)


# =========================================================================== 2. golden cases


@pytest.mark.parametrize("strict", [False, True], ids=["reshape", "view"])
def test_golden_double_shard_unflatten(strict: bool) -> None:
    got = propagate([Shard(0), Shard(0)], (24,), R.view_groups((24,), (2, 12)), (2, 3), strict)
    assert got == ((Shard(0), Shard(0)), (Shard(0), Shard(1)))


@pytest.mark.parametrize("strict", [False, True], ids=["reshape", "view"])
def test_golden_flatten_gives_strided_shard(strict: bool) -> None:
    shape, mesh = (8, 16, 32), (2, 4)
    got = propagate([Shard(0), Shard(1)], shape, R.view_groups(shape, (128, 32)), mesh, strict)
    assert got == ((Shard(0), Shard(1)), (Shard(0), SS(0, 4)))


@pytest.mark.parametrize("strict", [False, True], ids=["reshape", "view"])
def test_golden_flatten_then_unflatten_round_trip(strict: bool) -> None:
    shape, mesh = (128, 32), (2, 4)
    placements = [Shard(0), SS(0, 4)]
    got = propagate(placements, shape, R.view_groups(shape, (8, 16, 32)), mesh, strict)
    assert got == ((Shard(0), SS(0, 4)), (Shard(0), Shard(1)))
    assert_valid(shape, "view", ((8, 16, 32),), *got, mesh)


# (id, shape, oracle op, args, rule, mesh, input, expected output)
# fmt: off
GOLDEN: list[tuple[str, tuple[int, ...], str, tuple[Any, ...], R.Rule, tuple[int, ...],
                   list[Placement], tuple[Placement, ...]]] = [
    ("permute", (4, 6, 8), "permute", ((2, 0, 1),), R.permute(3, (2, 0, 1)), (2, 2),
     [Shard(0), Shard(2)], (Shard(1), Shard(0))),
    ("permute strided", (4, 6, 8), "permute", ((1, 2, 0),), R.permute(3, (1, 2, 0)), (2, 3),
     [Shard(1), SS(1, 2)], (Shard(0), SS(0, 2))),
    ("transpose", (4, 6), "transpose", (0, 1), R.transpose(2, 0, 1), (2, 3),
     [Shard(0), Shard(1)], (Shard(1), Shard(0))),
    ("transpose uneven", (5, 7), "transpose", (0, 1), R.transpose(2, 0, 1), (2, 3),
     [Shard(0), Shard(1)], (Shard(1), Shard(0))),
    ("movedim", (4, 6, 8), "movedim", (0, 2), R.movedim(3, 0, 2), (2, 2),
     [Shard(0), Shard(1)], (Shard(2), Shard(0))),
    ("unsqueeze", (4, 6), "unsqueeze", (1,), R.unsqueeze(2, 1), (2, 3),
     [Shard(0), Shard(1)], (Shard(0), Shard(2))),
    ("unsqueeze front", (4, 6), "unsqueeze", (0,), R.unsqueeze(2, 0), (2,),
     [SS(1, 2)], (SS(2, 2),)),
    ("squeeze", (4, 1, 6), "squeeze", (1,), R.squeeze((4, 1, 6), 1), (2, 3),
     [Shard(0), Shard(2)], (Shard(0), Shard(1))),
    ("squeeze all", (1, 4, 1, 6), "squeeze", (), R.squeeze((1, 4, 1, 6)), (2,),
     [Shard(3)], (Shard(1),)),
    ("expand size-1 dim", (4, 1), "expand", ((4, 6),), R.expand((4, 1), (4, 6)), (2,),
     [Shard(0)], (Shard(0),)),
    ("expand new leading dim", (4, 1), "expand", ((3, 4, 6),), R.expand((4, 1), (3, 4, 6)),
     (2, 2), [Shard(0), Rep], (Shard(1), Rep)),
    ("Partial carried", (4, 6), "view", ((24,),), R.view_groups((4, 6), (24,)), (2, 2),
     [Shard(0), Partial("sum")], (Shard(0), Partial("sum"))),
    ("Partial(max) carried", (4, 6), "transpose", (0, 1), R.transpose(2, 0, 1), (2, 3),
     [Partial("max"), Shard(1)], (Partial("max"), Shard(0))),
]
# fmt: on


@pytest.mark.parametrize(
    ("shape", "op", "args", "rule", "mesh", "placements", "expected"),
    [row[1:] for row in GOLDEN],
    ids=[row[0] for row in GOLDEN],
)
@pytest.mark.parametrize("strict", [False, True], ids=["reshape", "view"])
def test_golden(
    shape: tuple[int, ...],
    op: str,
    args: tuple[Any, ...],
    rule: R.Rule,
    mesh: tuple[int, ...],
    placements: list[Placement],
    expected: tuple[Placement, ...],
    strict: bool,
) -> None:
    assert_valid(shape, op, args, placements, expected, mesh)  # the golden itself
    in_tgt, out = propagate(placements, shape, rule, mesh, strict)
    assert in_tgt == tuple(placements)
    assert out == expected


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


# (shape, torch's own rule from its builders, our rule, mesh, input)
# fmt: off
TORCH_RULE_CASES = [
    ((8, 16, 32), tv.view_groups((8, 16, 32), (128, 32)), R.view_groups((8, 16, 32), (128, 32)),
     (2, 4), [Shard(0), Shard(1)]),
    ((24,), tv.view_groups((24,), (2, 12)), R.view_groups((24,), (2, 12)), (2, 3),
     [Shard(0), Shard(0)]),
    ((12, 20), tv.view_groups((12, 20), (20, 12)), R.view_groups((12, 20), (20, 12)), (2, 4),
     [Shard(0), SS(1, 2)]),
    ((4, 6, 8), tv.dim_maps[torch.permute](_meta(4, 6, 8), (2, 0, 1)),
     R.permute(3, (2, 0, 1)), (2, 2), [Shard(0), Shard(2)]),
    ((4, 1, 6), tv.dim_maps[torch.Tensor.expand](_meta(4, 1, 6), 2, 4, 3, 6),
     R.expand((4, 1, 6), (2, 4, 3, 6)), (2,), [Shard(0)]),
    ((6, 4), tv.dim_maps[torch.Tensor.repeat](_meta(6, 4), 2, 1), R.repeat(2, (2, 1)), (2, 2),
     [Shard(1), Shard(0)]),
]
# fmt: on


@pytest.mark.parametrize(("shape", "torch_rule", "rule", "mesh", "placements"), TORCH_RULE_CASES)
@pytest.mark.parametrize("strict", [False, True], ids=["reshape", "view"])
def test_torch_dimspecs_give_the_same_answer(
    shape: tuple[int, ...],
    torch_rule: Any,
    rule: R.Rule,
    mesh: tuple[int, ...],
    placements: list[Placement],
    strict: bool,
) -> None:
    assert to_torch(rule) == tuple(torch_rule)

    def run(r: Any) -> Any:
        try:
            return propagate(placements, shape, r, mesh, strict)
        except cute_shard.RedistributionRequired as exc:
            return ("raised", str(exc), exc.blocked)

    assert run(tuple(torch_rule)) == run(rule)


# =========================================================================== 3. found by the
# property tests (minimised); the oracle's zero-communication answer is the expectation.

# fmt: off
FOUND: list[tuple[str, tuple[int, ...], str, tuple[Any, ...], R.Rule, tuple[int, ...],
                  list[Placement]]] = [
    # A Shard of a size-1 input dim that the view drops: rank 0 holds everything, the others
    # nothing.  A Shard of a new size-1 output dim (or _StridedShard(d, sf=size)) says exactly
    # that, so no communication is needed.  (The rule is not squeeze's -- it adds a size-1 dim
    # -- so no other op shares it.)
    ("sharded size-1 dim, swapped with a new size-1 dim", (1, 4), "view", ((4, 1),),
     R.view_groups((1, 4), (4, 1)), (2,), [Shard(0)]),
    ("sharded size-1 dim, uneven mesh", (7, 1), "view", ((1, 7),), R.view_groups((7, 1), (1, 7)),
     (4,), [Shard(1)]),
    ("sharded size-1 dim on mesh dim 1", (2, 1), "view", ((1, 2),), R.view_groups((2, 1), (1, 2)),
     (2, 2), [Rep, Shard(1)]),
    # Refused by the engine before the one-path rebuild (issue 17's examples): uneven dims
    # with a short or empty tail on some ranks.
    ("uneven dims, a rank of each mesh dim holds nothing", (2, 2), "view", ((4,),),
     R.view_groups((2, 2), (4,)), (2, 3), [Shard(0), Shard(1)]),
    ("uneven inner dim of a flatten", (12, 2), "view", ((24,),), R.view_groups((12, 2), (24,)),
     (3, 2), [Shard(1), Rep]),
]
# fmt: on


@pytest.mark.parametrize(
    ("shape", "op", "args", "rule", "mesh", "placements"),
    [row[1:] for row in FOUND],
    ids=[row[0] for row in FOUND],
)
@pytest.mark.parametrize("strict", [False, True], ids=["reshape", "view"])
def test_found_zero_comm(
    shape: tuple[int, ...],
    op: str,
    args: tuple[Any, ...],
    rule: R.Rule,
    mesh: tuple[int, ...],
    placements: list[Placement],
    strict: bool,
) -> None:
    assert zero_comm(shape, op, args, placements, mesh)
    in_tgt, out = propagate(placements, shape, rule, mesh, strict)
    assert in_tgt == tuple(placements)
    assert_valid(shape, op, args, in_tgt, out, mesh, strict)


@pytest.mark.parametrize(
    ("shape", "rule", "mesh", "placements"),
    [
        ((1,), R.view_groups((1,), (1,)), (2, 2), [Shard(0), Shard(0)]),
        ((1,), R.unsqueeze(1, 0), (2, 3), [Shard(0), Shard(0)]),
        ((2, 2), R.permute(2, (1, 0)), (4, 2), [Shard(0), Shard(0)]),
    ],
    ids=["identity view", "unsqueeze", "permute"],
)
def test_whole_dim_rule_does_not_respell(
    shape: tuple[int, ...], rule: R.Rule, mesh: tuple[int, ...], placements: list[Placement]
) -> None:
    """Found by test_whole_dim_rules_carry_placements: with a rank whose local length is <= 1,
    a rule that only moves whole dims re-spelled the second Shard as _StridedShard(d, sf).
    Equivalent, but a view that moves nothing should hand DTensor back the same placements."""
    home = {spec.input_dim: o for o, spec in enumerate(rule) if isinstance(spec, R.InputDim)}
    want = tuple(Shard(home[p.dim]) for p in placements)
    assert propagate(placements, shape, rule, mesh, False) == (tuple(placements), want)


# =========================================================================== 4. SymInt sizes


def _sym_env() -> tuple[Any, Any]:
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    sym = env.create_symbol(4, source=ConstantSource("s0"))
    return env, env.create_symintnode(sym, hint=4)


def _hinted(placements: tuple[Placement, ...]) -> tuple[Placement, ...]:
    return tuple(
        SS(p.dim, int(p.split_factor.node.hint))
        if isinstance(p, _StridedShard) and isinstance(p.split_factor, torch.SymInt)
        else p
        for p in placements
    )


def test_symint_flatten_keeps_strided_shard() -> None:
    _, s = _sym_env()
    in_tgt, out = propagate([Shard(1)], (s, 6), R.view_groups((s, 6), (s * 6,)), (2,), False)
    assert in_tgt == (Shard(1),)
    assert _hinted(out) == (SS(0, 4),)
    assert propagate([Shard(1)], (4, 6), R.view_groups((4, 6), (24,)), (2,), False) == (
        (Shard(1),),
        (SS(0, 4),),
    )


@pytest.mark.parametrize(
    ("label", "placements", "build", "mesh"),
    [
        # an uneven int dim (5 over 2) flattened behind a symbolic batch dim: exact for every s
        ("uneven inner dim", [Shard(1)], lambda s: ((s, 5), R.view_groups((s, 5), (s * 5,))), (2,)),
        # a Shard of a size-1 dim broadcast by expand
        (
            "expand sharded size-1 dim",
            [Shard(0)],
            lambda s: ((1, s), R.expand((1, s), (4, s))),
            (2,),
        ),
    ],
)
def test_symint_equals_concrete(
    label: str, placements: list[Placement], build: Any, mesh: tuple[int, ...]
) -> None:
    """Found by test_engine_symint.py: the symbolic path replicates where the concrete answer at
    the hint is exact for every value of the symbol."""
    _, s = _sym_env()
    shape, rule = build(s)
    hshape, hrule = build(4)
    want = propagate(placements, hshape, hrule, mesh, False)
    got = propagate(placements, shape, rule, mesh, False)
    assert (got[0], _hinted(got[1])) == want


# =========================================================================== 4. found by the
# property tests: views that must move, where the engine moved more than torch (minimised).
# Replicating an earlier mesh dim re-carves a later one on the same tensor dim, which then fits:
# the search must try that before replicating both.

# (id, global shape, view target, mesh, input, input target, output)
# fmt: off
MOVES_LESS: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...], list[Placement],
                       tuple[Placement, ...], tuple[Placement, ...]]] = [
    ("re-carved by the earlier mesh dim", (12,), (2, 6), (3, 2), [Shard(0), Shard(0)],
     (Rep, Shard(0)), (Rep, Shard(0))),
    ("re-carved, with size-1 dims", (12, 1), (1, 2, 6, 1), (3, 2), [Shard(0), Shard(0)],
     (Rep, Shard(0)), (Rep, Shard(1))),
]
# fmt: on


@pytest.mark.parametrize(
    ("shape", "target", "mesh", "placements", "in_tgt", "out"),
    [row[1:] for row in MOVES_LESS],
    ids=[row[0] for row in MOVES_LESS],
)
def test_moves_no_more_than_torch(
    shape: tuple[int, ...],
    target: tuple[int, ...],
    mesh: tuple[int, ...],
    placements: list[Placement],
    in_tgt: tuple[Placement, ...],
    out: tuple[Placement, ...],
) -> None:
    rule = R.view_groups(shape, target)
    assert propagate(placements, shape, rule, mesh, False) == (in_tgt, out)
    assert_valid(shape, "view", (target,), in_tgt, out, mesh, strict=False)
    # torch moves the same mesh dim (and so gathers no less)
    theirs = tv.propagate_shape_and_sharding(
        placements, shape, to_torch(rule), mesh, strict_view=False
    )
    assert tuple(theirs[0]) == in_tgt
    # strict: the error names the mesh dim that moves and suggests the same input target
    with pytest.raises(RuntimeError, match=r"mesh dim 0 .*\[Replicate\(\), Shard\(dim=0\)\]"):
        propagate(placements, shape, rule, mesh, True)


@pytest.mark.parametrize("rule", [R.squeeze((1,), 0), ()], ids=["squeeze-rule", "plain-tuple"])
def test_squeeze_to_0d_of_a_sharded_size_1_dim(rule: Any) -> None:
    """Found by the uneven property test: an empty rule (a (1,) tensor squeezed to 0-d) that no
    builder tags crashed the plan with an IndexError."""
    target, out = propagate([Shard(0)], (1,), rule, (2,), False)
    assert out == (Rep,)
    assert_valid((1,), "squeeze", (0,), target, out, (2,), strict=False)

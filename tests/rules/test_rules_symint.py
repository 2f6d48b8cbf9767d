"""SymInt sizes: rules equal the concrete rules at the hints, and no guard is installed.

Backed symbols created with a hint >= 2 have the value range [2, inf), so
comparisons such as ``s0 == 1`` or ``s0*s1 > s0`` are decidable statically;
``s0 == s1`` is not, and the builders must say so with ``UndecidableRule``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import cute_shard.rules as R
from cute_shard.rules import CodesUndecided, UndecidableRule, format_rule, map_sizes


class Env:
    """A ShapeEnv plus helpers to make hinted backed SymInts and read hints back."""

    def __init__(self) -> None:
        self.shape_env = ShapeEnv()
        self._n = 0

    def sym(self, hint: int) -> Any:
        self._n += 1
        src = ConstantSource(f"rules_sym_{self._n}")
        return self.shape_env.create_symintnode(self.shape_env.create_symbol(hint, src), hint=hint)

    def guards(self) -> int:
        return len(self.shape_env.guards)


def hint(x: Any) -> int:
    if isinstance(x, torch.SymInt):
        return int(x.node.hint)
    return int(x)


def concrete(args: Any) -> Any:
    """Replace every SymInt in a nested args structure by its hint."""
    if isinstance(args, tuple | list):
        return type(args)(concrete(a) for a in args)
    return hint(args)


@pytest.fixture
def env() -> Env:
    return Env()


# Each case: (id, builder, function of (a, b, c) -> args).  a, b, c have hints 4, 6, 3.
CASES: list[tuple[str, Callable[..., R.Rule], Callable[[Any, Any, Any], tuple[Any, ...]]]] = [
    ("view flatten", R.view_groups, lambda a, b, c: ((a, b, c), (a * b, c))),
    ("view flatten -1", R.view_groups, lambda a, b, c: ((a, b, c), (-1, c))),
    ("view flatten tail", R.view_groups, lambda a, b, c: ((a, b, c), (a, -1))),
    ("view all", R.view_groups, lambda a, b, c: ((a, b, c), (-1,))),
    ("view split", R.view_groups, lambda a, b, c: ((a * b, c), (a, b, c))),
    ("view split int", R.view_groups, lambda a, b, c: ((2 * a, b), (2, a, b))),
    ("view mixed ints", R.view_groups, lambda a, b, c: ((a, 6), (a, 2, 3))),
    ("view ones", R.view_groups, lambda a, b, c: ((a, 1, b), (a, b, 1))),
    ("view identity", R.view_groups, lambda a, b, c: ((a, b), (a, b))),
    ("view 0-d", R.view_groups, lambda a, b, c: ((a,), (a, 1))),
    ("unflatten", R.unflatten, lambda a, b, c: ((a * b, c), 0, (a, -1))),
    ("expand", R.expand, lambda a, b, c: ((1, a), (b, c, a))),
    ("expand -1", R.expand, lambda a, b, c: ((1, a), (b, -1))),
    ("expand same", R.expand, lambda a, b, c: ((a, b), (a, b))),
    ("broadcast_to", R.broadcast_to, lambda a, b, c: ((1,), (a, 1))),
    ("squeeze", R.squeeze, lambda a, b, c: ((a, 1, b),)),
    ("squeeze dim", R.squeeze, lambda a, b, c: ((a, 1, b), 0)),
    ("repeat", R.repeat, lambda a, b, c: (2, (a, 1, b))),
    ("tile", R.tile, lambda a, b, c: (2, (a,))),
    ("view_as_real", R.view_as_real, lambda a, b, c: ((a, b),)),
    ("view_as_complex", R.view_as_complex, lambda a, b, c: ((a, 2),)),
]


@pytest.mark.parametrize(("name", "build", "make_args"), CASES, ids=[c[0] for c in CASES])
def test_symbolic_rule_equals_concrete_rule_at_hints(
    env: Env, name: str, build: Callable[..., R.Rule], make_args: Callable[..., tuple[Any, ...]]
) -> None:
    a, b, c = env.sym(4), env.sym(6), env.sym(3)
    args = make_args(a, b, c)
    before = env.guards()
    sym_rule = build(*args)
    assert env.guards() == before, "a rule builder installed a guard"
    assert map_sizes(sym_rule, hint) == build(*concrete(args))


UNDECIDABLE: list[tuple[str, Callable[..., R.Rule], Callable[[Any, Any, Any], tuple[Any, ...]]]] = [
    ("view swap", R.view_groups, lambda a, b, c: ((a, b), (b, a))),
    ("view numel", R.view_groups, lambda a, b, c: ((a, b), (a, c))),
    ("expand unrelated", R.expand, lambda a, b, c: ((a,), (b,))),
    ("view_as_complex", R.view_as_complex, lambda a, b, c: ((a,),)),
]


@pytest.mark.parametrize(
    ("name", "build", "make_args"), UNDECIDABLE, ids=[c[0] for c in UNDECIDABLE]
)
def test_undecidable_raises_marker_without_guards(
    env: Env, name: str, build: Callable[..., R.Rule], make_args: Callable[..., tuple[Any, ...]]
) -> None:
    a, b, c = env.sym(4), env.sym(6), env.sym(3)
    before = env.guards()
    with pytest.raises(UndecidableRule) as info:
        build(*make_args(a, b, c))
    assert env.guards() == before
    assert not isinstance(info.value, ValueError)
    assert info.value.op and info.value.question


def test_unbacked_sizes_never_raise_guard_errors(env: Env) -> None:
    u0 = env.shape_env.create_unbacked_symint()
    for call in (
        lambda: R.squeeze((u0, 2)),
        lambda: R.view_groups((u0, 2), (2, u0)),
        lambda: R.expand((u0,), (4,)),
        lambda: R.repeat(1, (u0,)),
        lambda: R.Split.new(R.InputDim(0), (u0, 2), 1),
    ):
        with pytest.raises(UndecidableRule):
            call()
    # Even an identity view is undecidable: torch's rule differs when u0 == 0
    # (size-0 dims leave the flatten), and nothing excludes u0 == 0 here.
    with pytest.raises(UndecidableRule):
        R.view_groups((u0, 2), (u0, 2))
    # decidable without knowing u0: the structure does not depend on it
    assert format_rule(R.view_as_real((u0,))) == f"(split(d0, ({u0},2), 0), split(d0, ({u0},2), 1))"
    assert format_rule(R.expand((u0,), (3, -1))) == "(bcast(1, 3), d0)"
    # once the range of an unbacked size excludes 0 and 1, views become decidable
    u1 = env.shape_env.create_unbacked_symint()
    env.shape_env.constrain_symbol_range(u1.node.expr, compiler_min=2, compiler_max=1024)
    assert format_rule(R.view_groups((u1, 2), (u1, 2))) == "(d0, d1)"
    assert format_rule(R.view_groups((u1, 2), (2 * u1,))) == "(flat(d0,d1),)"
    assert env.guards() == 0


def test_symbolic_specs_print_their_expressions(env: Env) -> None:
    a, b = env.sym(4), env.sym(6)
    rule = R.view_groups((a * b,), (a, b))
    assert format_rule(rule) == f"(split(d0, ({a},{b}), 0), split(d0, ({a},{b}), 1))"


def test_symbolic_numel_mismatch_is_a_value_error(env: Env) -> None:
    a = env.sym(4)
    with pytest.raises(ValueError, match="to_shape"):
        R.view_groups((a, 2), (a, 3))


# ---------------------------------------------------------------------------
# Size comparators: view_groups is one walk over each
# ---------------------------------------------------------------------------


def test_int_sizes_are_python_comparisons() -> None:
    sizes = R.IntSizes()
    keys = sizes.keys((2, -1, 6))
    assert keys == (2, -1, 6) and sizes.sizes(keys) == keys
    assert sizes.eq(6, 6) and not sizes.eq(6, 4)
    assert sizes.gt(6, 4) and not sizes.gt(4, 6)
    assert sizes.divides(2, 6) and not sizes.divides(4, 6)
    assert sizes.contains((2, 6), 6) and not sizes.contains((2, 6), 1)


def test_coded_sizes_settle_what_the_structure_proves(env: Env) -> None:
    a, b = env.sym(4), env.sym(6)
    sizes = R.CodedSizes("view_groups")
    ka, kab, minus, six = sizes.keys((a, 4 * a * b, -1, 6))
    assert minus == -1 and six == 6  # -1 is kept; a plain int is its own code
    assert sizes.gt(kab, ka) and not sizes.gt(ka, kab)  # 4*a*b = a * 4*b, and 4*b >= 8
    assert not sizes.eq(ka, 1) and not sizes.eq(ka, 0)  # a >= 2
    assert sizes.eq(6, 6) and not sizes.eq(6, 4)  # plain ints by their values
    assert sizes.divides(ka, kab) and not sizes.divides(4, 6)
    assert hint(sizes.sizes((kab // ka,))[0]) == 24  # 4*b at the hints
    assert sizes.sizes((ka,)) == (a,)  # the caller's own SymInt
    assert sizes.contains((6, ka), 6) and not sizes.contains((ka, kab), 1)
    (kb,) = sizes.keys((b,))
    assert sizes.contains((ka, kb), ka)  # (asked up to the first that is equal)
    questions = (
        lambda: sizes.eq(ka, kb),
        lambda: sizes.divides(4, ka),
        lambda: sizes.contains((kb,), ka),
    )
    for question in questions:
        with pytest.raises(CodesUndecided) as info:
            question()  # a == b, 4 | a: not the structure's to say
        assert info.value.op == "view_groups" and info.value.question
    assert env.guards() == 0


def test_coded_sizes_cannot_hold_another_shape_envs_sizes(env: Env) -> None:
    other = Env()
    a, c = env.sym(4), other.sym(6)
    with pytest.raises(CodesUndecided):
        R.view_groups((a, c), (a, c), sizes=R.CodedSizes("view_groups"))
    # the default asks the ShapeEnv instead, with the same walk
    rule = R.view_groups((a, c), (a, c))
    assert format_rule(rule) == "(d0, d1)"
    assert format_rule(R.view_groups((a, c), (a, c), sizes=R.AskedSizes("view_groups"))) == (
        "(d0, d1)"
    )


def test_what_the_codes_leave_open_is_asked_of_the_shape_env(env: Env) -> None:
    a, b = env.sym(4), env.sym(6)
    # (a, b) -> (b, a): a == b is open to the codes and to the ShapeEnv alike
    with pytest.raises(CodesUndecided):
        R.view_groups((a, b), (b, a), sizes=R.CodedSizes("view_groups"))
    with pytest.raises(UndecidableRule) as info:
        R.view_groups((a, b), (b, a))
    assert type(info.value) is UndecidableRule  # the ShapeEnv's answer, not the codes'
    # a size that is not a monomial is an atom of unknown range to the codes (is a + 1
    # zero?); the ShapeEnv knows a + 1 >= 3
    with pytest.raises(CodesUndecided, match="== 0"):
        R.view_groups((a + 1, b), ((a + 1) * b,), sizes=R.CodedSizes("view_groups"))
    assert format_rule(R.view_groups((a + 1, b), ((a + 1) * b,))) == "(flat(d0,d1),)"
    assert env.guards() == 0


@pytest.mark.parametrize(
    "sizes", [R.IntSizes(), R.CodedSizes("view_groups"), R.AskedSizes("view_groups")]
)
def test_one_infer_for_every_comparator(sizes: R.SizeComparator[Any]) -> None:
    assert R.view_groups((4, 6), (2, -1, 3), sizes=sizes).out_shape == (2, 4, 3)
    cases = [
        ((4, 6), (2, -1, -1), "more than one -1"),
        ((4, 6), (5, 5), "has 25 elements but the input has 24"),
        ((0, 6), (0, -1), "ambiguous"),
        ((4, 6), (5, -1), "not divisible by 5"),
    ]
    for src, dst, message in cases:
        with pytest.raises(ValueError, match=message):
            R.view_groups(src, dst, sizes=sizes)

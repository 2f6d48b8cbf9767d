"""The symbolic engine (``engine/symbolic.py``) and the monomial codes it and the rule builders use.

What each pass promises, on small hand-checked cases:

- a fact the sizes' structure proves needs no ShapeEnv question and installs no guard;
- a fact true at the hints but not proven is guarded once, and only if the answer rests on it;
- a fact that would pin a symbol to a few values is avoided where the answer does not need it;
- a fact false at the hints installs no guard (the answer takes the branch valid either way);
- unbacked symbols never raise a data-dependent error.

``property_tests/test_engine_symint.py`` checks the same over random cases (the concrete answer
at the hints, and validity at other values the guards allow).
"""

from __future__ import annotations

from typing import Any

import pytest
import sympy
from torch._dynamo.source import ConstantSource
from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard
from torch.fx.experimental.symbolic_shapes import ShapeEnv, guard_or_false

import cute_shard.rules as R
from cute_shard import propagate_shape_and_sharding as propagate
from cute_shard.rules import _sym
from cute_shard.rules._sym import LIMIT, Codes


class Env:
    """A ShapeEnv (no duck sizing: equal hints stay distinct symbols) and its new guards."""

    def __init__(self) -> None:
        self.shape_env = ShapeEnv(duck_shape=False)
        self._n = 0

    def sym(self, hint: int) -> Any:
        self._n += 1
        src = ConstantSource(f"sym_{self._n}")
        return self.shape_env.create_symintnode(self.shape_env.create_symbol(hint, src), hint=hint)

    def guards(self) -> list[str]:
        return [str(g.expr) for g in self.shape_env.guards]


def _sf(p: Any) -> Any:
    return p.split_factor if isinstance(p, _StridedShard) else None


# --------------------------------------------------------------------------- codes


def test_primes_are_distinct_primes_above_the_int_limit() -> None:
    assert all(p > LIMIT and sympy.isprime(p) for p in _sym._PRIMES)
    assert list(_sym._PRIMES) == sorted(set(_sym._PRIMES))
    assert _sym._PRIMES[0] == sympy.nextprime(LIMIT)
    assert all(
        sympy.nextprime(a) == b for a, b in zip(_sym._PRIMES[:-1], _sym._PRIMES[1:], strict=True)
    )


def test_codes_decide_by_structure_and_leave_the_rest_open() -> None:
    env = Env()
    s0, s1 = env.sym(4), env.sym(6)
    codes = Codes()
    a, b, ab, four_a = (codes.code(x) for x in (s0, s1, s0 * s1, 4 * s0))
    assert ab % a == 0 and four_a % a == 0 and a % b != 0  # divisibility is the monomials'
    assert codes.gt(ab, a) is True  # s0*s1 = s0 * s1 and s1 >= 2
    assert codes.gt(a, ab) is False
    assert codes.gt(four_a, a) is True
    assert codes.eq(a, b) is None  # s0 == s1 is a question for the ShapeEnv
    assert codes.eq(a, 1) is False and codes.eq(a, 0) is False  # backed sizes are >= 2
    assert codes.hint(ab) == 24 and codes.lower(four_a) == 8
    assert codes.size(ab) is not None and codes.size(a) is s0  # the caller's own SymInt
    assert str(codes.size(4 * a)) == str(4 * s0)
    assert codes.format(four_a) == f"4*{s0}"


def test_codes_refuse_sizes_of_two_shape_envs() -> None:
    codes = Codes()
    assert codes.code(Env().sym(4)) is not None
    assert codes.code(Env().sym(4)) is None


def test_view_groups_needs_no_shape_env_for_prefix_products(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(_: object) -> bool:
        raise AssertionError("asked the ShapeEnv")

    env = Env()
    b, s, h = env.sym(4), env.sym(6), env.sym(8)
    monkeypatch.setattr(_sym, "_statically_known_true", refuse)
    rule = R.view_groups((b * s, h), (b, s, h))
    assert R.format_rule(rule) == f"(split(d0, ({b},{s}), 0), split(d0, ({b},{s}), 1), d1)"
    inferred = R.view_groups((b, s, h), (-1, h))
    assert R.format_rule(inferred) == "(flat(d0,d1), d2)"
    split = R.view_groups((b * s * h,), (b, -1))
    assert split[0].group_shape[1] is not None and str(split[0].group_shape[1]) == str(s * h)
    assert env.guards() == []


# --------------------------------------------------------------------------- the engine


def test_a_proven_answer_installs_no_guard() -> None:
    env = Env()
    s = env.sym(5)  # odd: nothing may rest on the hint
    rule = R.view_groups((s, 6), (s * 6,))
    target, out = propagate([Shard(1)], (s, 6), rule, (2,))
    assert target == (Shard(1),) and _sf(out[0]) is s  # the caller's own SymInt
    rule = R.view_groups((4 * s,), (4, s))
    assert propagate([Shard(0)], (4 * s,), rule, (2,)) == ((Shard(0),), (Shard(0),))
    assert env.guards() == []


def test_a_fact_true_at_the_hints_is_guarded_once() -> None:
    env = Env()
    s0, s1 = env.sym(4), env.sym(3)
    rule = R.view_groups((s0 * s1,), (s0, s1))
    assert propagate([Shard(0)], (s0 * s1,), rule, (2,)) == ((Shard(0),), (Shard(0),))
    assert env.guards() == [f"Eq(Mod({s0}, 2), 0)"]


def test_no_guard_pins_a_symbol_the_answer_does_not_need() -> None:
    """At the hints s0 = 4 the piece boundary falls exactly on a sub-mode: the answer rests on
    4 | s0, not on s0 == 4 (which a compiled program would recompile for at every new s0)."""
    env = Env()
    s0, s1, s2 = env.sym(4), env.sym(4), env.sym(2)
    shape = (16 * s0 * s1 * s2,)
    rule = R.view_groups(shape, (s0, s1, 16 * s2))
    assert propagate([Shard(0)], shape, rule, (4,)) == ((Shard(0),), (Shard(0),))
    assert env.guards() == [f"Eq(Mod({s0}, 4), 0)"]


def test_a_fact_false_at_the_hints_installs_no_guard() -> None:
    env = Env()
    s0, s1 = env.sym(3), env.sym(4)
    rule = R.view_groups((s0 * s1,), (s0, s1))
    target, out = propagate([Shard(0)], (s0 * s1,), rule, (2,))
    assert target == (Replicate(),) and out == (Replicate(),)
    assert env.guards() == []


def test_a_fact_the_shape_env_knows_installs_no_guard() -> None:
    env = Env()
    s0, s1 = env.sym(4), env.sym(3)
    assert guard_or_false(s0 % 2 == 0)  # an earlier guard of the program
    before = env.guards()
    rule = R.view_groups((s0 * s1,), (s0, s1))
    assert propagate([Shard(0)], (s0 * s1,), rule, (2,)) == ((Shard(0),), (Shard(0),))
    assert env.guards() == before


def test_strided_split_factor_stays_symbolic() -> None:
    env = Env()
    b, s = env.sym(4), env.sym(6)
    rule = R.view_groups((b, s * 8), (b * s * 8,))
    target, out = propagate([Shard(1)], (b, s * 8), rule, (2,))
    assert target == (Shard(1),) and str(_sf(out[0])) == str(b)
    rule = R.view_groups((b * s, 8), (b * s * 8,))
    target, out = propagate([Shard(0), Shard(1)], (b * s, 8), rule, (2, 4))
    assert target == (Shard(0), Shard(1))
    # mesh dim 0 is applied first, so mesh dim 1 sees half of dim 0 slower than its block
    assert out[0] == Shard(0) and str(_sf(out[1])) == str((b * s) // 2)
    assert env.guards() == [f"Eq(Mod({b * s}, 2), 0)"]


def test_unbacked_sizes_never_raise() -> None:
    env = Env()
    u = env.shape_env.create_unbacked_symint()
    s = env.sym(4)
    # (4*u, s) -> (4, u*s): view_groups cannot decide 4*u == 4 for an unbacked u, so by hand
    flat = R.Flatten((R.InputDim(0), R.InputDim(1)))
    rule = tuple(R.Split(flat, (4, u * s), i) for i in range(2))
    assert propagate([Shard(0)], (4 * u, s), rule, (2,)) == ((Shard(0),), (Shard(0),))
    rule = (R.Split(R.InputDim(0), (2, u // 2), 0), R.Split(R.InputDim(0), (2, u // 2), 1))
    target, out = propagate([Shard(0), Shard(0)], (u, s), (*rule, R.InputDim(1)), (2, 2))
    assert target == out == (Replicate(), Replicate())  # 2 | u is not known: the safe answer
    assert env.guards() == []


def test_sizes_of_two_shape_envs_still_get_an_answer() -> None:
    """One program has one ShapeEnv; sizes of two cannot be compared, so only what needs no
    size stays (a dim moved whole), and nothing raises."""
    a, b = Env().sym(4), Env().sym(6)
    rule = R.flatten(2, 0, 1)
    assert propagate([Shard(1)], (a, b), rule, (2,)) == ((Replicate(),), (Replicate(),))
    assert propagate([Shard(1)], (a, b), R.transpose(2, 0, 1), (2,)) == ((Shard(1),), (Shard(0),))


@pytest.mark.parametrize("strict", [False, True])
def test_a_symbolic_view_that_must_move_names_the_dims(strict: bool) -> None:
    """(2*s,) -> (s, 2) on 4 ranks with s = 6: each rank would hold 1.5 rows."""
    env = Env()
    s = env.sym(6)
    shape = (2 * s,)
    rule = R.view_groups(shape, (s, 2))
    if strict:
        with pytest.raises(RuntimeError, match="mesh dim 0"):
            propagate([Shard(0)], shape, rule, (4,), strict_view=True)
    else:
        assert propagate([Shard(0)], shape, rule, (4,)) == ((Replicate(),), (Replicate(),))
    assert env.guards() == []  # moving rests on no fact


def test_a_symbolic_split_factor_in_the_input_needs_no_guard() -> None:
    """(s*8,) as s pieces of 8, each halved: viewed as (s, 8) it is Shard(1), as (2s, 4) the
    same s pieces of two rows."""
    env = Env()
    s = env.sym(6)
    strided = _StridedShard(0, split_factor=s)
    rule = R.view_groups((s * 8,), (s, 8))
    assert propagate([strided], (s * 8,), rule, (2,)) == ((strided,), (Shard(1),))
    rule = R.view_groups((s * 8,), (2 * s, 4))
    target, out = propagate([strided], (s * 8,), rule, (2,))
    assert target == (strided,) and _sf(out[0]) is s
    assert env.guards() == []


def test_views_that_only_move_dims_relabel_symbolic_dims_on_the_hot_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """permute, transpose, unsqueeze and a squeeze of static 1s move each dim whole, so the
    hot path relabels the placements whatever the sizes (uneven and unbacked ones too),
    without the symbolic engine and without a guard."""
    from cute_shard.engine import symbolic

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the symbolic engine ran")

    monkeypatch.setattr(symbolic, "propagate_symbolic", fail)
    env = Env()
    s, t = env.sym(5), env.sym(6)
    u = env.shape_env.create_unbacked_symint()
    placements = [Shard(0), _StridedShard(2, split_factor=3)]
    cases = [
        (R.permute(3, (2, 0, 1)), [Shard(1), _StridedShard(0, split_factor=3)]),
        (R.transpose(3, 0, 2), [Shard(2), _StridedShard(0, split_factor=3)]),
        (R.unsqueeze(3, 1), [Shard(0), _StridedShard(3, split_factor=3)]),
    ]
    for shape in ((s, t, 6), (u, 3 * s, t)):
        for rule, want in cases:
            assert propagate(placements, shape, rule, (3, 2)) == (tuple(placements), tuple(want))
    squeezed = R.squeeze((s, 1, t), 1)
    assert propagate([Shard(2), Replicate()], (s, 1, t), squeezed, (2, 2)) == (
        (Shard(2), Replicate()),
        (Shard(1), Replicate()),
    )
    assert env.guards() == []


@pytest.mark.parametrize(
    ("n", "to", "hint_to", "mesh", "placements"),
    [
        # a size-1 mesh dim on a dim inside a split group: the output dim the view gives its rows,
        # the same at the hints as for int sizes (found by the slow hypothesis profile)
        (2, lambda s: (s, 4), (2, 4), (1,), (Shard(1),)),
        (4, lambda s: (s, 2, 4), (2, 2, 4), (1, 2, 3), (Shard(1), Replicate(), Replicate())),
    ],
)
def test_a_size_one_mesh_dim_lands_where_the_int_sizes_put_it(
    n: int, to: Any, hint_to: tuple[int, ...], mesh: tuple[int, ...], placements: Any
) -> None:
    env = Env()
    s = env.sym(2)
    shape, hint_shape = (n * s, 2), (n * 2, 2)
    symbolic = propagate(placements, shape, R.view_groups(shape, to(s)), mesh)
    concrete = propagate(placements, hint_shape, R.view_groups(hint_shape, hint_to), mesh)
    assert symbolic == concrete
    assert env.guards() == []  # (any output dim is valid: the choice asks nothing)


def test_a_size_one_mesh_dim_in_a_split_of_one_dim() -> None:
    env = Env()
    a, b = env.sym(2), env.sym(2)
    shape, to = (a, 2 * b), (1, a, b, 2)
    placements = (Replicate(), Shard(1))
    symbolic = propagate(placements, shape, R.view_groups(shape, to), (3, 1))
    concrete = propagate(placements, (2, 4), R.view_groups((2, 4), (1, 2, 2, 2)), (3, 1))
    assert symbolic == concrete == ((Replicate(), Shard(1)), (Replicate(), Shard(2)))

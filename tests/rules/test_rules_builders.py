"""Golden tables of rule builders in the printed notation, plus argument errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import cute_shard.rules as R
from cute_shard.rules import AskedSizes, CodedSizes, IntSizes, format_rule

# ---------------------------------------------------------------------------
# view / reshape
# ---------------------------------------------------------------------------

VIEW_GOLDEN = [
    ((8, 16, 32), (128, 32), "(flat(d0,d1), d2)"),
    ((2, 3, 4), (2, 12), "(d0, flat(d1,d2))"),
    ((2, 3, 4), (24,), "(flat(d0,d1,d2),)"),
    ((2, 3), (3, 2), "(split(flat(d0,d1), (3,2), 0), split(flat(d0,d1), (3,2), 1))"),
    ((6,), (2, 3), "(split(d0, (2,3), 0), split(d0, (2,3), 1))"),
    ((24,), (2, 3, 4), "(split(d0, (2,3,4), 0), split(d0, (2,3,4), 1), split(d0, (2,3,4), 2))"),
    ((2, 3, 4), (4, 6), "(split(flat(d0,d1,d2), (4,6), 0), split(flat(d0,d1,d2), (4,6), 1))"),
    ((2, 16, 6), (8, 4, 6), "(split(flat(d0,d1), (8,4), 0), split(flat(d0,d1), (8,4), 1), d2)"),
    ((12, 5), (3, 20), "(split(flat(d0,d1), (3,20), 0), split(flat(d0,d1), (3,20), 1))"),
    ((2, 3, 5, 7), (6, 35), "(flat(d0,d1), flat(d2,d3))"),
    ((2, 1024, 768), (2, 1024, 12, 64), "(d0, d1, split(d2, (12,64), 0), split(d2, (12,64), 1))"),
    # size-1 dims: input 1s vanish unless matched by an output 1; output 1s are `1`
    ((6,), (2, 1, 3), "(split(d0, (2,3), 0), 1, split(d0, (2,3), 1))"),
    ((2, 1, 3), (6,), "(flat(d0,d1,d2),)"),
    ((4, 1, 4), (2, 8), "(split(flat(d0,d1,d2), (2,8), 0), split(flat(d0,d1,d2), (2,8), 1))"),
    ((1, 6), (6, 1), "(d1, 1)"),
    ((1, 7), (7,), "(d1,)"),
    ((7,), (7, 1, 1), "(d0, 1, 1)"),
    ((1,), (1,), "(d0,)"),
    ((5,), (5,), "(d0,)"),
    ((1, 1), (), "()"),
    ((), (1, 1), "(1, 1)"),
    ((), (), "()"),
    ((), (-1,), "(1,)"),
    # -1 inference
    ((4, 6), (-1,), "(flat(d0,d1),)"),
    (
        (4, 6),
        (2, -1, 3),
        "(split(flat(d0,d1), (2,4,3), 0), split(flat(d0,d1), (2,4,3), 1), "
        "split(flat(d0,d1), (2,4,3), 2))",
    ),
    ((2, 1024, 12, 64), (2, 1024, -1), "(d0, d1, flat(d2,d3))"),
    ((6,), (6, -1), "(d0, 1)"),
    # size-0 dims (torch's view_groups crashes or hangs on the first three and the last):
    # the dims equal at both ends move whole, the rest is one group holding a size-0 dim
    ((0, 3), (3, 0), "(split(flat(d0,d1), (3,0), 0), split(flat(d0,d1), (3,0), 1))"),
    ((0,), (0, 5), "(split(d0, (0,5), 0), split(d0, (0,5), 1))"),
    ((2, 0, 3), (0,), "(flat(d0,d1,d2),)"),
    ((0, 2), (-1,), "(flat(d0,d1),)"),
    ((0,), (2, 0), "(split(d0, (2,0), 0), split(d0, (2,0), 1))"),
    ((3, 0), (0, 3), "(split(flat(d0,d1), (0,3), 0), split(flat(d0,d1), (0,3), 1))"),
]


@pytest.mark.parametrize(("src", "dst", "expected"), VIEW_GOLDEN)
def test_view_groups_golden(src: tuple[int, ...], dst: tuple[int, ...], expected: str) -> None:
    rule = R.view_groups(src, dst)
    assert format_rule(rule) == expected
    assert R.parse_rule(expected) == rule
    # every size comparator makes the same decisions on ints (the codes of ints are the ints)
    for sizes in (IntSizes(), CodedSizes("view_groups"), AskedSizes("view_groups")):
        other = R.view_groups(src, dst, sizes=sizes)
        assert type(other) is R.ViewRule and other == rule
        assert (other.shape, other.out_shape, other.carry) == (
            rule.shape,
            rule.out_shape,
            rule.carry,
        )
    # rules are canonical
    assert R.canonicalize(rule) == rule


def test_view_rules_of_ints_record_what_the_walk_read() -> None:
    rule = R.view_groups((8, 1, 2, 16, 32), (16, 1, 16, 4, 8))
    assert format_rule(rule) == "(flat(d0,d1,d2), 1, d3, split(d4, (4,8), 0), split(d4, (4,8), 1))"
    assert (rule.shape, rule.out_shape, rule.carry) == (
        (8, 1, 2, 16, 32),
        (16, 1, 16, 4, 8),
        {3: 2},
    )
    assert R.view_groups((6, 4), (-1, 2)).out_shape == (12, 2)
    # a view of an empty tensor records nothing (the engine reads its own sizes there)
    assert R.view_groups((0, 8), (0,)).shape is None


def test_view_groups_accepts_lists_torch_size_numpy_and_bare_int() -> None:
    import torch

    expected = R.view_groups((2, 3, 4), (6, 4))
    assert R.view_groups([2, 3, 4], [6, 4]) == expected
    assert R.view_groups(torch.Size([2, 3, 4]), torch.Size([6, 4])) == expected
    assert R.view_groups(tuple(np.array([2, 3, 4])), (np.int64(6), 4)) == expected
    assert R.view_groups((2, 3), 6) == R.view_groups((2, 3), (6,))


def test_view_groups_cache_returns_equal_rules_and_clears() -> None:
    R.cache_clear()
    a = R.view_groups((8, 16, 32), (128, 32))
    b = R.view_groups((8, 16, 32), (128, 32))
    assert a is b  # second call is a cache hit
    R.cache_clear()
    c = R.view_groups((8, 16, 32), (128, 32))
    assert c == a and c is not a


def test_unflatten_golden() -> None:
    assert (
        format_rule(R.unflatten((6, 5), 0, (2, 3)))
        == "(split(d0, (2,3), 0), split(d0, (2,3), 1), d1)"
    )
    assert (
        format_rule(R.unflatten((5, 6), -1, (-1, 3)))
        == "(d0, split(d1, (2,3), 0), split(d1, (2,3), 1))"
    )
    assert format_rule(R.unflatten((2, 1, 3), 1, (1, 1))) == "(d0, d1, 1, d2)"
    assert format_rule(R.unflatten((4,), 0, (4,))) == "(d0,)"


# ---------------------------------------------------------------------------
# The other op families
# ---------------------------------------------------------------------------

GOLDEN: list[tuple[str, Callable[[], R.Rule], str]] = [
    ("flatten all", lambda: R.flatten(3), "(flat(d0,d1,d2),)"),
    ("flatten 1..2", lambda: R.flatten(4, 1, 2), "(d0, flat(d1,d2), d3)"),
    ("flatten -2..-1", lambda: R.flatten(3, -2, -1), "(d0, flat(d1,d2))"),
    ("flatten single", lambda: R.flatten(3, 1, 1), "(d0, d1, d2)"),
    ("flatten 1-d", lambda: R.flatten(1), "(d0,)"),
    ("flatten 0-d", lambda: R.flatten(0), "(1,)"),
    ("flatten 0-d -1", lambda: R.flatten(0, -1, 0), "(1,)"),
    ("ravel", lambda: R.ravel(2), "(flat(d0,d1),)"),
    ("ravel 0-d", lambda: R.ravel(0), "(1,)"),
    ("squeeze all", lambda: R.squeeze((1, 4, 1, 3)), "(d1, d3)"),
    ("squeeze dim", lambda: R.squeeze((1, 4, 1, 3), 2), "(d0, d1, d3)"),
    ("squeeze dim not 1", lambda: R.squeeze((1, 4, 1, 3), 1), "(d0, d1, d2, d3)"),
    ("squeeze dims", lambda: R.squeeze((1, 4, 1, 3), (0, -2)), "(d1, d3)"),
    ("squeeze keeps 0", lambda: R.squeeze((0, 1, 2)), "(d0, d2)"),
    ("squeeze 0-d", lambda: R.squeeze((), 0), "()"),
    ("squeeze 0-d -1", lambda: R.squeeze((), -1), "()"),
    ("unsqueeze 0", lambda: R.unsqueeze(2, 0), "(1, d0, d1)"),
    ("unsqueeze end", lambda: R.unsqueeze(2, 2), "(d0, d1, 1)"),
    ("unsqueeze -1", lambda: R.unsqueeze(2, -1), "(d0, d1, 1)"),
    ("unsqueeze -3", lambda: R.unsqueeze(2, -3), "(1, d0, d1)"),
    ("unsqueeze 0-d", lambda: R.unsqueeze(0, -1), "(1,)"),
    ("expand", lambda: R.expand((3, 1), (2, -1, 4)), "(bcast(1, 2), d0, bcast(d1, 4))"),
    ("expand same", lambda: R.expand((3, 1), (3, 1)), "(d0, d1)"),
    ("expand lead 1", lambda: R.expand((3,), (1, 3)), "(1, d0)"),
    ("expand to 0", lambda: R.expand((1,), (0,)), "(bcast(d0, 0),)"),
    ("expand 0-d", lambda: R.expand((), (5, 1)), "(bcast(1, 5), 1)"),
    ("broadcast_to", lambda: R.broadcast_to((1, 4), (3, 4)), "(bcast(d0, 3), d1)"),
    ("permute", lambda: R.permute(3, (2, 0, 1)), "(d2, d0, d1)"),
    ("permute neg", lambda: R.permute(3, (-1, 0, -2)), "(d2, d0, d1)"),
    ("permute 0-d", lambda: R.permute(0, ()), "()"),
    ("transpose", lambda: R.transpose(3, 0, -1), "(d2, d1, d0)"),
    ("transpose same", lambda: R.transpose(3, 1, 1), "(d0, d1, d2)"),
    ("transpose 0-d", lambda: R.transpose(0, 0, -1), "()"),
    ("t 2-d", lambda: R.t(2), "(d1, d0)"),
    ("t 1-d", lambda: R.t(1), "(d0,)"),
    ("t 0-d", lambda: R.t(0), "()"),
    ("movedim int", lambda: R.movedim(3, 0, 2), "(d1, d2, d0)"),
    ("movedim neg", lambda: R.movedim(4, -1, 0), "(d3, d0, d1, d2)"),
    ("movedim list", lambda: R.movedim(4, (0, 1), (3, 0)), "(d1, d2, d3, d0)"),
    ("movedim 0-d", lambda: R.movedim(0, 0, -1), "()"),
    ("repeat", lambda: R.repeat(2, (3, 1, 2)), "(bcast(1, 3), d0, repeat(d1, 2))"),
    ("repeat ones", lambda: R.repeat(2, (1, 1)), "(d0, d1)"),
    ("repeat lead 1", lambda: R.repeat(1, (1, 4)), "(1, repeat(d0, 4))"),
    ("repeat 0", lambda: R.repeat(1, (0,)), "(repeat(d0, 0),)"),
    ("repeat 0-d", lambda: R.repeat(0, ()), "()"),
    ("tile pads", lambda: R.tile(3, (2,)), "(d0, d1, repeat(d2, 2))"),
    ("tile longer", lambda: R.tile(1, (2, 3)), "(bcast(1, 2), repeat(d0, 3))"),
    ("atleast_1d 0", lambda: R.atleast_1d(0), "(1,)"),
    ("atleast_1d 2", lambda: R.atleast_1d(2), "(d0, d1)"),
    ("atleast_2d 0", lambda: R.atleast_2d(0), "(1, 1)"),
    ("atleast_2d 1", lambda: R.atleast_2d(1), "(1, d0)"),
    ("atleast_2d 3", lambda: R.atleast_2d(3), "(d0, d1, d2)"),
    ("atleast_3d 0", lambda: R.atleast_3d(0), "(1, 1, 1)"),
    ("atleast_3d 1", lambda: R.atleast_3d(1), "(1, d0, 1)"),
    ("atleast_3d 2", lambda: R.atleast_3d(2), "(d0, d1, 1)"),
    ("atleast_3d 4", lambda: R.atleast_3d(4), "(d0, d1, d2, d3)"),
    (
        "view_as_real",
        lambda: R.view_as_real((3, 4)),
        "(d0, split(d1, (4,2), 0), split(d1, (4,2), 1))",
    ),
    (
        "view_as_real n=1",
        lambda: R.view_as_real((1,)),
        "(split(d0, (1,2), 0), split(d0, (1,2), 1))",
    ),
    ("view_as_real 0-d", lambda: R.view_as_real(()), "(new(2),)"),
    ("view_as_complex", lambda: R.view_as_complex((3, 4, 2)), "(d0, flat(d1,d2))"),
    ("view_as_complex 1-d", lambda: R.view_as_complex((2,)), "()"),
]


@pytest.mark.parametrize(("name", "build", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_builder_golden(name: str, build: Callable[[], R.Rule], expected: str) -> None:
    rule = build()
    assert isinstance(rule, tuple)
    assert format_rule(rule) == expected


# ---------------------------------------------------------------------------
# Bad arguments: ValueError naming the argument and the reason
# ---------------------------------------------------------------------------

ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("numel mismatch", lambda: R.view_groups((6,), (4,)), "to_shape"),
    ("two -1", lambda: R.view_groups((6,), (-1, -1)), "more than one -1"),
    ("negative size", lambda: R.view_groups((6,), (-2, -3)), "to_shape"),
    ("negative from", lambda: R.view_groups((-6,), (6,)), "from_shape"),
    ("-1 not integral", lambda: R.view_groups((6,), (4, -1)), "not divisible"),
    ("-1 next to 0", lambda: R.view_groups((0, 2), (0, -1)), "ambiguous"),
    ("float size", lambda: R.view_groups((6.0,), (6,)), "from_shape"),
    ("bool size", lambda: R.view_groups((True,), (1,)), "from_shape"),
    ("not a shape", lambda: R.view_groups(None, (6,)), "from_shape"),
    ("str shape", lambda: R.view_groups("ab", (6,)), "from_shape"),
    ("unflatten numel", lambda: R.unflatten((6,), 0, (4, 2)), "sizes"),
    ("unflatten empty", lambda: R.unflatten((6,), 0, ()), "sizes"),
    ("unflatten dim", lambda: R.unflatten((6,), 1, (2, 3)), "dim"),
    ("unflatten 0-d", lambda: R.unflatten((), 0, (1,)), "dim"),
    ("flatten order", lambda: R.flatten(3, 2, 1), "start_dim"),
    ("flatten start range", lambda: R.flatten(3, 3), "start_dim"),
    ("flatten end range", lambda: R.flatten(3, 0, -4), "end_dim"),
    ("flatten 0-d range", lambda: R.flatten(0, 0, 1), "end_dim"),
    ("ndim negative", lambda: R.flatten(-1), "ndim"),
    ("ndim float", lambda: R.ravel(2.0), "ndim"),  # type: ignore[arg-type]
    ("squeeze dim range", lambda: R.squeeze((1, 2), 2), "dim"),
    ("squeeze dup", lambda: R.squeeze((1, 1, 2), (1, -2)), "more than once"),
    ("squeeze float dim", lambda: R.squeeze((1, 2), 0.0), "dim"),  # type: ignore[arg-type]
    ("unsqueeze range", lambda: R.unsqueeze(2, 3), "dim"),
    ("unsqueeze range neg", lambda: R.unsqueeze(2, -4), "dim"),
    ("expand fewer", lambda: R.expand((2, 1, 3), (3,)), "fewer dims"),
    ("expand lead -1", lambda: R.expand((3, 1), (-1, 3, 4)), "leading"),
    ("expand incompatible", lambda: R.expand((3, 2), (3, 4)), "input dim 1"),
    ("expand negative", lambda: R.expand((3,), (-2,)), "shape"),
    ("permute len", lambda: R.permute(3, (0, 1)), "dims"),
    ("permute dup", lambda: R.permute(2, (0, 0)), "more than once"),
    ("permute range", lambda: R.permute(2, (0, 2)), "dims"),
    ("permute 0-d", lambda: R.permute(0, (0,)), "dims"),
    ("transpose range", lambda: R.transpose(2, 0, 2), "dim1"),
    ("transpose range neg", lambda: R.transpose(2, -3, 0), "dim0"),
    ("t 3-d", lambda: R.t(3), "<= 2 dims"),
    ("movedim len", lambda: R.movedim(3, (0, 1), (1,)), "destination"),
    ("movedim dup src", lambda: R.movedim(3, (0, 0), (1, 2)), "source"),
    ("movedim dup dst", lambda: R.movedim(3, (0, 1), (2, -1)), "destination"),
    ("movedim range", lambda: R.movedim(3, 3, 0), "source"),
    ("repeat fewer", lambda: R.repeat(3, (2, 2)), "sizes"),
    ("repeat negative", lambda: R.repeat(1, (-1,)), "sizes"),
    ("tile negative", lambda: R.tile(1, (-2,)), "dims"),
    ("view_as_real bad", lambda: R.view_as_real((-1,)), "shape"),
    ("view_as_complex last", lambda: R.view_as_complex((3, 4)), "last dim is 2"),
    ("view_as_complex 0-d", lambda: R.view_as_complex(()), "last dim is 2"),
]


@pytest.mark.parametrize(("name", "call", "needle"), ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_arguments_raise_value_error(
    name: str, call: Callable[[], object], needle: str
) -> None:
    with pytest.raises(ValueError, match="fix:") as info:
        call()
    assert needle in str(info.value)
    assert not isinstance(info.value, R.UndecidableRule)

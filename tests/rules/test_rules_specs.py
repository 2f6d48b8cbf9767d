"""The DimSpec vocabulary: notation, canonicalisation, validation, parsing."""

from __future__ import annotations

import pytest

from cute_shard.rules import (
    Broadcast,
    DimSpec,
    Flatten,
    InputDim,
    NewDim,
    Repeat,
    Singleton,
    Split,
    canonicalize,
    format_rule,
    map_sizes,
    parse_rule,
    parse_spec,
    view_groups,
)

d0, d1, d2, d3 = (InputDim(i) for i in range(4))
ONE = Singleton()


# ---------------------------------------------------------------------------
# Printed notation
# ---------------------------------------------------------------------------

NOTATION = [
    (d0, "d0"),
    (InputDim(17), "d17"),
    (ONE, "1"),
    (Flatten((d0, d1)), "flat(d0,d1)"),
    (Flatten((d1, d2, d3)), "flat(d1,d2,d3)"),
    (Split(Flatten((d0, d1)), (4, 8), 1), "split(flat(d0,d1), (4,8), 1)"),
    (Split(d2, (2, 3, 5), 0), "split(d2, (2,3,5), 0)"),
    (Broadcast(d0, 8), "bcast(d0, 8)"),
    (Broadcast(ONE, 8), "bcast(1, 8)"),
    (NewDim(4), "new(4)"),
    (Repeat(d1, 3), "repeat(d1, 3)"),
]


@pytest.mark.parametrize(("spec", "text"), NOTATION, ids=[t for _, t in NOTATION])
def test_notation_str_repr_and_parse(spec: DimSpec, text: str) -> None:
    assert str(spec) == text
    assert repr(spec) == text
    assert parse_spec(text) == spec
    assert parse_spec(" " + text.replace(",", " , ") + " ") == spec


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        ((), "()"),
        ((d0,), "(d0,)"),
        ((Flatten((d0, d1)), d2), "(flat(d0,d1), d2)"),
        ((ONE, Broadcast(ONE, 3), Repeat(d0, 2)), "(1, bcast(1, 3), repeat(d0, 2))"),
    ],
)
def test_format_and_parse_rule(rule: tuple[DimSpec, ...], text: str) -> None:
    assert format_rule(rule) == text
    assert parse_rule(text) == rule


@pytest.mark.parametrize(
    "text",
    ["", "(", "(d0", "(x0)", "(d0 d1)", "(flat(d0))", "(split(d0, (4), 0))", "(d-1,)", "(d0,) x"],
)
def test_parse_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rule(text)


# ---------------------------------------------------------------------------
# Value semantics
# ---------------------------------------------------------------------------


def test_frozen_hashable_and_equal_by_value() -> None:
    a = Split(Flatten((d0, d1)), (4, 8), 1)
    b = Split(Flatten([InputDim(0), InputDim(1)]), [4, 8], 1)  # lists are coerced
    assert a == b and hash(a) == hash(b)
    assert isinstance(b.group_shape, tuple) and isinstance(b.input_dim, Flatten)
    assert len({a, b, Singleton(), Singleton(), d0, InputDim(0)}) == 3
    with pytest.raises(AttributeError):
        a.split_id = 0  # type: ignore[misc]
    assert Singleton() != d0 and Broadcast(d0, 2) != Repeat(d0, 2)
    assert d0 != 0  # plain comparison with non-specs is simply unequal


def test_inputs() -> None:
    assert d0.inputs() == () and ONE.inputs() == () and NewDim(3).inputs() == ()
    assert Flatten((d0, d1)).inputs() == (d0, d1)
    assert Split(d2, (2, 3), 0).inputs() == (d2,)
    assert Broadcast(ONE, 3).inputs() == (ONE,)
    assert Repeat(d1, 3).inputs() == (d1,)


def test_input_dim_new_interns() -> None:
    assert InputDim.new(3) is InputDim.new(3)
    assert InputDim.new(1000) == InputDim(1000)


def test_flatten_range_is_the_checked_flatten_built_once() -> None:
    from cute_shard.rules.specs import INPUT_DIMS, flatten_range

    assert INPUT_DIMS[:3] == (d0, d1, d2) and InputDim.new(5) is INPUT_DIMS[5]
    for hi in range(1, 20):
        for lo in range(hi):
            spec = flatten_range(lo, hi)
            checked = Flatten.new([InputDim(d) for d in range(lo, hi)])
            assert spec == checked and hash(spec) == hash(checked)
            if isinstance(spec, Flatten):
                assert spec.dims == tuple(range(lo, hi)) == checked.dims  # type: ignore[attr-defined]
    assert flatten_range(0, 2) is flatten_range(0, 2)  # the ranks models have: built once
    assert view_groups((2, 3, 4), (6, 4))[0] is flatten_range(0, 2)


def test_unchecked_constructors_build_the_checked_values() -> None:
    pieces = Split.pieces(d2, (4, 8, 2))
    checked = [Split(d2, (4, 8, 2), k) for k in range(3)]
    assert pieces == checked and list(map(hash, pieces)) == list(map(hash, checked))
    assert Broadcast.unchecked(ONE, 8) == Broadcast(ONE, 8)


def test_view_rule_of_tags_and_records() -> None:
    from cute_shard.rules import ViewRule

    plain = ViewRule.of([d0, d1])
    assert plain == (d0, d1) and hash(plain) == hash((d0, d1)) and plain.shape is None
    made = ViewRule.of([flat01 := Flatten((d0, d1))], (2, 3), (6,), {})
    assert made == (flat01,) and (made.shape, made.out_shape, made.carry) == ((2, 3), (6,), {})


# ---------------------------------------------------------------------------
# Canonicalising constructors
# ---------------------------------------------------------------------------

CANONICAL = [
    (Flatten.new(()), "1"),
    (Flatten.new((d2,)), "d2"),
    (Flatten.new((d0, d1)), "flat(d0,d1)"),
    (Flatten.new((Flatten((d0, d1)), d2)), "flat(d0,d1,d2)"),
    (Flatten.new((ONE, d1, ONE)), "d1"),
    (Split.new(d0, (6,), 0), "d0"),
    (Split.new(d0, (1, 6), 0), "1"),
    (Split.new(d0, (1, 6), 1), "d0"),
    (Split.new(d0, (2, 1, 3), 1), "1"),
    (Split.new(d0, (2, 1, 3), 2), "split(d0, (2,3), 1)"),
    (Split.new(d0, (1, 4, 1, 2), 3), "split(d0, (4,2), 1)"),
    (Split.new(Flatten((d0, d1)), (4, 8), 0), "split(flat(d0,d1), (4,8), 0)"),
    (Broadcast.new(d0, 1), "d0"),
    (Broadcast.new(ONE, 5), "bcast(1, 5)"),
    (Broadcast.new(ONE, 0), "bcast(1, 0)"),
    (NewDim.new(1), "1"),
    (NewDim.new(4), "new(4)"),
    (Repeat.new(d1, 1), "d1"),
    (Repeat.new(ONE, 3), "bcast(1, 3)"),
    (Repeat.new(d1, 3), "repeat(d1, 3)"),
    (Repeat.new(d1, 0), "repeat(d1, 0)"),
]


@pytest.mark.parametrize(("spec", "text"), CANONICAL, ids=[t for _, t in CANONICAL])
def test_canonicalising_constructors(spec: DimSpec, text: str) -> None:
    assert str(spec) == text


def test_canonicalize_rule() -> None:
    raw = (Split(d0, (1, 2), 0), Split(d0, (1, 2), 1), Broadcast(d1, 1), Repeat(ONE, 4), NewDim(1))
    assert format_rule(canonicalize(raw)) == "(1, d0, d1, bcast(1, 4), 1)"
    already = parse_rule("(split(flat(d0,d1), (4,8), 0), split(flat(d0,d1), (4,8), 1), d2)")
    assert canonicalize(already) == already


def test_map_sizes_keeps_structure() -> None:
    rule = parse_rule("(split(d0, (1,2), 0), bcast(d1, 3), repeat(d2, 4), new(5), flat(d3,d4), 1)")
    doubled = map_sizes(rule, lambda s: 2 * s)
    assert (
        format_rule(doubled)
        == "(split(d0, (2,4), 0), bcast(d1, 6), repeat(d2, 8), new(10), flat(d3,d4), 1)"
    )
    assert map_sizes(rule, lambda s: s) == rule


# ---------------------------------------------------------------------------
# Validation: ValueError with expected / got / fix
# ---------------------------------------------------------------------------

INVALID = [
    (lambda: InputDim(-1), "InputDim.input_dim"),
    (lambda: InputDim(True), "InputDim.input_dim"),
    (lambda: InputDim("0"), "InputDim.input_dim"),  # type: ignore[arg-type]
    (lambda: Flatten((d0,)), "at least 2"),
    (lambda: Flatten(()), "at least 2"),
    (lambda: Flatten((d1, d0)), "strictly increasing"),
    (lambda: Flatten((d0, d0)), "strictly increasing"),
    (lambda: Flatten((d0, ONE)), "strictly increasing"),
    (lambda: Flatten(d0), "sequence"),  # type: ignore[arg-type]
    (lambda: Split(d0, (4,), 0), "at least 2 pieces"),
    (lambda: Split(d0, (4, 2), 2), "Split.split_id"),
    (lambda: Split(d0, (4, 2), -1), "Split.split_id"),
    (lambda: Split(d0, (4, -2), 0), "size >= 0"),
    (lambda: Split(d0, (4, 2.0), 0), "int or SymInt"),  # type: ignore[arg-type]
    (lambda: Split(0, (4, 2), 0), "Split.input_dim"),  # type: ignore[arg-type]
    (lambda: Broadcast(d0, -3), "Broadcast.dim_size"),
    (lambda: Broadcast(3, 3), "Broadcast.dim"),  # type: ignore[arg-type]
    (lambda: NewDim(-1), "NewDim.size"),
    (lambda: Repeat(d0, -2), "Repeat.times"),
    (lambda: Split.new(d0, (4, 2), 5), "split_id"),
    (lambda: Split.new(d0, (), 0), "split_id"),
]


@pytest.mark.parametrize(("make", "needle"), INVALID)
def test_invalid_specs_raise_value_error(make: object, needle: str) -> None:
    with pytest.raises(ValueError, match="fix:") as info:
        make()  # type: ignore[operator]
    assert needle in str(info.value)

"""Worked examples of CuTe's documented layout algebra, as golden CuTe-notation tables.

Every row was checked against NVIDIA's CuTe DSL (nvidia-cutlass-dsl 4.8) before it was written
down; property_tests/test_layout_vs_cute_dsl.py re-checks thousands of generated cases.
"""

import pytest

from cute_shard.layout import (
    Layout,
    coalesce,
    complement,
    composition,
    left_inverse,
    logical_divide,
    logical_product,
    right_inverse,
    zipped_divide,
)

P = Layout.parse

COMPOSITION = [
    ("(6,2):(2,1)", "3:2", "3:4"),
    ("(6,2):(8,2)", "(4,3):(3,1)", "((2,2),3):((24,2),8)"),
    ("20:2", "(5,4):(4,1)", "(5,4):(8,2)"),
    ("(10,2):(16,4)", "(5,4):(1,5)", "(5,(2,2)):(16,(80,4))"),
    ("(4,6):(6,1)", "(2,3):(1,4)", "(2,3):(6,1)"),
    # B reaches past size(A): A extends along its last leaf, even a size-1 one.
    ("(6,1):(1,100)", "2:6", "2:100"),
    ("(1,1):(3,4)", "2:1", "2:4"),
    ("(3,2):(1,3)", "4:2", "4:2"),
    # Stride 2 does not divide 3, but both elements fit in the first leaf.
    ("(3,5):(5,1)", "2:2", "2:10"),
    ("(6,4):(4,1)", "4:0", "4:0"),
    ("(6,4):(4,1)", "(2,2):(0,1)", "(2,2):(0,4)"),
]

COMPLEMENT = [
    ("4:1", 24, "6:4"),
    ("6:4", 24, "4:1"),
    ("(4,6):(1,4)", 24, "1:0"),
    ("4:2", 24, "(2,3):(1,8)"),
    ("(2,4):(1,6)", 24, "3:2"),
    ("(2,2):(1,6)", 24, "(3,2):(2,12)"),
    ("4:2", 6, "2:1"),
    ("4:0", 12, "12:1"),
]

INVERSES = [
    # layout, right_inverse, left_inverse
    ("(4,2):(2,1)", "(2,4):(4,1)", "(2,4):(4,1)"),
    ("(2,3):(3,1)", "(3,2):(2,1)", "(3,2):(2,1)"),
    ("(2,3):(1,4)", "2:1", "(4,3):(1,2)"),
    ("(2,3):(4,1)", "3:2", "(4,2):(2,1)"),
    ("(3,3):(2,8)", "1:0", "(2,4,3):(0,1,3)"),
    ("(2,3,2):(1,8,2)", "(2,2):(1,6)", "(2,4,3):(1,6,2)"),
    ("1:0", "1:0", "1:0"),
]


@pytest.mark.parametrize(("a", "b", "want"), COMPOSITION)
def test_composition(a: str, b: str, want: str) -> None:
    assert str(composition(P(a), P(b))) == want


def test_composition_by_mode() -> None:
    a = P("(12,(4,8)):(59,(13,1))")
    got = composition(a, (Layout(3, 4), Layout(8, 2)))
    assert str(got) == "(3,(2,4)):(236,(26,1))"


def test_composition_with_int_tile_is_n_colon_1() -> None:
    assert composition(P("(4,6):(6,1)"), 8) == composition(P("(4,6):(6,1)"), Layout(8, 1))


@pytest.mark.parametrize(("a", "m", "want"), COMPLEMENT)
def test_complement(a: str, m: int, want: str) -> None:
    assert str(complement(P(a), m)) == want


def test_complement_default_cotarget_is_cosize() -> None:
    assert complement(P("(2,2):(1,6)")) == complement(P("(2,2):(1,6)"), 8)


@pytest.mark.parametrize(("a", "right", "left"), INVERSES)
def test_inverses(a: str, right: str, left: str) -> None:
    assert str(right_inverse(P(a))) == right
    assert str(left_inverse(P(a))) == left


def test_coalesce() -> None:
    assert str(coalesce(P("(2,(1,6)):(1,(6,2))"))) == "12:1"
    assert str(coalesce(P("(2,(1,6)):(1,(6,2))"), (1, 1))) == "(2,6):(1,2)"
    assert str(coalesce(P("(1,1):(3,4)"))) == "1:0"
    assert str(coalesce(P("(3,1,1):(2,0,4)"))) == "3:2"
    assert str(coalesce(P("1:5"))) == "1:0"
    assert str(coalesce(P("(2,4):(0,0)"))) == "8:0"
    assert str(coalesce(P("(2,1,3):(0,5,0)"))) == "6:0"
    assert str(coalesce(P("(4,2):(0,4)"))) == "(4,2):(0,4)"


def test_logical_divide() -> None:
    assert str(logical_divide(P("(4,2,3):(2,1,8)"), P("4:2"))) == "((2,2),(2,3)):((4,1),(2,8))"
    assert str(logical_divide(P("(8,4):(4,1)"), P("2:1"))) == "(2,(4,4)):(4,(8,1))"
    a = P("(9,(4,8)):(59,(13,1))")
    tiler = (Layout(3, 3), P("(2,4):(1,8)"))
    assert str(logical_divide(a, tiler)) == "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
    assert str(zipped_divide(a, tiler)) == "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"


def test_zipped_divide_with_layout_tiler_is_logical_divide() -> None:
    a = P("(4,2,3):(2,1,8)")
    assert zipped_divide(a, P("4:2")) == logical_divide(a, P("4:2"))
    assert str(zipped_divide(P("(4,6):(6,1)"), (2, 3))) == "((2,3),(2,2)):((6,1),(12,3))"


def test_logical_product() -> None:
    a = P("(2,2):(4,1)")
    assert str(logical_product(a, P("6:1"))) == "((2,2),(2,3)):((4,1),(2,8))"
    assert str(logical_product(a, P("(4,2):(2,1)"))) == "((2,2),(4,2)):((4,1),(8,2))"


@pytest.mark.parametrize(
    ("a", "b", "condition"),
    [
        ("(4,6):(6,1)", "6:1", "shape divisibility"),
        ("(3,5):(5,1)", "3:2", "stride divisibility"),
        ("(3,5):(5,1)", "4:2", "stride divisibility"),  # the CuTe DSL returns a wrong layout here
        ("(4,6):(6,1)", "4:3", "stride divisibility"),
        ("(3,5):(5,1)", "1:4", "stride divisibility"),
    ],
)
def test_inadmissible_composition_names_the_condition(a: str, b: str, condition: str) -> None:
    with pytest.raises(ValueError, match=condition):
        composition(P(a), P(b))


@pytest.mark.parametrize("a", ["(2,2):(1,3)", "(2,2):(2,2)", "(2,3):(1,1)"])
def test_complement_that_cannot_exist(a: str) -> None:
    with pytest.raises(ValueError, match="not a multiple"):
        complement(P(a), 24)


@pytest.mark.parametrize("a", ["4:0", "(2,4):(0,1)", "(2,2):(1,1)", "(3,2):(1,2)", "(2,2):(2,3)"])
def test_left_inverse_of_non_invertible(a: str) -> None:
    with pytest.raises(ValueError, match="left_inverse"):
        left_inverse(P(a))


def test_tiler_errors() -> None:
    with pytest.raises(ValueError, match="by-mode"):
        composition(P("(2,3):(1,2)"), (2, 3, 4))
    with pytest.raises(ValueError, match="expected a Layout"):
        logical_divide(P("6:1"), "2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nested"):
        zipped_divide(P("(4,6):(6,1)"), ((2,), 3))


@pytest.mark.parametrize(
    ("op", "a", "b"),
    [
        # Found by the CuTe DSL differential tests: composing B leaf by leaf is A∘B only when
        # A adds up over B's leaves (no carry between them). The DSL returns wrong layouts here.
        (composition, "(3,2):(2,1)", "(2,2):(1,2)"),
        (composition, "(2,2):(2,1)", "(2,2):(1,1)"),
        (composition, "(2,2):(1,0)", "(2,2):(1,1)"),
        (composition, "(3,1):(0,1)", "(3,2):(1,1)"),
        (logical_divide, "(6,1):(1,1)", "4:1"),
        (logical_divide, "(5,1):(0,1)", "2:1"),
        (logical_product, "2:2", "(2,2):(1,1)"),
        (logical_product, "2:5", "(2,2):(4,1)"),
    ],
)
def test_carry_between_modes_of_b_is_rejected(op: object, a: str, b: str) -> None:
    with pytest.raises(ValueError, match="carry"):
        op(P(a), P(b))  # type: ignore[operator]

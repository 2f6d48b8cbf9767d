"""The Layout value and the IntTuple helpers: construction, validation, evaluation, printing."""

import ast
import dataclasses
import pathlib

import pytest

import cute_shard.layout as layout_pkg
from cute_shard.layout import (
    Layout,
    ceil_div,
    congruent,
    crd2idx,
    depth,
    flatten,
    idx2crd,
    make_layout,
    prefix_product,
    product,
    rank,
    shape_div,
    suffix_product,
    unflatten,
)
from cute_shard.layout.inttuple import parse_inttuple


def test_inttuple_helpers() -> None:
    assert flatten((2, (3, (4,)), ())) == (2, 3, 4)
    assert flatten(7) == (7,)
    assert flatten(()) == ()
    assert unflatten((2, 3, 4), (0, (0, 0))) == (2, (3, 4))
    assert product((2, (3, 4))) == 24 and product(()) == 1
    assert rank((2, (3, 4))) == 2 and rank(5) == 1
    assert depth(5) == 0 and depth((1, 2)) == 1 and depth((1, (2, (3,)))) == 3 and depth(()) == 1
    assert congruent((1, (2, 3)), (4, (5, 6))) and not congruent((1, 2), (1, (2,)))
    assert prefix_product((2, (3, 4))) == (1, (2, 6)) and prefix_product(5) == 1
    assert suffix_product((2, (3, 4))) == (12, (4, 1))
    assert ceil_div(7, 2) == 4 and ceil_div(6, 3) == 2
    assert shape_div((4, 6), 8) == (1, 3)
    assert shape_div(12, 4) == 3 and shape_div(4, 12) == 1


def test_shape_div_rejects_coprime() -> None:
    with pytest.raises(ValueError, match="divides"):
        shape_div(6, 4)


def test_idx2crd_is_colexicographic_and_extends_the_last_mode() -> None:
    assert [idx2crd(i, (2, 3)) for i in range(6)] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (0, 2),
        (1, 2),
    ]
    assert idx2crd(7, (2, 3)) == (1, 3)
    assert idx2crd(5, (2, (3, 4))) == (1, (2, 0))
    for i in range(24):
        assert crd2idx(idx2crd(i, (2, (3, 4))), (2, (3, 4))) == i
    assert crd2idx((1, 5), (2, (3, 4))) == crd2idx((1, (2, 1)), (2, (3, 4)))


def test_parse_inttuple() -> None:
    assert parse_inttuple("(2,(3,4))") == (2, (3, 4))
    assert parse_inttuple(" ( 6 ) ") == (6,)
    assert parse_inttuple("-3") == -3
    assert parse_inttuple("()") == ()
    for bad in ["", "(", "(2,", "2)", "(2;3)", "-", "x"]:
        with pytest.raises(ValueError, match="cannot read"):
            parse_inttuple(bad)


def test_layout_evaluation() -> None:
    L = Layout((2, (3, 4)), (12, (4, 1)))
    assert str(L) == "(2,(3,4)):(12,(4,1))" and repr(L) == "Layout((2,(3,4)):(12,(4,1)))"
    assert (L(0), L(1), L(2), L(23)) == (0, 12, 4, 23)
    assert L((1, (2, 3))) == 23 == L(1, (2, 3))
    assert L((1, 11)) == 23  # an int coordinate for a nested mode is that mode's flat index
    assert (L.size, L.cosize, L.rank, L.depth) == (24, 24, 2, 2)
    assert L[1] == Layout((3, 4), (4, 1)) and L[0] == Layout(2, 12)
    assert sorted(L(i) for i in range(L.size)) == list(range(24))
    # Past its size a layout extends along its last leaf.
    assert Layout((2, 3), (1, 10))(7) == 1 + 30


def test_int_and_empty_layouts() -> None:
    L = Layout(6, 2)
    assert (L.size, L.cosize, L.rank, L.depth, L(5), L[0]) == (6, 11, 1, 0, 10, L)
    E = Layout((), ())
    assert (E.size, E.cosize, E.rank, E(0), str(E)) == (1, 1, 0, 0, "():()")
    Z = Layout((2, 0), (1, 2))
    assert (Z.size, Z.cosize) == (0, 0)
    with pytest.raises(IndexError):
        L[1]


def test_size_one_and_stride_zero_modes() -> None:
    L = Layout((1, 4, 1), (7, 0, 3))
    assert [L(i) for i in range(4)] == [0, 0, 0, 0]
    assert L.cosize == 1


def test_make_layout() -> None:
    assert make_layout((2, 3)) == Layout((2, 3), (1, 2))
    assert make_layout((2, (3, 4))) == Layout((2, (3, 4)), (1, (2, 6)))
    assert make_layout((2, 3), stride=(3, 1)) == Layout((2, 3), (3, 1))
    assert make_layout(Layout(2, 3), Layout((4, 5), (1, 8))) == Layout((2, (4, 5)), (3, (1, 8)))
    assert make_layout(Layout(6, 1)) == Layout((6,), (1,))  # one layout: a rank-1 tuple
    with pytest.raises(ValueError, match="not both"):
        make_layout(Layout(2, 1), stride=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one shape"):
        make_layout((2, 3), (3, 1))


def test_layout_is_an_immutable_hashable_value() -> None:
    a, b = Layout((2, 3), (3, 1)), Layout((2, 3), (3, 1))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    # Same function, different structure: not ==.
    assert Layout(6, 1) != Layout((2, 3), (1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.shape = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("shape", "stride", "message"),
    [
        ((2, 3), (1,), "not congruent"),
        ((2, 3), 1, "not congruent"),
        (2, (1,), "not congruent"),
        ((2, (3, 4)), (1, (2,)), "not congruent"),
        ((2, -1), (1, 2), ">= 0"),
        ((2, 2.0), (1, 2), ">= 0"),
        ((2, True), (1, 2), ">= 0"),
        ((2, 3), (1, "2"), "stride leaves must be ints"),
    ],
)
def test_layout_validation(shape: object, stride: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Layout(shape, stride)  # type: ignore[arg-type]


def test_parse_round_trip() -> None:
    for text in ["(2,(3,4)):(12,(4,1))", "6:1", "(6):(1)", "():()", "((2,1),3):((1,0),-2)"]:
        assert str(Layout.parse(text)) == text
    assert Layout.parse("(2,3)") == make_layout((2, 3))


def test_bad_coordinates() -> None:
    L = Layout((2, 3), (1, 2))
    with pytest.raises(ValueError, match="does not match"):
        L((1, 2, 3))
    with pytest.raises(ValueError, match="ints"):
        L((1, 0.5))


def test_layout_package_imports_only_the_standard_library() -> None:
    """cute_shard.layout is the bottom layer: no torch, no numpy, nothing outside stdlib."""
    pkg_dir = pathlib.Path(layout_pkg.__file__).parent
    allowed = {
        "__future__",
        "dataclasses",
        "functools",
        "typing",
        "collections",
        "itertools",
        "math",
        "operator",
    }
    for path in pkg_dir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [(node.module or "").split(".")[0]]
            else:
                continue
            assert set(names) <= allowed, f"{path.name} imports {names}"

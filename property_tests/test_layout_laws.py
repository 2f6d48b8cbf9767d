"""Every Post line of the layout algebra, checked over all coordinates of generated layouts.

A case the algebra rejects (ValueError) is counted with ``event`` and skipped here: whether a
rejection is right is the differential tier's question (test_layout_vs_cute_dsl.py).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import event, given
from hypothesis import strategies as st

from cute_shard.layout import (
    IntTuple,
    Layout,
    coalesce,
    complement,
    composition,
    crd2idx,
    flatten,
    idx2crd,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    product,
    right_inverse,
    zipped_divide,
)
from cute_shard.layout.inttuple import parse_inttuple

from .layout_strategies import int_tuples, layouts, sub_layouts


def _values(L: Layout) -> list[int]:
    return [L(i) for i in range(L.size)]


def _attempt(f: Callable[[], Layout], name: str) -> Layout | None:
    try:
        r = f()
    except ValueError:
        event(f"{name}: rejected")
        return None
    event(f"{name}: computed")
    return r


# --------------------------------------------------------------------------------------------
# IntTuple and Layout basics


@given(int_tuples())
def test_inttuple_round_trips(shape: IntTuple) -> None:
    assert parse_inttuple(_fmt(shape)) == shape
    n = product(shape)
    for i in range(min(n, 512)):
        c = idx2crd(i, shape)
        assert crd2idx(c, shape) == i
        assert all(0 <= x < s for x, s in zip(flatten(c), flatten(shape), strict=True))


def _fmt(t: IntTuple) -> str:
    return "(" + ",".join(_fmt(x) for x in t) + ")" if isinstance(t, tuple) else str(t)


@given(layouts())
def test_layout_value_laws(L: Layout) -> None:
    assert Layout.parse(str(L)) == L
    assert hash(Layout(L.shape, L.stride)) == hash(L)
    assert L.size == product(L.shape)
    vals = _values(L)
    assert L.cosize == max(vals) + 1  # strides are non-negative here
    for i in range(L.size):
        assert L(idx2crd(i, L.shape)) == vals[i]


# --------------------------------------------------------------------------------------------
# coalesce


@given(layouts())
def test_coalesce(L: Layout) -> None:
    R = coalesce(L)
    assert R.size == L.size
    assert R.depth <= 1
    assert _values(R) == _values(L)
    s, d = R.flat_shape, R.flat_stride
    if R != Layout(1, 0):
        assert all(x != 1 for x in s)
    assert all(s[k] * d[k] != d[k + 1] for k in range(len(s) - 1))


@given(layouts(max_depth=3), st.data())
def test_coalesce_by_mode(L: Layout, data: st.DataObject) -> None:
    n = data.draw(st.integers(0, L.rank)) if isinstance(L.shape, tuple) else 0
    profile = tuple(1 for _ in range(n))
    R = coalesce(L, profile)
    assert R.rank == L.rank if isinstance(L.shape, tuple) else True
    for i in range(n):
        assert R[i] == coalesce(L[i])
    for i in range(n, L.rank if isinstance(L.shape, tuple) else 0):
        assert R[i] == L[i]
    assert _values(R) == _values(L)


# --------------------------------------------------------------------------------------------
# composition


@given(layouts(), st.data())
def test_composition(A: Layout, data: st.DataObject) -> None:
    B = data.draw(sub_layouts(A.size))
    R = _attempt(lambda: composition(A, B), "composition")
    if R is None:
        return
    assert R.size == B.size
    for i in range(B.size):
        assert R(i) == A(B(i))
    if isinstance(B.shape, tuple):
        assert isinstance(R.shape, tuple) and len(R.shape) == len(B.shape)
        for k in range(B.rank):
            assert R[k].size == B[k].size


@given(layouts(max_depth=2), st.data())
def test_composition_by_mode(A: Layout, data: st.DataObject) -> None:
    if not isinstance(A.shape, tuple) or A.rank == 0:
        return
    n = data.draw(st.integers(1, A.rank))
    tiler = tuple(data.draw(sub_layouts(A[k].size)) for k in range(n))
    R = _attempt(lambda: composition(A, tiler), "composition by mode")
    if R is None:
        return
    for k in range(n):
        assert R[k] == composition(A[k], tiler[k])
    for k in range(n, A.rank):
        assert R[k] == A[k]


# --------------------------------------------------------------------------------------------
# complement


def _check_complement(A: Layout, R: Layout, m: int) -> None:
    rd = R.flat_stride
    assert list(rd) == sorted(rd)
    assert len(set(_values(R))) == R.size  # injective
    keep = [(s, d) for s, d in zip(A.flat_shape, A.flat_stride, strict=True) if s != 1 and d != 0]
    a_prime = Layout(tuple(s for s, _ in keep), tuple(d for _, d in keep))
    image_a = set(_values(a_prime))
    assert not (image_a & set(_values(R))) - {0}
    both = make_layout(a_prime, R)
    assert sorted(_values(both)) == list(range(both.size))
    assert both.size >= m
    # Minimal: the smallest multiple of A's span (its largest leaf's extent) that reaches m.
    span = max((s * d for s, d in keep), default=1)
    assert both.size % span == 0
    assert both.size == span or both.size - span < m


@given(layouts(kind="permuted"), st.integers(1, 600))
def test_complement_of_injective_layouts(A: Layout, m: int) -> None:
    """Permuted compact layouts with gaps always have a complement."""
    _check_complement(A, complement(A, m), m)


@given(layouts(kind="arbitrary"), st.integers(1, 600))
def test_complement_of_arbitrary_layouts(A: Layout, m: int) -> None:
    R = _attempt(lambda: complement(A, m), "complement")
    if R is not None:
        _check_complement(A, R, m)


# --------------------------------------------------------------------------------------------
# divide and product


@given(layouts(), st.data())
def test_logical_divide(A: Layout, data: st.DataObject) -> None:
    B = data.draw(sub_layouts(A.size))
    R = _attempt(lambda: logical_divide(A, B), "logical_divide")
    if R is None:
        return
    C = complement(B, A.size)
    assert R == composition(A, make_layout(B, C))
    assert R[0].size == B.size
    for t in range(B.size):
        for r in range(C.size):
            assert R((t, r)) == A(B(t) + C(r))


@given(layouts(max_depth=2), st.data())
def test_divides_by_mode(A: Layout, data: st.DataObject) -> None:
    if not isinstance(A.shape, tuple) or A.rank == 0:
        return
    n = data.draw(st.integers(1, A.rank))
    tiler = tuple(data.draw(sub_layouts(A[k].size)) for k in range(n))
    R = _attempt(lambda: logical_divide(A, tiler), "logical_divide by mode")
    if R is None:
        return
    for k in range(n):
        assert R[k] == logical_divide(A[k], tiler[k])
    Z = zipped_divide(A, tiler)
    rest = [R[k][1] for k in range(n)] + [R[k] for k in range(n, A.rank)]
    assert Z == make_layout(make_layout(*(R[k][0] for k in range(n))), make_layout(*rest))


@given(layouts(max_depth=2, kind="permuted"), layouts(max_depth=2))
def test_logical_product(A: Layout, B: Layout) -> None:
    if A.size * B.size > 4096:
        return
    R = _attempt(lambda: logical_product(A, B), "logical_product")
    if R is None:
        return
    assert R[0] == A
    assert R[1] == composition(complement(A, A.size * B.cosize), B)
    assert R.size == A.size * B.size


# --------------------------------------------------------------------------------------------
# inverses


@given(layouts())
def test_right_inverse(A: Layout) -> None:
    R = right_inverse(A)
    for i in range(R.size):
        assert A(R(i)) == i
    # Maximal along the stride chain: the next index is not reached by a stride-matching leaf.
    c = coalesce(A)
    assert R.size not in {d for d, s in zip(c.flat_stride, c.flat_shape, strict=True) if s > 1}


@given(layouts())
def test_left_inverse(A: Layout) -> None:
    R = _attempt(lambda: left_inverse(A), "left_inverse")
    if R is None:
        # Rejected: then the layout really is not injective, or the construction cannot apply.
        return
    for i in range(A.size):
        assert R(A(i)) == i


@given(layouts(kind="permuted"))
def test_left_inverse_exists_for_injective_compact_layouts(A: Layout) -> None:
    """Permuted compact layouts with gaps are injective and their strides divide: never reject."""
    R = left_inverse(A)
    for i in range(A.size):
        assert R(A(i)) == i

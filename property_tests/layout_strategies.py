"""Hypothesis strategies for layouts: depth <= 3, leaf sizes 1-12, small total sizes.

The strides mix three families so that the algebra's admissible cases are common:
compact (column- or row-major), permuted compact with gaps, and arbitrary small strides
(0 and 1 included).
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from cute_shard.layout import IntTuple, Layout, flatten, product, unflatten

MAX_LEAVES = 5
MAX_SIZE = 2048


@st.composite
def int_tuples(draw: st.DrawFn, max_depth: int = 3, max_leaf: int = 12) -> IntTuple:
    """An IntTuple shape of depth <= max_depth with at most MAX_LEAVES leaves."""
    budget = [MAX_LEAVES]

    def build(d: int) -> IntTuple:
        if d == 0 or budget[0] <= 1 or draw(st.booleans()):
            budget[0] -= 1
            return draw(st.integers(1, max_leaf))
        n = draw(st.integers(1, min(3, budget[0])))
        return tuple(build(d - 1) for _ in range(n))

    top = draw(st.integers(0, max_depth))
    return build(top)


def _shape_strategy(max_depth: int) -> st.SearchStrategy[IntTuple]:
    return int_tuples(max_depth=max_depth).filter(lambda s: product(s) <= MAX_SIZE)


@st.composite
def layouts(draw: st.DrawFn, max_depth: int = 3, kind: str | None = None) -> Layout:
    """A Layout; ``kind`` forces 'compact', 'permuted' or 'arbitrary' strides."""
    shape = draw(_shape_strategy(max_depth))
    leaves = flatten(shape)
    kind = kind or draw(st.sampled_from(["compact", "permuted", "arbitrary"]))
    if kind == "compact":
        strides = _compact(leaves, draw(st.booleans()))
    elif kind == "permuted":
        order = draw(st.permutations(range(len(leaves))))
        gaps = draw(
            st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=len(leaves), max_size=len(leaves))
        )
        strides = [0] * len(leaves)
        acc = 1
        for k, g in zip(order, gaps, strict=True):
            acc *= g
            strides[k] = acc
            acc *= leaves[k]
    else:
        strides = draw(st.lists(st.integers(0, 40), min_size=len(leaves), max_size=len(leaves)))
    return Layout(
        shape, unflatten(tuple(strides), shape) if isinstance(shape, tuple) else strides[0]
    )


def _compact(leaves: tuple[int, ...], row_major: bool) -> list[int]:
    order = range(len(leaves) - 1, -1, -1) if row_major else range(len(leaves))
    strides = [0] * len(leaves)
    acc = 1
    for k in order:
        strides[k] = acc
        acc *= leaves[k]
    return strides


@st.composite
def sub_layouts(draw: st.DrawFn, size: int) -> Layout:
    """A layout B whose image mostly stays inside [0, size): a composition right operand.

    Built from the divisor chain of ``size``, so admissible compositions are common; with a
    small chance a fully arbitrary layout instead, to reach the rejections too.
    """
    if draw(st.integers(0, 9)) == 0:
        return draw(layouts(max_depth=2))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    shapes: list[int] = []
    strides: list[int] = []
    stride = rng.choice([d for d in range(1, size + 1) if size % d == 0])
    left = size // stride
    for _ in range(rng.randint(1, 3)):
        divisors = [d for d in range(1, left + 1) if left % d == 0]
        s = rng.choice(divisors)
        shapes.append(s)
        strides.append(stride)
        stride *= s * rng.choice([1, 1, 2])
        left = max(1, left // s)
    if rng.random() < 0.5:
        perm = list(range(len(shapes)))
        rng.shuffle(perm)
        shapes = [shapes[p] for p in perm]
        strides = [strides[p] for p in perm]
    if len(shapes) == 1:
        return Layout(shapes[0], strides[0])
    return Layout(tuple(shapes), tuple(strides))

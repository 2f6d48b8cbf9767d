"""IntTuple: an ``int`` or a (possibly nested) tuple of IntTuples, as in CuTe.

Shapes, strides and coordinates are IntTuples. Every function here is pure and works on plain
Python ints and tuples; none imports anything outside the standard library.

Coordinates are **colexicographic** (CuTe's convention): the first mode varies fastest. For the
shape ``(2, 3)`` the flat indices 0..5 are the coordinates
``(0,0) (1,0) (0,1) (1,1) (0,2) (1,2)``.

Worked example::

    >>> flatten((2, (3, 4)))
    (2, 3, 4)
    >>> prefix_product((2, (3, 4)))
    (1, (2, 6))
    >>> idx2crd(5, (2, 3))
    (1, 2)
    >>> crd2idx((1, 2), (2, 3))
    5
    >>> shape_div((4, 6), 8)
    (1, 3)
"""

from __future__ import annotations

from typing import TypeAlias, TypeGuard

IntTuple: TypeAlias = "int | tuple[IntTuple, ...]"

__all__ = [
    "IntTuple",
    "ceil_div",
    "compact_col_major",
    "compact_row_major",
    "congruent",
    "crd2idx",
    "depth",
    "flatten",
    "idx2crd",
    "is_int",
    "is_tuple",
    "parse_inttuple",
    "prefix_product",
    "product",
    "rank",
    "shape_div",
    "suffix_product",
    "unflatten",
]


def is_int(x: object) -> TypeGuard[int]:
    """True for a Python int (bool excluded: ``True`` is not a size)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_tuple(x: object) -> bool:
    return isinstance(x, tuple)


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of ``t`` in order. ``flatten(3) == (3,)``, ``flatten(()) == ()``."""
    if not isinstance(t, tuple):
        return (t,)
    # Depth-1 tuples are by far the most common; they need no walk.
    for x in t:
        if isinstance(x, tuple):
            break
    else:
        return t  # type: ignore[return-value]  # (the loop found no nested tuple)
    out: list[int] = []
    stack = [iter(t)]
    while stack:
        for x in stack[-1]:
            if isinstance(x, tuple):
                stack.append(iter(x))
                break
            out.append(x)
        else:
            stack.pop()
    return tuple(out)


def unflatten(flat: tuple[int, ...], profile: IntTuple) -> IntTuple:
    """Rebuild ``flat`` with the nesting of ``profile`` (the inverse of ``flatten``).

    Pre: ``len(flat) == len(flatten(profile))``. Post: ``flatten(result) == flat`` and
    ``congruent(result, profile)``.
    """
    leaves = iter(flat)

    def build(p: IntTuple) -> IntTuple:
        if isinstance(p, tuple):
            return tuple(build(x) for x in p)
        return next(leaves)

    n_flat, n_prof = len(flat), len(flatten(profile))
    if n_flat != n_prof:
        raise ValueError(f"unflatten: profile {profile} has {n_prof} leaves, got {n_flat} values")
    return build(profile)


def rank(t: IntTuple) -> int:
    """Number of top-level modes: ``len(t)`` for a tuple, 1 for an int."""
    return len(t) if isinstance(t, tuple) else 1


def depth(t: IntTuple) -> int:
    """Nesting depth: 0 for an int, 1 for a flat tuple, 1 + max child depth otherwise."""
    if not isinstance(t, tuple):
        return 0
    return 1 + max((depth(x) for x in t), default=0)


def product(t: IntTuple) -> int:
    """Product of all leaves (1 for the empty tuple)."""
    p = 1
    for x in flatten(t):
        p *= x
    return p


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """True when ``a`` and ``b`` have the same nesting structure (ints match ints)."""
    if isinstance(a, tuple):
        return (
            isinstance(b, tuple)
            and len(a) == len(b)
            and all(congruent(x, y) for x, y in zip(a, b, strict=True))
        )
    return not isinstance(b, tuple)


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, ``b > 0``."""
    return -(-a // b)


def prefix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive prefix product, congruent with ``t``: the compact column-major strides.

    ``prefix_product((2, (3, 4))) == (1, (2, 6))``; ``prefix_product(5) == 1``.
    """
    flat = flatten(t)
    out = []
    acc = init
    for x in flat:
        out.append(acc)
        acc *= x
    return unflatten(tuple(out), t) if isinstance(t, tuple) else out[0]


def suffix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive suffix product, congruent with ``t``: the compact row-major strides.

    ``suffix_product((2, (3, 4))) == (12, (4, 1))``; ``suffix_product(5) == 1``.
    """
    flat = flatten(t)
    out = [0] * len(flat)
    acc = init
    for i in range(len(flat) - 1, -1, -1):
        out[i] = acc
        acc *= flat[i]
    return unflatten(tuple(out), t) if isinstance(t, tuple) else out[0]


compact_col_major = prefix_product
compact_row_major = suffix_product


def idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    """The colexicographic coordinate of flat index ``idx`` in ``shape``, congruent with it.

    As in CuTe, the last leaf is not reduced modulo its size, so an index at or past
    ``product(shape)`` extends along the last mode: ``idx2crd(7, (2, 3)) == (1, 3)``.
    """
    flat = flatten(shape)
    crd = []
    for s in flat[:-1]:
        idx, r = divmod(idx, s)
        crd.append(r)
    crd.append(idx)
    return unflatten(tuple(crd), shape) if isinstance(shape, tuple) else crd[0]


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple | None = None) -> int:
    """Map a coordinate to an index: the inner product of coordinate and ``stride``.

    ``stride`` defaults to the compact column-major strides of ``shape``, so
    ``crd2idx(idx2crd(i, s), s) == i``. A coordinate may be coarser than the shape: an int
    given for a tuple mode is that mode's own flat (colexicographic) index, e.g.
    ``crd2idx((1, 5), (2, (3, 4)))`` treats 5 as ``(2, 1)`` inside ``(3, 4)``.
    """
    if stride is None:
        stride = prefix_product(shape)
    if isinstance(crd, tuple):
        if not isinstance(shape, tuple) or len(crd) != len(shape):
            raise ValueError(f"coordinate {crd} does not match shape {shape}")
        # stride is congruent with shape, so a tuple here too
        return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride, strict=True))  # type: ignore[arg-type, misc]
    # An int coordinate for a (possibly nested) mode: split it colexicographically.
    flat_s, flat_d = flatten(shape), flatten(stride)
    total = 0
    for s, d in zip(flat_s[:-1], flat_d[:-1], strict=True):
        crd, r = divmod(crd, s)
        total += r * d
    return total + crd * flat_d[-1]


def shape_div(a: IntTuple, b: int) -> IntTuple:
    """CuTe's ``shape_div``: divide shape ``a`` by ``b``, consuming its modes left to right.

    Each leaf ``x`` is divided by what is left of ``b``: ``x // b`` when ``b`` divides ``x``
    (then ``b`` is used up), ``1`` when ``x`` divides ``b`` (then ``b //= x``).
    ``shape_div((4, 6), 8) == (1, 3)``. Raises ValueError when neither divides the other.
    """
    if isinstance(a, tuple):
        out = []
        for x in a:
            out.append(shape_div(x, b))
            b = _div_either(b, product(x))
        return tuple(out)
    return _div_either(a, b)


def _div_either(a: int, b: int) -> int:
    if b != 0 and a % b == 0:
        return a // b
    if a != 0 and b % a == 0:
        return 1 if a > 0 else -1
    raise ValueError(f"shape_div: neither {a} nor {b} divides the other")


def parse_inttuple(text: str) -> IntTuple:
    """Read CuTe notation: ``"(2,(3,4))"`` → ``(2, (3, 4))``; ``"6"`` → ``6``; ``"(6)"`` → ``(6,)``.

    Raises ValueError pointing at the first character that does not fit.
    """
    s = text.replace(" ", "")
    pos = 0

    def fail(what: str) -> ValueError:
        return ValueError(f"cannot read IntTuple {text!r}: {what} at position {pos}")

    def parse() -> IntTuple:
        nonlocal pos
        if pos < len(s) and s[pos] == "(":
            pos += 1
            items: list[IntTuple] = []
            if pos < len(s) and s[pos] == ")":
                pos += 1
                return ()
            while True:
                items.append(parse())
                if pos < len(s) and s[pos] == ",":
                    pos += 1
                elif pos < len(s) and s[pos] == ")":
                    pos += 1
                    return tuple(items)
                else:
                    raise fail("expected ',' or ')'")
        start = pos
        if pos < len(s) and s[pos] == "-":
            pos += 1
        while pos < len(s) and s[pos].isdigit():
            pos += 1
        if start == pos or s[start:pos] == "-":
            raise fail("expected an integer or '('")
        return int(s[start:pos])

    result = parse()
    if pos != len(s):
        raise fail("unexpected trailing text")
    return result

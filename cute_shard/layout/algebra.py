"""CuTe's layout algebra: coalesce, composition, complement, divide, product, inverses.

Every function has CuTe's name and argument order, returns a new ``Layout`` and states its
contract as Pre/Post predicates that the tests check over every coordinate. Where CuTe's
divisibility conditions fail, the function raises ``ValueError`` naming the condition, so an
answer is never a function other than the one the Post line promises.

A layout ``A`` is evaluated as CuTe does (see ``layout.py``): an index past ``size(A)`` extends
along the last mode. Composition relies on that: ``A ∘ B`` is defined even when ``B`` reaches
past ``size(A)``.

Worked examples (CuTe notation)::

    coalesce((2,(1,6)):(1,(6,2)))         = 12:1
    (6,2):(2,1) ∘ 3:2                      = 3:4
    complement((2,2):(1,6), 24)            = (3,2):(2,12)
    logical_divide((8,4):(4,1), 2:1)       = (2,(4,4)):(4,(8,1))
    logical_product((2,2):(4,1), 6:1)      = ((2,2),(2,3)):((4,1),(2,8))
    right_inverse((4,2):(2,1))             = (2,4):(4,1)
"""

from __future__ import annotations

from functools import lru_cache
from itertools import pairwise
from typing import TypeAlias

from .inttuple import IntTuple, ceil_div, is_int, product
from .layout import Layout, make_layout

__all__ = [
    "Tiler",
    "coalesce",
    "complement",
    "composition",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "right_inverse",
    "zipped_divide",
]

# A tiler is a Layout, a size n (the layout n:1), or a tuple of tilers applied mode by mode.
Tiler: TypeAlias = "Layout | int | tuple[Tiler, ...]"


# --------------------------------------------------------------------------------------------
# coalesce


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """Merge the modes of ``layout`` that can be merged, keeping the same function.

    With a tuple ``profile``, mode ``i`` is coalesced with ``profile[i]`` (modes past the
    profile are kept unchanged) and the result keeps one top-level mode per input mode.

    Pre: ``profile`` is None, an int, or a tuple no longer than ``layout.rank``.
    Post: ``R.size == L.size``; ``R(i) == L(i)`` for every ``0 <= i < size``; without a tuple
    profile ``R.depth <= 1`` and no two adjacent modes of R merge (``s_k * d_k != d_{k+1}``) and
    no mode of R has size 1 unless R is ``1:0``; with a tuple profile,
    ``R[i] == coalesce(L[i], profile[i])``.

    Example: ``coalesce((2,(1,6)):(1,(6,2))) = 12:1``.
    """
    if isinstance(profile, tuple):
        if len(profile) > layout.rank:
            raise ValueError(
                f"coalesce: profile {profile} has more modes than layout {layout} "
                f"(rank {layout.rank})"
            )
        modes = [coalesce(layout[i], p) for i, p in enumerate(profile)]
        modes += [layout[i] for i in range(len(profile), layout.rank)]
        return make_layout(*modes)
    shapes, strides = _coalesce_flat(layout.flat_shape, layout.flat_stride)
    if not shapes:
        return Layout._trusted(1, 0, (1,), (0,))
    return Layout.from_flat(shapes, strides)


@lru_cache(maxsize=4096)
def _coalesce_flat(
    shape: tuple[int, ...], stride: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Drop size-1 leaves and merge ``(s0:d0, s1:d1)`` into ``s0*s1:d0`` when ``s0*d0 == d1``."""
    out_s: list[int] = []
    out_d: list[int] = []
    for s, d in zip(shape, stride, strict=True):
        if s == 1:
            continue
        if out_s and out_s[-1] * out_d[-1] == d:
            out_s[-1] *= s
        else:
            out_s.append(s)
            out_d.append(d)
    return tuple(out_s), tuple(out_d)


# --------------------------------------------------------------------------------------------
# composition


def composition(a: Layout, b: Tiler) -> Layout:
    """The layout ``R = A ∘ B`` with ``R(c) == A(B(c))`` for every coordinate of ``B``.

    ``B`` may be a Layout; an int ``n`` (the layout ``n:1``); or a tuple of those, applied
    mode by mode (``R[i] = A[i] ∘ B[i]``; modes of A past the tuple are kept).

    Pre (CuTe's divisibility conditions, checked leaf by leaf of A for each leaf ``s:d`` of B,
    ``d`` being what is left of the stride): ``d`` is a multiple of the A-leaf's size, or the
    size is a multiple of ``d``, or (d below the size) all remaining elements of B fit inside
    that leaf; and what is left of ``s`` is a multiple of the part taken from the leaf.
    Otherwise ValueError names the failing condition.
    Post: ``R.size == B.size``; ``R(i) == A(B(i))`` for every ``0 <= i < B.size``; R's shape
    has B's top-level structure (each leaf of B becomes a coalesced sub-layout).

    Example: ``(6,2):(2,1) ∘ 3:2 = 3:4``.
    """
    if isinstance(b, tuple):
        if len(b) > a.rank:
            raise ValueError(
                f"composition: by-mode tiler has {len(b)} modes but layout {a} has rank {a.rank}"
            )
        modes = [composition(a[i], t) for i, t in enumerate(b)]
        modes += [a[i] for i in range(len(b), a.rank)]
        return make_layout(*modes)
    if is_int(b):
        b = Layout._trusted(b, 1, (b,), (1,))
    elif not isinstance(b, Layout):
        raise ValueError(f"composition: expected a Layout, an int or a tuple, got {b!r}")
    a_shape, a_stride = _merge_keep_last(a.flat_shape, a.flat_stride)
    if not isinstance(b.shape, tuple):
        return _compose_leaf(a_shape, a_stride, b.shape, b.stride, a, b)
    # B has modes: compose each leaf and rebuild B's nesting around the results.
    leaves = iter(
        _compose_leaf(a_shape, a_stride, s, d, a, b)
        for s, d in zip(b.flat_shape, b.flat_stride, strict=True)
    )
    return _rebuild(b.shape, leaves)


def _rebuild(profile: IntTuple, leaves: object) -> Layout:
    """Nest the layouts of ``leaves`` (one per leaf of ``profile``) like ``profile``."""
    if isinstance(profile, tuple):
        return make_layout(*(_rebuild(p, leaves) for p in profile))
    return next(leaves)  # type: ignore[call-overload, no-any-return]


@lru_cache(maxsize=4096)
def _merge_keep_last(
    shape: tuple[int, ...], stride: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Coalesce while keeping the function past the size: the last leaf keeps its stride.

    Merging ``s0:d0, s1:d1`` with ``s0*d0 == d1`` preserves the extended function, and so does
    dropping an inner size-1 leaf; dropping the *last* size-1 leaf would not (past the size,
    the layout extends along that leaf's stride), so it stays.
    """
    if not shape:
        return (1,), (0,)
    out_s: list[int] = []
    out_d: list[int] = []
    last = len(shape) - 1
    for k, (s, d) in enumerate(zip(shape, stride, strict=True)):
        if s == 1 and k != last:
            continue
        if out_s and out_s[-1] * out_d[-1] == d:
            out_s[-1] *= s
        else:
            out_s.append(s)
            out_d.append(d)
    return tuple(out_s), tuple(out_d)


def _compose_leaf(
    a_shape: tuple[int, ...],
    a_stride: tuple[int, ...],
    s: int,
    d: int,
    a: Layout,
    b: Layout,
) -> Layout:
    shapes, strides = _compose_leaf_flat(a_shape, a_stride, s, d)
    if shapes is None:
        raise ValueError(f"composition {a} ∘ {b} is not admissible: {strides}")
    return coalesce(Layout.from_flat(shapes, strides))


@lru_cache(maxsize=8192)
def _compose_leaf_flat(
    a_shape: tuple[int, ...], a_stride: tuple[int, ...], s: int, d: int
) -> tuple[tuple[int, ...], tuple[int, ...]] | tuple[None, str]:
    """``A ∘ s:d`` on flat leaves of A; ``(None, reason)`` when it is not admissible.

    Walk A's leaves: a leaf of size ``n`` that the remaining stride ``d`` steps over entirely
    (``n`` divides ``d``) is skipped; otherwise the leaf contributes ``min(n/d, s)`` elements at
    stride ``d * stride_leaf`` and the walk continues with stride 1 in the next leaf.
    """
    if d == 0:
        return (s,), (0,)
    # A negative stride walks B backwards: compose with |d| and negate the resulting strides.
    sign = -1 if d < 0 else 1
    d = abs(d)
    out_s: list[int] = []
    out_d: list[int] = []
    last = len(a_shape) - 1
    for k in range(last):
        n = a_shape[k]
        if d % n == 0:
            d //= n
            continue
        if d > n:
            return None, (
                f"stride divisibility: remaining stride {d} is neither a multiple of nor "
                f"smaller than size {n} of leaf {k}"
            )
        if s == 1:
            break
        take = ceil_div(n, d)
        if n % d != 0:
            # d does not divide n: stepping by d wraps into the next leaf at an offset, which a
            # layout cannot express unless every remaining element lies inside this leaf.
            if take < s:
                return None, (
                    f"stride divisibility: stride {d} does not divide size {n} of leaf {k} "
                    f"and {s} elements do not fit inside it"
                )
            out_s.append(s)
            out_d.append(d * a_stride[k])
            s, d = 1, 1
            break
        if take >= s:
            out_s.append(s)
            out_d.append(d * a_stride[k])
            s, d = 1, 1
            break
        if s % take != 0:
            return None, (
                f"shape divisibility: {take} elements fit in leaf {k} (size {n}, stride {d}) "
                f"but {take} does not divide the remaining {s}"
            )
        out_s.append(take)
        out_d.append(d * a_stride[k])
        s //= take
        d = 1
    else:
        out_s.append(s)
        out_d.append(d * a_stride[last])
    if not out_s:
        out_s, out_d = [s], [d * a_stride[last]]
    return tuple(out_s), tuple(sign * x for x in out_d)


# --------------------------------------------------------------------------------------------
# complement


def complement(a: Layout, cotarget: IntTuple | None = None) -> Layout:
    """The layout of the indices ``A`` does not reach, up to ``cotarget``.

    Pre: ``A`` is injective on its non-zero-stride, non-size-1 leaves, and sorting those leaves
    by stride, each stride is a multiple of ``size * stride`` of the leaf before it (else
    ValueError); ``cotarget`` is an int or a shape (its product is used), default
    ``A.cosize``.
    Post: R's strides are increasing and R is injective; ``R(j)`` is never ``A(i)`` for
    ``(i, j) != (0, 0)``; the concatenation ``(A', R)`` of A's non-degenerate leaves with R is a
    bijection onto ``[0, size(A') * size(R))`` and ``size(A') * size(R) >= cotarget``;
    ``R.size == ceil(cotarget / size(A'))`` rounded up to whole tiles of A'.

    Example: ``complement((2,2):(1,6), 24) = (3,2):(2,12)``.
    """
    if cotarget is None:
        m = a.cosize
    elif is_int(cotarget):
        m = cotarget
    else:
        m = product(cotarget)
    result = _complement_flat(a.flat_shape, a.flat_stride, m)
    if isinstance(result[0], str):
        raise ValueError(f"complement({a}, {m}) does not exist: {result[0]}")
    shapes, strides = result
    return coalesce(Layout.from_flat(shapes, strides))  # type: ignore[arg-type]


@lru_cache(maxsize=4096)
def _complement_flat(
    shape: tuple[int, ...], stride: tuple[int, ...], cotarget: int
) -> tuple[tuple[int, ...], tuple[int, ...]] | tuple[str, None]:
    modes = sorted((d, s) for s, d in zip(shape, stride, strict=True) if s != 1 and d != 0)
    out_s: list[int] = []
    out_d: list[int] = []
    reached = 1  # one past the largest contiguous block covered so far, in units of index
    for d, s in modes:
        if d % reached != 0:
            return (
                f"stride {d} is not a multiple of {reached}, the extent of the smaller modes "
                f"(the layout is not injective or leaves gaps a layout cannot fill)",
                None,
            )
        out_s.append(d // reached)
        out_d.append(reached)
        reached = s * d
    out_s.append(ceil_div(cotarget, reached))
    out_d.append(reached)
    return tuple(out_s), tuple(out_d)


# --------------------------------------------------------------------------------------------
# divide and product


def logical_divide(a: Layout, tiler: Tiler) -> Layout:
    """Split ``A`` into (tile, rest): ``A ∘ (B, complement(B, size(A)))``.

    With a tuple tiler, mode ``i`` of A is divided by ``tiler[i]`` (modes past it are kept).
    The first mode of each result is "the tile" (for a Shard: the local part), the second is
    "which tile" (for a Shard: the mesh coordinate).

    Pre: ``complement(B, size(A))`` exists and the composition is admissible (else ValueError).
    Post: ``R == composition(A, make_layout(B, complement(B, size(A))))``; ``R.size ==
    A.size`` when B's tiles cover A exactly; ``R(t, r) == A(B(t) + C(r))`` with C the
    complement.

    Example: ``logical_divide((8,4):(4,1), 2:1) = (2,(4,4)):(4,(8,1))``.
    """
    if isinstance(tiler, tuple):
        return _by_mode(a, tiler, logical_divide, "logical_divide")
    b = _as_layout(tiler, "logical_divide")
    return composition(a, make_layout(b, complement(b, a.size)))


def zipped_divide(a: Layout, tiler: Tiler) -> Layout:
    """``logical_divide`` with the tiles gathered in mode 0 and the rests in mode 1.

    For a Layout tiler this is ``logical_divide``. For a tuple tiler of rank k, the result is
    ``((tile_0, ..., tile_k-1), (rest_0, ..., rest_k-1, modes of A past k...))``.

    Pre: as logical_divide; tiler elements are Layouts or ints (no nested tuples).
    Post: ``R(( t ), ( r )) == logical_divide(A, tiler)`` at the unzipped coordinates.

    Example: ``zipped_divide((4,6):(6,1), (2,3)) = ((2,3),(2,2)):((6,1),(12,3))``.
    """
    divided = logical_divide(a, tiler)
    if not isinstance(tiler, tuple):
        return divided
    if any(isinstance(t, tuple) for t in tiler):
        raise ValueError("zipped_divide: nested tuple tilers are not supported; flatten the tiler")
    k = len(tiler)
    tiles = [divided[i][0] for i in range(k)]
    rests = [divided[i][1] for i in range(k)] + [divided[i] for i in range(k, divided.rank)]
    return make_layout(make_layout(*tiles), make_layout(*rests))


def logical_product(a: Layout, b: Tiler) -> Layout:
    """Repeat ``A`` over the layout ``B``: ``(A, complement(A, size(A)*cosize(B)) ∘ B)``.

    With a tuple ``b``, mode ``i`` of A is multiplied by ``b[i]``.

    Pre: the complement exists and the composition is admissible (else ValueError).
    Post: ``R[0] == A``; ``R[1] == composition(complement(A, A.size * B.cosize), B)``;
    ``R.size == A.size * B.size``.

    Example: ``logical_product((2,2):(4,1), 6:1) = ((2,2),(2,3)):((4,1),(2,8))``.
    """
    if isinstance(b, tuple):
        return _by_mode(a, b, logical_product, "logical_product")
    bl = _as_layout(b, "logical_product")
    return make_layout(a, composition(complement(a, a.size * bl.cosize), bl))


def _by_mode(a: Layout, tiler: tuple[Tiler, ...], op: object, name: str) -> Layout:
    if len(tiler) > a.rank:
        raise ValueError(f"{name}: by-mode tiler has {len(tiler)} modes, layout {a} has {a.rank}")
    modes = [op(a[i], t) for i, t in enumerate(tiler)]  # type: ignore[operator]
    modes += [a[i] for i in range(len(tiler), a.rank)]
    return make_layout(*modes)


def _as_layout(t: Tiler, name: str) -> Layout:
    if isinstance(t, Layout):
        return t
    if is_int(t):
        return Layout._trusted(t, 1, (t,), (1,))  # type: ignore[arg-type]
    raise ValueError(f"{name}: expected a Layout, an int or a tuple of them, got {t!r}")


# --------------------------------------------------------------------------------------------
# inverses


def right_inverse(a: Layout) -> Layout:
    """The largest ``R`` with ``A(R(i)) == i`` for every ``0 <= i < R.size``.

    Starting from stride 1, follow the leaves of ``coalesce(A)`` whose stride is the extent
    reached so far; R maps i back to A's flat index.

    Pre: none (a layout with no stride-1 leaf gives ``1:0``).
    Post: ``A(R(i)) == i`` for ``0 <= i < R.size``; ``R.size`` is the largest n such that
    ``[0, n)`` is reached contiguously this way.

    Example: ``right_inverse((4,2):(2,1)) = (2,4):(4,1)``.
    """
    c = coalesce(a)
    shape, stride = c.flat_shape, c.flat_stride
    colex = [1] * len(shape)
    for k in range(1, len(shape)):
        colex[k] = colex[k - 1] * shape[k - 1]
    out_s: list[int] = []
    out_d: list[int] = []
    want = 1
    while True:
        k = next((k for k, d in enumerate(stride) if abs(d) == want and shape[k] != 1), None)
        if k is None:
            break
        out_s.append(shape[k])
        out_d.append(colex[k] if stride[k] > 0 else -colex[k])
        want *= shape[k]
    if not out_s:
        return Layout._trusted(1, 0, (1,), (0,))
    return Layout.from_flat(tuple(out_s), tuple(out_d))


def left_inverse(a: Layout) -> Layout:
    """An ``R`` with ``R(A(i)) == i`` for every ``0 <= i < A.size``.

    Sort the leaves of ``coalesce(A)`` by stride ``d_0 < d_1 < ...``; R reads an index in the
    mixed radix ``(d_0, d_1/d_0, ..., d_n-1/d_n-2, s_n-1)``, drops the first digit (stride 0)
    and sends digit ``j+1`` to leaf j's place in A's colexicographic domain.

    Pre: A is injective in this sense: strides are >= 0, every leaf of size > 1 has a stride
    > 0, ``d_j`` divides ``d_j+1`` and ``s_j * d_j <= d_j+1`` (else ValueError).
    Post: ``R(A(i)) == i`` for ``0 <= i < A.size``.

    Example: ``left_inverse((4,2):(2,1)) = (2,4):(4,1)``.
    """
    c = coalesce(a)
    shape, stride = c.flat_shape, c.flat_stride
    if c.size == 1:
        return Layout._trusted(1, 0, (1,), (0,))
    colex = [1] * len(shape)
    for k in range(1, len(shape)):
        colex[k] = colex[k - 1] * shape[k - 1]
    modes = sorted(zip(stride, shape, colex, strict=True))
    if modes[0][0] <= 0:
        raise ValueError(
            f"left_inverse({a}): a leaf of size {modes[0][1]} has stride {modes[0][0]}; "
            "the layout is not injective (or walks backwards), so no left inverse exists"
        )
    out_s = [modes[0][0]]
    out_d = [0]
    for (d, s, col), (d_next, _, _) in pairwise(modes):
        if d_next % d != 0 or s * d > d_next:
            raise ValueError(
                f"left_inverse({a}): the leaf {s}:{d} and the next stride {d_next} overlap or "
                f"do not divide ({d_next} % {d} = {d_next % d}, {s}*{d} > {d_next}: "
                f"{s * d > d_next}); no layout inverts it"
            )
        out_s.append(d_next // d)
        out_d.append(col)
    d, s, col = modes[-1]
    out_s.append(s)
    out_d.append(col)
    return coalesce(Layout.from_flat(tuple(out_s), tuple(out_d)))

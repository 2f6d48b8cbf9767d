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

from collections.abc import Callable, Iterator
from functools import lru_cache
from itertools import pairwise
from typing import TypeAlias

from .inttuple import IntTuple, is_int, product
from .layout import Layout, concat

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
# Internal form. The operations below work on flat leaf tuples and build one Layout per result:
# on the propagation hot path, intermediate Layout objects are most of the cost.

_ONE = Layout._trusted(1, 0, (1,), (0,))


def _from_flat(shape: tuple[int, ...], stride: tuple[int, ...]) -> Layout:
    if not shape:
        return _ONE
    if len(shape) == 1:
        return Layout._trusted(shape[0], stride[0], shape, stride)
    return Layout._trusted(shape, stride, shape, stride)


def _coalesce_flat(
    shape: tuple[int, ...], stride: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Drop size-1 leaves and merge ``(s0:d0, s1:d1)`` into ``s0*s1:d0`` when ``s0*d0 == d1``."""
    if len(shape) == 1 and shape[0] != 1:
        return shape, stride
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
        return concat(modes)
    return _from_flat(*_coalesce_flat(layout.flat_shape, layout.flat_stride))


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
    has B's structure, each leaf of B becoming a coalesced sub-layout.

    Example: ``(6,2):(2,1) ∘ 3:2 = 3:4``.
    """
    if type(b) is not Layout:
        if isinstance(b, tuple):
            return _by_mode(a, b, composition, "composition")
        b = _as_layout(b, "composition")
    return _compose(a, b)


@lru_cache(maxsize=4096)
def _compose(a: Layout, b: Layout) -> Layout:
    return _compose_uncached(a, b)


def _compose_uncached(a: Layout, b: Layout) -> Layout:
    a_shape, a_stride = _merge_keep_last(a.flat_shape, a.flat_stride)
    if len(a_shape) == 1:
        # A single (unbounded) leaf is linear: A∘B is B with its strides scaled.
        return _scale(b, a_stride[0])
    if type(b.shape) is int:  # (and so is its stride)
        return _from_flat(*_compose_leaf(a_shape, a_stride, b.shape, b.stride, a, b))  # type: ignore[arg-type]
    # One coalesced sub-layout per leaf of B, nested like B. That is A∘B only if A adds up
    # over B's leaves, A(x + y) == A(x) + A(y): ``usage`` collects, per leaf of A, the largest
    # digit each B leaf puts there, and their sum must not carry into the next leaf.
    leaf_shapes: list[IntTuple] = []
    leaf_strides: list[IntTuple] = []
    flat_shape: list[int] = []
    flat_stride: list[int] = []
    usage = [0] * len(a_shape)
    for s, d in zip(b.flat_shape, b.flat_stride, strict=True):
        rs, rd = _compose_leaf(a_shape, a_stride, s, d, a, b, usage)
        if not rs:
            rs, rd = (1,), (0,)
        leaf_shapes.append(rs[0] if len(rs) == 1 else rs)
        leaf_strides.append(rd[0] if len(rd) == 1 else rd)
        flat_shape += rs
        flat_stride += rd
    for k in range(len(a_shape) - 1):
        if usage[k] >= a_shape[k]:
            raise _inadmissible(
                a,
                b,
                f"carry: B's modes together reach digit {usage[k]} of leaf {k} of size "
                f"{a_shape[k]}, so A is not additive over them and A∘B is no composition of "
                "B's modes",
            )
    shape: IntTuple
    stride: IntTuple
    if b.flat_shape is b.shape:  # B is flat: no nesting to rebuild
        shape, stride = tuple(leaf_shapes), tuple(leaf_strides)
    else:
        shape = _nest(iter(leaf_shapes), b.shape)
        stride = _nest(iter(leaf_strides), b.shape)
    return Layout._trusted(shape, stride, tuple(flat_shape), tuple(flat_stride))


def _scale(b: Layout, k: int) -> Layout:
    """B with every stride times k, each leaf coalesced on its own (size 1 becomes ``1:0``)."""
    fs, fd = b.flat_shape, b.flat_stride
    fd = tuple(0 if s == 1 else d * k for s, d in zip(fs, fd, strict=True))
    if type(b.shape) is int:
        return Layout._trusted(b.shape, fd[0], fs, fd)
    stride = fd if fs is b.shape else _nest(iter(fd), b.shape)
    return Layout._trusted(b.shape, stride, fs, fd)


def _nest(leaves: Iterator[IntTuple], profile: IntTuple) -> IntTuple:
    """Nest ``leaves`` (one per leaf of ``profile``) the way ``profile`` is nested."""
    out: list[IntTuple] = []
    for p in profile:  # type: ignore[union-attr]
        if type(p) is int:
            out.append(next(leaves))
        else:
            out.append(_nest(leaves, p))
    return tuple(out)


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
    if len(shape) == 1:
        return shape, stride
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
    usage: list[int] | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``A ∘ s:d`` on the flat leaves of A, coalesced; ValueError when not admissible.

    Walk A's leaves: a leaf of size ``n`` that the remaining stride ``d`` steps over entirely
    (``n`` divides ``d``) is skipped; otherwise the leaf contributes ``min(n/d, s)`` elements at
    stride ``d * stride_leaf`` and the walk continues with stride 1 in the next leaf. With
    ``usage``, the largest digit placed in each leaf of A (but the last) is added to it.
    """
    if d == 0 or len(a_shape) == 1:
        return _coalesce_flat((s,), (d * a_stride[0],))
    # A negative stride walks B backwards: compose with |d| and negate the resulting strides.
    sign = -1 if d < 0 else 1
    d = abs(d)
    if sign < 0 and usage is not None:
        raise _inadmissible(
            a,
            b,
            "a negative stride in a B of several modes over an A of several leaves "
            "(whether A adds up over B's modes is not decided for backward walks)",
        )
    out_s: list[int] = []
    out_d: list[int] = []
    last = len(a_shape) - 1
    for k in range(last):
        n = a_shape[k]
        if d % n == 0:
            d //= n
            continue
        if d > n:
            raise _inadmissible(
                a,
                b,
                f"stride divisibility: remaining stride {d} is neither a multiple of nor "
                f"smaller than size {n} of leaf {k}",
            )
        if s == 1:
            break
        take = -(-n // d)
        if take >= s:
            out_s.append(s)
            out_d.append(d * a_stride[k])
            if usage is not None:
                usage[k] += (s - 1) * d
            s = 1
            break
        if n % d != 0:
            # d does not divide n: stepping by d wraps into the next leaf at an offset, which a
            # layout cannot express unless every remaining element lies inside this leaf.
            raise _inadmissible(
                a,
                b,
                f"stride divisibility: stride {d} does not divide size {n} of leaf {k} "
                f"and {s} elements do not fit inside it",
            )
        if s % take != 0:
            raise _inadmissible(
                a,
                b,
                f"shape divisibility: {take} elements fit in leaf {k} (size {n}, stride "
                f"{d}) but {take} does not divide the remaining {s}",
            )
        out_s.append(take)
        out_d.append(d * a_stride[k])
        if usage is not None:
            usage[k] += (take - 1) * d
        s //= take
        d = 1
    else:
        out_s.append(s)
        out_d.append(d * a_stride[last])
    if not out_s:
        out_s.append(s)
        out_d.append(d * a_stride[last])
    if sign < 0:
        out_d = [-x for x in out_d]
    return _coalesce_flat(tuple(out_s), tuple(out_d))


def _inadmissible(a: Layout, b: Layout, why: str) -> ValueError:
    return ValueError(f"composition {a} ∘ {b} is not admissible: {why}")


# --------------------------------------------------------------------------------------------
# complement


def complement(a: Layout, cotarget: IntTuple | None = None) -> Layout:
    """The layout of the indices ``A`` does not reach, up to ``cotarget``.

    Pre: sorting A's leaves that have size > 1 and stride != 0 by stride, each stride is a
    multiple of ``size * stride`` of the leaf before it (so A is injective and its gaps are a
    layout; else ValueError); ``cotarget`` is an int or a shape (its product is used), default
    ``A.cosize``.
    Post: R's strides are increasing and R is injective; ``R(j)`` is never ``A(i)`` for
    ``(i, j) != (0, 0)``; the concatenation ``(A', R)`` of A's non-degenerate leaves with R is a
    bijection onto ``[0, N)`` where N is the smallest multiple of A's span (its largest leaf's
    ``size * stride``) that is ``>= cotarget``.

    Example: ``complement((2,2):(1,6), 24) = (3,2):(2,12)``.
    """
    if cotarget is None:
        m = a.cosize
    elif is_int(cotarget):
        m = cotarget
    else:
        m = product(cotarget)
    return _from_flat(*_complement_flat(a.flat_shape, a.flat_stride, m, a))


def _complement_flat(
    shape: tuple[int, ...], stride: tuple[int, ...], cotarget: int, a: Layout | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Coalesced flat leaves of ``complement``; ValueError when it does not exist."""
    if len(shape) == 1:  # the common case: a single leaf
        modes = [(stride[0], shape[0])] if shape[0] != 1 and stride[0] != 0 else []
    else:
        modes = sorted((d, s) for s, d in zip(shape, stride, strict=True) if s != 1 and d != 0)
    out_s: list[int] = []
    out_d: list[int] = []
    reached = 1  # the extent covered so far by A's smaller leaves and the gaps between them
    for d, s in modes:
        if d % reached != 0:
            who = a if a is not None else _from_flat(shape, stride)
            raise ValueError(
                f"complement({who}, {cotarget}) does not exist: stride {d} is not a multiple "
                f"of {reached}, the extent of the smaller modes (the layout is not injective "
                "or leaves gaps a layout cannot fill)"
            )
        if d != reached:
            out_s.append(d // reached)
            out_d.append(reached)
        reached = s * d
    out_s.append(-(-cotarget // reached))
    out_d.append(reached)
    return _coalesce_flat(tuple(out_s), tuple(out_d))


# --------------------------------------------------------------------------------------------
# divide and product


def logical_divide(a: Layout, tiler: Tiler) -> Layout:
    """Split ``A`` into (tile, rest): ``A ∘ (B, complement(B, size(A)))``.

    With a tuple tiler, mode ``i`` of A is divided by ``tiler[i]`` (modes past it are kept).
    The first mode of each result is "the tile" (for a Shard: the local part), the second is
    "which tile" (for a Shard: the mesh coordinate).

    Pre: ``complement(B, size(A))`` exists and the composition is admissible (else ValueError).
    Post: ``R == composition(A, make_layout(B, complement(B, size(A))))``;
    ``R(t, r) == A(B(t) + C(r))`` with C the complement, for every tile coordinate t and rest
    coordinate r.

    Example: ``logical_divide((8,4):(4,1), 2:1) = (2,(4,4)):(4,(8,1))``.
    """
    if type(tiler) is not Layout:
        if isinstance(tiler, tuple):
            return _by_mode(a, tiler, logical_divide, "logical_divide")
        tiler = _as_layout(tiler, "logical_divide")
    return _divide(a, tiler)


@lru_cache(maxsize=4096)
def _divide(a: Layout, b: Layout) -> Layout:
    cs, cd = _complement_flat(b.flat_shape, b.flat_stride, a.size, b)
    if not cs:
        cs, cd = (1,), (0,)
    c_shape = cs[0] if len(cs) == 1 else cs
    c_stride = cd[0] if len(cd) == 1 else cd
    tile_and_rest = Layout._trusted(
        (b.shape, c_shape), (b.stride, c_stride), b.flat_shape + cs, b.flat_stride + cd
    )
    return _compose_uncached(a, tile_and_rest)


def zipped_divide(a: Layout, tiler: Tiler) -> Layout:
    """``logical_divide`` with the tiles gathered in mode 0 and the rests in mode 1.

    For a Layout tiler this is ``logical_divide``. For a tuple tiler of rank k, the result is
    ``((tile_0, ..., tile_k-1), (rest_0, ..., rest_k-1, modes of A past k...))``.

    Pre: as logical_divide; tiler elements are Layouts or ints (no nested tuples).
    Post: ``R[0][i] == logical_divide(A, tiler)[i][0]`` and ``R[1][i] ==
    logical_divide(A, tiler)[i][1]`` for ``i < k``; ``R[1][k + j] == A[k + j]``.

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
    return concat([concat(tiles), concat(rests)])


def logical_product(a: Layout, b: Tiler) -> Layout:
    """Repeat ``A`` over the layout ``B``: ``(A, complement(A, size(A)*cosize(B)) ∘ B)``.

    With a tuple ``b``, mode ``i`` of A is multiplied by ``b[i]``.

    Pre: the complement exists and the composition is admissible (else ValueError).
    Post: ``R[0] == A``; ``R[1] == composition(complement(A, A.size * B.cosize), B)``;
    ``R.size == A.size * B.size``.

    Example: ``logical_product((2,2):(4,1), 6:1) = ((2,2),(2,3)):((4,1),(2,8))``.
    """
    if type(b) is not Layout:
        if isinstance(b, tuple):
            return _by_mode(a, b, logical_product, "logical_product")
        b = _as_layout(b, "logical_product")
    return concat([a, _compose(complement(a, a.size * b.cosize), b)])


def _by_mode(
    a: Layout, tiler: tuple[Tiler, ...], op: Callable[[Layout, Tiler], Layout], name: str
) -> Layout:
    if len(tiler) > a.rank:
        raise ValueError(
            f"{name}: by-mode tiler has {len(tiler)} modes but layout {a} has rank {a.rank}"
        )
    modes = [op(a[i], t) for i, t in enumerate(tiler)]
    modes += [a[i] for i in range(len(tiler), a.rank)]
    return concat(modes)


def _as_layout(t: Tiler, name: str) -> Layout:
    if isinstance(t, Layout):
        return t
    if is_int(t) and t >= 0:
        return Layout._trusted(t, 1, (t,), (1,))
    raise ValueError(f"{name}: expected a Layout, a size >= 0 or a tuple of them, got {t!r}")


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
    for j in range(1, len(shape)):
        colex[j] = colex[j - 1] * shape[j - 1]
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
        return _ONE
    return _from_flat(tuple(out_s), tuple(out_d))


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
        return _ONE
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
    return _from_flat(*_coalesce_flat(tuple(out_s), tuple(out_d)))

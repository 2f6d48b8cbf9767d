"""Rule builders: one function per view-op family, each returning a ``Rule``.

Every builder returns the same rule as torch 2.13's
``torch.distributed.tensor._ops._view_ops`` builder for that op (``dim_maps`` /
``view_groups``) after :func:`cute_shard.rules.torch_compat.to_torch`, except
where torch's builder is wrong or crashes on legal input; those cases (listed
in the package docstring) get a correct rule or a clean ``ValueError``.

Argument conventions follow torch's builders: ops that only permute or pad
dims take ``ndim``; ops whose rule depends on sizes take the input ``shape``.
Dims may be negative (normalised like ``torch``); sizes may be ``-1`` where the
op infers them (view/reshape/unflatten target sizes, expand's ``shape``).
Bad arguments raise ``ValueError`` naming the argument and the fix.

Sizes may be ``torch.SymInt``: decisions go through ``decide_eq`` /
``decide_gt`` (the sizes' monomial codes, else ``statically_known_true`` in both
polarities), so no guard is ever installed, and an undecidable comparison raises
:class:`~cute_shard.rules.UndecidableRule`.  ``view_groups``, the one builder
that compares many sizes, is one walk over a
:class:`~cute_shard.rules.SizeComparator`: plain ints for int shapes; for
SymInts the sizes' monomial codes (ints that multiply without making a SymInt),
and when the codes leave a question open the same walk again asking the
ShapeEnv.

Speed: rules are built on the sharding-propagation hot path.  Shape arguments
are normalised to int tuples once; all-int calls of the size-dependent
builders hit a bounded ``lru_cache``, and a ``view_groups`` miss walks both
shapes once with running products, the int comparator's questions being C
operators and the specs built unchecked (their invariants hold by construction).

Worked example -- ``x.view(4, 6)`` for ``x`` of shape ``(2, 3, 4)``::

    from (2, 3, 4), to (4, 6): no prefix of either side matches, so the whole
    input is one group  flat(d0,d1,d2)  re-split as (4, 6):

    >>> from cute_shard.rules import format_rule, view_groups
    >>> format_rule(view_groups((2, 3, 4), (4, 6)))
    '(split(flat(d0,d1,d2), (4,6), 0), split(flat(d0,d1,d2), (4,6), 1))'
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache, partial
from math import prod
from typing import Any

from ._sym import (
    INT_SIZES,
    AskedSizes,
    CodedSizes,
    CodesUndecided,
    Size,
    SizeComparator,
    as_dim,
    as_size,
    decide_eq,
    is_symint,
)
from .specs import (
    INPUT_DIMS,
    SINGLETON,
    Broadcast,
    ComplexRule,
    DimSpec,
    Flatten,
    InputDim,
    NewDim,
    Repeat,
    Rule,
    Split,
    ViewRule,
    flatten_range,
)

__all__ = [
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_to",
    "cache_clear",
    "expand",
    "flatten",
    "movedim",
    "permute",
    "ravel",
    "repeat",
    "squeeze",
    "t",
    "tile",
    "transpose",
    "unflatten",
    "unsqueeze",
    "view_as_complex",
    "view_as_real",
    "view_groups",
]

_CACHE_SIZE = 4096

ShapeArg = Sequence[Size] | Size
DimsArg = Sequence[int] | int

_D = InputDim.new  # interned InputDim constructor
_N_INTERNED = len(INPUT_DIMS)

# Each builder first tries the all-int arguments a model passes, with the checks inlined and
# interned specs; anything else (SymInts, -1, lists of odd types, errors) takes the general
# code below it, which owns conversion and the error messages.


def _whole_dims(dims: Sequence[object], ndim: int) -> Rule | None:
    """``(d_dims[0], d_dims[1], ...)`` if ``dims`` are distinct int dims of an ``ndim``-d
    tensor (negative ones wrapped), else None."""
    if ndim > _N_INTERNED:
        return None
    seen = 0
    out = []
    for d in dims:
        if type(d) is not int:
            return None
        if d < 0:
            d += ndim
        if d < 0 or d >= ndim or seen >> d & 1:
            return None
        seen |= 1 << d
        out.append(INPUT_DIMS[d])
    return tuple(out)


# ---------------------------------------------------------------------------
# Argument normalisation
# ---------------------------------------------------------------------------


def _sizes(
    x: object, op: str, arg: str, *, allow_minus_one: bool = False
) -> tuple[tuple[Size, ...], bool]:
    """Normalise a shape argument to a tuple; also report whether it is all ints.

    The common case (a tuple/torch.Size/list of valid ints) costs one pass of
    type checks; anything else goes through ``as_size`` for conversion and
    error reporting.
    """
    if type(x) is tuple:
        t = x
    elif isinstance(x, Sequence) and not isinstance(x, str):
        t = tuple(x)
    elif type(x) is int or is_symint(x):
        t = (x,)  # torch accepts view(6) / expand(6) / repeat(2)
    else:
        raise ValueError(
            f"{op}: {arg} must be a sequence of sizes, got {x!r} of type "
            f"{type(x).__name__}; fix: pass a tuple of ints"
        )
    for s in t:
        if type(s) is not int or (s < 0 and not (allow_minus_one and s == -1)):
            break
    else:
        return t, True
    t = tuple(as_size(s, op, arg, allow_minus_one=allow_minus_one) for s in t)
    return t, all(type(s) is int for s in t)


def _ndim(ndim: object, op: str) -> int:
    if type(ndim) is not int or ndim < 0:
        raise ValueError(
            f"{op}: ndim must be an int >= 0, got {ndim!r}; fix: pass the input tensor's ndim"
        )
    return ndim


def _dim_list(dims: object, op: str, arg: str) -> tuple[object, ...]:
    if isinstance(dims, Sequence) and not isinstance(dims, str):
        return tuple(dims)
    if type(dims) is int or hasattr(type(dims), "__index__"):
        return (dims,)
    raise ValueError(
        f"{op}: {arg} must be an int or a sequence of ints, got {dims!r}; fix: pass dim indices"
    )


def _no_repeats(dims: Sequence[int], op: str, arg: str) -> None:
    seen: set[int] = set()
    for d in dims:
        if d in seen:
            raise ValueError(
                f"{op}: dim {d} appears more than once in {arg}; "
                "expected distinct dims; fix: remove the duplicate"
            )
        seen.add(d)


def _infer(
    total: Size, sizes: tuple[Size, ...], cmp: SizeComparator[Any], op: str, arg: str
) -> tuple[Size, ...]:
    """Replace a single ``-1`` in ``sizes`` so that ``prod(sizes) == total``: keys of ``cmp``,
    every decision made by it."""
    known: Size = 1
    minus = 0  # the -1s (a SymInt is never compared with -1: that would guard)
    for s in sizes:
        if type(s) is int and s == -1:
            minus += 1
        else:
            known = known * s
    if not minus:
        if not cmp.eq(known, total):
            known, total = cmp.sizes((known, total))
            raise ValueError(
                f"{op}: {arg}={cmp.sizes(sizes)} has {known} elements but the input has "
                f"{total}; expected equal element counts; fix: make the sizes multiply to the "
                "input numel"
            )
        return sizes
    if minus > 1:
        raise ValueError(
            f"{op}: {arg}={cmp.sizes(sizes)} has more than one -1; expected at most one "
            "inferred size; fix: give all but one size explicitly"
        )
    if cmp.eq(known, 0):
        raise ValueError(
            f"{op}: {arg}={cmp.sizes(sizes)} has a -1 next to a 0 size, so the inferred size "
            "is ambiguous; fix: give the size explicitly instead of -1"
        )
    if not cmp.divides(known, total):
        known, total = cmp.sizes((known, total))
        raise ValueError(
            f"{op}: {arg}={cmp.sizes(sizes)}: the input numel {total} is not divisible by "
            f"{known}, so -1 cannot be inferred; fix: make the explicit sizes divide the "
            "input numel"
        )
    i = next(i for i, s in enumerate(sizes) if type(s) is int and s == -1)
    return (*sizes[:i], total // known, *sizes[i + 1 :])


# ---------------------------------------------------------------------------
# view / reshape / _unsafe_view / view_copy
# ---------------------------------------------------------------------------


def _view_groups(
    cmp: SizeComparator[Any], ints: bool, from_shape: tuple[Size, ...], to_shape: tuple[Size, ...]
) -> ViewRule:
    """The rule of a view from ``from_shape`` to ``to_shape`` (one ``-1`` allowed), every size
    decision made by ``cmp`` on its keys of the sizes. A rule of int shapes (``ints``) records
    what the walk read (``ViewRule.out_shape``, ``carry``), except for an empty tensor's."""
    op = "view_groups"
    fk = cmp.keys(from_shape)
    eq = cmp.eq
    total: Size = prod(fk)
    empty = eq(total, 0)
    tk = cmp.keys(to_shape)
    # (int keys with no -1 that multiply to the total are what _infer returns them as, read
    # here by C calls; anything else _infer infers or refuses)
    if not (ints and -1 not in tk and eq(prod(tk), total)):
        tk = _infer(total, tk, cmp, op, "to_shape")
    if empty:
        return ViewRule.of(_empty_groups(fk, tk, cmp))
    out: list[DimSpec] = []
    carry: dict[int, int] = {}
    gt = cmp.gt
    nf = len(fk)
    nt = len(tk)
    fi = ti = 0
    # Both numels are equal and nonzero: past either side's end, the other's product is 1.
    while fi < nf or ti < nt:
        f0, t0 = fi, ti
        f: Size = 1
        t: Size = 1
        if fi < nf:
            f = fk[fi]
            fi += 1
        if ti < nt:
            t = tk[ti]
            ti += 1
        if not eq(f, t):
            if eq(f, 1):
                ti = t0  # a size-1 input dim maps to nothing; retry t
                continue
            if eq(t, 1):
                fi = f0  # a new size-1 output dim; retry f
                out.append(SINGLETON)
                continue
            # the shortest runs of input and output dims with equal products
            while True:
                if fi < nf and (ti >= nt or gt(t, f)):
                    f = f * fk[fi]
                    fi += 1
                else:
                    t = t * tk[ti]
                    ti += 1
                if eq(f, t):
                    break
        elif ti == t0:
            continue  # trailing size-1 input dims: nothing to emit
        elif fi == f0:
            out.append(SINGLETON)  # trailing size-1 output dims
            continue
        elif ti - t0 == 1 and fi - f0 == 1:  # one dim moved whole (the usual case)
            carry[f0] = len(out)
            out.append(INPUT_DIMS[f0] if f0 < _N_INTERNED else InputDim(f0))
            continue
        # (a group the inner loop grew: several dims on one side, so no dim moves whole)
        _emit_group(out, f0, fi, tk[t0:ti], cmp)
    if ints:
        return ViewRule.of(out, from_shape, cmp.sizes(tk), carry)  # type: ignore[arg-type]
    return ViewRule.of(out)


def _emit_group(
    out: list[DimSpec], f0: int, fi: int, keys: tuple[Size, ...], cmp: SizeComparator[Any]
) -> None:
    """Append the specs of one group of several dims on a side: input dims ``f0 .. fi-1``
    split into the output sizes whose keys are ``keys``. Each piece is
    ``Split.new(src, group, i)``, with the size-1-free group computed once."""
    src = flatten_range(f0, fi)
    if len(keys) == 1:  # (its size is never asked about)
        out.append(src)
        return
    group = cmp.sizes(keys)
    if not cmp.contains(keys, 1):
        out += Split.pieces(src, group)
        return
    ones = [cmp.eq(k, 1) for k in keys]
    kept = tuple([s for s, one in zip(group, ones, strict=True) if not one])
    pieces = iter((src,) if len(kept) == 1 else Split.pieces(src, kept))
    out += [SINGLETON if one else next(pieces) for one in ones]


def _empty_groups(
    fk: tuple[Size, ...], tk: tuple[Size, ...], cmp: SizeComparator[Any]
) -> list[DimSpec]:
    """The rule of a view of an empty tensor (numel 0). Any grouping multiplies out (0 == 0),
    so the dims equal at the front and at the back are moved whole and the rest, widened
    until both sides of it hold a size-0 dim, is one group: ``(0, 8) -> (0,)`` is
    ``(flat(d0,d1),)``, ``(5, 0, 2) -> (5, 0, 3)`` is ``(d0, split(flat(d1,d2), (0,3), ..))``.
    ``fk``, ``tk``: the keys of the input and output sizes."""
    eq = cmp.eq
    nf, nt = len(fk), len(tk)
    p = 0
    while p < nf and p < nt and eq(fk[p], tk[p]):
        p += 1
    s = 0
    while s < nf - p and s < nt - p and eq(fk[nf - 1 - s], tk[nt - 1 - s]):
        s += 1
    lo, f_hi, t_hi = p, nf - s, nt - s
    if lo == f_hi and lo == t_hi:
        return [_D(i) for i in range(nf)]
    while not cmp.contains(fk[lo:f_hi], 0) or not cmp.contains(tk[lo:t_hi], 0):
        if lo > 0:
            lo -= 1
        else:
            f_hi, t_hi = min(f_hi + 1, nf), min(t_hi + 1, nt)
    out: list[DimSpec] = [_D(i) for i in range(lo)]
    _emit_group(out, lo, f_hi, tk[lo:t_hi], cmp)
    out.extend(_D(i) for i in range(f_hi, nf))
    return out


# (the walk itself cached, through a C-level partial: a cache miss pays no frame of its own)
_view_groups_of_ints = lru_cache(maxsize=_CACHE_SIZE)(partial(_view_groups, INT_SIZES, True))


def view_groups(
    from_shape: ShapeArg, to_shape: ShapeArg, *, sizes: SizeComparator[Any] | None = None
) -> Rule:
    """Rule of ``view``, ``reshape``, ``_unsafe_view`` and ``view_copy`` to ``to_shape``.

    Walks both shapes once, grouping the shortest runs of input and output dims
    with equal products: a 1:1 group forwards the dim (``d2``), a many:1 group
    is a ``flat(...)``, a 1:many or many:many group is a ``split(...)`` of the
    (flattened) inputs.  Size-1 input dims outside a group vanish; size-1
    output dims are ``1``.  ``to_shape`` may contain one ``-1``.

    ``sizes`` makes every size decision (one walk serves them all): by default
    :class:`~cute_shard.rules.IntSizes` for int shapes, else
    :class:`~cute_shard.rules.CodedSizes` and, for what the codes leave open,
    :class:`~cute_shard.rules.AskedSizes`.  Given explicitly, it is used alone.

    >>> from cute_shard.rules import format_rule
    >>> format_rule(view_groups((8, 16, 32), (128, 32)))
    '(flat(d0,d1), d2)'
    """
    if sizes is None and type(from_shape) is tuple and type(to_shape) is tuple:
        for s in from_shape:  # the common case, checked inline
            if type(s) is not int or s < 0:
                break
        else:
            for s in to_shape:
                if type(s) is not int or (s < 0 and s != -1):
                    break
            else:
                return _view_groups_of_ints(from_shape, to_shape)
    op = "view_groups"
    fs, f_int = _sizes(from_shape, op, "from_shape")
    ts, t_int = _sizes(to_shape, op, "to_shape", allow_minus_one=True)
    if sizes is not None:
        return _view_groups(sizes, f_int and t_int, fs, ts)
    if f_int and t_int:
        return _view_groups_of_ints(fs, ts)
    try:
        return _view_groups(CodedSizes(op), False, fs, ts)
    except CodesUndecided:  # (what the codes leave open, the ShapeEnv may settle)
        return _view_groups(AskedSizes(op), False, fs, ts)


def unflatten(shape: ShapeArg, dim: int, sizes: ShapeArg) -> Rule:
    """Rule of ``x.unflatten(dim, sizes)`` for ``x`` of ``shape``.

    ``unflatten`` reaches DTensor as ``view``, so this is
    ``view_groups(shape, shape[:dim] + sizes + shape[dim + 1:])``.  ``sizes``
    may contain one ``-1``.
    """
    if type(shape) is tuple and type(dim) is int and type(sizes) is tuple and sizes:
        n = len(shape)
        d = dim + n if dim < 0 else dim
        if 0 <= d < n and _all_sizes(shape):
            p = 1
            for x in sizes:
                if type(x) is not int or x < 0:
                    break
                p *= x
            else:
                if p == shape[d]:
                    return _view_groups_of_ints(shape, shape[:d] + sizes + shape[d + 1 :])
    op = "unflatten"
    s, _ = _sizes(shape, op, "shape")
    d = as_dim(dim, len(s), op, "dim", wrap_scalar=False)
    sz, _ = _sizes(sizes, op, "sizes", allow_minus_one=True)
    if not sz:
        raise ValueError(
            f"{op}: sizes must be non-empty, got (); fix: pass the new sizes of dim {dim}"
        )
    sz = _infer(s[d], sz, AskedSizes(op), op, "sizes")
    return view_groups(s, s[:d] + sz + s[d + 1 :])


# ---------------------------------------------------------------------------
# flatten / ravel / view_as_complex
# ---------------------------------------------------------------------------


def flatten(ndim: int, start_dim: int = 0, end_dim: int = -1) -> Rule:
    """Rule of ``torch.flatten(x, start_dim, end_dim)`` as torch's ``dim_flatten``.

    Dims ``start_dim..end_dim`` become one ``flat(...)``; a 0-d input gives
    ``(1,)``.  (At runtime ``aten.flatten`` decomposes to ``view``, whose rule
    is ``view_groups`` and differs when flattened dims have size 1.)
    """
    if type(ndim) is int and 0 < ndim <= _N_INTERNED:
        if type(start_dim) is int and type(end_dim) is int:
            a = start_dim + ndim if start_dim < 0 else start_dim
            b = end_dim + ndim if end_dim < 0 else end_dim
            if 0 <= a <= b < ndim:
                if a == b:
                    return INPUT_DIMS[:ndim]
                return (*INPUT_DIMS[:a], flatten_range(a, b + 1), *INPUT_DIMS[b + 1 : ndim])
    op = "flatten"
    n = _ndim(ndim, op)
    start = as_dim(start_dim, n, op, "start_dim")
    end = as_dim(end_dim, n, op, "end_dim")
    if start > end:
        raise ValueError(
            f"{op}: start_dim={start_dim} comes after end_dim={end_dim} for a {n}-d tensor; "
            "fix: pass start_dim <= end_dim"
        )
    if n == 0:
        return (SINGLETON,)
    return (
        *[_D(i) for i in range(start)],
        flatten_range(start, end + 1),
        *[_D(i) for i in range(end + 1, n)],
    )


def ravel(ndim: int) -> Rule:
    """Rule of ``torch.ravel(x)``: all dims flattened (``dim_flatten(ndim)``)."""
    return flatten(_ndim(ndim, "ravel"))


def view_as_complex(shape: ShapeArg) -> Rule:
    """Rule of ``torch.view_as_complex(x)``: the trailing ``(…, n, 2)`` pair merges.

    Matches torch's ``dim_flatten(ndim, ndim - 2)`` for ``ndim >= 2``.  A
    ``(2,)`` input gives ``()`` (a 0-d complex); torch's builder wrongly gives
    ``(d0,)``.
    """
    op = "view_as_complex"
    s, _ = _sizes(shape, op, "shape")
    if not s or not decide_eq(s[-1], 2, op):
        raise ValueError(
            f"{op}: expected a shape whose last dim is 2 (real, imag), got {s}; "
            "fix: only view (..., 2) float tensors as complex"
        )
    n = len(s)
    if n == 1:
        return tuple.__new__(ComplexRule, ())
    return tuple.__new__(
        ComplexRule, (*[_D(i) for i in range(n - 2)], Flatten((_D(n - 2), _D(n - 1))))
    )


def view_as_real(shape: ShapeArg) -> Rule:
    """Rule of ``torch.view_as_real(x)`` for a complex ``x`` of ``shape``.

    As torch: the last dim ``n`` becomes ``split(d, (n,2), 0), split(d, (n,2), 1)``,
    kept un-canonicalised even for ``n == 1`` (the split is over the real
    reinterpretation of the dim, so dropping the 1 would move the data dim).
    A 0-d input gives ``(new(2),)``; torch's builder raises IndexError.
    """
    s, _ = _sizes(shape, "view_as_real", "shape")
    n = len(s)
    if n == 0:
        return (NewDim(2),)
    last = _D(n - 1)
    group = (s[-1], 2)
    return (*[_D(i) for i in range(n - 1)], Split(last, group, 0), Split(last, group, 1))


# ---------------------------------------------------------------------------
# squeeze / unsqueeze / atleast_nd
# ---------------------------------------------------------------------------


def squeeze(shape: ShapeArg, dim: DimsArg | None = None) -> Rule:
    """Rule of ``torch.squeeze(x)``, ``squeeze(x, dim)`` and ``squeeze(x, dims)``.

    Drops the targeted dims of size 1 (all dims when ``dim`` is None).  Unlike
    torch's ``dim_squeeze``, size-0 dims are kept, as ``torch.squeeze`` does.
    """
    if type(shape) is tuple and 0 < len(shape) <= _N_INTERNED:
        n = len(shape)
        if dim is None:
            out = []
            for i, size in enumerate(shape):
                if type(size) is not int or size < 0:
                    break
                if size != 1:
                    out.append(INPUT_DIMS[i])
            else:
                return tuple(out)
        elif type(dim) is int and -n <= dim < n:
            d = dim + n if dim < 0 else dim
            for size in shape:
                if type(size) is not int or size < 0:
                    break
            else:
                if shape[d] != 1:
                    return INPUT_DIMS[:n]
                return INPUT_DIMS[:d] + INPUT_DIMS[d + 1 : n]
    op = "squeeze"
    s, _ = _sizes(shape, op, "shape")
    n = len(s)
    if dim is None:
        targets: set[int] | range = range(n)
    else:
        norm = [as_dim(d, n, op, "dim") for d in _dim_list(dim, op, "dim")]
        _no_repeats(norm, op, "dim")
        targets = set(norm)
    if n == 0:
        return ()
    return tuple(_D(i) for i in range(n) if not (i in targets and decide_eq(s[i], 1, op)))


def unsqueeze(ndim: int, dim: int) -> Rule:
    """Rule of ``torch.unsqueeze(x, dim)``: a ``1`` inserted at ``dim``."""
    if type(ndim) is int and 0 <= ndim < _N_INTERNED and type(dim) is int:
        d = dim + ndim + 1 if dim < 0 else dim
        if 0 <= d <= ndim:
            return (*INPUT_DIMS[:d], SINGLETON, *INPUT_DIMS[d:ndim])
    op = "unsqueeze"
    n = _ndim(ndim, op)
    d = as_dim(dim, n + 1, op, "dim", wrap_scalar=False)
    return (*[_D(i) for i in range(d)], SINGLETON, *[_D(i) for i in range(d, n)])


def _pad_left(ndim: int, min_dims: int) -> Rule:
    return (SINGLETON,) * max(0, min_dims - ndim) + tuple(_D(i) for i in range(ndim))


def atleast_1d(ndim: int) -> Rule:
    """Rule of ``torch.atleast_1d(x)``: a 0-d input gains a leading ``1``."""
    return _pad_left(_ndim(ndim, "atleast_1d"), 1)


def atleast_2d(ndim: int) -> Rule:
    """Rule of ``torch.atleast_2d(x)``: leading ``1``s up to 2 dims."""
    return _pad_left(_ndim(ndim, "atleast_2d"), 2)


def atleast_3d(ndim: int) -> Rule:
    """Rule of ``torch.atleast_3d(x)``: ``(1,1,1)``, ``(1,d0,1)``, ``(d0,d1,1)`` for ndim 0-2."""
    n = _ndim(ndim, "atleast_3d")
    if n == 0:
        return (SINGLETON, SINGLETON, SINGLETON)
    if n == 1:
        return (SINGLETON, _D(0), SINGLETON)
    if n == 2:
        return (_D(0), _D(1), SINGLETON)
    return tuple(_D(i) for i in range(n))


# ---------------------------------------------------------------------------
# expand / broadcast_to, repeat / tile
# ---------------------------------------------------------------------------


def _expand(input_shape: tuple[Size, ...], shape: tuple[Size, ...]) -> Rule:
    op = "expand"
    pad = len(shape) - len(input_shape)
    if pad < 0:
        raise ValueError(
            f"{op}: shape={shape} has fewer dims than the input shape {input_shape}; "
            "fix: give at least one size per input dim"
        )
    out: list[DimSpec] = []
    for i, want in enumerate(shape):
        if i < pad:
            if type(want) is int and want == -1:
                raise ValueError(
                    f"{op}: shape={shape} has -1 at new leading dim {i}; -1 means 'keep the "
                    "input size' and a new dim has none; fix: give the size explicitly"
                )
            out.append(Broadcast.new(SINGLETON, want))
            continue
        j = i - pad
        have = input_shape[j]
        p = _D(j)
        if (type(want) is int and want == -1) or decide_eq(want, have, op):
            out.append(p)
        elif decide_eq(have, 1, op):
            out.append(Broadcast(p, want))
        else:
            raise ValueError(
                f"{op}: cannot expand input dim {j} of size {have} to {want} (shape={shape}); "
                "only size-1 dims can be broadcast; fix: use -1 or the input size for that dim"
            )
    return tuple(out)


_expand_int = lru_cache(maxsize=_CACHE_SIZE)(_expand)


def _expand_fast(input_shape: tuple[object, ...], shape: tuple[object, ...]) -> Rule | None:
    pad = len(shape) - len(input_shape)
    if pad < 0 or len(input_shape) > _N_INTERNED:
        return None
    out: list[DimSpec] = []
    for i, want in enumerate(shape):
        if type(want) is not int:
            return None
        if i < pad:
            if want < 0:
                return None
            out.append(SINGLETON if want == 1 else Broadcast.unchecked(SINGLETON, want))
            continue
        have = input_shape[i - pad]
        if type(have) is not int or have < 0 or want < -1:
            return None
        if want == -1 or want == have:
            out.append(INPUT_DIMS[i - pad])
        elif have == 1:
            out.append(Broadcast.unchecked(INPUT_DIMS[i - pad], want))
        else:
            return None
    return tuple(out)


def _all_sizes(shape: tuple[object, ...]) -> bool:
    """Every entry is an int size >= 0."""
    for x in shape:
        if type(x) is not int or x < 0:
            return False
    return True


def expand(input_shape: ShapeArg, shape: ShapeArg) -> Rule:
    """Rule of ``x.expand(*shape)`` for ``x`` of ``input_shape``.

    New leading dims are ``bcast(1, n)`` (``1`` when ``n == 1``), size-1
    dims expanded to ``n != 1`` are ``bcast(d, n)``, and dims given as ``-1`` or
    their own size are forwarded.
    """
    if type(input_shape) is tuple and type(shape) is tuple:
        fast = _expand_fast(input_shape, shape)
        if fast is not None:
            return fast
    ins, i_int = _sizes(input_shape, "expand", "input_shape")
    out, o_int = _sizes(shape, "expand", "shape", allow_minus_one=True)
    if i_int and o_int:
        return _expand_int(ins, out)
    return _expand(ins, out)


def broadcast_to(input_shape: ShapeArg, shape: ShapeArg) -> Rule:
    """Rule of ``torch.broadcast_to(x, shape)``: same as :func:`expand`."""
    return expand(input_shape, shape)


def repeat(ndim: int, sizes: ShapeArg) -> Rule:
    """Rule of ``x.repeat(*sizes)``.

    Extra leading sizes make new dims (``bcast(1, n)``); ``repeat(dk, n)``
    tiles an input dim; a count of 1 forwards the dim.
    """
    op = "repeat"
    n = _ndim(ndim, op)
    reps, _ = _sizes(sizes, op, "sizes")
    pad = len(reps) - n
    if pad < 0:
        raise ValueError(
            f"{op}: sizes={reps} has fewer entries than the tensor's {n} dims; "
            "fix: give one repeat count per dim (tile pads with 1s for you)"
        )
    return tuple(Repeat.new(SINGLETON, r) for r in reps[:pad]) + tuple(
        Repeat.new(_D(i), r) for i, r in enumerate(reps[pad:])
    )


def tile(ndim: int, dims: ShapeArg) -> Rule:
    """Rule of ``torch.tile(x, dims)``: ``repeat`` with ``dims`` left-padded by 1s."""
    n = _ndim(ndim, "tile")
    reps, _ = _sizes(dims, "tile", "dims")
    if len(reps) < n:
        reps = (1,) * (n - len(reps)) + reps
    return repeat(n, reps)


# ---------------------------------------------------------------------------
# permute / transpose / t / movedim
# ---------------------------------------------------------------------------


def permute(ndim: int, dims: DimsArg) -> Rule:
    """Rule of ``x.permute(dims)``: output dim ``i`` is input dim ``dims[i]``."""
    if type(ndim) is int and (type(dims) is tuple or type(dims) is list) and len(dims) == ndim:
        out = _whole_dims(dims, ndim)
        if out is not None:
            return out
    op = "permute"
    n = _ndim(ndim, op)
    raw = _dim_list(dims, op, "dims")
    if len(raw) != n:
        raise ValueError(
            f"{op}: dims={raw} has {len(raw)} entries for a {n}-d tensor; "
            "expected one per dim; fix: pass a permutation of range(ndim)"
        )
    norm = [as_dim(d, n, op, "dims", wrap_scalar=False) for d in raw]
    _no_repeats(norm, op, "dims")
    return tuple(_D(d) for d in norm)


def transpose(ndim: int, dim0: int, dim1: int) -> Rule:
    """Rule of ``x.transpose(dim0, dim1)``: the two input dims swap places."""
    if type(ndim) is int and 0 < ndim <= _N_INTERNED and type(dim0) is int and type(dim1) is int:
        a = dim0 + ndim if dim0 < 0 else dim0
        b = dim1 + ndim if dim1 < 0 else dim1
        if 0 <= a < ndim and 0 <= b < ndim:
            swapped = list(INPUT_DIMS[:ndim])
            swapped[a], swapped[b] = swapped[b], swapped[a]
            return tuple(swapped)
    op = "transpose"
    n = _ndim(ndim, op)
    a = as_dim(dim0, n, op, "dim0")
    b = as_dim(dim1, n, op, "dim1")
    out = [_D(i) for i in range(n)]
    if n:
        out[a], out[b] = out[b], out[a]
    return tuple(out)


def t(ndim: int) -> Rule:
    """Rule of ``x.t()``: transpose of a 2-d tensor, identity for 0-d and 1-d."""
    n = _ndim(ndim, "t")
    if n > 2:
        raise ValueError(
            f"t: expected a tensor with <= 2 dims, got {n}; fix: use transpose(ndim, dim0, dim1)"
        )
    return (_D(1), _D(0)) if n == 2 else tuple(_D(i) for i in range(n))


def movedim(ndim: int, source: DimsArg, destination: DimsArg) -> Rule:
    """Rule of ``torch.movedim(x, source, destination)``.

    Input dim ``source[k]`` lands at output position ``destination[k]``; the
    remaining input dims fill the free positions in order.
    """
    if type(ndim) is int and 0 < ndim <= _N_INTERNED:
        if type(source) is int and type(destination) is int:
            s0 = source + ndim if source < 0 else source
            d0 = destination + ndim if destination < 0 else destination
            if 0 <= s0 < ndim and 0 <= d0 < ndim:
                order = [i for i in range(ndim) if i != s0]
                order.insert(d0, s0)
                return tuple([INPUT_DIMS[i] for i in order])
    op = "movedim"
    n = _ndim(ndim, op)
    src = [as_dim(d, n, op, "source") for d in _dim_list(source, op, "source")]
    dst = [as_dim(d, n, op, "destination") for d in _dim_list(destination, op, "destination")]
    if len(src) != len(dst):
        raise ValueError(
            f"{op}: source has {len(src)} dims but destination has {len(dst)}; "
            "expected the same number; fix: pair every source dim with a destination"
        )
    _no_repeats(src, op, "source")
    _no_repeats(dst, op, "destination")
    if n == 0:
        return ()
    placed = [-1] * n
    for s, d in zip(src, dst, strict=True):
        placed[d] = s
    moved = set(src)
    rest = iter([i for i in range(n) if i not in moved])
    return tuple(_D(p if p >= 0 else next(rest)) for p in placed)


def cache_clear() -> None:
    """Clear every cache kept by the rule builders."""
    _view_groups_of_ints.cache_clear()
    _expand_int.cache_clear()

"""The plan: a rule and an input shape read once into what every step of the engine needs.

A rule has one DimSpec per output dim. The plan groups them by what the view does to the
flat (row-major) index of the input:

- **A view** (``view``, ``reshape``, ``flatten``, ``unflatten``: ``InputDim``, ``Flatten``,
  ``Split`` and ``Singleton`` with the input dims in order) keeps the whole flat index: the
  input and output shapes are two factorings of it. Its plan is one :class:`Group` of every
  input dim and every output dim, so a mesh dim's shard may land on any output dim, a rank
  that holds nothing (a sharded size-1 dim, an uneven tail) needs nothing, and dropped or new
  size-1 dims are axes like the others.
- **Everything else** (permute, expand, repeat, squeeze, view_as_real/complex, rules whose
  groups are not in order): one group per ``Flatten``/``Split`` source, ``Repeat`` (its copies
  a virtual outer axis every rank holds) and ``Broadcast``; an ``InputDim`` moves its dim
  whole, so its placements carry verbatim (``Reading.carry``); a dim no output dim holds (a
  dropped size-1 dim) can stay only on a mesh dim of size 1.

Some rules are built by ops with different local semantics: ``(d0, flat(d1,d2))`` of a
``(.., n, 2)`` input is a view and also ``view_as_complex`` (whose output dim has n complex
elements); ``(d1,)`` of ``(1, n)`` is a view and also ``squeeze(0)`` (whose local op keeps an
empty rank's size-0 dim). A rule from ``cute_shard.rules`` says which op built it
(:class:`cute_shard.rules.ViewRule`, ``ComplexRule``), and so does ``complex_view``; where
nothing says, the plan holds every reading and an answer must hold in all of them.

With symbolic sizes a view is planned group by group too: an uneven step can be exact only
where no symbol enters, and a group without symbols keeps that.

Worked example: ``view_groups((8, 16, 32), (128, 32))`` is ``(flat(d0,d1), d2)``: one view
group with input axes ``(8, 16, 32)``, output axes ``(128, 32)``; d2 also carries whole to
output dim 1, and the home of d0 and d1 is output dim 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..rules import (
    Broadcast,
    ComplexRule,
    DimSpec,
    Flatten,
    InputDim,
    NewDim,
    Repeat,
    Singleton,
    Split,
    ViewRule,
)
from ..rules.torch_compat import from_torch
from .types import Group, NotStatic, Plan, Reading, Size

__all__ = ["as_rule", "make_plan"]


def as_rule(rule: tuple[Any, ...]) -> tuple[DimSpec, ...]:
    """``rule`` as ``cute_shard.rules`` DimSpecs (torch's are converted; anything else is a
    ValueError)."""
    for spec in rule:
        if not isinstance(spec, DimSpec):
            break
    else:
        return rule
    try:
        return tuple(from_torch(rule))
    except (TypeError, AttributeError) as e:
        raise ValueError(
            f"rule {rule!r} is neither cute_shard.rules DimSpecs nor torch DimSpecs: {e}"
        ) from None


def make_plan(
    rule: Sequence[DimSpec], shape: tuple[Size, ...], complex_view: bool | None, static: bool
) -> Plan:
    """Read ``rule`` for an input of ``shape`` (ValueError if they do not match). ``static``:
    every size is an int, else raise :class:`NotStatic` (symbolic sizes are planned as
    ``symbolic.Sym`` values, with ``static`` False).

    A view rule from ``cute_shard.rules.view_groups`` records what its builder read, for the
    shape it was built for (``ViewRule.out_shape`` and ``carry``): for that shape the plan is
    taken from it as it is."""
    if type(rule) is ViewRule and rule.shape == shape and static and complex_view is not True:
        made, made_carry = rule.out_shape, rule.carry
        if made is not None and made_carry is not None:  # (recorded with ``shape``)
            return Plan(made_carry, {}, Group.view(shape, made), made, -1)
    ndim = len(shape)
    ints = True  # (symbolic sizes need the symbolic engine only where the plan computes)
    for n in shape:
        if type(n) is not int:
            ints = False
            break
    if ints and ndim and min(shape) < 0:
        d = next(d for d, n in enumerate(shape) if n < 0)
        raise ValueError(f"input dim {d} has size {shape[d]}; sizes must be >= 0")
    used = [-1] * ndim  # each input dim's (first) output dim
    out: list[Size] = []
    carry: dict[int, int] = {}
    splits: dict[tuple[int, ...], list[Any]] | None = None  # dims -> [sizes, pieces bitmask]
    last = -1  # the last input dim of the specs read so far, if they are in order
    in_order = True
    is_view = False  # a Flatten or a Split that keeps the size: only view-family ops
    plain = True  # only InputDim, Flatten, Split and Singleton
    grouped = False  # some spec reads input dims other than whole (a group to route)
    prev: Any = None  # (dims, piece) of the last Split piece, if it was the last spec
    spec: Any  # (dispatched on ``type(spec)`` once per spec, which mypy does not narrow)
    for o, spec in enumerate(rule):
        cls = type(spec)
        if cls is InputDim:
            d = spec.input_dim
            if d >= ndim or used[d] >= 0:
                _bad_dim(d, ndim)
            used[d] = o
            carry[d] = o
            out.append(shape[d])
            if d <= last:
                in_order = False
            last = d
            prev = None
        elif cls is Split:
            src = spec.input_dim
            dims = (src.input_dim,) if type(src) is InputDim else getattr(src, "dims", None)
            if dims is None:
                raise ValueError(f"a Split can only split an input dim or a Flatten, got {src}")
            sizes = spec.group_shape
            j = spec.split_id
            if static and (not ints or type(sizes[j]) is not int):
                raise NotStatic
            if splits is None:
                splits = {}
            entry = splits.get(dims)
            if entry is None:
                for d in dims:
                    if d >= ndim or used[d] >= 0:
                        _bad_dim(d, ndim)
                    used[d] = o
                entry = splits[dims] = [sizes, 0]
            if entry[1] >> j & 1 or len(sizes) != len(entry[0]):
                raise ValueError(f"rule has piece {j} of {spec} twice, or pieces of two splits")
            entry[1] |= 1 << j
            if j == 0:
                if dims[0] <= last:
                    in_order = False
                last = dims[-1]
            elif prev != (dims, j - 1):
                in_order = False  # a view's pieces come in order (size-1 dims between)
            prev = (dims, j)
            grouped = True
            out.append(sizes[j])
        elif cls is Flatten:
            if static and not ints:
                raise NotStatic
            dims = spec.dims
            size: Size = 1
            for d in dims:
                if d >= ndim or used[d] >= 0:
                    _bad_dim(d, ndim)
                used[d] = o
                size = size * shape[d]
            out.append(size)
            if dims[0] <= last:
                in_order = False
            last = dims[-1]
            is_view = grouped = True
            prev = None
        elif cls is Singleton:
            out.append(1)
        else:
            if static and not ints:
                raise NotStatic
            out.append(_special(spec, o, shape, used, static))
            plain = in_order = False
            grouped = True  # (a broadcast or repeat of an input dim is a group)
    if -1 in used:
        _check_dropped(rule, shape, used, complex_view)
    if splits is not None:
        if _check_splits(splits, shape):
            plain = in_order = False  # view_as_real
        else:
            is_view = True  # a Split that keeps the size: only view-family ops
    if plain and in_order and not is_view:
        # InputDims and Singletons only: a view if it both drops and adds a dim (squeeze only
        # drops, unsqueeze only adds); otherwise every dim moves whole.
        is_view = len(out) > len(carry) and -1 in used
    outs = tuple(out)
    return _readings(
        rule, shape, complex_view, static, outs, carry, in_order, is_view, ints, grouped
    )


def _check_dropped(
    rule: Sequence[DimSpec], shape: tuple[Size, ...], used: list[int], cv: bool | None
) -> None:
    """Only size-1 dims may be dropped (and the (real, imag) pair of a (2,) tensor's
    view_as_complex)."""
    for d, o in enumerate(used):
        if o < 0 and not _size_eq(shape[d], 1):
            if len(shape) == 1 and not rule and _complex_op(rule, cv):
                continue
            raise ValueError(
                f"rule drops input dim {d} of size {shape[d]}; only size-1 dims can disappear "
                "(the rule does not match the shape)"
            )


def _readings(
    rule: Sequence[DimSpec],
    shape: tuple[Size, ...],
    complex_view: bool | None,
    static: bool,
    out: tuple[Size, ...],
    carry: dict[int, int],
    in_order: bool,
    is_view: bool,
    ints: bool,
    grouped: bool,
) -> Plan:
    """The plan's readings (see the module docstring)."""
    tag = type(rule)
    if _complex_op(rule, complex_view):
        pair = _complex_pair(rule, shape)
        if pair < 0:
            if len(shape) == 1 and not rule:
                return Plan({}, {}, None, (), 0)
            raise ValueError(
                f"rule {_fmt(rule)} is not view_as_complex's for shape {shape}: its last output "
                "dim must flatten the last two input dims, the last of size 2"
            )
        return Plan(*_groups(rule, shape, out, carry, pair), None, out, pair)
    view = None
    group_of: dict[int, Group] = {}
    if (tag is ViewRule or is_view) and in_order and static:
        if not ints:
            raise NotStatic
        view = Group.view(shape, out)
        carried = carry
    elif grouped:
        carried, group_of = _groups(rule, shape, out, carry, -1)
    else:  # every dim moves whole or is dropped: nothing to route
        carried = carry
    pair = (
        -1
        if tag is ViewRule or complex_view is False or not rule or type(rule[-1]) is not Flatten
        else _complex_pair(rule, shape)
    )
    if pair < 0:
        return Plan(carried, group_of, view, out, -1)
    # a flatten of a trailing (n, 2) pair, by an op not known: a view, or view_as_complex
    return Plan(
        carried, group_of, view, out, pair, (Reading(*_groups(rule, shape, out, carry, pair)),)
    )


def _complex_op(rule: Sequence[DimSpec], complex_view: bool | None) -> bool:
    return type(rule) is ComplexRule if complex_view is None else complex_view


def _complex_pair(rule: Sequence[DimSpec], shape: tuple[Size, ...]) -> int:
    """The (real, imag) input dim if the rule is view_as_complex's, else -1."""
    n = len(shape)
    if n < 2 or len(rule) != n - 1 or not _size_eq(shape[-1], 2):
        return -1
    flat = rule[-1]
    if type(flat) is not Flatten or flat.dims != (n - 2, n - 1):
        return -1
    for d in range(n - 2):
        spec = rule[d]
        if type(spec) is not InputDim or spec.input_dim != d:
            return -1
    return n - 1


def _special(spec: Any, o: int, shape: tuple[Size, ...], used: list[int], static: bool) -> Size:
    """The output size of a ``Broadcast``, ``Repeat`` or ``NewDim`` spec, checked (``spec``: any
    rule entry; what is none of them is a ValueError)."""
    cls = type(spec)
    if cls is NewDim:
        size = spec.size
        if static and type(size) is not int:
            raise NotStatic
        return size
    if cls is not Broadcast and cls is not Repeat:
        raise ValueError(
            f"rule entry {spec!r} for output dim {o} is not a cute_shard.rules DimSpec"
        )
    inner = spec.dim if cls is Broadcast else spec.input_dim
    n = spec.dim_size if cls is Broadcast else spec.times
    if static and type(n) is not int:
        raise NotStatic
    if type(inner) is Singleton:
        return n
    if type(inner) is not InputDim:
        raise ValueError(f"unsupported rule entry {spec} for output dim {o}")
    d = inner.input_dim
    if not 0 <= d < len(used) or used[d] >= 0:
        _bad_dim(d, len(used))
    used[d] = o
    if cls is Repeat:
        return shape[d] * n
    if not _size_eq(shape[d], 1):
        raise ValueError(
            f"rule broadcasts input dim {d} of size {shape[d]}; only size-1 dims broadcast "
            "(the rule does not match the shape)"
        )
    return n


def _check_splits(splits: dict[tuple[int, ...], list[Any]], shape: tuple[Size, ...]) -> bool:
    """Check every Split group is whole and multiplies out; True if one is view_as_real's
    (``(n,)`` complex as ``(n, 2)`` reals)."""
    real = False
    for dims, (sizes, seen) in splits.items():
        if seen != (1 << len(sizes)) - 1:
            have = [j for j in range(len(sizes)) if seen >> j & 1]
            raise ValueError(
                f"rule splits input dims {list(dims)} into {len(sizes)} pieces but has pieces "
                f"{have}: every piece of a Split must be an output dim"
            )
        total: Size = 1
        for d in dims:
            total = total * shape[d]
        whole: Size = 1
        for x in sizes:
            whole = whole * x
        if _size_eq(whole, total):
            continue
        if (
            len(dims) == 1
            and len(sizes) == 2
            and _size_eq(sizes[1], 2)
            and _size_eq(sizes[0], total)
        ):
            real = True
            continue
        raise ValueError(
            f"rule splits input dims {list(dims)} (size {total}) into {tuple(sizes)} "
            f"(size {whole}): the rule does not match the shape"
        )
    return real


def _groups(
    rule: Sequence[DimSpec],
    shape: tuple[Size, ...],
    out: tuple[Size, ...],
    carry: dict[int, int],
    pair: int,
) -> tuple[dict[int, int], dict[int, Group]]:
    """The rule group by group (``pair``: view_as_complex's (real, imag) input dim, or -1):
    ``(carry, group_of)`` of its reading."""
    group_of: dict[int, Group] = {}
    carried = carry
    spec: Any  # (dispatched on ``type(spec)``, which mypy does not narrow)
    for o, spec in enumerate(rule):
        cls = type(spec)
        if cls is Flatten:
            dims = spec.dims
            sizes = tuple(shape[d] for d in dims)
            axis = {d: i for i, d in enumerate(dims)}
            if dims[-1] == pair:  # complex elements: the (real, imag) pair is inside them
                g = Group(sizes, axis, (sizes[0], 2), (o, -1), {dims[0]: o})
                group_of[dims[0]] = g  # (the pair itself no output dim may shard)
                continue
            else:
                g = Group(sizes, axis, (out[o],), (o,), dict.fromkeys(dims, o))
        elif cls is Split:
            if spec.split_id:
                continue
            src = spec.input_dim
            dims = (src.input_dim,) if type(src) is InputDim else src.dims
            pieces = spec.group_shape
            outs = [o] * len(pieces)
            for k, other in enumerate(rule):
                if type(other) is Split and other.input_dim == src:
                    outs[other.split_id] = k
            if len(dims) == 1 and not _size_eq(_prod(pieces), shape[dims[0]]):
                if carried is carry:
                    carried = dict(carry)
                carried[dims[0]] = o  # view_as_real: the new (real, imag) dim is innermost
                continue
            g = Group(
                tuple(shape[d] for d in dims),
                {d: i for i, d in enumerate(dims)},
                tuple(pieces),
                tuple(outs),
                None,  # a view of its dims: a shard's home is read from the flat index
            )
        elif (cls is Repeat or cls is Broadcast) and type(
            inner := spec.input_dim if cls is Repeat else spec.dim
        ) is InputDim:
            d = inner.input_dim
            if cls is Repeat:  # the copies: a virtual outer axis every rank holds whole
                g = Group((spec.times, shape[d]), {d: 1}, (out[o],), (o,), {d: o})
            else:
                g = Group((shape[d],), {d: 0}, (out[o],), (o,), {d: o})
        else:
            continue
        for d in g.axis or ():
            group_of[d] = g
    return carried, group_of


def _bad_dim(d: object, ndim: int) -> None:
    if type(d) is not int or not 0 <= d < ndim:
        raise ValueError(f"rule refers to input dim {d}, but the input has {ndim} dims")
    raise ValueError(f"rule uses input dim {d} twice; the rule does not match")


def _fmt(rule: Sequence[DimSpec]) -> str:
    from ..rules import format_rule

    return format_rule(rule)


def _size_eq(a: Size, b: Size) -> bool:
    """Equal sizes, for checking a rule (symbolic sizes: equal at the hints)."""
    if type(a) is int and type(b) is int:
        return a == b
    ha, hb = _hint(a), _hint(b)
    return ha is None or hb is None or ha == hb


def _hint(x: Size) -> int | None:
    if type(x) is int:
        return x
    hint = getattr(x, "hint", None)  # a symbolic.Sym
    if hint is None:
        node = getattr(x, "node", None)  # a torch.SymInt
        hint = getattr(node, "hint", None)
    return hint if type(hint) is int else None


def _prod(xs: Any) -> Size:
    p: Size = 1
    for x in xs:
        p = p * x
    return p

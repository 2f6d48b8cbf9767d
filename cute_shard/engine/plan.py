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
            # (the rule's own sizes: ints, where ``shape`` may hold integers that only equal
            # them, numpy's)
            return Plan(made_carry, {}, Group(rule.shape, made), made, -1)
    scan = _Scan(shape, static)
    spec: Any  # (dispatched on ``type(spec)`` once per spec, which mypy does not narrow)
    for o, spec in enumerate(rule):
        cls = type(spec)
        if cls is InputDim:
            scan.input_dim(o, spec.input_dim)
        elif cls is Split:
            scan.split(o, spec)
        elif cls is Flatten:
            scan.flatten(o, spec.dims)
        elif cls is Singleton:
            scan.out.append(1)
        else:
            scan.special(o, spec)
    scan.finish(rule, complex_view)
    return _readings(rule, complex_view, scan)


class _Scan:
    """One pass over a rule's specs for an input of ``shape``, each read by the method for its
    kind, checking each against the shape (ValueError; :class:`NotStatic` where ``static`` and
    a size it must compute with is symbolic).

    It finds ``out`` (the output sizes), ``used[d]`` (input dim d's first output dim, -1 if
    none), ``carry`` (input dim -> the output dim it moves to whole), ``splits`` (a Split's
    input dims -> ``[sizes, bitmask of the pieces seen]``), and what the rule is:
    ``in_order`` (the specs read the input dims in order, a Split's pieces together),
    ``is_view`` (a Flatten or a Split that keeps the size: only view-family ops), ``plain``
    (only InputDim, Flatten, Split and Singleton) and ``grouped`` (some spec reads input dims
    other than whole: a group to route)."""

    __slots__ = (
        "carry", "grouped", "in_order", "ints", "is_view", "last", "ndim", "out", "plain",
        "prev", "shape", "splits", "static", "used",
    )  # fmt: skip

    def __init__(self, shape: tuple[Size, ...], static: bool) -> None:
        self.shape = shape
        self.static = static
        ndim = self.ndim = len(shape)
        ints = True  # (symbolic sizes need the symbolic engine only where the plan computes)
        for n in shape:
            if type(n) is not int:
                ints = False
                break
        if ints and ndim and min(shape) < 0:
            d = next(d for d, n in enumerate(shape) if n < 0)
            raise ValueError(f"input dim {d} has size {shape[d]}; sizes must be >= 0")
        self.ints = ints
        self.used = [-1] * ndim
        self.out: list[Size] = []
        self.carry: dict[int, int] = {}
        self.splits: dict[tuple[int, ...], list[Any]] | None = None
        self.last = -1  # the last input dim of the specs read so far, if they are in order
        self.prev: Any = None  # (dims, piece) of the last Split piece, if it was the last spec
        self.in_order = self.plain = True
        self.is_view = self.grouped = False

    def _take(self, d: int, o: int) -> None:
        """Input dim ``d`` is read by output dim ``o`` (once: a rule reads each dim once)."""
        if d >= self.ndim or self.used[d] >= 0:
            _bad_dim(d, self.ndim)
        self.used[d] = o

    def _next(self, first: int, last: int) -> None:
        """The specs read input dims ``first..last`` next."""
        if first <= self.last:
            self.in_order = False
        self.last = last

    def input_dim(self, o: int, d: int) -> None:
        self._take(d, o)
        self.carry[d] = o
        self.out.append(self.shape[d])
        self._next(d, d)
        self.prev = None

    def flatten(self, o: int, dims: tuple[int, ...]) -> None:
        if self.static and not self.ints:
            raise NotStatic
        size: Size = 1
        for d in dims:
            self._take(d, o)
            size = size * self.shape[d]
        self.out.append(size)
        self._next(dims[0], dims[-1])
        self.is_view = self.grouped = True
        self.prev = None

    def split(self, o: int, spec: Any) -> None:
        src = spec.input_dim
        dims = (src.input_dim,) if type(src) is InputDim else getattr(src, "dims", None)
        if dims is None:
            raise ValueError(f"a Split can only split an input dim or a Flatten, got {src}")
        sizes = spec.group_shape
        j = spec.split_id
        if self.static and (not self.ints or type(sizes[j]) is not int):
            raise NotStatic
        if self.splits is None:
            self.splits = {}
        entry = self.splits.get(dims)
        if entry is None:
            for d in dims:
                self._take(d, o)
            entry = self.splits[dims] = [sizes, 0]
        if entry[1] >> j & 1 or len(sizes) != len(entry[0]):
            raise ValueError(f"rule has piece {j} of {spec} twice, or pieces of two splits")
        entry[1] |= 1 << j
        if j == 0:
            self._next(dims[0], dims[-1])
        elif self.prev != (dims, j - 1):
            self.in_order = False  # a view's pieces come in order (size-1 dims between)
        self.prev = (dims, j)
        self.grouped = True
        self.out.append(sizes[j])

    def special(self, o: int, spec: Any) -> None:
        """A Broadcast, Repeat or NewDim (anything else is a ValueError)."""
        if self.static and not self.ints:
            raise NotStatic
        self.out.append(_special(spec, o, self.shape, self.used, self.static))
        self.plain = self.in_order = False
        self.grouped = True  # (a broadcast or repeat of an input dim is a group)

    def finish(self, rule: Sequence[DimSpec], complex_view: bool | None) -> None:
        """The checks of the whole rule: dropped dims, whole Splits."""
        used = self.used
        if -1 in used:
            _check_dropped(rule, self.shape, used, complex_view)
        if self.splits is not None:
            if _check_splits(self.splits, self.shape):
                self.plain = self.in_order = False  # view_as_real
            else:
                self.is_view = True  # a Split that keeps the size: only view-family ops
        if self.plain and self.in_order and not self.is_view:
            # InputDims and Singletons only: a view if it both drops and adds a dim (squeeze
            # only drops, unsqueeze only adds); otherwise every dim moves whole.
            self.is_view = len(self.out) > len(self.carry) and -1 in used


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


def _readings(rule: Sequence[DimSpec], complex_view: bool | None, scan: _Scan) -> Plan:
    """The plan's readings (see the module docstring)."""
    shape, out, carry, static = scan.shape, tuple(scan.out), scan.carry, scan.static
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
    if (tag is ViewRule or scan.is_view) and scan.in_order and static:
        if not scan.ints:
            raise NotStatic
        view = Group(shape, out)
        carried = carry
    elif scan.grouped:
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
                g = Group(sizes, (sizes[0], 2), axis=axis, out_dims=(o, -1), home={dims[0]: o})
                group_of[dims[0]] = g  # (the pair itself no output dim may shard)
                continue
            else:
                g = Group(sizes, (out[o],), axis=axis, out_dims=(o,), home=dict.fromkeys(dims, o))
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
            g = Group(  # (a view of its dims: a shard's home is read from the flat index)
                tuple(shape[d] for d in dims),
                tuple(pieces),
                axis={d: i for i, d in enumerate(dims)},
                out_dims=tuple(outs),
            )
        elif (cls is Repeat or cls is Broadcast) and type(
            inner := spec.input_dim if cls is Repeat else spec.dim
        ) is InputDim:
            d = inner.input_dim
            if cls is Repeat:  # the copies: a virtual outer axis every rank holds whole
                g = Group(
                    (spec.times, shape[d]), (out[o],), axis={d: 1}, out_dims=(o,), home={d: o}
                )
            else:
                g = Group((shape[d],), (out[o],), axis={d: 0}, out_dims=(o,), home={d: o})
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

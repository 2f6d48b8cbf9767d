"""The DimSpec vocabulary: how one output dim of a view op derives from input dims.

A *rule* (``Rule = tuple[DimSpec, ...]``) has one DimSpec per output dim.  The
vocabulary mirrors ``torch.distributed.tensor._ops._view_ops`` (same class and
field names) but every value is a frozen, slotted, hashable dataclass:

============================  ==========================  =========================================
class                         printed                     meaning of the output dim
============================  ==========================  =========================================
``InputDim(0)``               ``d0``                      input dim 0, unchanged
``Singleton()``               ``1``                       a new dim of size 1
``Flatten((d0, d1))``         ``flat(d0,d1)``             input dims 0 and 1 merged (row-major)
``Split(x, (4, 8), 1)``       ``split(x, (4,8), 1)``      piece 1 of ``x`` viewed as shape (4, 8)
``Broadcast(x, 8)``           ``bcast(x, 8)``             size-1 ``x`` broadcast to 8
``NewDim(4)``                 ``new(4)``                  a new dim of size 4 unrelated to input
``Repeat(x, 3)``              ``repeat(x, 3)``            ``x`` tiled 3 times
============================  ==========================  =========================================

A rule prints as a Python-style tuple of those: ``format_rule(rule)``, and
``parse_rule`` reads the notation back (int sizes only).

Construction: the dataclass constructors *validate* (wrong types, negative
sizes, out-of-range split ids, a Flatten of fewer than two or non-increasing
``InputDim``s ... raise ``ValueError`` saying what was expected and how to fix
it) but do not rewrite.  The ``new`` classmethods *canonicalise*, following
torch's ``*.new`` smart constructors plus a few obvious identities:

* ``Flatten.new(())`` is ``1``; ``Flatten.new((d2,))`` is ``d2``; nested
  Flattens are spliced and Singletons dropped.
* ``Split.new(x, (n,), 0)`` is ``x``; a size-1 piece is ``1``; other size-1
  pieces are dropped from ``group_shape`` (ids renumbered) and a Split left
  with a single piece is its input (torch's ``Split.new`` would keep
  ``Split(x, (n,), 0)``; its ``view_groups`` never produces that case).
  The raw ``Split`` accepts size-1 pieces because torch's ``view_as_real``
  rule is ``split(d, (n,2), i)`` even for ``n == 1``.
* ``Broadcast.new(x, 1)`` is ``x``; ``NewDim.new(1)`` is ``1``;
  ``Repeat.new(x, 1)`` is ``x`` and ``Repeat.new(1, n)`` is ``bcast(1, n)``.

Sizes may be ``torch.SymInt``.  Canonicalisation then asks
``statically_known_true`` and raises :class:`UndecidableRule` rather than
guard.  Specs holding SymInts are not hashable (SymInt is not) and comparing
them with ``==`` may guard; use :func:`map_sizes` to substitute hints first.

Worked example -- ``x.view(6, 4, 2)`` for ``x`` of shape ``(2, 3, 8)``::

    >>> from cute_shard.rules import view_groups, format_rule
    >>> format_rule(view_groups((2, 3, 8), (6, 4, 2)))
    '(flat(d0,d1), split(d2, (4,2), 0), split(d2, (4,2), 1))'
    >>> from cute_shard.rules import Split, InputDim
    >>> str(Split.new(InputDim(2), (1, 4, 1, 2), 3))   # size-1 pieces dropped
    'split(d2, (4,2), 1)'
    >>> str(Split.new(InputDim(2), (1, 8), 1))          # one piece left: d2 itself
    'd2'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ._sym import Size, decide_eq, is_symint

__all__ = [
    "Broadcast",
    "ComplexRule",
    "DimSpec",
    "Flatten",
    "InputDim",
    "NewDim",
    "Repeat",
    "Rule",
    "Singleton",
    "Split",
    "ViewRule",
    "canonicalize",
    "format_rule",
    "map_sizes",
    "parse_rule",
    "parse_spec",
]


def _check_size(value: object, where: str, fix: str) -> None:
    # Only plain ints are range-checked; inspecting a SymInt's value would guard.
    if type(value) is int:
        if value < 0:
            raise ValueError(f"{where}: expected a size >= 0, got {value}; fix: {fix}")
    elif not is_symint(value):
        raise ValueError(
            f"{where}: expected an int or SymInt size, got {value!r} of type "
            f"{type(value).__name__}; fix: {fix}"
        )


def _check_spec(value: object, where: str) -> None:
    if not isinstance(value, DimSpec):
        raise ValueError(
            f"{where}: expected a DimSpec, got {value!r} of type {type(value).__name__}; "
            "fix: wrap input dim indices as InputDim(i)"
        )


@dataclass(frozen=True, slots=True, repr=False)
class DimSpec:
    """Base class: how one output dim is derived from the input dims."""

    def inputs(self) -> tuple[DimSpec, ...]:
        """The DimSpecs this one is built from (empty for leaves)."""
        return ()

    def __repr__(self) -> str:
        # The compact notation makes assertion diffs of rules readable.
        return str(self)


@dataclass(frozen=True, slots=True, repr=False)
class InputDim(DimSpec):
    """The output dim is input dim ``input_dim`` (a non-negative index)."""

    input_dim: int

    def __post_init__(self) -> None:
        if type(self.input_dim) is not int or self.input_dim < 0:
            raise ValueError(
                f"InputDim.input_dim: expected an int >= 0, got {self.input_dim!r}; "
                "fix: normalise negative dims (dim + ndim) before building the spec"
            )

    @classmethod
    def new(cls, input_dim: int) -> InputDim:
        """Interned ``InputDim`` for small indices (rules reuse them constantly)."""
        if type(input_dim) is int and 0 <= input_dim < len(INPUT_DIMS):
            return INPUT_DIMS[input_dim]
        return cls(input_dim)

    def __str__(self) -> str:
        return f"d{self.input_dim}"


INPUT_DIMS: tuple[InputDim, ...] = tuple(InputDim(i) for i in range(64))
"""``InputDim(0)`` .. ``InputDim(63)``, built once: ``InputDim.new`` hands these out, and
builders slice them (``INPUT_DIMS[:ndim]`` is the identity rule of an ``ndim``-d tensor)."""


@dataclass(frozen=True, slots=True, repr=False)
class Singleton(DimSpec):
    """The output dim has size 1 and carries no input data dimension."""

    def __str__(self) -> str:
        return "1"


SINGLETON = Singleton()


@dataclass(frozen=True, slots=True, repr=False)
class Broadcast(DimSpec):
    """The output dim is ``dim`` (of size 1) broadcast to ``dim_size``."""

    dim: DimSpec
    dim_size: Size

    def __post_init__(self) -> None:
        _check_spec(self.dim, "Broadcast.dim")
        _check_size(self.dim_size, "Broadcast.dim_size", "pass the broadcast target size")

    @classmethod
    def new(cls, dim: DimSpec, dim_size: Size) -> DimSpec:
        """Canonical broadcast: broadcasting to size 1 is ``dim`` itself."""
        if decide_eq(dim_size, 1, "Broadcast.new"):
            return dim
        return cls(dim, dim_size)

    @classmethod
    def unchecked(cls, dim: DimSpec, dim_size: Size) -> Broadcast:
        """``Broadcast(dim, dim_size)`` without the checks, for a builder whose construction
        guarantees them (a DimSpec and a size other than 1)."""
        b = _new(cls)
        _set_broadcast_dim(b, dim)
        _set_broadcast_size(b, dim_size)
        return b

    def inputs(self) -> tuple[DimSpec, ...]:
        return (self.dim,)

    def __str__(self) -> str:
        return f"bcast({self.dim}, {self.dim_size})"


@dataclass(frozen=True, slots=True, repr=False)
class NewDim(DimSpec):
    """The output dim is a new dim of ``size`` not derived from the input."""

    size: Size

    def __post_init__(self) -> None:
        _check_size(self.size, "NewDim.size", "pass the new dim's size")

    @classmethod
    def new(cls, size: Size) -> DimSpec:
        """Canonical new dim: a new dim of size 1 is ``Singleton()``."""
        if decide_eq(size, 1, "NewDim.new"):
            return SINGLETON
        return cls(size)

    def __str__(self) -> str:
        return f"new({self.size})"


@dataclass(frozen=True, slots=True, repr=False)
class Repeat(DimSpec):
    """The output dim is ``input_dim`` tiled ``times`` times."""

    input_dim: DimSpec
    times: Size

    def __post_init__(self) -> None:
        _check_spec(self.input_dim, "Repeat.input_dim")
        _check_size(self.times, "Repeat.times", "pass a repeat count >= 0")

    @classmethod
    def new(cls, input_dim: DimSpec, times: Size) -> DimSpec:
        """Canonical repeat (as torch): once is a no-op; a repeated 1 is a broadcast."""
        if decide_eq(times, 1, "Repeat.new"):
            return input_dim
        if isinstance(input_dim, Singleton):
            return Broadcast(input_dim, times)
        return cls(input_dim, times)

    def inputs(self) -> tuple[DimSpec, ...]:
        return (self.input_dim,)

    def __str__(self) -> str:
        return f"repeat({self.input_dim}, {self.times})"


@dataclass(frozen=True, slots=True, repr=False)
class Flatten(DimSpec):
    """The output dim merges ``input_dims`` (increasing InputDims) row-major.

    ``dims`` holds their indices (``(0, 1)`` for ``flat(d0,d1)``), computed once for the
    propagation paths that read them on every call."""

    input_dims: tuple[InputDim, ...]
    dims: tuple[int, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        dims = self.input_dims
        if not isinstance(dims, tuple):
            if not isinstance(dims, Sequence):
                raise ValueError(
                    f"Flatten.input_dims: expected a sequence of InputDim, got {dims!r}; "
                    "fix: pass a tuple such as (InputDim(0), InputDim(1))"
                )
            dims = tuple(dims)
            # Coerce lists to tuples so the value stays hashable.
            object.__setattr__(self, "input_dims", dims)
        if len(dims) < 2:
            raise ValueError(
                f"Flatten.input_dims: expected at least 2 dims, got {len(dims)}; "
                "fix: use Flatten.new, which turns () into Singleton() and (x,) into x"
            )
        prev = -1
        for d in dims:
            if not isinstance(d, InputDim) or d.input_dim <= prev:
                raise ValueError(
                    f"Flatten.input_dims: expected strictly increasing InputDims, got "
                    f"({', '.join(map(str, dims))}); fix: flatten input dims in order"
                )
            prev = d.input_dim
        object.__setattr__(self, "dims", tuple([d.input_dim for d in dims]))

    @classmethod
    def new(cls, dims: Iterable[DimSpec]) -> DimSpec:
        """Canonical flatten: () -> Singleton, (x,) -> x, nested/Singleton spliced."""
        flat: list[DimSpec] = []
        for d in dims:
            if isinstance(d, Flatten):
                flat.extend(d.input_dims)
            elif not isinstance(d, Singleton):
                flat.append(d)
        if not flat:
            return SINGLETON
        if len(flat) == 1:
            return flat[0]
        return cls(tuple(flat))  # type: ignore[arg-type]

    def inputs(self) -> tuple[DimSpec, ...]:
        return self.input_dims

    def __str__(self) -> str:
        return f"flat({','.join(map(str, self.input_dims))})"


@dataclass(frozen=True, slots=True, repr=False)
class Split(DimSpec):
    """The output dim is piece ``split_id`` of ``input_dim`` viewed as ``group_shape``.

    The raw constructor accepts size-1 pieces (torch's ``view_as_real`` rule
    uses ``(n, 2)`` even when ``n == 1``); ``Split.new`` drops them.
    """

    input_dim: DimSpec
    group_shape: tuple[Size, ...]
    split_id: int

    def __post_init__(self) -> None:
        _check_spec(self.input_dim, "Split.input_dim")
        shape = self.group_shape
        if not isinstance(shape, tuple):
            if not isinstance(shape, Sequence):
                raise ValueError(
                    f"Split.group_shape: expected a sequence of sizes, got {shape!r}; "
                    "fix: pass a tuple such as (4, 8)"
                )
            shape = tuple(shape)
            object.__setattr__(self, "group_shape", shape)
        if len(shape) < 2:
            raise ValueError(
                f"Split.group_shape: expected at least 2 pieces, got {shape!r}; "
                "fix: use Split.new, which turns a one-piece split into its input"
            )
        for s in shape:
            _check_size(s, "Split.group_shape", "pass non-negative piece sizes")
        sid = self.split_id
        if type(sid) is not int or not 0 <= sid < len(shape):
            raise ValueError(
                f"Split.split_id: expected an int in [0, {len(shape) - 1}], got {sid!r}; "
                "fix: index a piece of group_shape"
            )

    @classmethod
    def new(cls, input_dim: DimSpec, group_shape: Sequence[Size], split_id: int) -> DimSpec:
        """Canonical split: drop size-1 pieces like torch's ``Split.new``.

        A one-piece group (before or after dropping) is ``input_dim`` itself and
        a size-1 piece is ``Singleton()``.
        """
        shape = tuple(group_shape)
        if type(split_id) is not int or not 0 <= split_id < len(shape):
            raise ValueError(
                f"Split.new: split_id must index group_shape {shape!r}, got {split_id!r}; "
                "fix: pass 0 <= split_id < len(group_shape)"
            )
        if len(shape) == 1:
            return input_dim
        if decide_eq(shape[split_id], 1, "Split.new"):
            return SINGLETON
        kept: list[Size] = []
        new_id = 0
        for i, s in enumerate(shape):
            if i == split_id:
                new_id = len(kept)
                kept.append(s)
            elif not decide_eq(s, 1, "Split.new"):
                kept.append(s)
        if len(kept) == 1:
            return input_dim
        return cls(input_dim, tuple(kept), new_id)

    @classmethod
    def pieces(cls, input_dim: DimSpec, group_shape: tuple[Size, ...]) -> list[Split]:
        """Every piece of ``input_dim`` viewed as ``group_shape``: ``[Split(input_dim,
        group_shape, k) for k in range(len(group_shape))]`` without the checks, for a builder
        whose construction guarantees them (a DimSpec, a tuple of two or more sizes):
        ``view_groups`` builds one per output piece, and the checks would be most of its cost."""
        out = []
        for k in range(len(group_shape)):
            piece = _new(cls)
            _set_split_input(piece, input_dim)
            _set_split_shape(piece, group_shape)
            _set_split_id(piece, k)
            out.append(piece)
        return out

    def inputs(self) -> tuple[DimSpec, ...]:
        return (self.input_dim,)

    def __str__(self) -> str:
        return f"split({self.input_dim}, ({','.join(map(str, self.group_shape))}), {self.split_id})"


_new = object.__new__


def _slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The setter of slot ``name`` of ``cls`` (its descriptor in the class's namespace)."""
    setter: Callable[[Any, Any], None] = cls.__dict__[name].__set__
    return setter


# The slots' own setters: a third cheaper than object.__setattr__ by name, and the unchecked
# constructors run on the hot path (one Split per piece of a view).
_set_split_input = _slot_setter(Split, "input_dim")
_set_split_shape = _slot_setter(Split, "group_shape")
_set_split_id = _slot_setter(Split, "split_id")
_set_flatten_inputs = _slot_setter(Flatten, "input_dims")
_set_flatten_dims = _slot_setter(Flatten, "dims")
_set_broadcast_dim = _slot_setter(Broadcast, "dim")
_set_broadcast_size = _slot_setter(Broadcast, "dim_size")


def _flatten_unchecked(lo: int, hi: int) -> Flatten:
    """``Flatten`` of the input dims ``lo .. hi-1`` (two or more) without the checks."""
    f = _new(Flatten)
    _set_flatten_inputs(f, tuple([InputDim.new(i) for i in range(lo, hi)]))
    _set_flatten_dims(f, tuple(range(lo, hi)))
    return f


# The consecutive input dims lo .. hi-1 as one spec, for the ranks models have, built once like
# the InputDims (DimSpecs are immutable values): _FLATTENS[(lo, hi)].
_FLATTENS: dict[tuple[int, int], DimSpec] = {
    (lo, hi): INPUT_DIMS[lo] if hi - lo == 1 else _flatten_unchecked(lo, hi)
    for hi in range(1, 13)
    for lo in range(hi)
}


def flatten_range(lo: int, hi: int) -> DimSpec:
    """The input dims ``lo .. hi-1`` as one spec: ``Flatten.new([InputDim(i) for i in
    range(lo, hi)])`` for ``0 <= lo < hi``, built once for the ranks models have (up to 12).

    >>> flatten_range(1, 3), flatten_range(2, 3)
    (flat(d1,d2), d2)
    """
    made = _FLATTENS.get((lo, hi))
    if made is not None:
        return made
    return InputDim.new(lo) if hi - lo == 1 else _flatten_unchecked(lo, hi)


Rule: TypeAlias = tuple[DimSpec, ...]
"""One DimSpec per output dim."""


class ViewRule(tuple):  # type: ignore[type-arg]
    """A rule built for ``view``/``reshape``/``flatten``/``unflatten``: the same tuple (equal to
    it, hashing as it, printed as it) that also says which op made it. The rule of a view can
    also be another op's (dropping a size-1 dim is ``squeeze``'s too, flattening a trailing
    ``(n, 2)`` is ``view_as_complex``'s), whose local op treats empty ranks and complex
    elements differently; a propagator given a ``ViewRule`` knows the local op is a view.

    A rule the int builder made also records what it read while making it, for the input
    shape it was made for (``shape``; None when not recorded): ``out_shape``, the size of each
    output dim, and ``carry``, the output dim of each input dim the rule moves whole (an
    ``InputDim``). A propagator may use them for that shape only. Read-only: rules are cached
    and shared.

    Post: ``out_shape[o]`` is output dim o's size under ``shape``; ``carry[d] == o`` exactly
    when ``rule[o] == InputDim(d)``.

    >>> from cute_shard.rules import view_groups
    >>> rule = view_groups((8, 16, 32), (128, 32))
    >>> type(rule).__name__, rule.out_shape, rule.carry
    ('ViewRule', (128, 32), {2: 1})
    """

    shape: tuple[int, ...] | None = None
    out_shape: tuple[int, ...] | None = None
    carry: dict[int, int] | None = None

    @classmethod
    def of(
        cls,
        specs: Iterable[DimSpec],
        shape: tuple[int, ...] | None = None,
        out_shape: tuple[int, ...] | None = None,
        carry: dict[int, int] | None = None,
    ) -> ViewRule:
        """The rule ``specs`` tagged as a view's, recording ``out_shape`` and ``carry`` for
        the input ``shape`` when one is given (the caller vouches for the Post above)."""
        r = tuple.__new__(cls, specs)
        if shape is not None:
            r.shape = shape
            r.out_shape = out_shape
            r.carry = carry
        return r


class ComplexRule(tuple):  # type: ignore[type-arg]
    """The rule of ``view_as_complex`` (see :class:`ViewRule`): its output dim counts complex
    elements, so every rank must hold whole (real, imag) pairs."""

    __slots__ = ()


def format_rule(rule: Iterable[DimSpec]) -> str:
    """Print a rule as a Python-style tuple: ``()``, ``(d0,)``, ``(flat(d0,d1), d2)``."""
    items = [str(s) for s in rule]
    if len(items) == 1:
        return f"({items[0]},)"
    return f"({', '.join(items)})"


def map_sizes(rule: Iterable[DimSpec], fn: Callable[[Size], Size]) -> Rule:
    """Apply ``fn`` to every size in ``rule`` (e.g. SymInt -> hint), keeping structure.

    Specs are rebuilt with the validating constructors, not canonicalised, so
    the result has exactly the structure of ``rule``.
    """

    def go(s: DimSpec) -> DimSpec:
        if isinstance(s, Split):
            return Split(go(s.input_dim), tuple(fn(x) for x in s.group_shape), s.split_id)
        if isinstance(s, Broadcast):
            return Broadcast(go(s.dim), fn(s.dim_size))
        if isinstance(s, Repeat):
            return Repeat(go(s.input_dim), fn(s.times))
        if isinstance(s, NewDim):
            return NewDim(fn(s.size))
        return s  # InputDim, Singleton, Flatten carry no sizes

    return tuple(go(s) for s in rule)


def canonicalize(rule: Iterable[DimSpec]) -> Rule:
    """Rebuild every spec of ``rule`` through the canonicalising ``new`` constructors."""

    def go(s: DimSpec) -> DimSpec:
        if isinstance(s, Split):
            return Split.new(go(s.input_dim), s.group_shape, s.split_id)
        if isinstance(s, Broadcast):
            return Broadcast.new(go(s.dim), s.dim_size)
        if isinstance(s, Repeat):
            return Repeat.new(go(s.input_dim), s.times)
        if isinstance(s, NewDim):
            return NewDim.new(s.size)
        if isinstance(s, Flatten):
            return Flatten.new(s.input_dims)
        return s

    return tuple(go(s) for s in rule)


# ---------------------------------------------------------------------------
# Parsing the printed notation (int sizes only).  Hand-written recursive
# descent: the grammar is tiny and the nesting depth is at most three.
# ---------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, expected: str) -> ValueError:
        got = self.text[self.pos : self.pos + 12] or "end of text"
        return ValueError(
            f"parse_rule: expected {expected} at offset {self.pos} of {self.text!r}, "
            f"got {got!r}; fix: use the notation of format_rule, e.g. '(flat(d0,d1), d2)'"
        )

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.skip()
        return self.text.startswith(token, self.pos)

    def eat(self, token: str) -> None:
        if not self.peek(token):
            raise self.fail(repr(token))
        self.pos += len(token)

    def integer(self) -> int:
        self.skip()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos].isdigit():
            self.pos += 1
        if start == self.pos:
            raise self.fail("an integer")
        return int(self.text[start : self.pos])

    def sizes(self) -> tuple[int, ...]:
        self.eat("(")
        out = [self.integer()]
        while self.peek(","):
            self.eat(",")
            out.append(self.integer())
        self.eat(")")
        return tuple(out)

    def spec(self) -> DimSpec:
        if self.peek("flat("):
            self.eat("flat(")
            dims = [self.spec()]
            while self.peek(","):
                self.eat(",")
                dims.append(self.spec())
            self.eat(")")
            return Flatten(tuple(dims))  # type: ignore[arg-type]
        if self.peek("split("):
            self.eat("split(")
            inner = self.spec()
            self.eat(",")
            shape = self.sizes()
            self.eat(",")
            sid = self.integer()
            self.eat(")")
            return Split(inner, shape, sid)
        for name, cls in (("bcast(", Broadcast), ("repeat(", Repeat)):
            if self.peek(name):
                self.eat(name)
                inner = self.spec()
                self.eat(",")
                size = self.integer()
                self.eat(")")
                return cls(inner, size)
        if self.peek("new("):
            self.eat("new(")
            size = self.integer()
            self.eat(")")
            return NewDim(size)
        if self.peek("d"):
            self.eat("d")
            return InputDim.new(self.integer())
        if self.peek("1"):
            self.eat("1")
            return SINGLETON
        raise self.fail("a DimSpec (d<i>, 1, flat, split, bcast, new, repeat)")

    def end(self) -> None:
        self.skip()
        if self.pos != len(self.text):
            raise self.fail("end of text")


def parse_spec(text: str) -> DimSpec:
    """Parse one DimSpec in the printed notation, e.g. ``'split(d0, (4,8), 1)'``."""
    p = _Parser(text)
    spec = p.spec()
    p.end()
    return spec


def parse_rule(text: str) -> Rule:
    """Parse a rule printed by :func:`format_rule`, e.g. ``'(flat(d0,d1), d2)'``."""
    p = _Parser(text)
    p.eat("(")
    out: list[DimSpec] = []
    if not p.peek(")"):
        out.append(p.spec())
        while p.peek(","):
            p.eat(",")
            if p.peek(")"):
                break  # trailing comma of a one-element tuple
            out.append(p.spec())
    p.eat(")")
    p.end()
    return tuple(out)

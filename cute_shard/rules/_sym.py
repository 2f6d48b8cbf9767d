"""Static (guard-free) decisions about sizes that may be ``torch.SymInt``.

Rule builders compare sizes (``s == 1``, ``f == t``, ``t > f`` ...).  For plain
ints that is ordinary Python.  For ``torch.SymInt`` sizes, converting a
comparison to ``bool`` would make the ``ShapeEnv`` install a guard (and, for
unbacked symbols, raise a data-dependent error).  Instead every comparison here
is decided for every value of the symbols: by the sizes' structure where it
settles it (see *Speed* below), else by ``statically_known_true`` in both
polarities, which never installs a guard:

* provably true   -> ``True``
* provably false  -> ``False``
* neither         -> :class:`UndecidableRule` is raised.

A builder that returns normally has therefore made only decisions that hold for
*every* value of the symbols the ``ShapeEnv`` admits, so the rule equals the
concrete rule at the hints (and at any other admissible values).  The engine
catches :class:`UndecidableRule` and hands the op to its fallback path.

torch is never imported by this module: a value can only be a ``SymInt`` if
torch is already in ``sys.modules``, so the check is free for plain ints and
``statically_known_true`` is imported lazily on the first symbolic question.

Example (inside a ShapeEnv where ``s0`` has hint 4, range ``[2, inf)``)::

    decide_eq(s0, 1, "squeeze")       # False: s0 >= 2 is known statically
    decide_eq(s0 * s1, s1 * s0, "x")  # True: the expressions are identical
    decide_eq(s0, s1, "view_groups")  # raises UndecidableRule

Speed: asking the ``ShapeEnv`` costs a sympy simplification (~0.1-2 ms). Most sizes are
monomials, products of an int and symbols, and most questions about them are settled by their
structure alone, so :class:`Codes` answers those first and the ``ShapeEnv`` is asked only about
the rest. ``Codes`` writes a monomial as one int: the symbols of a call are numbered with
distinct primes above ``2**64`` (every int factor is below it), so ``c * s0**2 * s1`` becomes
``c * p0**2 * p1``. By unique factorisation, code(a) divides code(b) exactly when ``b/a`` is an
int times a product of symbols, i.e. ``a`` divides ``b`` for every value of the symbols; and
with the symbols' lower bounds (``s0 >= 2``) ``b = a * r`` is provably larger when ``r >= 2``::

    codes = Codes()
    a, b = codes.code(s0), codes.code(4 * s0 * s1)   # p0, 4*p0*p1
    codes.gt(b, a)                                    # True: b = a * 4*s1 and 4*s1 >= 8
    codes.eq(codes.code(s0), codes.code(s1))          # None: not decided by the structure

Size comparators: a builder that makes many decisions (``view_groups``) runs one algorithm over
a :class:`SizeComparator`, which turns the sizes into *keys* once and answers ``eq``, ``gt`` and
``divides`` on them: :class:`IntSizes` (ints, Python's operators), :class:`CodedSizes` (the
codes above; :class:`CodesUndecided` for what they leave open) and :class:`AskedSizes`
(``decide_eq`` / ``decide_gt``: any sizes)::

    sizes = CodedSizes("view_groups")
    a, b = sizes.keys((s0, 4 * s0 * s1))
    sizes.gt(b, a), sizes.sizes((b // a,))            # True, (4*s1,)
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Protocol,
    SupportsIndex,
    TypeAlias,
    TypeGuard,
    TypeVar,
    cast,
)

if TYPE_CHECKING:
    import torch

    Size: TypeAlias = int | torch.SymInt
else:
    Size: TypeAlias = Any

__all__ = [
    "INT_SIZES",
    "AskedSizes",
    "CodedSizes",
    "Codes",
    "CodesUndecided",
    "IntSizes",
    "Size",
    "SizeComparator",
    "UndecidableRule",
    "as_dim",
    "as_size",
    "decide_eq",
    "decide_gt",
    "is_symint",
]


class UndecidableRule(Exception):
    """A rule depends on a size comparison that cannot be decided statically.

    Raised by rule builders when some input size is a ``torch.SymInt`` and the
    rule's structure depends on a comparison (for example ``s0 == s1``) that
    the ``ShapeEnv`` can neither prove nor refute without installing a guard.
    It is deliberately *not* a ``ValueError``: the arguments may be perfectly
    legal, the rule is just not statically known.  Callers should fall back
    (for example, trace the op on concrete hints or replicate).

    Attributes:
        op: name of the builder that gave up.
        question: the comparison that could not be decided, e.g. ``"s0 == s1"``.
    """

    def __init__(self, op: str, question: str) -> None:
        self.op = op
        self.question = question
        super().__init__(
            f"{op}: cannot decide `{question}` statically (symbolic sizes); "
            "the rule depends on it. Hand this op to the fallback path, or "
            "specialize the sizes involved."
        )


def is_symint(x: object) -> TypeGuard[torch.SymInt]:
    """True if ``x`` is a ``torch.SymInt`` (never imports torch)."""
    torch_mod = sys.modules.get("torch")
    return torch_mod is not None and isinstance(x, torch_mod.SymInt)


def _statically_known_true(cond: object) -> bool:
    # Lazy import keeps ``cute_shard.rules`` importable without torch; this is
    # only reached when a SymInt is involved, hence torch is already loaded.
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(cond))  # type: ignore[arg-type]


def decide_eq(a: Size, b: Size, op: str) -> bool:
    """Decide ``a == b`` without guards; raise :class:`UndecidableRule` if unknown."""
    if type(a) is int and type(b) is int:
        return a == b
    codes = Codes()
    ca, cb = codes.code(a), codes.code(b)
    decided = None if ca is None or cb is None else codes.eq(ca, cb)
    if decided is not None:
        return decided
    # A polarity that is false at the hints cannot be provable: skip asking for it.
    ha, hb = _hint_of(a), _hint_of(b)
    same = None if ha is None or hb is None else ha == hb
    if same is not False and _statically_known_true(a == b):
        return True
    if same is not True and _statically_known_true(a != b):
        return False
    raise UndecidableRule(op, f"{a} == {b}")


def decide_gt(a: Size, b: Size, op: str) -> bool:
    """Decide ``a > b`` without guards; raise :class:`UndecidableRule` if unknown."""
    if type(a) is int and type(b) is int:
        return a > b
    codes = Codes()
    ca, cb = codes.code(a), codes.code(b)
    decided = None if ca is None or cb is None else codes.gt(ca, cb)
    if decided is not None:
        return decided
    if _statically_known_true(a > b):
        return True
    if _statically_known_true(a <= b):
        return False
    raise UndecidableRule(op, f"{a} > {b}")


def _hint_of(x: Size) -> int | None:
    if type(x) is int:
        return x
    hint = getattr(getattr(x, "node", None), "hint", None)
    return hint if type(hint) is int else None


# ---------------------------------------------------------------------------
# Monomial codes
# ---------------------------------------------------------------------------

LIMIT = 1 << 64
"""Every int factor of a coded size is below this; atoms are numbered with primes above it.
So a code below ``LIMIT`` is a plain int."""

# The first 32 primes above LIMIT (``tests/rules/test_rules_symint.py`` checks them): a call
# whose sizes hold more distinct atoms than this is not coded (it asks the ShapeEnv instead).
_PRIMES = (
    18446744073709551629, 18446744073709551653, 18446744073709551667, 18446744073709551697,
    18446744073709551709, 18446744073709551757, 18446744073709551923, 18446744073709551947,
    18446744073709552009, 18446744073709552109, 18446744073709552157, 18446744073709552213,
    18446744073709552253, 18446744073709552267, 18446744073709552333, 18446744073709552357,
    18446744073709552361, 18446744073709552373, 18446744073709552421, 18446744073709552423,
    18446744073709552501, 18446744073709552541, 18446744073709552577, 18446744073709552597,
    18446744073709552613, 18446744073709552621, 18446744073709552697, 18446744073709552729,
    18446744073709552859, 18446744073709552901, 18446744073709552957, 18446744073709552969,
)  # fmt: skip


class Codes:
    """One call's sizes as monomial codes (see the module docstring), with what is known about
    each atom.

    An *atom* is a symbol of the ``ShapeEnv`` or, for a size that is not a monomial (e.g.
    ``s0//2``), the whole expression. ``code(x)`` is None for what cannot be coded: a
    negative or huge int, or a SymInt of another ``ShapeEnv``. All SymInts of one ``Codes``
    must come from one ``ShapeEnv``, since atoms are told apart by their sympy expression.

    ``eq`` and ``gt`` answer True/False only when the structure proves it for every value the
    atoms' ranges allow (lower bounds from the ``ShapeEnv``), else None. ``size`` turns a
    code back into an int or a SymInt (the caller's own object where one had that code).
    """

    __slots__ = ("_by_expr", "_lower", "_names", "atoms", "env", "hints", "info", "originals")

    def __init__(self) -> None:
        self.env: Any = None
        self.atoms: dict[Any, int] = {}  # sympy expr of an atom -> its prime
        # prime -> (its atom's expr, hint, lower bound)
        self.info: dict[int, tuple[Any, int | None, int | None]] = {}
        self.originals: dict[int, Any] = {}  # code -> the first SymInt seen with it
        self.hints: dict[int, int | None] = {}  # code -> its value at the hints, once known
        self._by_expr: dict[Any, int | None] = {}
        self._lower: dict[int, int | None] = {}
        self._names: dict[int, str] = {}

    def code(self, x: object) -> int | None:
        if type(x) is int:
            return x if 0 <= x < LIMIT else None
        node = getattr(x, "node", None)
        env = getattr(node, "shape_env", None)
        if env is None or not is_symint(x):
            return None
        if self.env is None:
            self.env = env
        elif env is not self.env:
            return None
        expr = node.expr  # type: ignore[union-attr]
        if expr in self._by_expr:
            c = self._by_expr[expr]
        else:
            c = self._by_expr[expr] = self._parse(expr, node)
        if c is not None and c >= LIMIT and c not in self.originals:
            self.originals[c] = x
            hint = node.hint  # type: ignore[union-attr]
            self.hints[c] = hint if type(hint) is int else None
        return c

    def codes(self, xs: Sequence[object]) -> list[int] | None:
        out = []
        for x in xs:
            c = self.code(x)
            if c is None:
                return None
            out.append(c)
        return out

    def _parse(self, expr: Any, node: Any) -> int | None:
        if expr.is_Integer:
            v = int(expr)
            return v if 0 <= v < LIMIT else None
        if expr.is_Symbol:
            return self._atom(expr, None)
        if expr.is_Mul or expr.is_Pow:
            c = 1
            for a in expr.args if expr.is_Mul else (expr,):
                if a.is_Symbol:
                    p = self._atom(a, None)
                elif a.is_Integer and 0 < int(a) < LIMIT:
                    p = int(a)
                elif a.is_Pow and a.base.is_Symbol and a.exp.is_Integer and int(a.exp) > 0:
                    p = self._atom(a.base, None)
                    p = None if p is None else p ** int(a.exp)
                else:
                    break
                if p is None:
                    return None
                c *= p
            else:
                return c
        return self._atom(expr, node)  # not a monomial: the whole expression is one atom

    def _atom(self, expr: Any, node: Any) -> int | None:
        p = self.atoms.get(expr)
        if p is not None:
            return p
        if len(self.atoms) == len(_PRIMES):
            return None
        p = self.atoms[expr] = _PRIMES[len(self.atoms)]
        hint: int | None
        lower: int | None = None
        if node is None:  # a symbol: its hint and range from the ShapeEnv
            val = self.env.backed_var_to_val.get(expr)
            hint = int(val) if val is not None and val.is_Integer else None
            rng = self.env.var_to_range.get(expr)
            if rng is not None and rng.lower.is_Integer:
                lower = int(rng.lower)
        else:
            hint = node.hint if type(node.hint) is int else None
        self.info[p] = (expr, hint, lower)
        return p

    def factor(self, code: int) -> tuple[int, list[tuple[int, int]]]:
        """``(int factor, [(atom prime, exponent), ...])`` of a code."""
        atoms = []
        if code >= LIMIT:
            for p in self.info:
                e = 0
                while code % p == 0:
                    code //= p
                    e += 1
                if e:
                    atoms.append((p, e))
        return code, atoms

    def hint(self, code: int) -> int | None:
        """The code's value at the hints, None if an atom has no hint (unbacked)."""
        if code in self.hints:
            return self.hints[code]
        c, atoms = self.factor(code)
        for p, e in atoms:
            h = self.info[p][1]
            if h is None:
                return None
            c *= h**e
        return c

    def lower(self, code: int) -> int | None:
        """A lower bound of the code's value (None: none known, e.g. an opaque atom)."""
        if code < LIMIT:
            return code
        if code in self._lower:
            return self._lower[code]
        c: int | None
        c, atoms = self.factor(code)
        for p, e in atoms:
            lo = self.info[p][2]
            if lo is None or lo < 0:
                c = None
                break
            c *= lo**e
        self._lower[code] = c
        return c

    def gt(self, a: int, b: int) -> bool | None:
        """``a > b`` for every admissible value (True), ``a <= b`` for every one (False),
        or None. Decided when one code is a multiple of the other."""
        if a == b:
            return False
        if b and a % b == 0:  # a = b * r
            lo_b, lo_r = self.lower(b), self.lower(a // b)
            if lo_b is not None and lo_b >= 1 and lo_r is not None and lo_r >= 2:
                return True
        if a and b % a == 0:  # b = a * r
            lo_a, lo_r = self.lower(a), self.lower(b // a)
            if lo_a is not None and lo_r is not None and lo_r >= 1:
                return False
        if b == 0:  # a > 0 when its lower bound is
            lo_a = self.lower(a)
            return True if lo_a is not None and lo_a >= 1 else None
        if a == 0:  # 0 > b never holds for a size b >= 0
            return False
        return None

    def eq(self, a: int, b: int) -> bool | None:
        """``a == b`` for every admissible value (True), for none (False), or None."""
        if a == b:
            return True
        if b < 2 <= a:  # the common "is it 1" / "is it 0": a symbolic size against its bound
            lo = self.lower(a)
            return False if lo is not None and lo > b else None
        if self.gt(a, b) or self.gt(b, a):
            return False
        return None

    def size(self, code: int, hint: int | None = None) -> Any:
        """The size with this code: an int, the caller's SymInt that had it, or a new SymInt
        ``c * s0**e0 * ...`` of the ShapeEnv."""
        if code < LIMIT:
            return code
        x = self.originals.get(code)
        if x is not None:
            return x
        c, atoms = self.factor(code)
        expr: Any = c
        for p, e in atoms:
            expr = expr * self.info[p][0] ** e
        if hint is None:
            hint = self.hint(code)
        x = self.env.create_symintnode(expr, hint=hint)
        self.originals[code] = x
        return x

    def format(self, code: int) -> str:
        """``code`` printed like a sympy product, e.g. ``4*s0*s1**2``."""
        c, atoms = self.factor(code)
        names = [self._name(p) + (f"**{e}" if e > 1 else "") for p, e in atoms]
        return "*".join(([str(c)] if c != 1 or not names else []) + names)

    def _name(self, prime: int) -> str:
        name = self._names.get(prime)
        if name is None:
            expr = self.info[prime][0]
            name = self._names[prime] = str(expr) if expr.is_Symbol else f"({expr})"
        return name


# ---------------------------------------------------------------------------
# Size comparators
# ---------------------------------------------------------------------------


K = TypeVar("K")


class SizeComparator(Protocol[K]):
    """The size decisions of one rule-building call, over one representation of its sizes.

    A builder turns its sizes into *keys* once (``keys``), multiplies keys with ``*``, divides
    one by another with ``//`` only where ``divides`` said it may, and asks only the questions
    below, so one algorithm serves every representation: :class:`IntSizes` (plain ints),
    :class:`CodedSizes` (monomial codes) and :class:`AskedSizes` (the ShapeEnv).

    Post: a True or False holds for every admissible value of the symbols; a question the
    comparator cannot settle raises :class:`UndecidableRule`. ``keys`` keeps a ``-1`` (an
    inferred size) as ``-1``, and ``sizes(keys(xs))`` has the values of ``xs``.
    """

    def keys(self, sizes: Sequence[Size]) -> tuple[K, ...]:
        """The keys of ``sizes``."""
        ...

    def sizes(self, keys: Sequence[K]) -> tuple[Size, ...]:
        """The sizes (ints or SymInts) that ``keys`` stand for."""
        ...

    def eq(self, a: K, b: K) -> bool:
        """``a == b``."""
        ...

    def gt(self, a: K, b: K) -> bool:
        """``a > b``."""
        ...

    def divides(self, a: K, b: K) -> bool:
        """``b % a == 0``, for ``a`` decided nonzero; when True, ``b // a`` is the quotient's
        key."""
        ...

    def contains(self, keys: Sequence[K], k: K) -> bool:
        """Some key of ``keys`` ``eq`` ``k`` (asked in order, up to the first that does)."""
        ...


class IntSizes:
    """Plain int sizes, their own keys, compared by Python's operators (C functions: a
    builder's walk over ints pays no Python frame per question)."""

    __slots__ = ()

    keys = staticmethod(tuple)  # (a tuple of ints is its own keys: not copied)
    sizes = staticmethod(tuple)
    eq = staticmethod(operator.eq)
    gt = staticmethod(operator.gt)
    contains = staticmethod(operator.contains)

    def divides(self, a: int, b: int) -> bool:
        return b % a == 0


INT_SIZES = IntSizes()
"""The one :class:`IntSizes` (it holds nothing)."""


class CodesUndecided(UndecidableRule):
    """A question the monomial codes leave open (or a size they cannot hold): the ShapeEnv may
    still settle it, so a builder that used :class:`CodedSizes` asks again with
    :class:`AskedSizes`."""


class CodedSizes:
    """Int and SymInt sizes of one ShapeEnv as their monomial codes (:class:`Codes`): every
    question is settled by the codes' structure (plain ints by their values), without the
    ShapeEnv, or raises :class:`CodesUndecided`. Keys multiply as ints, so a walk over them
    makes no SymInt."""

    __slots__ = ("codes", "op")

    def __init__(self, op: str) -> None:
        self.op = op
        self.codes = Codes()

    def keys(self, sizes: Sequence[Size]) -> tuple[int, ...]:
        out: list[int] = []
        for x in sizes:
            c = -1 if type(x) is int and x == -1 else self.codes.code(x)
            if c is None:
                raise CodesUndecided(self.op, f"{x} as a monomial code")
            out.append(c)
        return tuple(out)

    def sizes(self, keys: Sequence[int]) -> tuple[Size, ...]:
        return tuple(self.codes.size(k) for k in keys)

    def eq(self, a: int, b: int) -> bool:
        if a < LIMIT and b < LIMIT:  # two plain ints
            return bool(a == b)
        decided = self.codes.eq(a, b)
        if decided is None:
            raise self._open(a, "==", b)
        return decided

    def gt(self, a: int, b: int) -> bool:
        if a < LIMIT and b < LIMIT:
            return bool(a > b)
        decided = self.codes.gt(a, b)
        if decided is None:
            raise self._open(a, ">", b)
        return decided

    def divides(self, a: int, b: int) -> bool:
        if b % a == 0:  # b = a * r: a divides b for every value of the symbols
            return True
        if a < LIMIT and b < LIMIT:  # two plain ints
            return False
        raise self._open(a, "divides", b)  # a symbol may make a divide b for some values

    def contains(self, keys: Sequence[int], k: int) -> bool:
        return _any_eq(self, keys, k)

    def _open(self, a: int, rel: str, b: int) -> CodesUndecided:
        fmt = self.codes.format
        return CodesUndecided(self.op, f"{fmt(a)} {rel} {fmt(b)}")


class AskedSizes:
    """Int and SymInt sizes, their own keys, decided by :func:`decide_eq` / :func:`decide_gt`
    (the codes of the two sizes compared, else ``statically_known_true``): any sizes, at the
    price of SymInt arithmetic and, for what the codes leave open, the ShapeEnv's."""

    __slots__ = ("op",)

    def __init__(self, op: str) -> None:
        self.op = op

    def keys(self, sizes: Sequence[Size]) -> tuple[Size, ...]:
        return tuple(sizes)

    def sizes(self, keys: Sequence[Size]) -> tuple[Size, ...]:
        return tuple(keys)

    def eq(self, a: Size, b: Size) -> bool:
        return decide_eq(a, b, self.op)

    def gt(self, a: Size, b: Size) -> bool:
        return decide_gt(a, b, self.op)

    def contains(self, keys: Sequence[Size], k: Size) -> bool:
        return _any_eq(self, keys, k)

    def divides(self, a: Size, b: Size) -> bool:
        # (SymInt's __mod__ is installed at runtime by torch's sym_node; only some releases'
        # stubs declare it)
        return decide_eq(cast(Any, b) % a, 0, self.op)


def _any_eq(sizes: SizeComparator[K], keys: Sequence[K], k: K) -> bool:
    """``contains`` of a comparator whose ``eq`` is a Python method: asked key by key."""
    return any(sizes.eq(x, k) for x in keys)


def as_size(x: object, op: str, arg: str, *, allow_minus_one: bool = False) -> Size:
    """Validate one size: an int >= 0 (or -1 when allowed) or a SymInt.

    numpy integers and other ``__index__`` types are converted to int; bools
    are rejected because ``True`` silently meaning ``1`` hides caller bugs.
    SymInts are accepted unchanged (their value is not inspected, which would
    guard).
    """
    if type(x) is int:
        v = x
    elif is_symint(x):
        return x
    elif isinstance(x, bool) or not isinstance(x, SupportsIndex):
        raise ValueError(
            f"{op}: {arg} must contain ints or SymInts, got {x!r} of type "
            f"{type(x).__name__}; fix: pass integer sizes"
        )
    else:
        v = operator.index(x)
    if v < 0 and not (allow_minus_one and v == -1):
        allowed = "-1 (inferred) or a size >= 0" if allow_minus_one else "a size >= 0"
        raise ValueError(
            f"{op}: {arg} entries must be {allowed}, got {v}; fix: use non-negative sizes"
        )
    return v


def as_dim(x: object, ndim: int, op: str, arg: str, *, wrap_scalar: bool = True) -> int:
    """Normalise a dim index the way torch's ``maybe_wrap_dim`` does.

    With ``wrap_scalar`` a 0-d tensor accepts dims ``-1`` and ``0`` (torch
    treats it as 1-d for range checking); the result is then 0.
    """
    if type(x) is int:
        d = x
    elif isinstance(x, bool) or not isinstance(x, SupportsIndex) or is_symint(x):
        raise ValueError(
            f"{op}: {arg} must be an int dim index, got {x!r} of type "
            f"{type(x).__name__}; fix: pass a plain int"
        )
    else:
        d = operator.index(x)
    n = ndim if ndim > 0 or not wrap_scalar else 1
    if not -n <= d < n:
        expected = f"a dim in [{-n}, {n - 1}]" if n > 0 else "no dim (a 0-d tensor has none)"
        raise ValueError(
            f"{op}: {arg}={d} is out of range for a {ndim}-d tensor; expected "
            f"{expected}; fix: pass a dim within the tensor's rank"
        )
    return d % n

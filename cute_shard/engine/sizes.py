"""Size arithmetic that works on ints, on torch SymInts and on ``Sym`` without data-dependent
errors.

The engine's decisions are divisibility and equality questions about sizes. For plain ints they
are answered directly. Any other answer is True only when the fact holds for every value the
``ShapeEnv`` allows from then on, and False means "not known": the engine then takes the branch
that is valid either way (it redistributes). So a question that is false at the hints is
answered False at once, with no guard. One that is true at the hints is answered True when it
is proven, and otherwise, for backed symbols, by ``guard_or_false``: it records a guard (so a
compiled program re-checks the fact instead of reusing a sharding that is wrong for other
sizes), and it records none for a fact the ShapeEnv proves. An unbacked symbol has no hint; a
fact about it is True only when the ShapeEnv proves it.

``Sym`` is how the symbolic engine (``symbolic.py``) carries a SymInt size through the layout
code: its monomial code (``cute_shard.rules.Codes``) as a fraction ``num/den`` of codes, and its
value at the hints. Products and exact quotients are int arithmetic on the codes, and a
divisibility or equality that the codes prove (``n/d`` is an int times symbols) needs no
``ShapeEnv`` at all. A fact that is true at the hints but not proven by the codes is answered
True and kept pending (``SymFacts``); the engine later guards those its answer rests on, as
``Mod(X, Y) == 0`` or ``X == Y`` on the reduced codes, each once.
"""

from __future__ import annotations

from math import gcd
from typing import Any

from ..rules._sym import LIMIT, Codes

Size = Any  # int, torch.SymInt, or Sym


def is_static(x: object) -> bool:
    return type(x) is int


def known(cond: object) -> bool:
    """True only when ``cond`` holds (for a SymBool: provably, or guarded on a backed hint)."""
    if type(cond) is bool:
        return cond
    if cond.node.hint is False:  # type: ignore[attr-defined]
        return False  # not true for every value: the branch that is valid either way
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    # guard_or_false asks the ShapeEnv for a proof first (no guard); only a fact that depends
    # on the hint is guarded, and an unbacked one that is not proven is False.
    return guard_or_false(cond)


def divides(d: Size, n: Size) -> bool:
    """``d`` divides ``n`` (known)."""
    td, tn = type(d), type(n)
    if td is int and tn is int:
        return n % d == 0
    if td is Sym or tn is Sym:
        if td is Sym:
            dn, dd, dh, facts = d.num, d.den, d.hint, d.facts
        else:
            dn, dd, dh = d, 1, d
        if tn is Sym:
            nn, nd, nh, facts = n.num, n.den, n.hint, n.facts
        else:
            nn, nd, nh = n, 1, n
        x, y = nn * dd, nd * dn  # n/d = x/y
        if y == 0:
            return False
        if x % y == 0:  # proven: n/d is an int times symbols
            return True
        hinted = dh is not None and nh is not None
        if hinted and (dh == 0 or nh % dh):
            return False
        g = gcd(x, y)
        return facts.divides(x // g, y // g, hinted)
    hd, hn = _hint(d), _hint(n)
    if hd is not None and hn is not None and (hd == 0 or hn % hd):
        return False
    return known(n % d == 0)


def eq(a: Size, b: Size) -> bool:
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return a == b
    if ta is Sym or tb is Sym:
        if ta is Sym:
            an, ad, ah, facts = a.num, a.den, a.hint, a.facts
        else:
            an, ad, ah = a, 1, a
        if tb is Sym:
            bn, bd, bh, facts = b.num, b.den, b.hint, b.facts
        else:
            bn, bd, bh = b, 1, b
        x, y = an * bd, bn * ad  # a/b = x/y
        if x == y:
            return True
        hinted = ah is not None and bh is not None
        if hinted and ah != bh:
            return False
        g = gcd(x, y)
        return facts.equal_codes(x // g, y // g, hinted)
    ha, hb = _hint(a), _hint(b)
    if ha is not None and hb is not None and ha != hb:
        return False
    return known(a == b)


def is_one(a: Size) -> bool:
    return a == 1 if type(a) is int else eq(a, 1)


def prod(xs: Any) -> Size:
    p: Size = 1
    for x in xs:
        p = p * x
    return p


def _hint(x: Size) -> int | None:
    if type(x) is int:
        return x
    hint = x.node.hint
    return hint if type(hint) is int else None


# --------------------------------------------------------------------------------------------
# Sym: a size of the symbolic engine


class SymFacts:
    """One call's codes, and the facts about its sizes that are true at the hints but not
    proven by the codes.

    Such a fact is answered True and kept in ``pending``; ``settle`` then guards the pending
    facts (``guard_or_false``: no guard for one the ShapeEnv proves). The symbolic engine
    settles only the facts its answer rests on, so a fact that only led to a dead end installs
    no guard. A settled fact also settles the ones it implies: ``Y | X`` gives ``y | x`` for
    every ``y | Y`` and every multiple ``x`` of ``X``. With unbacked symbols (no hint) a fact
    is asked of the ShapeEnv at once, without a guard: True only when proven.

    ``generic``: answer False ("not known") to the facts that would pin symbols to a few
    values, and so keep the answer valid for more of them. ``X == Y`` is one, and so is
    ``Y | X`` with a symbol in ``Y``: for coprime ``X``, ``Y`` it bounds that symbol (``s | 4``
    leaves ``s`` in {1, 2, 4}); ``4 | s`` does not. They are exactly the facts a size that is 1
    at the hints (``s/4`` with ``s = 4``) makes true there, as when a sub-mode ends exactly at
    a piece boundary at the hints only.
    """

    __slots__ = ("codes", "denied", "divisible", "equal", "generic", "pending")

    def __init__(self, codes: Codes, generic: bool = False) -> None:
        self.codes = codes
        self.generic = generic
        self.denied = False  # a generic run answered False to a fact true at the hints
        self.divisible: list[tuple[int, int]] = []  # settled (X, Y): Y divides X
        self.equal: dict[tuple[int, int], bool] = {}  # settled X == Y, or asked unbacked
        self.pending: set[tuple[bool, int, int]] = set()  # (is a divisibility, X, Y)

    def sym(self, code: int, hint: int | None) -> Size:
        return code if code < LIMIT else Sym(code, 1, hint, self)

    def divides(self, x: int, y: int, hinted: bool) -> bool:
        """``y`` divides ``x`` (coprime codes): pending when ``hinted`` (true at the hints)."""
        if self._implied(x, y):
            return True
        if hinted:
            if self.generic and y >= LIMIT:
                self.denied = True
                return False
            self.pending.add((True, x, y))
            return True
        ok = _ask(self.codes.size(x) % self.codes.size(y) == 0, False)
        if ok:
            self.divisible.append((x, y))
        return ok

    def equal_codes(self, x: int, y: int, hinted: bool) -> bool:
        ok = self.equal.get((x, y))
        if ok is not None:
            return ok
        if hinted:
            if self.generic:
                self.denied = True
                return False
            self.pending.add((False, x, y))
            return True
        ok = self.equal[(x, y)] = _ask(self.codes.size(x) == self.codes.size(y), False)
        return ok

    def settle(self) -> bool:
        """Guard the pending facts: equalities first (the ShapeEnv then substitutes them, so
        what they imply needs no guard), then divisibilities by the largest divisor first (so
        that it implies the others). False if the ShapeEnv refutes one (then the answer must not
        be used)."""
        codes = self.codes
        for is_div, x, y in sorted(self.pending, key=lambda f: (f[0], -f[2], f[1])):
            if is_div:
                if self._implied(x, y):
                    continue
                if not _ask(codes.size(x) % codes.size(y) == 0, True):
                    return False
                self.divisible.append((x, y))
            elif self.equal.get((x, y)) is None:
                ok = self.equal[(x, y)] = _ask(codes.size(x) == codes.size(y), True)
                if not ok:
                    return False
        self.pending = set()
        return True

    def _implied(self, x: int, y: int) -> bool:
        for a, b in self.divisible:  # y | b | a | x
            if x % a == 0 and b % y == 0:
                return True
        return False

    def format(self, num: int, den: int) -> str:
        text = self.codes.format(num)
        return text if den == 1 else f"{text}/{self.codes.format(den)}"


def _ask(cond: Any, hinted: bool) -> bool:
    if type(cond) is bool:
        return cond
    from torch.fx.experimental.symbolic_shapes import guard_or_false, statically_known_true

    return guard_or_false(cond) if hinted else statically_known_true(cond)


class Sym:
    """A symbolic size: the value ``num/den`` of monomial codes (an int for every value the
    facts asked so far allow; not reduced), and its value at the hints (None if unbacked)."""

    __slots__ = ("den", "facts", "hint", "num")
    __hash__ = None  # type: ignore[assignment]  # like a SymInt: rules holding one are not cached

    def __init__(self, num: int, den: int, hint: int | None, facts: SymFacts) -> None:
        self.num = num
        self.den = den
        self.hint = hint
        self.facts = facts

    # The engine only multiplies sizes and divides them exactly (after asking ``divides``).
    def __mul__(self, other: Size) -> Size:
        h = self.hint
        if type(other) is int:
            if other == 1:
                return self
            return _make(self.num * other, self.den, None if h is None else h * other, self.facts)
        if type(other) is Sym:
            oh = other.hint
            return _make(
                self.num * other.num,
                self.den * other.den,
                None if h is None or oh is None else h * oh,
                self.facts,
            )
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, other: Size) -> Size:
        h = self.hint
        if type(other) is int:
            if other == 1:
                return self
            return _make(self.num, self.den * other, None if h is None else h // other, self.facts)
        if type(other) is Sym:
            oh = other.hint
            return _make(
                self.num * other.den,
                self.den * other.num,
                None if h is None or not oh else h // oh,
                self.facts,
            )
        return NotImplemented

    def __rfloordiv__(self, other: Size) -> Size:
        if type(other) is int:
            h = self.hint
            return _make(other * self.den, self.num, None if not h else other // h, self.facts)
        return NotImplemented

    def __str__(self) -> str:
        return self.facts.format(self.num, self.den)

    __repr__ = __str__


_new_sym = object.__new__


def _make(num: int, den: int, hint: int | None, facts: SymFacts) -> Size:
    # num/den is not reduced: questions compare cross products, and decoding reduces it.
    if num < LIMIT and den == 1:  # no symbol left: a plain int
        return num
    x = _new_sym(Sym)
    x.num = num
    x.den = den
    x.hint = hint
    x.facts = facts
    return x

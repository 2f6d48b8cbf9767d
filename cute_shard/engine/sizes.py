"""Size arithmetic that works on ints and on torch SymInts without data-dependent errors.

The engine's decisions are divisibility and equality questions about sizes. For plain ints they
are answered directly. For SymInts, ``known`` first asks torch's ShapeEnv what it can prove
(no guard). Otherwise it uses ``guard_or_false``: a backed symbol answers from its hint and
records a guard (so a compiled program re-checks the fact instead of silently reusing a wrong
sharding). An unbacked symbol answers "not known", and the engine then takes the branch that
keeps the answer valid (it redistributes).
"""

from __future__ import annotations

from typing import Any

Size = Any  # int or torch.SymInt


def is_static(x: object) -> bool:
    return type(x) is int


def known(cond: object) -> bool:
    """True only when ``cond`` holds (for a SymBool: provably, or guarded on a backed hint)."""
    if type(cond) is bool:
        return cond
    from torch import sym_not
    from torch.fx.experimental.symbolic_shapes import guard_or_false, statically_known_true

    # What the ShapeEnv can prove needs no guard; only a fact that depends on the hint does.
    if statically_known_true(cond):
        return True
    if statically_known_true(sym_not(cond)):
        return False
    return guard_or_false(cond)


def divides(d: Size, n: Size) -> bool:
    """``d`` divides ``n`` (known)."""
    if type(d) is int and type(n) is int:
        return n % d == 0
    return known(n % d == 0)


def eq(a: Size, b: Size) -> bool:
    if type(a) is int and type(b) is int:
        return a == b
    return known(a == b)


def is_one(a: Size) -> bool:
    return a == 1 if type(a) is int else known(a == 1)


def prod(xs: Any) -> Size:
    p: Size = 1
    for x in xs:
        p = p * x
    return p

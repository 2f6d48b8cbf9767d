"""Propagation with SymInt sizes: the same steps on sizes that know what they can prove.

Asking torch's ``ShapeEnv`` a question costs a sympy simplification (0.1-2 ms), and a guard
more. But the sizes of real programs are monomials (``16*s0``, ``s0*s1``), and most facts
about them follow from their structure alone. So every size is written as its monomial code
(``cute_shard.rules.Codes``: a plain int, each symbol a distinct prime above ``2**64``): a code
divides another exactly when the sizes divide for every value of the symbols. A :class:`Sym`
carries a size's code (a fraction of codes) and its value at the hints, and answers the
engine's few operations: products, exact quotients and ``%`` (0 when it divides):

- a fact the codes prove is true, with no guard;
- a fact false at the hints is false: the branch that is valid either way (the mesh dim
  moves, or another output dim is tried), with no guard;
- a fact true at the hints but not proven is true and *pending*; the pending facts of the mesh
  dims that stay are guarded at the end (``guard_or_false``, which records no guard for one
  the ShapeEnv proves), so a compiled program re-checks exactly what its sharding rests on.

Only the even steps of ``decide.py`` have a meaning on codes; an uneven step (``torch.chunk``'s
short tail) on a symbolic size raises ``types.SymbolicStep`` and that mesh dim moves (a view is
planned group by group here, so a group without symbols still decides its uneven shards).
A first run answers False to facts that would pin a symbol to a few values (``s == 4``,
``s | 4``); if that moved a mesh dim, a second run takes them. Unbacked symbols have no hint:
a fact about them is true only when the codes or the ShapeEnv prove it.

Worked example: ``(s0*s1, 8)`` viewed as ``(s0, s1*8)`` on mesh ``(2,)`` with ``[Shard(1)]``:
dim 1's sub-mode is ``2:4`` (chunks of 4 of 8) in the flat index of the group
``flat(d0, d1)``, which output dim 1 (``8*s1`` elements, rows of 1) holds: split factor
``8*s1 / 8 = s1``, ``_StridedShard(1, sf=s1)``, proven for every ``s0, s1`` with no guard.
With ``(s0*s1,)`` viewed as ``(s0, s1)`` and ``[Shard(0)]`` on 2 ranks (hints 4, 3), the
sub-mode ``2:s0*s1/2`` needs ``2 | s0``; true at the hints, it is kept with the one guard
``Eq(Mod(s0, 2), 0)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import gcd
from typing import Any

from ..rules import LIMIT, Broadcast, Codes, DimSpec, InputDim, NewDim, Repeat, Split
from .plan import make_plan
from .solve import solve
from .types import Fail, FailKind, MeshPlacement, Moved, Plan, Sharded, SymbolicStep

__all__ = ["Sym", "SymFacts", "propagate_symbolic"]


def propagate_symbolic(
    norm: Sequence[Any],
    shape: tuple[Any, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
) -> tuple[Plan, list[MeshPlacement], list[Moved]]:
    """``solve`` for sizes that may be SymInts: ``(plan, output, moved)``."""
    codes = Codes()
    answer = None
    for generic in (True, False):
        facts = SymFacts(codes, generic)
        problem = _symbolic(facts, norm, shape, rule)
        if problem is None:  # a size the codes cannot hold (another ShapeEnv, a huge int)
            return _unknown(norm, shape, rule, complex_view)
        snorm, sshape, srule = problem
        plan = make_plan(srule, sshape, complex_view, False)
        out, fails = solve(plan, snorm, mesh, facts)
        if answer is None or len(fails) < len(answer[2]):
            answer = (facts, plan, out, fails)
        if not (fails and facts.denied):
            break  # the other run answers every question the same
    facts, plan, out, fails = answer  # type: ignore[misc]
    out = [_one_at_hints(p, facts) for p in out]
    if not facts.settle():
        # The ShapeEnv refutes a fact that holds at the hints (stale hints?): move everything
        # that the rule does not carry whole.
        return _unknown(norm, shape, rule, complex_view)
    return plan, [_decoded(p, codes) for p in out], fails


def _unknown(
    norm: Sequence[Any], shape: tuple[Any, ...], rule: tuple[DimSpec, ...], cv: bool | None
) -> tuple[Plan, list[MeshPlacement], list[Moved]]:
    """Nothing can be evaluated: every mesh dim moves, but those whose tensor dim the rule
    moves whole (their placement carries verbatim, whatever the sizes)."""
    carry = {spec.input_dim: o for o, spec in enumerate(rule) if type(spec) is InputDim}
    plan = Plan(carry, {}, None, (), -1)
    out: list[MeshPlacement] = []
    moved: list[Moved] = []
    for m, p in enumerate(norm):
        if type(p) is Sharded and p.dim in carry:
            out.append(Sharded(carry[p.dim], p.split_factor))
        elif type(p) is Sharded:
            out.append(None)
            moved.append(Moved(m, p.dim, Fail(FailKind.SYMBOLIC)))
        else:
            out.append(p)
    return plan, out, moved


# --------------------------------------------------------------------------------------------
# Sym: a size of the symbolic engine


class SymFacts:
    """One call's codes, and the facts about its sizes that are true at the hints but not
    proven by the codes (``pending``, in the order asked, so that the facts of a mesh dim
    that then moved can be dropped: ``mark``/``drop``).

    ``generic``: answer False ("not known") to the facts that would pin symbols to a few
    values, and so keep the answer valid for more of them: ``X == Y``, and ``Y | X`` with a
    symbol in ``Y`` (``s | 4`` leaves ``s`` in {1, 2, 4}; ``4 | s`` does not). ``denied``
    says one was answered so. A settled fact also settles the ones it implies: ``Y | X``
    gives ``y | x`` for every ``y | Y`` and every multiple ``x`` of ``X``.
    """

    __slots__ = ("codes", "denied", "divisible", "equal", "generic", "pending")

    def __init__(self, codes: Codes, generic: bool = False) -> None:
        self.codes = codes
        self.generic = generic
        self.denied = False
        self.divisible: list[tuple[int, int]] = []  # settled (X, Y): Y divides X
        self.equal: dict[tuple[int, int], bool] = {}  # settled X == Y, or asked unbacked
        self.pending: list[tuple[bool, int, int]] = []  # (is a divisibility, X, Y)

    def mark(self) -> int:
        return len(self.pending)

    def drop(self, mark: int) -> None:
        del self.pending[mark:]

    def divides(self, x: int, y: int, hinted: bool) -> bool:
        """``y`` divides ``x`` (coprime codes): pending when ``hinted`` (true at the hints)."""
        if self._implied(x, y):
            return True
        if hinted:
            if self.generic and y >= LIMIT:
                self.denied = True
                return False
            self.pending.append((True, x, y))
            return True
        ok = _ask(self.codes.size(x) % self.codes.size(y) == 0, False)
        if ok:
            self.divisible.append((x, y))
        return ok

    def settle(self) -> bool:
        """Guard the pending facts, by the largest divisor first (so that it implies the
        others). False if the ShapeEnv refutes one (the answer must not be used)."""
        codes = self.codes
        for is_div, x, y in sorted(set(self.pending), key=lambda f: (f[0], -f[2], f[1])):
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
        self.pending = []
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

    return bool(guard_or_false(cond) if hinted else statically_known_true(cond))


class Sym:
    """A symbolic size: the value ``num/den`` of monomial codes (an int for every value the
    facts asked so far allow; not reduced), and its value at the hints (None if unbacked).
    ``x % y`` is 0 when ``y`` divides ``x`` (proven, or pending), else 1; ``//`` is exact."""

    __slots__ = ("den", "facts", "hint", "num")
    __hash__ = None  # type: ignore[assignment]  # like a SymInt: rules holding one are not cached

    def __init__(self, num: int, den: int, hint: int | None, facts: SymFacts) -> None:
        self.num = num
        self.den = den
        self.hint = hint
        self.facts = facts

    def __mul__(self, other: Any) -> Any:
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

    def __floordiv__(self, other: Any) -> Any:
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

    def __rfloordiv__(self, other: Any) -> Any:
        if type(other) is int:
            h = self.hint
            return _make(other * self.den, self.num, None if not h else other // h, self.facts)
        return NotImplemented

    def __mod__(self, other: Any) -> int:
        return 0 if _divides(other, self) else 1

    def __rmod__(self, other: Any) -> int:
        return 0 if _divides(self, other) else 1

    # The engine orders sizes only where ranks differ (uneven sizes): not for symbols.
    def __lt__(self, other: Any) -> bool:
        raise SymbolicStep

    __le__ = __gt__ = __ge__ = __lt__

    def __neg__(self) -> Any:
        raise SymbolicStep

    def __sub__(self, other: Any) -> Any:
        raise SymbolicStep

    def __str__(self) -> str:
        return self.facts.format(self.num, self.den)

    __repr__ = __str__


_new_sym = object.__new__


def _make(num: int, den: int, hint: int | None, facts: SymFacts) -> Any:
    # num/den is not reduced: questions compare cross products, and decoding reduces it.
    if num < LIMIT and den == 1:  # no symbol left: a plain int
        return num
    x = _new_sym(Sym)
    x.num = num
    x.den = den
    x.hint = hint
    x.facts = facts
    return x


def _divides(d: Any, n: Any) -> bool:
    """``d`` divides ``n`` (known; see the module docstring)."""
    facts: SymFacts
    if type(d) is Sym:
        dn, dd, dh, facts = d.num, d.den, d.hint, d.facts
    else:
        dn, dd, dh = d, 1, d
    if type(n) is Sym:
        nn, nd, nh, facts = n.num, n.den, n.hint, n.facts
    else:
        nn, nd, nh = n, 1, n
    x, y = nn * dd, nd * dn  # n/d = x/y
    if y == 0:
        return False
    if x % y == 0:  # proven: n/d is an int times symbols
        return True
    hinted = False
    if dh is not None and nh is not None:
        if dh == 0 or nh % dh:
            return False
        hinted = True
    g = gcd(x, y)
    return facts.divides(x // g, y // g, hinted)


# --------------------------------------------------------------------------------------------
# Coding and decoding


def _symbolic(
    facts: SymFacts, norm: Sequence[Any], shape: tuple[Any, ...], rule: tuple[DimSpec, ...]
) -> tuple[list[Any], tuple[Any, ...], tuple[DimSpec, ...]] | None:
    """The problem with every symbolic size a ``Sym`` of ``facts``, or None if one cannot be
    coded."""
    codes = facts.codes

    def sym(x: Any) -> Any:
        if type(x) is int:
            return x
        c = codes.code(x)
        if c is None:
            raise _Uncoded
        return c if c < LIMIT else Sym(c, 1, codes.hint(c), facts)

    try:
        snorm = [Sharded(p.dim, sym(p.split_factor)) if type(p) is Sharded else p for p in norm]
        return snorm, tuple(sym(n) for n in shape), _map_rule(rule, sym)
    except _Uncoded:
        return None


class _Uncoded(Exception):
    pass


def _one_at_hints(p: Any, facts: SymFacts) -> Any:
    """A split factor that is 1 at the hints is ``Shard`` there, and is spelled so, with the
    fact that it is 1 guarded (the facts it came from pin its symbols already)."""
    if type(p) is not Sharded or type(p.split_factor) is not Sym or p.split_factor.hint != 1:
        return p
    sf = p.split_factor
    g = gcd(sf.num, sf.den)
    facts.pending.append((False, sf.num // g, sf.den // g))
    return Sharded(p.dim, 1)


def _decoded(p: Any, codes: Codes) -> Any:
    """A placement with its split factor an int or a SymInt again."""
    if type(p) is not Sharded or type(p.split_factor) is not Sym:
        return p
    sf = p.split_factor
    g = gcd(sf.num, sf.den)
    num, den = sf.num // g, sf.den // g
    size = codes.size(num, sf.hint) if den == 1 else codes.size(num) // codes.size(den)
    return Sharded(p.dim, size)


_new = object.__new__
_set = object.__setattr__


def _map_rule(rule: tuple[DimSpec, ...], fn: Any) -> tuple[DimSpec, ...]:
    """``map_sizes`` without validation (the sizes are ``Sym``), keeping the rule's type."""
    shapes: dict[int, tuple[Any, ...]] = {}  # the Splits of one group share their shape
    specs = [_map_spec(s, fn, shapes) for s in rule]
    return tuple.__new__(type(rule), specs) if type(rule) is not tuple else tuple(specs)


def _map_spec(s: DimSpec, fn: Any, shapes: dict[int, tuple[Any, ...]]) -> Any:
    if isinstance(s, Split):
        shape = shapes.get(id(s.group_shape))
        if shape is None:
            shape = shapes[id(s.group_shape)] = tuple(map(fn, s.group_shape))
        return _raw(
            Split, ("input_dim", s.input_dim), ("group_shape", shape), ("split_id", s.split_id)
        )
    if isinstance(s, Broadcast):
        return _raw(Broadcast, ("dim", s.dim), ("dim_size", fn(s.dim_size)))
    if isinstance(s, Repeat):
        return _raw(Repeat, ("input_dim", s.input_dim), ("times", fn(s.times)))
    if isinstance(s, NewDim):
        return _raw(NewDim, ("size", fn(s.size)))
    return s


def _raw(cls: type, *fields: tuple[str, Any]) -> Any:
    """A frozen spec built from its fields, without validation."""
    spec: Any = _new(cls)
    for name, value in fields:
        _set(spec, name, value)
    return spec

"""Propagation with SymInt sizes: proven from the sizes' structure first, then from the hints.

Asking torch's ``ShapeEnv`` a question costs a sympy simplification (0.1-2 ms), and a layout
asks dozens. But the sizes of real programs are monomials (``16*s0``, ``s0*s1``), and most
answers follow from their structure alone. So every size is written as its monomial code
(``cute_shard.rules.Codes``: a plain int, the symbols numbered with primes above ``2**64``).
A code divides another exactly when the sizes divide for every value of the symbols. Then:

1. **Proven**: the layout path (``_carried``, ``_attempt``) runs on the codes, as plain ints.
   If every mesh dim stays, the answer holds for every value and needs no guard. Most calls
   end here (and those that move only whole dims, like a permute, end before coding).
2. **At the hints**: the static engine answers the problem at the hints (the hot path first:
   does nothing move?). That answer is routed again on ``Sym`` sizes (``sizes.py``), which
   carry each code and its value at the hints: a fact the codes prove is True, one false at
   the hints is False ("not known": the branch valid either way), and one true at the hints
   but not proven is True and *pending*. A first, generic run answers False to the facts that
   would pin a symbol to a few values (``s == 4``, ``s | 4``); if it does not route that
   answer, a second run takes every fact true at the hints.
3. Otherwise (the answer at the hints rests on the uneven fallback, or the sizes are unbacked)
   the whole engine runs on ``Sym`` sizes, with every fact true at the hints.

Only the pending facts of the layout that routes the answer's mesh dims are then guarded, each
once (``SymFacts.settle``: ``guard_or_false``, which records no guard for a fact the ShapeEnv
proves). The attempts that failed on the way need none: failing only moves more, which is
valid whatever their facts are. So the answer is the one at the hints, valid for every value of
the symbols that the recorded guards allow. Unbacked symbols have no hint: a fact about them is
True only when the codes or the ShapeEnv prove it, and the rest is the conservative answer.

Split factors come back as ints, as the caller's own SymInts where one has that value, or
else as new SymInts of the same ``ShapeEnv`` (``16*s60``, ``(s2*s60)//2``).

Worked example: ``(s0*s1, 8)`` viewed as ``(s0, s1*8)`` on mesh (2,) with ``[Shard(1)]``: the
codes are ``(p0*p1, 8)`` and ``(p0, 8*p1)``; dim 1 carves into ``[4 local, 2 gpu]`` (2
divides 8) and the group ``[4 local, 2 gpu, p0*p1 local]`` is cut at ``8*p1`` (``8*p1`` is a
multiple of 8, and ``p0*p1`` splits as ``p1`` and ``p0``): the output is
``_StridedShard(1, sf=s1)``, proven for every ``s0, s1`` in pass 1, with no guard. With
``(s0*s1,)`` viewed as ``(s0, s1)`` and ``[Shard(0)]`` on 2 ranks (hints 4, 3), pass 1 cannot
prove ``2 | s0``; at the hints it holds, so the answer ``Shard(0)`` is kept with the one guard
``Eq(Mod(s0, 2), 0)``.
"""

from __future__ import annotations

from math import gcd
from typing import Any

from ..rules import Broadcast, DimSpec, InputDim, NewDim, Repeat, Split, map_sizes
from ..rules._sym import LIMIT, Codes
from . import propagate as _engine
from .fast import complex_pair_dim, fast_propagate
from .sharded import MeshPlacement, to_torch_placement
from .sizes import Size, Sym, SymFacts

__all__ = ["propagate_symbolic"]

Answer = tuple[tuple[MeshPlacement, ...], tuple[MeshPlacement, ...], tuple[Any, ...]]
Problem = tuple[tuple[MeshPlacement, ...], tuple[Any, ...], tuple[DimSpec, ...]]


def propagate_symbolic(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[Size, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
) -> Answer:
    """``_propagate`` for sizes that may be SymInts: ``(input target, output, blocked)``."""
    if _moved_whole(norm, rule):  # permute, unsqueeze, ...: no size question to ask
        return _engine._propagate(norm, shape, rule, mesh, complex_view)
    codes = Codes()
    coded = _coded(codes, norm, shape, rule)
    if coded is None:  # a size the codes cannot hold (another ShapeEnv, a huge int)
        return _engine._propagate(norm, shape, rule, mesh, complex_view)
    out = _proven(coded, mesh, complex_view, codes)
    if out is not None:
        return norm, _decoded(out, codes), ()
    hinted = _hint_problem(coded, codes)
    # The common case: nothing moves at the hints (then that is the answer there), or the
    # sizes are unbacked (then nothing is known at the hints).
    if hinted is None or _nothing_moves(hinted, mesh, complex_view):
        found = _routed(codes, coded, (norm, (), ()), mesh, complex_view)
        if found is not None:
            return _settled(*found, norm, norm, (), codes)
    at_hints = None if hinted is None else _at_hints(hinted, mesh, complex_view)
    if at_hints is not None:
        found = _routed(codes, coded, at_hints, mesh, complex_view)
        if found is not None:
            target = tuple(
                n if isinstance(t, tuple) else t for n, t in zip(norm, at_hints[0], strict=True)
            )
            return _settled(*found, norm, target, at_hints[2], codes)
    # The answer at the hints rests on what a layout cannot prove for every value (uneven
    # sizes there), or there are no hints: the engine itself on Sym sizes.
    facts = SymFacts(codes)
    target, out, blocked = _hinted(facts, coded, mesh, complex_view)
    return _settled(facts, out, norm, _decoded(target, codes), blocked, codes)


def _routed(
    codes: Codes, coded: Problem, answer: Answer, mesh: tuple[int, ...], complex_view: bool | None
) -> tuple[SymFacts, tuple[MeshPlacement, ...]] | None:
    """``_verified``, by a generic run first and, if that had to say no to a fact that pins a
    symbol, by a run with every fact true at the hints."""
    for generic in (True, False):
        facts = SymFacts(codes, generic)
        out = _verified(facts, coded, answer, mesh, complex_view)
        if out is not None:
            return facts, out
        if not facts.denied:
            break  # the other run answers every question the same
    return None


def _settled(
    facts: SymFacts,
    out: tuple[MeshPlacement, ...],
    norm: tuple[MeshPlacement, ...],
    target: tuple[MeshPlacement, ...],
    blocked: tuple[Any, ...],
    codes: Codes,
) -> Answer:
    """The answer, once the facts it rests on are guarded."""
    if not facts.settle():
        # The ShapeEnv refutes a fact that holds at the hints (stale hints?): move everything.
        return _engine._replicate_all(norm)
    return target, _decoded(out, codes), blocked


def _moved_whole(norm: tuple[MeshPlacement, ...], rule: tuple[DimSpec, ...]) -> bool:
    """Every sharded tensor dim is some output dim's ``InputDim``: ``_carried`` answers."""
    whole = {spec.input_dim for spec in rule if type(spec) is InputDim}
    return all(not isinstance(p, tuple) or p[0] in whole for p in norm)


def _hint_problem(coded: Problem, codes: Codes) -> Problem | None:
    """The problem at the hints, None with unbacked sizes (no hints)."""
    cnorm, cshape, crule = coded
    hint = codes.hint
    hints = tuple(hint(c) for c in cshape)
    hint_norm = _map_norm(cnorm, hint)
    if None in hints or any(isinstance(p, tuple) and p[1] is None for p in hint_norm):
        return None
    try:
        return hint_norm, hints, map_sizes(crule, hint)
    except ValueError:  # an unbacked size in the rule
        return None


def _nothing_moves(hinted: Problem, mesh: tuple[int, ...], complex_view: bool | None) -> bool:
    """The hot path says nothing moves at the hints (None: it does not know, e.g. uneven)."""
    norm, shape, rule = hinted
    placements = [to_torch_placement(p) for p in norm]
    return fast_propagate(placements, shape, rule, mesh, complex_view) is not None


def _at_hints(hinted: Problem, mesh: tuple[int, ...], complex_view: bool | None) -> Answer | None:
    """The static engine's answer at the hints, None if it raises (the run on Sym sizes then
    raises it with the sizes spelled out)."""
    try:
        return _engine._propagate_cached(*hinted, mesh, complex_view)
    except ValueError:
        return None


def _verified(
    facts: SymFacts,
    coded: Problem,
    at_hints: Answer,
    mesh: tuple[int, ...],
    complex_view: bool | None,
) -> tuple[MeshPlacement, ...] | None:
    """The output placements of the answer at the hints, routed on ``Sym`` sizes, with
    ``facts.pending`` the facts they rest on; None if the layout does not give that answer.

    The mesh dims that stay are routed by one layout (those the rule carries whole rest on no
    size). The answer is reached at the hints through attempts that may have failed; failing
    only moves more, which is valid whatever their facts are, so only this layout's facts and
    the rule check's need a guard.
    """
    norm, shape, rule = _symbolic_problem(facts, coded)
    target, want, _ = at_hints  # want () : whatever the layout reads back
    try:
        _engine.check_rule(rule, shape)
        pairs = complex_pair_dim(rule, shape) if complex_view is not False else None
        carried = _engine._carried(norm, shape, rule, pairs)
        stay = tuple(
            t if not isinstance(t, tuple) else None if m in carried else norm[m]
            for m, t in enumerate(target)
        )
        routed = _engine._attempt(stay, shape, rule, mesh, pairs)
    except ValueError:
        return None
    if routed is None or routed[0] is None:
        return None
    out = _engine._with_carried(routed[0], carried)
    if not want:
        return None if any(_one_at_hints(p) for p in out) else out
    for g, w in zip(out, want, strict=True):
        if isinstance(g, tuple) and isinstance(w, tuple):
            sf = g[1]
            if g[0] != w[0] or (sf.hint if type(sf) is Sym else sf) != w[1] or _one_at_hints(g):
                return None
        elif g is not w and g != w:
            return None
    return out


def _symbolic_problem(facts: SymFacts, coded: Problem) -> Problem:
    """The coded problem with every symbolic size a ``Sym`` of ``facts``."""
    codes = facts.codes

    def sym(c: int) -> Size:
        return c if c < LIMIT else Sym(c, 1, codes.hint(c), facts)

    cnorm, cshape, crule = coded
    return _map_norm(cnorm, sym), tuple(sym(c) for c in cshape), _map_rule(crule, sym)


def _proven(
    coded: Problem, mesh: tuple[int, ...], complex_view: bool | None, codes: Codes
) -> tuple[MeshPlacement, ...] | None:
    """The output placements if, on the codes, every mesh dim stays (then the answer holds for
    every value of the symbols), else None.

    The codes are ints, so this is the static layout path; but only the part of it that
    decides by divisibility and equality (``_carried``, ``_attempt``). Choosing what moves
    and the uneven fallback compare or evaluate sizes, which a code does not mean.
    """
    try:
        out = _zero_comm(coded, mesh, complex_view)
    except ValueError:  # the next passes raise it with the sizes spelled out
        return None
    if out is None:
        return None
    for p in out:  # a split factor that is 1 at the hints must be spelled Shard there
        if isinstance(p, tuple) and p[1] >= LIMIT and codes.hint(p[1]) == 1:
            return None
    return out


def _zero_comm(
    problem: Problem, mesh: tuple[int, ...], complex_view: bool | None
) -> tuple[MeshPlacement, ...] | None:
    """The head of ``_propagate``: the output placements if every mesh dim stays, else None."""
    norm, shape, rule = problem
    _engine.check_rule(rule, shape)
    pairs = complex_pair_dim(rule, shape) if complex_view is not False else None
    carried = _engine._carried(norm, shape, rule, pairs)
    if all(not isinstance(p, tuple) or m in carried for m, p in enumerate(norm)):
        return _engine._with_carried(norm, carried)
    first = _engine._attempt(norm, shape, rule, mesh, pairs)
    if first is None or first[0] is None:
        return None
    return _engine._with_carried(first[0], carried)


def _hinted(
    facts: SymFacts, coded: Problem, mesh: tuple[int, ...], complex_view: bool | None
) -> Answer:
    """The engine on ``Sym`` sizes whose facts ``facts`` answers, with ``facts.pending`` left
    holding the facts the answer rests on."""
    problem = _symbolic_problem(facts, coded)
    answer = _engine._propagate(*problem, mesh, complex_view)
    _rests_on(facts, problem, mesh, complex_view, answer)
    return answer


def _rests_on(
    facts: SymFacts,
    problem: Problem,
    mesh: tuple[int, ...],
    complex_view: bool | None,
    answer: Answer,
) -> None:
    """Leave in ``facts.pending`` the facts ``answer`` rests on: those of the rule check and
    of the layout that routes the mesh dims that stay (the carried ones rest on no size).

    The answer may have been reached through attempts that failed; failing only moves more,
    which is valid whatever their facts are. If no layout routes the mesh dims that stay, the
    uneven fallback chose them from sizes no symbol changes: only the rule check's facts.
    """
    norm, shape, rule = problem
    target, out, _ = answer
    facts.pending.clear()
    _engine.check_rule(rule, shape)
    checked = set(facts.pending)
    pairs = complex_pair_dim(rule, shape) if complex_view is not False else None
    carried = _engine._carried(norm, shape, rule, pairs)
    stay = tuple(
        None if m in carried or not isinstance(t, tuple) else t for m, t in enumerate(target)
    )
    if any(t is not None for t in stay):
        routed = _engine._attempt(stay, shape, rule, mesh, pairs)
        if routed is None or routed[0] is None or not _same(routed[0], out, stay):
            facts.pending = checked


def _one_at_hints(p: MeshPlacement) -> bool:
    """A symbolic split factor that is 1 at the hints (the static engine says Shard there)."""
    return isinstance(p, tuple) and type(p[1]) is Sym and p[1].hint == 1


def _same(
    got: tuple[MeshPlacement, ...], want: tuple[MeshPlacement, ...], stay: tuple[MeshPlacement, ...]
) -> bool:
    """``got`` places every mesh dim of ``stay`` as ``want`` does (split factors by value)."""
    for g, w, s in zip(got, want, stay, strict=True):
        if s is None:
            continue
        if not (isinstance(g, tuple) and isinstance(w, tuple) and g[0] == w[0]):
            return False
        (a, b), (c, d) = _fraction(g[1]), _fraction(w[1])
        if a * d != b * c:
            return False
    return True


def _fraction(x: Size) -> tuple[int, int]:
    return (x.num, x.den) if type(x) is Sym else (x, 1)


# --------------------------------------------------------------------------------------------
# Coding and decoding


def _coded(
    codes: Codes,
    norm: tuple[MeshPlacement, ...],
    shape: tuple[Size, ...],
    rule: tuple[DimSpec, ...],
) -> Problem | None:
    """The problem with every size a code (an int), or None if one cannot be coded."""
    cshape = codes.codes(shape)
    if cshape is None:
        return None
    try:
        cnorm = _map_norm(norm, lambda x: x if type(x) is int else _code(codes, x))
        crule = _map_rule(rule, lambda x: x if type(x) is int else _code(codes, x))
    except _Uncoded:
        return None
    return cnorm, tuple(cshape), crule


class _Uncoded(Exception):
    pass


def _code(codes: Codes, x: Size) -> int:
    c = codes.code(x)
    if c is None:
        raise _Uncoded
    return c


def _decoded(placements: tuple[MeshPlacement, ...], codes: Codes) -> tuple[MeshPlacement, ...]:
    """Placements with every split factor an int or a SymInt again."""
    out: list[MeshPlacement] = []
    for p in placements:
        if isinstance(p, tuple):
            sf = p[1]
            if type(sf) is Sym:
                g = gcd(sf.num, sf.den)
                num, den = sf.num // g, sf.den // g
                sf = codes.size(num, sf.hint) if den == 1 else codes.size(num) // codes.size(den)
            elif sf >= LIMIT:
                sf = codes.size(sf)
            p = (p[0], sf)
        out.append(p)
    return tuple(out)


def _map_norm(norm: tuple[MeshPlacement, ...], fn: Any) -> tuple[MeshPlacement, ...]:
    """The placements with ``fn`` applied to every split factor."""
    return tuple((p[0], fn(p[1])) if isinstance(p, tuple) else p for p in norm)


_SIZED = (Split, Broadcast, Repeat, NewDim)
_new = object.__new__
_set = object.__setattr__


def _map_rule(rule: tuple[DimSpec, ...], fn: Any) -> tuple[DimSpec, ...]:
    """``map_sizes`` without validation: the sizes may be codes or ``Sym``."""
    if not any(isinstance(s, _SIZED) for s in rule):
        return rule
    shapes: dict[int, tuple[Any, ...]] = {}  # the Splits of one group share their shape
    return tuple(_map_spec(s, fn, shapes) for s in rule)


def _map_spec(s: DimSpec, fn: Any, shapes: dict[int, tuple[Any, ...]]) -> DimSpec:
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
    return s  # no sizes (an input of a Split, Broadcast or Repeat has none either)


def _raw(cls: type, *fields: tuple[str, Any]) -> Any:
    """A frozen spec built from its fields, without validation."""
    spec = _new(cls)
    for name, value in fields:
        _set(spec, name, value)
    return spec

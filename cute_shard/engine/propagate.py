"""``propagate_shape_and_sharding``: the drop-in for DTensor's view propagator.

The data flow, one short step each:

1. validate and normalise the placements, convert the rule (torch DimSpecs are accepted);
2. ``placements_to_layout``: the sharded layout (None where a layout cannot express it, e.g.
   uneven sizes; those cases go to the fallback in ``uneven.py``);
3. ``compose_view``: route the sub-modes to the output dims;
4. ``layout_to_placements``: read each output dim's placements back;
5. if some mesh dim cannot stay, choose which mesh dims to replicate (``_least_to_move``),
   raise for a strict view, and return ``(input_target, output)``.

Choosing what moves: first the mesh dims that fail directly, and only them, as DTensor's own
propagator does. If that is not enough (a local sub-mode is cut, or a later mesh dim then
fails), the other subsets are tried, cheapest first. A subset costs more the more mesh dims it
adds beyond the directly failing ones, then the larger the product of their sizes; it need not
hold every directly failing one (replicating an earlier mesh dim re-carves the later ones).
Replicating everything always works, so the search ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import lru_cache

from torch.distributed.tensor.placement_types import Partial, Placement

from ..rules import Broadcast, DimSpec, Flatten, InputDim, Repeat
from .compose import _rule_groups_cached, compose_view, rule_groups
from .errors import Blocked, RedistributionRequired
from .fast import complex_pair_dim, fast_propagate, leaf_propagate, replicated, search_moves
from .fast_uneven import uneven_answer
from .sharded import (
    MeshPlacement,
    layout_to_placements,
    normalize_placements,
    placements_to_layout,
    to_torch_placement,
)
from .sizes import Size, Sym, is_one, is_static
from .symbolic import propagate_symbolic

__all__ = ["cache_clear", "propagate_shape_and_sharding"]

CACHE_SIZE = 8192

# (input target, output placements, the mesh dims that move and why)
Answer = tuple[tuple[MeshPlacement, ...], tuple[MeshPlacement, ...], tuple[Blocked, ...]]


def propagate_shape_and_sharding(
    placements: Sequence[Placement],
    global_shape: Sequence[Size],
    rule: Sequence[object],
    mesh_shape: Sequence[int],
    strict_view: bool = False,
    *,
    complex_view: bool | None = None,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    """``(input_target_placements, output_placements)`` for a view op with DimMap ``rule``.

    Same inputs and outputs as torch's ``propagate_shape_and_sharding``. ``rule`` may hold
    torch's DimSpecs or ``cute_shard.rules`` ones. With ``strict_view`` a view that needs
    communication raises ``RedistributionRequired`` naming the tensor dim, the mesh dim and
    the reason. Bad input raises ValueError.

    ``view_as_complex`` has the same rule as a view that flattens a trailing size-2 dim, but
    it needs whole (real, imag) pairs on every rank. ``complex_view`` says which op it is:
    True for view_as_complex, False for a real view. None (unknown) gives an answer that is
    valid for both.
    """
    shape = global_shape if type(global_shape) is tuple else tuple(global_shape)
    mesh = mesh_shape if type(mesh_shape) is tuple else tuple(mesh_shape)
    given = rule if isinstance(rule, tuple) else tuple(rule)
    # The common even, zero-communication view. The hot path answers only for cute_shard's
    # own DimSpecs (it tests their exact types), so it runs before any conversion.
    # Outside strict views it also answers a lone Shard of a group that must move.
    moved = None if strict_view else [0]
    parsed: list[dict[int, list[tuple[int, int]]]] = []  # the placements, if the path parsed them
    fast = fast_propagate(placements, shape, given, mesh, complex_view, moved, parsed)
    ours = given
    if fast is None:
        ours = _as_rule(given)
        if ours is not given:  # torch's DimSpecs, converted
            moved = None if strict_view else [0]
            parsed = []
            fast = fast_propagate(placements, shape, ours, mesh, complex_view, moved, parsed)
    if fast is not None:
        if moved and moved[0]:
            return replicated(placements, moved[0]), fast
        return tuple(placements), fast
    dims = parsed[0] if parsed else None
    answer = uneven_answer(placements, shape, ours, mesh, complex_view, strict_view, dims)
    if answer is not None:
        return answer
    if strict_view:  # (a strict view that must move raises, with the general engine's reasons)
        fast = leaf_propagate(placements, shape, ours, mesh, complex_view, dims)
        if fast is not None:
            return tuple(placements), fast
    else:
        answer = search_moves(placements, shape, ours, mesh, complex_view, dims)
        if answer is not None:
            return answer
    norm = normalize_placements(placements, len(shape), mesh)
    if all(is_static(n) for n in shape):
        target, out, blocked = _propagate_cached(norm, shape, ours, mesh, complex_view)
    else:  # SymInt sizes are not hashable: no cache
        target, out, blocked = propagate_symbolic(norm, shape, ours, mesh, complex_view)
    if blocked and strict_view:
        raise RedistributionRequired(blocked, tuple(_merge_target(placements, target)))
    return tuple(_merge_target(placements, target)), tuple(to_torch_placement(p) for p in out)


def cache_clear() -> None:
    """Empty every cache the engine and the layers below it keep."""
    from .. import layout, rules
    from .uneven import _dim_set

    _propagate_cached.cache_clear()
    _dim_set.cache_clear()
    _as_rule_cached.cache_clear()
    _rule_groups_cached.cache_clear()
    rules.cache_clear()
    layout.cache_clear()


def _merge_target(
    placements: Sequence[Placement], target: tuple[MeshPlacement, ...]
) -> list[Placement]:
    # Mesh dims that stay keep the caller's own placement object (a _StridedShard with split
    # factor 1 stays as given, so DTensor sees no redistribution); moved ones are Replicate.
    return [
        p
        if t is not None or isinstance(p, Partial) or p.is_replicate()
        else to_torch_placement(None)
        for p, t in zip(placements, target, strict=True)
    ]


# --------------------------------------------------------------------------------------------
# Rules


def _as_rule(rule: tuple[object, ...]) -> tuple[DimSpec, ...]:
    for spec in rule:
        if not isinstance(spec, DimSpec):
            break
    else:
        return rule  # type: ignore[return-value]
    try:
        return _as_rule_cached(rule)
    except TypeError:  # unhashable (SymInt sizes inside torch DimSpecs)
        return _convert(rule)


@lru_cache(maxsize=1024)
def _as_rule_cached(rule: tuple[object, ...]) -> tuple[DimSpec, ...]:
    return _convert(rule)


def _convert(rule: tuple[object, ...]) -> tuple[DimSpec, ...]:
    from ..rules.torch_compat import from_torch

    try:
        return tuple(from_torch(rule))
    except (TypeError, AttributeError) as e:
        raise ValueError(
            f"rule {rule!r} is neither cute_shard.rules DimSpecs nor torch DimSpecs: {e}"
        ) from None


def check_rule(rule: tuple[DimSpec, ...], shape: tuple[Size, ...]) -> None:
    """ValueError unless the sizes are >= 0 and ``rule`` refers to every non-size-1 input dim
    exactly once (and broadcasts only size-1 dims)."""
    ndim = len(shape)
    for d, n in enumerate(shape):
        if is_static(n) and n < 0:
            raise ValueError(f"input dim {d} has size {n}; sizes must be >= 0")
    used: set[int] = set()
    groups, others = rule_groups(rule)
    sources = [g.in_dims for g in groups]
    for _, spec in others:
        inner = getattr(spec, "dim", None) or getattr(spec, "input_dim", None)
        if isinstance(inner, InputDim):
            sources.append((inner.input_dim,))
            d = inner.input_dim
            if isinstance(spec, Broadcast) and 0 <= d < ndim and not is_one(shape[d]):
                raise ValueError(
                    f"rule broadcasts input dim {d} of size {shape[d]}; only size-1 dims "
                    "broadcast (the rule does not match the shape)"
                )
    for dims in sources:
        for d in dims:
            if not 0 <= d < ndim:
                raise ValueError(
                    f"rule refers to input dim {d}, but the input has {ndim} dims {shape}"
                )
            if d in used:
                raise ValueError(f"rule uses input dim {d} twice; the rule does not match")
            used.add(d)
    for d, n in enumerate(shape):
        if d not in used and not is_one(n):
            raise ValueError(
                f"rule drops input dim {d} of size {n}; only size-1 dims can disappear "
                "(the rule does not match the shape)"
            )


# --------------------------------------------------------------------------------------------
# Propagation


@lru_cache(maxsize=CACHE_SIZE)
def _propagate_cached(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
) -> Answer:
    return _propagate(norm, shape, rule, mesh, complex_view)


def _propagate(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[Size, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
) -> Answer:
    check_rule(rule, shape)
    pairs = complex_pair_dim(rule, shape) if complex_view is not False else None
    carried = _carried(norm, shape, rule, pairs)
    if all(not isinstance(p, tuple) or m in carried for m, p in enumerate(norm)):
        return norm, _with_carried(norm, carried), ()
    first = _attempt(norm, shape, rule, mesh, pairs)
    if first is None:  # a layout cannot express the input: the rule-tracing fallback
        target, out, blocked = _fallback(norm, shape, rule, mesh, complex_view)
    elif first[0] is not None:
        target, out, blocked = norm, first[0], ()
    else:
        target, out, blocked = _least_to_move(norm, shape, rule, mesh, first[1], first[2], pairs)
    if carried:
        target = tuple(norm[m] if m in carried else t for m, t in enumerate(target))
        out = _with_carried(out, carried)
        blocked = tuple(b for b in blocked if b.mesh_dim not in carried)
    return target, out, blocked


def _carried(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[Size, ...],
    rule: tuple[DimSpec, ...],
    pairs: int | None,
) -> dict[int, MeshPlacement]:
    """The output placement of every mesh dim whose tensor dim the rule carries whole.

    Such a mesh dim stays, whatever the sizes (uneven, symbolic), and independently of the
    mesh dims on other tensor dims:

    - ``InputDim(d)`` at output dim o: the local op moves dim d whole and chunks nothing, so
      ``(d, sf)`` is ``(o, sf)``. Re-reading it off a layout could only re-spell it (a
      ``Shard`` whose local length is <= 1 is also a ``_StridedShard``).
    - ``repeat(d, k)``, and ``flat(d0..dj, d)`` whose leading dims no mesh dim shards: the
      output dim is k (or P = the leading dims' size) copies of dim d, and each copy is
      chunked as dim d was. If every placement on d is a ``Shard``, each becomes
      ``_StridedShard(o, k)``: k pieces, each the whole dim d, chunked the same way.
      (A ``_StridedShard`` of d would need its pieces to divide d; that is left to the
      layout path.) Not for the flatten ``view_as_complex`` may have.
    """
    by_dim: dict[int, list[int]] = {}
    for m, p in enumerate(norm):
        if isinstance(p, tuple):
            by_dim.setdefault(p[0], []).append(m)
    out: dict[int, MeshPlacement] = {}
    for o, spec in enumerate(rule):
        if isinstance(spec, InputDim):
            for m in by_dim.get(spec.input_dim, ()):
                out[m] = (o, norm[m][1])  # type: ignore[index]
            continue
        d, copies = _copied_dim(spec, shape, by_dim, pairs)
        if d is None or (is_static(copies) and copies < 1):  # not copies, or no data at all
            continue
        if all(norm[m][1] == 1 for m in by_dim[d]):  # type: ignore[index]
            for m in by_dim[d]:
                out[m] = (o, copies)
    return out


def _copied_dim(
    spec: DimSpec, shape: tuple[Size, ...], by_dim: dict[int, list[int]], pairs: int | None
) -> tuple[int | None, Size]:
    """``(d, k)`` if output dim ``spec`` is k copies of the sharded input dim d, else None."""
    if isinstance(spec, Repeat) and isinstance(spec.input_dim, InputDim):
        d = spec.input_dim.input_dim
        return (d, spec.times) if d in by_dim else (None, 1)
    if isinstance(spec, Flatten):
        dims = [x.input_dim for x in spec.input_dims]
        d = dims[-1]
        if d in by_dim and d != pairs and not any(x in by_dim for x in dims[:-1]):
            copies: Size = 1
            for x in dims[:-1]:
                copies = copies * shape[x]
            return d, copies
    return None, 1


def _with_carried(
    result: tuple[MeshPlacement, ...], carried: dict[int, MeshPlacement]
) -> tuple[MeshPlacement, ...]:
    return tuple(carried.get(m, r) for m, r in enumerate(result))


Failures = dict[int, tuple[int, str]]


def _attempt(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[Size, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    pairs: int | None = None,
) -> tuple[tuple[MeshPlacement, ...] | None, Failures, Failures] | None:
    """``(output placements, {}, {})`` for input placements ``norm``, or ``(None, failures,
    optional)``: the mesh dims that fail directly, and those of a group whose local sub-modes
    a boundary cuts (replicating one of them may merge the local sub-modes). None if a layout
    cannot express ``norm``."""
    sl = placements_to_layout(shape, norm, mesh)
    if sl is None:
        return None
    routed = compose_view(sl, rule)
    failures: Failures = dict(routed.failures)
    if pairs is not None:
        for m, p in enumerate(norm):
            if isinstance(p, tuple) and p[0] == pairs and mesh[m] > 1:
                failures.setdefault(
                    m,
                    (pairs, "view_as_complex needs whole (real, imag) pairs on every rank"),
                )
    optional: Failures = {}
    for dims, reason in routed.local_failures:
        for m, p in enumerate(norm):
            if isinstance(p, tuple) and p[0] in dims:
                optional.setdefault(m, (p[0], f"{reason}; replicating it lets them merge"))
    read: dict[int, MeshPlacement] = {}
    for o, leaves in enumerate(routed.out_dims):
        placements, problems = layout_to_placements(leaves, o)
        read.update(placements)
        for m, why in problems.items():
            failures.setdefault(m, (_dim(norm[m]), why))
    if failures or optional:
        return None, failures, optional
    out: list[MeshPlacement] = []
    for m, p in enumerate(norm):
        if p is None or isinstance(p, Partial):
            out.append(p)
        elif m in read:
            out.append(read[m])
        elif mesh[m] == 1 and p[0] in routed.home:
            out.append((routed.home[p[0]], 1))  # a size-1 mesh dim: any Shard is exact
        else:
            out.append(None)
    return tuple(out), {}, {}


def _dim(p: MeshPlacement) -> int:
    return p[0] if isinstance(p, tuple) else -1


def _least_to_move(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[Size, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    failures: Failures,
    optional: Failures,
    pairs: int | None = None,
) -> Answer:
    sharded = [m for m, p in enumerate(norm) if isinstance(p, tuple)]
    direct = set(failures)
    failures = {**optional, **failures}

    # A subset that leaves a directly failing mesh dim in place is not hopeless: replicating
    # an earlier mesh dim of the same tensor dim re-carves the later one, which may then fit
    # (``(12,)`` as ``(2, 6)`` on mesh (3, 2) with ``[S(0), S(0)]``: moving mesh dim 0 alone
    # leaves mesh dim 1 ``Shard(0)``, where moving both would gather twice as much).
    def cost(subset: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
        extra = set(subset) - direct
        size = 1
        for m in subset:
            size *= mesh[m]
        return (len(extra), size, subset)

    subsets = sorted(
        (c for r in range(1, len(sharded) + 1) for c in itertools.combinations(sharded, r)),
        key=cost,
    )
    cv = None if pairs is not None else False
    static = all(is_static(n) for n in shape)
    for subset in subsets:
        target = tuple(None if m in subset else p for m, p in enumerate(norm))
        if static:  # the hot path answers most retries
            fast = fast_propagate([to_torch_placement(p) for p in target], shape, rule, mesh, cv)
            if fast is not None:
                out = normalize_placements(fast, len(rule), mesh)
                return target, out, _blocked(norm, subset, failures)
        result = _attempt(target, shape, rule, mesh, pairs)
        if result is not None and result[0] is not None:
            return target, result[0], _blocked(norm, subset, failures)
    everything = tuple(sharded)
    target = tuple(None if m in everything else p for m, p in enumerate(norm))
    return target, target, _blocked(norm, everything, failures)


def _blocked(
    norm: tuple[MeshPlacement, ...], subset: Sequence[int], failures: Failures
) -> tuple[Blocked, ...]:
    out = []
    for m in subset:
        dim, reason = failures.get(
            m,
            (
                _dim(norm[m]),
                "it must be replicated so that the other mesh dims' sub-modes survive the view",
            ),
        )
        out.append(Blocked(m, dim, reason))
    return tuple(out)


def _fallback(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[Size, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None = None,
) -> Answer:
    """Cases a layout cannot express: uneven sizes (exact rule tracing in ``uneven.py``);
    symbolic sizes (the same, at the hints, for what no symbol can change)."""
    if all(is_static(n) for n in shape):
        return _uneven(norm, shape, rule, mesh, complex_view)
    hints = _hints(shape)
    if hints is None:  # unbacked sizes: nothing to evaluate at
        return _replicate_all(norm)
    return _symbolic(norm, shape, hints, rule, mesh, complex_view)


def _uneven(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
) -> Answer:
    from .uneven import propagate_uneven

    torch_in = tuple(to_torch_placement(p) for p in norm)
    target, out, blocked = propagate_uneven(torch_in, shape, rule, mesh, complex_view=complex_view)
    return (
        normalize_placements(target, len(shape), mesh),
        normalize_placements(out, len(rule), mesh),
        tuple(blocked),
    )


def _hints(shape: tuple[Size, ...]) -> tuple[int, ...] | None:
    out = []
    for n in shape:
        hint = _hint(n)
        if hint is None:
            return None
        out.append(hint)
    return tuple(out)


def _hint(n: Size) -> int | None:
    """A size's value at the hints (a SymInt's, or a ``Sym``'s), None for an unbacked one."""
    if is_static(n):
        return n  # type: ignore[no-any-return]
    hint = n.hint if isinstance(n, Sym) else getattr(n.node, "hint", None)
    return None if hint is None else int(hint)


def _symbolic(
    norm: tuple[MeshPlacement, ...],
    shape: tuple[Size, ...],
    hints: tuple[int, ...],
    rule: tuple[DimSpec, ...],
    mesh: tuple[int, ...],
    complex_view: bool | None,
) -> Answer:
    """Symbolic sizes a layout cannot decide: solve the problem at the hints, keeping only the
    mesh dims whose answer no value of a symbol can change.

    The exact fallback works per group of input dims that the rule mixes; a group without
    symbolic sizes (in its input dims and in its rule specs) has the same index sets for every
    value of the symbols, and a mesh dim of size 1 holds everything whatever its placement. The
    other sharded mesh dims are replicated first, and the problem is solved again at the hints
    with them replicated, so what is kept was proven in the situation that is returned
    (symbolic sizes are backed, so >= 2: no symbol makes a rank empty).
    """
    from ..rules import map_sizes

    if any(_hint(n) is None for n in _rule_sizes(rule)):
        return _replicate_all(norm)
    symbolic_dims = _symbolic_groups(shape, rule)
    # A symbolic split factor chunks its dim differently for other values: it moves too.
    keep = tuple(
        p
        if not isinstance(p, tuple)
        or mesh[m] == 1
        or (p[0] not in symbolic_dims and is_static(p[1]))
        else None
        for m, p in enumerate(norm)
    )
    hint_rule = map_sizes(rule, _hint)
    target, out, blocked = _uneven(keep, hints, hint_rule, mesh, complex_view)
    why = (
        "the view mixes it with symbolic sizes, and its shard sizes cannot be proven to "
        "divide evenly for every value"
    )
    moved = tuple(
        Blocked(m, p[0], why) for m, (p, k) in enumerate(zip(norm, keep, strict=True)) if p != k
    )
    return target, out, tuple(sorted(moved + blocked, key=lambda b: b.mesh_dim))


def _rule_sizes(rule: tuple[DimSpec, ...]) -> list[Size]:
    from ..rules import Broadcast as B
    from ..rules import NewDim, Repeat, Split

    out: list[Size] = []
    stack = list(rule)
    while stack:
        spec = stack.pop()
        if isinstance(spec, Split):
            out.extend(spec.group_shape)
        elif isinstance(spec, B):
            out.append(spec.dim_size)
        elif isinstance(spec, Repeat):
            out.append(spec.times)
        elif isinstance(spec, NewDim):
            out.append(spec.size)
        stack.extend(spec.inputs())
    return out


def _symbolic_groups(shape: tuple[Size, ...], rule: tuple[DimSpec, ...]) -> set[int]:
    """The input dims in a group of the rule that involves a symbolic size."""
    from ..rules import Broadcast as B
    from ..rules import NewDim, Repeat, Split

    def walk(spec: DimSpec, dims: set[int]) -> bool:  # True if the spec holds a symbolic size
        sym = False
        if isinstance(spec, InputDim):
            dims.add(spec.input_dim)
            return not is_static(shape[spec.input_dim])
        if isinstance(spec, Split):
            sym = any(not is_static(n) for n in spec.group_shape)
        elif isinstance(spec, B):
            sym = not is_static(spec.dim_size)
        elif isinstance(spec, Repeat):
            sym = not is_static(spec.times)
        elif isinstance(spec, NewDim):
            sym = not is_static(spec.size)
        for inner in spec.inputs():
            sym = walk(inner, dims) or sym
        return sym

    groups: list[tuple[set[int], bool]] = []
    for spec in rule:
        dims: set[int] = set()
        groups.append((dims, walk(spec, dims)))
    out: set[int] = {d for d, n in enumerate(shape) if not is_static(n)}
    changed = True
    while changed:  # a group is symbolic if any spec sharing an input dim with it is
        changed = False
        for dims, sym in groups:
            if dims and (sym or dims & out) and not dims <= out:
                out |= dims
                changed = True
    return out


def _replicate_all(norm: tuple[MeshPlacement, ...]) -> Answer:
    """Unbacked sizes: nothing can be evaluated, so every sharded mesh dim moves. (Those on dims
    the rule carries whole are put back by ``_propagate``, which proves them without sizes.)"""
    target = tuple(None if isinstance(p, tuple) else p for p in norm)
    why = (
        "the view reshapes it and its shard sizes cannot be proven to divide evenly "
        "(unbacked sizes)"
    )
    blocked = tuple(Blocked(m, p[0], why) for m, p in enumerate(norm) if isinstance(p, tuple))
    return target, target, blocked

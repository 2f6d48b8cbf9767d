"""The layout package is the specification of the engine's sharded layouts.

1. A dim's sharded layout (``placements_to_layout``) is CuTe's ``logical_divide`` applied
   step by step: start from ``n:1``; each placement on mesh dim m (size M, split factor sf)
   divides the current local layout ``L`` by its tile, ``(L/M):1`` for ``Shard`` and
   ``(L/(sf*M), sf):(1, L/sf)`` for ``_StridedShard``; mode 1 of the divide is mesh dim m's gpu
   sub-mode and mode 0 the new local layout. The engine's local and gpu sub-modes are the same
   functions as those ``cute_shard.layout`` computes.
2. A view that keeps every mesh dim composes: the output's sharded layout (of the engine's
   output placements) and the input's map each rank's local element (the same local flat
   index: a local view keeps it) to the same global element (the same global flat index: a
   view keeps that too). Both layouts are evaluated by ``cute_shard.layout``.
3. ``compose_view`` (the input's sharded layout composed with the view, read off the rule
   without the engine) is the engine's answer: a layout exactly when the engine keeps every
   mesh dim, and then the layout of the engine's output placements; for every op of the
   engine's strategies (views, permutes, expands, repeats, squeezes, view_as_real/complex)
   with Partial placements carried.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import assume, given
from hypothesis import strategies as st
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard, _StridedShard

import cute_shard
import cute_shard.rules as R
from cute_shard.engine import ShardedLayout, compose_view, decide_view, placements_to_layout
from cute_shard.layout import Layout, logical_divide
from property_tests.engine_strategies import ENGINE, Case, _out_shape, cases, even_view_cases


def _values(layout: Layout) -> list[int]:
    return [layout(i) for i in range(layout.size)]


def _leaves_layout(leaves: tuple[tuple[int, int], ...]) -> Layout:
    if not leaves:
        return Layout(1, 0)
    return Layout(tuple(s for s, _ in leaves), tuple(d for _, d in leaves))


@st.composite
def dim_stacks(draw: st.DrawFn) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """A dim size, and an even stack of (mesh size, split factor) placed on it in order."""
    primes = draw(st.lists(st.sampled_from([2, 2, 2, 3, 3, 5]), min_size=1, max_size=7))
    n = math.prod(primes)
    local = n
    meshes: list[int] = []
    sfs: list[int] = []
    for _ in range(draw(st.integers(1, 3))):
        ms = [m for m in range(2, 9) if local % m == 0]
        if not ms:
            break
        m = draw(st.sampled_from(ms))
        sf = draw(st.sampled_from([f for f in range(1, local // m + 1) if (local // m) % f == 0]))
        meshes.append(m)
        sfs.append(sf)
        local //= m
    assume(meshes)
    return n, tuple(meshes), tuple(sfs)


@ENGINE
@given(dim_stacks())
def test_a_dims_layout_is_stepwise_logical_divide(
    case: tuple[int, tuple[int, ...], tuple[int, ...]],
) -> None:
    n, meshes, sfs = case
    placements: list[Placement] = [
        Shard(0) if sf == 1 else _StridedShard(0, split_factor=sf) for sf in sfs
    ]
    sl = placements_to_layout((n,), placements, meshes)
    local = Layout(n, 1)
    gpus: dict[int, Layout] = {}
    for m, (size, sf) in enumerate(zip(meshes, sfs, strict=True)):
        length = local.size
        k = length // (sf * size)
        tile = Layout(k, 1) if sf == 1 else Layout((k, sf), (1, length // sf))
        try:
            divided = logical_divide(local, tile)
        except ValueError:  # CuTe's divisibility conditions fail: no layout expresses it
            assert sl is None, (case, sl)
            return
        gpus[m] = divided[1]
        local = divided[0]
    assert sl is not None, case
    local_leaves, gpu_leaves = sl.dims[0].modes()
    assert _values(_leaves_layout(local_leaves)) == _values(local), (case, sl)
    for m, gpu in gpus.items():
        assert _values(_leaves_layout(gpu_leaves[m])) == _values(gpu), (case, m, sl)
    # and the whole dim, (local, gpu...), is the layout of that divide
    assert sorted(sl.dims[0].to_layout()(i) for i in range(n)) == list(range(n))


def _global_of_local(sl: ShardedLayout, coord: tuple[int, ...], mesh: tuple[int, ...]) -> list[int]:
    """The global flat index of each element of the rank at ``coord``'s local tensor, in local
    row-major order, by evaluating the sharded layout (``to_layout``) at (local, gpu) coords.

    A layout's value at a coordinate is the sum of its modes' values at theirs, so each tensor
    dim's mode is evaluated once per local index and the sums are taken over the product."""
    layout = sl.to_layout()
    tables = []
    for d, dim in enumerate(sl.dims):
        local, gpu = dim.modes()
        g = tuple(coord[m] for m in gpu)
        mode = layout[d]
        size = math.prod(s for s, _ in local)
        if not g:
            tables.append([mode(i) for i in range(size)])
        else:
            at = g[0] if len(g) == 1 else g
            tables.append([mode((i, at)) for i in range(size)])
    return [sum(t) for t in itertools.product(*tables)]


@st.composite
def even_views(
    draw: st.DrawFn,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[Placement, ...]]:
    primes = draw(st.lists(st.sampled_from([2, 2, 2, 3, 3]), min_size=2, max_size=8))
    cuts = sorted(draw(st.lists(st.integers(1, len(primes) - 1), max_size=3, unique=True)))
    shape = tuple(
        math.prod(primes[a:b]) for a, b in zip([0, *cuts], [*cuts, len(primes)], strict=True)
    )
    order = list(draw(st.permutations(primes)))
    cuts2 = sorted(draw(st.lists(st.integers(1, len(order) - 1), max_size=3, unique=True)))
    target = tuple(
        math.prod(order[a:b]) for a, b in zip([0, *cuts2], [*cuts2, len(order)], strict=True)
    )
    assume(math.prod(shape) <= 2048)
    mesh = draw(st.sampled_from([(2,), (4,), (2, 2), (2, 3), (3, 2), (2, 2, 2)]))
    local = list(shape)
    placements: list[Placement] = []
    for size in mesh:
        dims = [d for d in range(len(shape)) if local[d] % size == 0]
        if not dims or draw(st.integers(0, 5)) == 0:
            placements.append(Replicate())
            continue
        d = draw(st.sampled_from(dims))
        sfs = [f for f in range(1, local[d] // size + 1) if (local[d] // size) % f == 0]
        sf = draw(st.sampled_from(sfs))
        placements.append(Shard(d) if sf == 1 else _StridedShard(d, split_factor=sf))
        local[d] //= size
    return shape, target, mesh, tuple(placements)


@ENGINE
@given(even_views())
def test_a_view_composes_the_sharded_layouts(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[Placement, ...]],
) -> None:
    shape, target, mesh, placements = case
    rule = R.view_groups(shape, target)
    tgt, out = cute_shard.propagate_shape_and_sharding(placements, shape, rule, mesh)
    assume(tuple(tgt) == tuple(placements))  # every mesh dim stays
    before = placements_to_layout(shape, placements, mesh)
    assume(before is not None)  # a stack no layout expresses (a cut inside a sub-mode)
    after = placements_to_layout(target, out, mesh)
    assert after is not None, (case, out)
    assert compose_view(before, rule) == after, (case, out)
    for coord in itertools.product(*(range(m) for m in mesh)):
        assert _global_of_local(before, coord, mesh) == _global_of_local(after, coord, mesh), (
            case,
            out,
            coord,
        )


@ENGINE
@given(st.one_of(cases(), even_view_cases()))  # (even views: many must move a mesh dim)
def test_compose_view_is_the_engines_answer(case: Case) -> None:
    before = placements_to_layout(case.shape, case.placements, case.mesh)
    assume(before is not None)  # uneven shards, or a stack no layout expresses
    composed = compose_view(before, case.rule)
    decision = decide_view(
        case.placements,
        case.shape,
        case.rule,
        case.mesh,
        complex_view=case.op == "view_as_complex",
    )
    if composed is None:
        assert decision.moved, (case, decision)
        return
    assert not decision.moved, (case, decision, composed)
    out_shape = _out_shape(case.op, case.args, case.shape)
    assert composed == placements_to_layout(out_shape, decision.output, case.mesh), (
        case,
        decision,
    )

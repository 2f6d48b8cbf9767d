"""Every redistribution exact, on every rank: the planner and executor against the oracle.

Three tiers, one ground truth (``redistribute_sim.expected_locals``: the oracle's target shard
of the global tensor, with the source's pending reductions carried out exactly once):

1. ``test_random_cases``: 10,000 seeded random cases per run (10 blocks of 1,000), each run
   on every rank by ``redistribute_sim.run_plan`` (the executor's own per-rank pieces, the
   collectives simulated). Shapes of 1-4 dims with sizes 0-16 (uneven, size 0 and 1 dims),
   meshes of 1-3 dims with at most 8 ranks (size-1 mesh dims included), placements R, S, SS
   with split factors 1-5 (dividing or not), several mesh dims on one tensor dim in any
   order, negative shard dims, Partial sources (one op per placement list, or sum with avg,
   as DTensor allows; integer pieces in float64 so every reduction is exact), Partial targets
   (from R, from another Partial, from a shard), ``joint`` True and False. Per case: planning
   never raises; every rank's result equals the ground truth bit for bit; every local tensor
   has the shape the plan says after every step; ``plan.received == physical_limit(plan)``
   unless ``plan.split``; and what the busiest rank actually receives in each step is the
   step's ``received``.
2. ``test_hypothesis_cases``: the same generator driven by hypothesis (so a failure shrinks
   to a small seed), adding that ``transfers(plan, step)`` sums, per receiver, to what the
   simulator saw that rank receive.
3. ``test_simulator_agrees_with_local_tensor_mode``: a sample of the same cases through
   ``execute`` itself under torch's ``LocalTensorMode`` (every rank in one process, torch's
   own collectives) on a fake world of the mesh's size, a quarter of them on complex data:
   every rank's result equals the simulator's and the ground truth, and ``CommDebugMode``
   counts exactly the plan's collectives. This is what makes tier 1 trustworthy: the
   simulator's collectives behave as torch's do on the cases it is trusted with.

Beside them, ``test_even_shapes_plan_as_their_unit_scaled`` (2,000 seeded cases, and a
hypothesis twin): the same placements on shapes whose every dim is a multiple of its unit
(``plan._Pair.units``), where a plan is the unit plan scaled; it must equal, field by field, the
plan built from labels computed for the shape itself; so must a plan on a shape whose dims are
multiples of their units only in part, whose multiples are labelled by their unit dims scaled.
(Tiers 1 and 2 run such plans on every rank too: a small even shape plans through its unit.)

And on meshes of 105-128 ranks, where the planner counts one rank per class of ranks
(``labels.rank_classes``; the other tiers' meshes count every rank): tier 1 on 120 seeded
cases (``test_large_meshes_run_exactly``), and the plan counted per class against the plan
counted on every rank, on large and small meshes (``test_plans_count_one_rank_per_class``).

A failing case prints as ``(shape) on (mesh): [src] -> [dst]`` (and `` joint=False``); paste
it into ``Case.parse`` to reproduce (``redistribute_sim.py``; ``dataclasses.replace(case,
joint=False)`` for the latter).
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import random

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed._local_tensor import rank_map
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode

from bench.redistribute_bench import simulated_world
from cute_shard.redistribute import check_placements, physical_limit, plan_redistribution, transfers
from cute_shard.redistribute import execute as execute_module
from cute_shard.redistribute import labels as labels_module
from cute_shard.redistribute import plan as plan_module
from cute_shard.redistribute.execute import Group, execute
from cute_shard.redistribute.plan import plan_of_symbols
from cute_shard.redistribute.types import Plan, Step
from property_tests.redistribute_sim import (
    Case,
    Run,
    Symbols,
    World,
    expected_locals,
    full_tensor,
    random_case,
    run_plan,
    source_locals,
)

BLOCKS = 10
PER_BLOCK = 1000
LOCAL_TENSOR_CASES = 50


def check_case(case: Case) -> tuple[Plan, Run]:
    """Plan and simulate ``case`` and check everything tier 1 promises; AssertionError naming
    the case (and the rank) otherwise. Returns the plan and the simulator's run."""
    try:
        plan = case.plan()
    except Exception as e:
        raise AssertionError(f"{case}: planning a legal pair raised {e!r}") from e
    full = full_tensor(case.shape)
    try:
        run = run_plan(plan, source_locals(case, full))
    except Exception as e:
        raise AssertionError(f"{case}: {plan}: running the plan raised {e!r}") from e
    want = expected_locals(case, full)
    for coord, got, exp in zip(World.of(case.mesh).coords, run.outputs, want, strict=True):
        if got.shape != exp.shape or not torch.equal(got, exp):
            raise AssertionError(f"{case}: {plan}: rank {coord} holds\n{got}\nexpected\n{exp}")
    if not plan.split:
        limit = physical_limit(plan)
        assert plan.received == limit, f"{case}: {plan}: received {plan.received}, limit {limit}"
    for step, got_per_rank in zip(plan.steps, run.received, strict=True):
        assert max(got_per_rank, default=0) == step.received, (
            f"{case}: {step}: ranks received {got_per_rank}, the plan says {step.received}"
        )
    totals = [sum(per_step) for per_step in zip(*run.received, strict=True)]
    assert plan.received == max(totals, default=0), (
        f"{case}: {plan}: plan.received {plan.received}, the ranks received {totals} in all"
    )
    return plan, run


# ------------------------------------------------------------------------------ tier 1


@pytest.mark.parametrize("block", range(BLOCKS))
def test_random_cases(block: int) -> None:
    rng = random.Random(1000 + block)
    failures = []
    for _ in range(PER_BLOCK):
        case = random_case(rng)
        try:
            check_case(case)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, f"{len(failures)} of {PER_BLOCK} cases failed:\n" + "\n\n".join(
        failures[:5]
    )


def test_generator_covers_what_it_claims() -> None:
    """The random cases include each kind of input the module docstring lists."""
    rng = random.Random(1000)
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(PER_BLOCK):
        case = random_case(rng)
        plan = case.plan()
        seen["uneven"] += any(
            n % math.prod(case.mesh) for n in case.shape
        )  # a proxy: a dim the world does not divide
        seen["size 0"] += 0 in case.shape
        seen["size-1 mesh dim"] += 1 in case.mesh
        seen["3-D mesh"] += len(case.mesh) == 3
        seen["strided"] += any(p.kind == "SS" for p in case.src + case.dst)
        dims = [p.dim % len(case.shape) for p in case.src if p.shards]
        seen["stacked"] += len(dims) != len(set(dims))
        seen["partial source"] += any(p.kind == "P" for p in case.src)
        seen["partial target"] += any(p.kind == "P" for p in case.dst)
        ops = {p.reduce_op for p in case.src if p.kind == "P"}
        seen["max/min source"] += bool(ops & {"max", "min"})
        seen["avg source"] += "avg" in ops
        seen["negative dim"] += any(p.shards and p.dim < 0 for p in case.src + case.dst)
        seen["joint=False"] += not case.joint
        seen["split"] += plan.split
        for step in plan.steps:
            seen[step.kind.value] += 1
            seen[f"over {len(step.mesh_dims)} mesh dims"] += 1
    want = (
        "uneven,size 0,size-1 mesh dim,3-D mesh,strided,stacked,partial source,partial target,"
        "max/min source,avg source,negative dim,joint=False,split,chunk,all-reduce,"
        "reduce-scatter,all-to-all,permutation,all-gather,partition,over 2 mesh dims"
    ).split(",")
    rare = {k: seen[k] for k in want if seen[k] < 10}
    assert not rare, f"the generator rarely makes: {rare}"
    assert seen["over 3 mesh dims"] >= 2, seen


# ------------------------------------------------------------------------------ tier 2


@given(seed=st.integers(0, 2**32 - 1))
def test_hypothesis_cases(seed: int) -> None:
    case = random_case(random.Random(seed))
    plan, run = check_case(case)
    world = World.of(case.mesh)
    for step, got in zip(plan.steps, run.received, strict=True):
        per_receiver = collections.Counter[tuple[int, ...]]()
        for to, frm, n in transfers(plan, step):
            assert n > 0 and to != frm, f"{case}: {step}: transfer {to} <- {frm}: {n}"
            per_receiver[to] += n
        assert tuple(per_receiver[c] for c in world.coords) == got, (
            f"{case}: {step}: transfers {dict(per_receiver)}, the ranks received {got}"
        )


# ------------------------------------------------------- even shapes: the unit plan scaled

EVEN_CASES = 2000


def fresh_build(shape: tuple[int, ...], pair: object, joint: bool) -> Plan:
    """The plan built from labels computed for ``shape`` itself, dim by dim, none read off a
    unit dim's: what a scaled plan, and a plan with scaled dims, must equal."""
    fresh = labels_module.dim_labels.__wrapped__
    dims = tuple(map(fresh, shape, *pair.levels))  # type: ignore[attr-defined]
    return plan_module._build(shape, pair, joint, dims)  # type: ignore[arg-type]


def check_scaled(case: Case, rng: random.Random) -> None:
    """The case's placements on a shape whose every dim is a multiple of its unit
    (``plan._Pair.units``: every torch.chunk exact): the plan, read off the unit plan, equals in
    every field (each dim's cuts and runs too) the plan built from fresh labels. And on a shape
    whose dims are multiples of their units only in part (the others the case's own sizes), a
    plan whose multiples' labels are their unit dims' scaled equals the fresh one too."""
    ndim = len(case.shape)
    src = check_placements(case.src, ndim, case.mesh, "source")
    dst = check_placements(case.dst, ndim, case.mesh, "target")
    pair = plan_module._pair(src, dst, case.mesh, ndim)
    even = tuple(u * rng.choice((1, 1, 2, 3, 5)) for u in pair.units)
    mixed = tuple(e if rng.random() < 0.5 else n for e, n in zip(even, case.shape, strict=True))
    for shape in (even, mixed):
        plan = plan_redistribution(shape, case.mesh, src, dst, joint=case.joint)
        built = fresh_build(shape, pair, case.joint)
        assert plan == built, f"{shape} on {case.mesh}: {src} -> {dst}: {plan} != {built}"
        assert [d.segments for d in plan.dims] == [d.segments for d in built.dims], f"{shape}"
        assert [d.counts(d.slots) for d in plan.dims] == [d.counts(d.slots) for d in built.dims]


def test_even_shapes_plan_as_their_unit_scaled() -> None:
    rng = random.Random(3)
    for _ in range(EVEN_CASES):
        check_scaled(random_case(rng), rng)


@given(seed=st.integers(0, 2**32 - 1))
def test_hypothesis_even_shapes(seed: int) -> None:
    rng = random.Random(seed)
    check_scaled(random_case(rng), rng)


# ------------------------------------------------- rank classes: one rank counted per class

CLASS_CASES = 400
#: Meshes of up to 128 ranks (planned, not run): what ``labels.rank_classes`` is for.
BIG_MESHES = (
    (16,),
    (64,),
    (3, 5),
    (8, 8),
    (4, 16),
    (16, 8),
    (6, 10),
    (2, 3, 7),
    (2, 4, 8),
    (4, 4, 4),
    (2, 2, 2, 4),
)
#: Sizes that such meshes cut unevenly, evenly, or leave empty chunks in.
BIG_SIZES = (1, 2, 5, 7, 16, 24, 33, 48, 64, 100, 127, 128, 130, 255, 384)


def _built(case: Case, ranks: object) -> tuple[Plan, int]:
    """The case's plan built from fresh labels, and its physical limit, counting the ranks
    ``ranks(dims, mesh)`` gives."""
    ndim = len(case.shape)
    src = check_placements(case.src, ndim, case.mesh, "source")
    dst = check_placements(case.dst, ndim, case.mesh, "target")
    pair = plan_module._pair.__wrapped__(src, dst, case.mesh, ndim)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_module, "_ranks", ranks)
        plan = fresh_build(case.shape, pair, case.joint)
        return plan, physical_limit(plan)


def _every_rank(dims: object, mesh: tuple[int, ...]) -> labels_module.Ranks:
    return labels_module.mesh_ranks(mesh)


def check_classes(case: Case) -> None:
    """Whatever the mesh's size (the planner finds classes only on large meshes,
    ``plan._CLASSES_ABOVE``): the plan counted on one rank per class (``labels.rank_classes``)
    equals, field by field, the plan counted on every rank, and so does the physical limit;
    and for every dim and every set of its slots, the per-rank lengths over the classes are
    those over every rank (the same values: none missed, none made up)."""
    plan, limit = _built(case, labels_module.rank_classes)
    every, every_limit = _built(case, _every_rank)
    assert plan == every, f"{case}: {plan} != {every} counted on every rank"
    assert limit == every_limit, f"{case}: limit {limit} != {every_limit} on every rank"
    # as the planner searches them: small mesh dims counted whole
    above = plan_module._CLASSES_OF_MESH_DIMS_ABOVE
    some, _ = _built(case, functools.partial(labels_module.rank_classes, above=above))
    assert some == every, f"{case}: {some} != {every} with mesh dims of <= {above} counted whole"
    classes = labels_module.rank_classes(plan.dims, case.mesh)
    everyone = labels_module.mesh_ranks(case.mesh)
    for d in plan.dims:
        for k in range(1, len(d.slots) + 1):
            for slots in itertools.combinations(d.slots, k):
                a, b = d.per_rank(slots, classes), d.per_rank(slots, everyone)
                assert set(_each(a)) == set(_each(b)), f"{case}: {d} at {slots}: {a} != {b}"


def _each(x: int | tuple[int, ...]) -> tuple[int, ...]:
    return x if isinstance(x, tuple) else (x,)


def _big_case(rng: random.Random) -> Case:
    return random_case(rng, world=128, meshes=BIG_MESHES, sizes=BIG_SIZES, max_numel=math.inf)


def test_plans_count_one_rank_per_class() -> None:
    rng = random.Random(11)
    for _ in range(CLASS_CASES):
        check_classes(_big_case(rng))
    for _ in range(CLASS_CASES):  # and the small meshes the other tiers run
        check_classes(random_case(rng))


@given(seed=st.integers(0, 2**32 - 1))
def test_hypothesis_rank_classes(seed: int) -> None:
    check_classes(_big_case(random.Random(seed)))


# ------------------------------------------- symbolic sizes: the unit plan, scaled by symbols

SYMBOLIC_CASES = 300
Coord = tuple[int, ...]


def _boxes(plan: Plan, step: Step, holder: Coord, by: Coord) -> tuple[object, ...]:
    """Both boxes the executor reads for a pair of ranks in a step: where ``by``'s part sits
    in ``holder``'s local tensor before the step, and the reverse after."""
    return (
        execute_module._box(plan.dims, step.before, holder, step.after, by),
        execute_module._box(plan.dims, step.after, holder, step.before, by),
    )


def _outline(plan: Plan) -> list[tuple[object, ...]]:
    """What a plan does, without its counts of elements."""
    return [plan.start, plan.final, plan.moves, plan.split] + [
        (s.kind, s.mesh_dims, s.before, s.after, s.peers, s.reduce_op, s.even, s.uniform)
        for s in plan.steps
    ]


def check_symbolic(case: Case, rng: random.Random) -> None:
    """The case's placements on sizes that are symbols (``plan_of_symbols``: what install()
    plans under ``torch.compile`` with dynamic shapes), each hinted at a multiple of its unit
    or at the case's own size. A dim at a multiple stays symbolic, any other is planned at its
    value; the plan read at other multiples of the symbolic dims' units equals the int plan
    there: what it does, what the busiest rank receives (each step's too), every rank's local
    shape in every state, and both boxes the executor reads for every pair of ranks in every
    step (where read off unit dims' boxes, they are also those of labels computed at the
    values); and every guard it records holds at every such multiple (no symbolic size is
    specialised)."""
    ndim = len(case.shape)
    src = check_placements(case.src, ndim, case.mesh, "source")
    dst = check_placements(case.dst, ndim, case.mesh, "target")
    pair = plan_module._pair(src, dst, case.mesh, ndim)
    units = pair.units
    hints = tuple(
        u * rng.choice((1, 2, 3)) if rng.random() < 0.7 else n
        for u, n in zip(units, case.shape, strict=True)
    )
    symbols = Symbols.of(hints)
    plan = plan_of_symbols(symbols.sizes, case.mesh, src, dst, case.joint)
    coords = World.of(case.mesh).coords
    label = f"{case} hinted at {hints}, units {units}"
    # (sizes 0 and 1 are ints, as torch.compile specialises them; other non-multiples are
    # planned at their values)
    kept = [
        isinstance(n, torch.SymInt) and plan_module._multiple(h, u)
        for n, h, u in zip(symbols.sizes, hints, units, strict=True)
    ]
    tried = [hints] + [
        tuple(u * rng.randint(1, 6) if k else h for u, h, k in zip(units, hints, kept, strict=True))
        for _ in range(2)
    ]
    for values in tried:
        want = plan_redistribution(values, case.mesh, src, dst, joint=case.joint)
        at = functools.partial(symbols.at, values=values)
        assert _outline(plan) == _outline(want), f"{label}, {values}: {plan} != {want}"
        assert at([plan.received, plan.reduced]) == [want.received, want.reduced], label
        for step, other in zip(plan.steps, want.steps, strict=True):
            assert at([step.received, step.reduced]) == [other.received, other.reduced], label
        for state in (plan.start, *(s.after for s in plan.steps)):
            for c in coords:
                assert at(plan.local_shape(state, c)) == want.local_shape(state, c), label
        fresh = fresh_build(values, pair, case.joint)  # (its boxes not read off unit dims)
        for step, other in zip(plan.steps, want.steps, strict=True):
            if step.kind.local or step.kind.reduces:
                continue
            for holder in coords:
                for by in coords:
                    got = at(_boxes(plan, step, holder, by))
                    assert got == _boxes(want, other, holder, by), f"{label}, {values}: {step}"
                    assert got == _boxes(fresh, other, holder, by), f"{label}, {values}: {step}"
    for guard in symbols.guards():
        assert all(symbols.holds(guard, v) for v in tried), f"{label}: guard {guard}"


def test_symbolic_sizes_plan_as_the_unit_plan_scaled() -> None:
    rng = random.Random(11)
    for _ in range(SYMBOLIC_CASES):
        check_symbolic(random_case(rng), rng)


@given(seed=st.integers(0, 2**32 - 1))
def test_hypothesis_symbolic_sizes(seed: int) -> None:
    rng = random.Random(seed)
    check_symbolic(random_case(rng), rng)


# ------------------------------------------------------------------------------ tier 3


def _local_tensor_cases() -> dict[int, list[Case]]:
    """The sample, by world size: the first cases of a seed, with 4-8 ranks favoured."""
    rng = random.Random(7)
    by_world: dict[int, list[Case]] = collections.defaultdict(list)
    for _ in range(LOCAL_TENSOR_CASES):
        case = random_case(rng)
        by_world[math.prod(case.mesh)].append(case)
    return dict(sorted(by_world.items()))


def test_simulator_agrees_with_local_tensor_mode() -> None:
    failures = []
    checked = 0
    for size, cases in _local_tensor_cases().items():
        failures += _run_under_local_tensor_mode(size, cases)
        checked += len(cases)
    assert not failures, "\n\n".join(failures[:5])
    assert checked == LOCAL_TENSOR_CASES


def _run_under_local_tensor_mode(size: int, cases: list[Case]) -> list[str]:
    """Each case through ``execute`` under ``LocalTensorMode`` on a fake world of ``size``
    ranks (a quarter on complex data): every rank's result against the simulator's and the
    ground truth, and the collectives ``CommDebugMode`` counts against the plan's."""
    failures = []
    with simulated_world(size):
        # One mesh per shape, alive as long as the mode: LocalTensorMode caches a mesh's
        # coordinates by id(mesh), so a new mesh that reuses a freed one's id would get
        # the old mesh's coordinates (torch 2.13).
        meshes: dict[tuple[int, ...], DeviceMesh] = {}
        for index, case in enumerate(cases):
            if case.mesh not in meshes:
                meshes[case.mesh] = init_device_mesh("cpu", case.mesh)
            mesh = meshes[case.mesh]
            plan = case.plan()
            full = full_tensor(case.shape)
            if index % 4 == 0 and not any(p.kind == "P" for p in case.src):
                # complex data: the executor hands collectives real views of it
                full = full.to(torch.complex128) * (1 + 2j)
            srcs = source_locals(case, full)
            world = Group(dist.group.WORLD, World.of(case.mesh).coords)
            local = rank_map(lambda r, srcs=srcs: srcs[r].clone())
            try:
                with CommDebugMode() as comm:
                    out = execute(local, plan, mesh, mesh.get_coordinate(), world)
            except Exception as e:
                failures.append(f"{case}: {plan}: execute raised {e!r}")
                continue
            sim = run_plan(plan, srcs).outputs
            want = expected_locals(case, full)
            for r, coord in enumerate(World.of(case.mesh).coords):
                got = out._local_tensors[r]  # type: ignore[attr-defined]
                if not (torch.equal(got, sim[r]) and torch.equal(got, want[r])):
                    failures.append(
                        f"{case}: {plan}: rank {coord}: execute {got}, simulator {sim[r]}, "
                        f"expected {want[r]}"
                    )
                    break
            counts = collections.Counter(s.collective for s in plan.steps if s.collective)
            ran = {str(op).rsplit(".", 1)[-1]: n for op, n in comm.get_comm_counts().items()}
            if ran != dict(counts):
                failures.append(f"{case}: {plan}: CommDebugMode counted {ran}, plan {counts}")
    return failures


# ------------------------------------------- large meshes: the plans counted per rank class

LARGE_CASES = 120
#: Meshes of more than ``plan._CLASSES_ABOVE`` ranks, where the planner counts one rank per
#: class: the other tiers' meshes (at most 8 ranks) count every rank.
LARGE_MESHES = ((128,), (16, 8), (2, 8, 8), (4, 4, 8), (3, 5, 7))
LARGE_SIZES = (1, 2, 3, 5, 8, 9, 16, 17, 33, 64, 130)


def _large_case(rng: random.Random) -> Case:
    case = random_case(rng, world=128, meshes=LARGE_MESHES, sizes=LARGE_SIZES, max_numel=8192)
    assert math.prod(case.mesh) > plan_module._CLASSES_ABOVE, case
    return case


def test_large_meshes_run_exactly() -> None:
    """Tier 1 on meshes of 105-128 ranks: every rank's result, bytes and limit, with the plan
    counted per rank class. (Not tier 3: ``LocalTensorMode`` runs every op once per rank, and
    a sample of six such cases took over ten minutes.)"""
    rng = random.Random(5)
    for _ in range(LARGE_CASES):
        check_case(_large_case(rng))

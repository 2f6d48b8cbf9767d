"""The planner's plans (``cute_shard/redistribute/plan.py``): the design brief's cases with
their exact plans, each kind of step, uneven and size-1 cases, the errors on bad input, and
``transfers`` against ``received``.

Every plan here is also run on every rank by ``property_tests/redistribute_sim.py`` (the
executor's per-rank pieces, the collectives simulated) and compared with the oracle's target
shard, so a plan that reads right but moves the wrong data fails too.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re

import pytest
import torch

from cute_shard.notation import PlacementSpec, parse_placements
from cute_shard.redistribute import (
    Kind,
    Plan,
    check_placements,
    physical_limit,
    plan_redistribution,
    transfers,
)
from cute_shard.redistribute import labels as labels_mod
from cute_shard.redistribute import plan as plan_mod
from cute_shard.redistribute.labels import dim_runs
from property_tests.redistribute_sim import (
    Case,
    World,
    expected_locals,
    full_tensor,
    run_plan,
    source_locals,
)


def run(case: Case) -> Plan:
    """The case's plan, after checking it moves every rank's data exactly."""
    plan = case.plan()
    full = full_tensor(case.shape)
    out = run_plan(plan, source_locals(case, full)).outputs
    for coord, got, want in zip(
        World.of(case.mesh).coords, out, expected_locals(case, full), strict=True
    ):
        assert got.shape == want.shape and torch.equal(got, want), f"{case}: rank {coord}"
    return plan


def steps(plan: Plan) -> list[tuple[str, tuple[int, ...]]]:
    return [(s.kind.value, s.mesh_dims) for s in plan.steps]


def received_per_rank(plan: Plan) -> dict[tuple[int, ...], int]:
    """Over all steps, what each rank receives (from ``transfers``), ranks receiving 0 left
    out."""
    out: collections.Counter[tuple[int, ...]] = collections.Counter()
    for step in plan.steps:
        for to, _, n in transfers(plan, step):
            out[to] += n
    return dict(out)


# ----------------------------------------------------------------- the design brief's cases


def test_brief_strided_target_from_replicate_and_shard() -> None:
    """(12,) on (3, 2), [R, S0] -> [S0, SS0:2] (torch 2.13's local tensors are wrong): mesh dim
    0 keeps its part locally, mesh dim 1 permutes; the busiest ranks receive their 2
    missing elements, the limit."""
    plan = run(Case.parse((12,), (3, 2), "R,S0", "S0,SS0:2"))
    assert steps(plan) == [("chunk", (0,)), ("permutation", (1,))]
    assert plan.received == physical_limit(plan) == 2
    assert received_per_rank(plan) == {(0, 1): 2, (1, 0): 1, (1, 1): 1, (2, 0): 2}
    assert [s.collective for s in plan.steps] == [None, "all_to_all_single"]


def test_brief_fsdp2_tp_weight_is_one_permutation() -> None:
    """(64, 32) on (2, 4), [SS0:4, S0] -> [S0, S0]: each rank's target comes whole from one
    peer; one permutation over both mesh dims, 8 rows of 32 for the busiest rank (torch
    all-gathers all 64 rows: 7x)."""
    case = Case.parse((64, 32), (2, 4), "SS0:4,S0", "S0,S0")
    plan = run(case)
    assert steps(plan) == [("permutation", (0, 1))]
    (step,) = plan.steps
    assert step.peers == 1 and step.collective == "all_to_all_single"
    assert plan.received == physical_limit(plan) == 8 * 32
    assert not plan.split
    got = received_per_rank(plan)
    assert set(got.values()) == {256}
    assert {(0, 0), (1, 3)}.isdisjoint(got)  # these two already hold their rows
    assert len(got) == 6
    assert {m.mesh_dim: m.kind for m in plan.moves} == {0: Kind.PERMUTE, 1: Kind.PERMUTE}


def test_brief_fsdp2_tp_weight_without_a_joint_group() -> None:
    """Without a group over both mesh dims: one mesh dim at a time, and the plan says so."""
    case = dataclasses.replace(Case.parse((64, 32), (2, 4), "SS0:4,S0", "S0,S0"), joint=False)
    plan = run(case)
    assert plan.split
    assert [len(s.mesh_dims) for s in plan.steps] == [1, 1]
    assert sorted(m for s in plan.steps for m in s.mesh_dims) == [0, 1]
    assert plan.received > physical_limit(plan) == 256
    assert plan.received == 512


def test_brief_head_merge_is_one_all_to_all_on_mesh_dim_1() -> None:
    """(32, 24, 16) on (2, 4), [S0, SS0:2] -> [S0, S1]: mesh dim 0 keeps its sub-mode; mesh
    dim 1 moves from d0 to d1 by one all-to-all (torch: all-gather then chunk, 4x)."""
    plan = run(Case.parse((32, 24, 16), (2, 4), "S0,SS0:2", "S0,S1"))
    assert steps(plan) == [("all-to-all", (1,))]
    assert [m.mesh_dim for m in plan.moves] == [1]
    # the target shard is 16 x 6 x 16; a rank holds a quarter of its rows already
    assert plan.received == physical_limit(plan) == 16 * 6 * 16 * 3 // 4
    assert plan.steps[0].peers == 3


# ------------------------------------------------------------------------ each kind of step


@pytest.mark.parametrize(
    ("shape", "mesh", "src", "dst", "want", "collectives"),
    [
        ((8, 4), (4,), "S0", "R", [("all-gather", (0,))], ["all_gather_into_tensor"]),
        ((8, 4), (4,), "R", "S1", [("chunk", (0,))], [None]),
        ((8, 4), (4,), "P", "R", [("all-reduce", (0,))], ["all_reduce"]),
        ((8, 4), (4,), "P", "S0", [("reduce-scatter", (0,))], ["reduce_scatter_tensor"]),
        ((8, 4), (4,), "P:max", "SS0:2", [("reduce-scatter", (0,))], ["reduce_scatter_tensor"]),
        (
            (8, 4),
            (4,),
            "S0",
            "P",
            [("all-gather", (0,)), ("partition", (0,))],
            ["all_gather_into_tensor", None],
        ),
        ((8, 4), (4,), "R", "P:max", [("partition", (0,))], [None]),
        ((8, 4), (4,), "S0", "S1", [("all-to-all", (0,))], ["all_to_all_single"]),
        ((8, 4), (4,), "S0", "SS0:2", [("all-to-all", (0,))], ["all_to_all_single"]),
        ((8, 4), (4,), "SS0:2", "SS0:2", [], []),
        ((8, 4), (2, 2), "S0,S1", "S1,S0", [("permutation", (0, 1))], ["all_to_all_single"]),
        ((8, 8), (2, 4), "S0,S1", "S1,S0", [("all-to-all", (0, 1))], ["all_to_all_single"]),
        ((8, 4), (2, 2), "S0,S0", "S0,R", [("all-gather", (1,))], ["all_gather_into_tensor"]),
        (
            (8, 4),
            (2, 2),
            "S0,S0",
            "R,R",
            [("all-gather", (1,)), ("all-gather", (0,))],
            ["all_gather_into_tensor", "all_gather_into_tensor"],
        ),
        ((8, 4), (2, 2), "P,S0", "R,S0", [("all-reduce", (0,))], ["all_reduce"]),
        (
            (8, 4),
            (2, 2),
            "P,P",
            "S0,R",
            [("reduce-scatter", (0,)), ("all-reduce", (1,))],
            ["reduce_scatter_tensor", "all_reduce"],
        ),
    ],
)
def test_each_kind_of_step(
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    src: str,
    dst: str,
    want: list[tuple[str, tuple[int, ...]]],
    collectives: list[str | None],
) -> None:
    plan = run(Case.parse(shape, mesh, src, dst))
    assert steps(plan) == want
    assert [s.collective for s in plan.steps] == collectives
    assert plan.received == physical_limit(plan)


def test_partial_sum_to_partial_max_reduces_then_keeps() -> None:
    """P(sum) -> P(max): the sum is carried out (an all-reduce), then every rank holds the
    whole value as its pending max (max of equal values is the value)."""
    case = Case.parse((6, 4), (3,), "P", "P:max")
    plan = run(case)
    assert steps(plan) == [("all-reduce", (0,)), ("partition", (0,))]
    assert plan.steps[0].reduce_op == "sum" and plan.steps[1].reduce_op == "max"
    full = full_tensor(case.shape)
    out = run_plan(plan, source_locals(case, full)).outputs
    assert all(torch.equal(x, full) for x in out)


def test_partial_max_to_partial_sum_divides() -> None:
    """P(max) -> P(sum): reduced, then each of the 4 ranks holds a quarter (torch's
    ``_partition_value``)."""
    case = Case.parse((6, 4), (4,), "P:max", "P")
    plan = run(case)
    full = full_tensor(case.shape)
    out = run_plan(plan, source_locals(case, full)).outputs
    assert all(torch.equal(x, full / 4) for x in out)


def test_reduce_scatter_runs_before_all_reduce() -> None:
    """[P, P] -> [R, S0] on (2, 2): reduce-scatter on mesh dim 1 first, then the all-reduce
    on mesh dim 0 reduces only the scattered half, as torch does."""
    plan = run(Case.parse((8, 4), (2, 2), "P,P", "R,S0"))
    assert steps(plan) == [("reduce-scatter", (1,)), ("all-reduce", (0,))]
    assert plan.reduced == 32 + 16


def test_same_partial_moves_nothing() -> None:
    plan = run(Case.parse((6, 4), (2, 3), "P:min,S1", "P:min,S1"))
    assert plan.steps == () and plan.moves == () and plan.received == 0


# ------------------------------------------------------------------------- uneven, size 1


@pytest.mark.parametrize(
    ("shape", "mesh", "src", "dst"),
    [
        ((5, 7), (2, 4), "S0,SS1:2", "R,S0"),
        ((7,), (4,), "S0", "SS0:3"),
        ((3,), (8,), "S0", "R"),  # five ranks hold nothing
        ((0, 5), (2, 4), "S0,S1", "S1,S0"),  # nothing at all
        ((9, 3), (2, 2, 2), "S0,S0,S1", "SS0:2,S1,S0"),
        ((13,), (2, 4), "SS0:3,S0", "S0,S0"),
        ((5, 1), (4,), "P", "S1"),  # a size-1 dim sharded by 4: three ranks hold nothing
        ((6, 10), (3, 2), "P:min,SS1:4", "S1,P:avg"),
    ],
)
def test_uneven(shape: tuple[int, ...], mesh: tuple[int, ...], src: str, dst: str) -> None:
    plan = run(Case.parse(shape, mesh, src, dst))
    assert plan.received == physical_limit(plan)


def test_empty_shards_have_empty_local_shapes() -> None:
    plan = run(Case.parse((3,), (8,), "R", "S0"))
    assert [plan.local_shape(plan.final, (c,)) for c in range(8)] == [(1,)] * 3 + [(0,)] * 5


def test_size_one_mesh_dims_move_nothing() -> None:
    """A mesh dim of size 1 holds everything whatever its placement: no move, no step."""
    plan = run(Case.parse((8, 6), (1, 4, 1), "S0,S1,P", "S1,S1,SS0:2"))
    assert plan.moves == () and plan.steps == ()
    plan = run(Case.parse((8, 6), (1, 4), "R,S1", "S0,S0"))
    assert [m.mesh_dim for m in plan.moves] == [1]
    assert steps(plan) == [("all-to-all", (1,))]


def test_negative_dims_and_split_factor_one_are_canonical() -> None:
    a = plan_redistribution((8, 6), (2, 4), _specs("S-2", "SS-1:1"), _specs("R", "R"))
    b = plan_redistribution((8, 6), (2, 4), _specs("S0", "S1"), _specs("R", "R"))
    assert a.src == b.src and steps(a) == steps(b)


def _specs(*tokens: str) -> tuple[PlacementSpec, ...]:
    out = []
    for t in tokens:
        if t == "R":
            out.append(PlacementSpec("R"))
        elif t.startswith("SS"):
            d, sf = t[2:].split(":")
            out.append(PlacementSpec("SS", int(d), int(sf)))
        else:
            out.append(PlacementSpec("S", int(t[1:])))
    return tuple(out)


# -------------------------------------------------------------------------------- transfers


@pytest.mark.parametrize(
    ("shape", "mesh", "src", "dst", "joint"),
    [
        ((64, 32), (2, 4), "SS0:4,S0", "S0,S0", True),
        ((64, 32), (2, 4), "SS0:4,S0", "S0,S0", False),
        ((32, 24, 16), (2, 4), "S0,SS0:2", "S0,S1", True),
        ((5, 7), (2, 4), "S0,SS1:2", "R,S0", True),
        ((9, 3), (2, 2, 2), "S0,S0,S1", "SS0:2,S1,S0", True),
        ((9, 3), (2, 2, 2), "S0,S0,S1", "SS0:2,S1,S0", False),
        ((12, 8), (2, 2, 2), "S1,S0,S0", "R,R,R", True),
        ((10,), (2, 4), "P,S0", "SS0:3,S0", True),
    ],
)
def test_transfers_sum_to_received(
    shape: tuple[int, ...], mesh: tuple[int, ...], src: str, dst: str, joint: bool
) -> None:
    case = dataclasses.replace(Case.parse(shape, mesh, src, dst), joint=joint)
    plan = run(case)
    totals: collections.Counter[tuple[int, ...]] = collections.Counter()
    for step in plan.steps:
        per_rank: collections.Counter[tuple[int, ...]] = collections.Counter()
        for to, frm, n in transfers(plan, step):
            assert to != frm and n > 0
            # only ranks of one group exchange: equal coordinates off the step's mesh dims
            assert all(
                a == b
                for m, (a, b) in enumerate(zip(to, frm, strict=True))
                if m not in step.mesh_dims
            )
            per_rank[to] += n
        assert max(per_rank.values(), default=0) == step.received, step
        totals.update(per_rank)
    assert max(totals.values(), default=0) == plan.received


def test_transfers_of_local_steps_and_reductions_are_empty() -> None:
    plan = plan_redistribution((8,), (2, 4), _specs("R", "S0"), _specs("S0", "S0"))
    plan2 = Case.parse((8,), (4,), "P", "S0").plan()
    assert [transfers(plan, s) for s in plan.steps if s.kind.local] != []
    assert all(transfers(plan, s) == () for s in plan.steps if s.kind.local)
    assert all(transfers(plan2, s) == () for s in plan2.steps)


# ------------------------------------------------------------------------------ bad input


def P(kind: str, dim: int = 0, sf: object = 1, op: str = "sum") -> PlacementSpec:
    return PlacementSpec(kind, dim, sf, op)  # type: ignore[arg-type]


BAD: list[tuple[str, tuple, tuple, tuple, tuple, str]] = [
    (
        "shard dim out of range",
        (8, 4),
        (2, 4),
        (P("S", 0), P("S", 2)),
        (P("R"), P("R")),
        r"source placement S2 on mesh dim 1 shards tensor dim 2.*-2 <= dim < 2",
    ),
    (
        "negative shard dim out of range",
        (8, 4),
        (2, 4),
        (P("R"), P("R")),
        (P("SS", -3, 2), P("R")),
        r"target placement SS-3:2 on mesh dim 0 shards tensor dim -3",
    ),
    (
        "split factor 0",
        (8,),
        (4,),
        (P("SS", 0, 0),),
        (P("R"),),
        r"source placement SS0:0 on mesh dim 0: .*split factor.*int >= 1, got 0",
    ),
    (
        "negative split factor",
        (8,),
        (2, 2),
        (P("R"), P("R")),
        (P("S", 0), P("SS", 0, -2)),
        r"target placement SS0:-2 on mesh dim 1: .*split factor.*got -2",
    ),
    (
        "split factor not an int",
        (8,),
        (4,),
        (P("SS", 0, 2.0),),
        (P("R"),),
        r"mesh dim 0: .*split factor.*must be an int >= 1, got 2\.0",
    ),
    (
        "shard dim not an int",
        (8,),
        (4,),
        (P("S", 0.0),),
        (P("R"),),
        r"source placement .* on mesh dim 0: the tensor dim it shards must be an int, got 0\.0",
    ),
    (
        "too few placements",
        (8,),
        (2, 4),
        (P("S", 0),),
        (P("R"), P("R")),
        r"source placements: got 1 for a mesh of 2 dims \(2, 4\)",
    ),
    (
        "too many placements",
        (8,),
        (4,),
        (P("R"),),
        (P("R"), P("R")),
        r"target placements: got 2 for a mesh of 1 dims",
    ),
    (
        "unknown reduce op",
        (8,),
        (4,),
        (P("P", op="mean"),),
        (P("R"),),
        r"source placement P:mean on mesh dim 0: unknown reduce op 'mean'",
    ),
    (
        "unknown kind",
        (8,),
        (4,),
        (P("R"),),
        (P("X"),),
        r"target placement .* on mesh dim 0: unknown kind 'X'",
    ),
    ("mesh size 0", (8,), (2, 0), (P("R"), P("R")), (P("R"), P("R")), r"mesh dim 1 has size 0"),
    ("mesh size not an int", (8,), (2.0,), (P("R"),), (P("R"),), r"mesh dim 0 has size 2\.0"),
    ("empty mesh", (8,), (), (), (), r"the mesh has no dims"),
    ("negative dim size", (8, -1), (4,), (P("R"),), (P("R"),), r"dim 1 has size -1"),
    ("dim size not an int", (8.5,), (4,), (P("R"),), (P("R"),), r"dim 0 has size 8\.5"),
    ("dim size a bool", (True,), (4,), (P("R"),), (P("R"),), r"dim 0 has size True"),
    ("shape an int", 8, (4,), (P("R"),), (P("R"),), r"global shape: expected a sequence .* got 8"),
    ("shape a string", "8", (4,), (P("R"),), (P("R"),), r"global shape: expected a sequence"),
    ("mesh an int", (8,), 4, (P("R"),), (P("R"),), r"mesh: expected a sequence .* got 4"),
    ("placements None", (8,), (4,), None, (P("R"),), r"source placements: expected a sequence"),
    (
        "placement a string",
        (8,),
        (4,),
        ("S0",),
        (P("R"),),
        r"source placement 'S0' on mesh dim 0: expected a PlacementSpec .* got str",
    ),
    (
        "placement None",
        (8,),
        (2, 2),
        (P("R"), P("R")),
        (P("R"), None),
        r"target placement None on mesh dim 1: expected a PlacementSpec",
    ),
]


@pytest.mark.parametrize(
    ("shape", "mesh", "src", "dst", "pattern"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input_raises_value_error(
    shape: tuple, mesh: tuple, src: tuple, dst: tuple, pattern: str
) -> None:
    with pytest.raises(ValueError, match=pattern):
        plan_redistribution(shape, mesh, src, dst)


def test_torch_placements_are_named_not_read() -> None:
    """A torch placement (``_StridedShard`` has ``dim`` and ``split_factor`` as a
    PlacementSpec does) is refused with the way to convert it, not read half way."""
    from torch.distributed.tensor.placement_types import Shard, _StridedShard

    for given in (_StridedShard(0, split_factor=2), Shard(0)):
        with pytest.raises(ValueError, match=r"PlacementSpec\.of converts a torch placement"):
            plan_redistribution((8,), (4,), (given,), (P("R"),))


def test_numpy_ints_are_sizes() -> None:
    """Sizes that are integers but not Python ints (numpy's, as torch takes them) plan as
    the ints they are."""
    np = pytest.importorskip("numpy")
    plan = plan_redistribution((np.int64(8), 6), (np.int32(4),), (P("S", 0),), (P("R"),))
    assert plan == plan_redistribution((8, 6), (4,), (P("S", 0),), (P("R"),))
    assert all(type(n) is int for n in (*plan.shape, *plan.mesh))


def test_check_placements_canonicalises() -> None:
    got = check_placements((P("S", -1), P("SS", -2, 1), P("SS", 0, 3)), 2, (2, 2, 2), "source")
    assert got == (P("S", 1), P("S", 0), P("SS", 0, 3))


@pytest.mark.parametrize("src", ["R", "S0", "P", "P:max"])
def test_partial_product_target_is_refused_when_planned(src: str) -> None:
    """Replicate -> Partial(product) has no partition (torch's ``_partition_value`` raises:
    there is no exact n-th root), so the pair is not legal; the planner refuses it with a
    ValueError naming the placement and the mesh dim, before anything runs (it used to plan
    it, and the executor raised at the partition step, after the plan's collectives)."""
    with pytest.raises(ValueError, match=re.escape("P:product") + ".*mesh dim 0"):
        Case.parse((8,), (4,), src, "P:product").plan()


def test_partial_product_kept_and_reduced() -> None:
    """A pending product may stay, or be reduced (an all-reduce with op product)."""
    assert Case.parse((8,), (4,), "P:product", "P:product").plan().steps == ()
    plan = Case.parse((8,), (4,), "P:product", "R").plan()
    assert steps(plan) == [("all-reduce", (0,))] and plan.steps[0].reduce_op == "product"


# ------------------------------------------------------------------ even shapes: unit plans


@pytest.mark.parametrize(
    ("mesh", "src", "dst", "units"),
    [
        ((2, 2, 2), "S0,R,SS0:18", "S0,S0,S1", (72, 2)),  # lcm(2, 4 * 18) and 4; 2
        ((2, 4), "SS0:4,S0", "S0,S0", (8, 1)),  # lcm(2 * 4, 8 * 1) and lcm(2, 8)
        ((3, 2), "R,S0", "S0,SS0:2", (12, 1)),  # 2, and lcm(3, 6 * 2)
        ((4, 1), "S1,SS0:7", "R,R", (1, 4)),  # a mesh dim of size 1 constrains nothing
        ((2, 2), "P,R", "R,S-1", (1, 2)),
    ],
)
def test_units_cut_exactly_and_scale(
    mesh: tuple[int, ...], src: str, dst: str, units: tuple[int, ...]
) -> None:
    """``_Pair.units``' Post on the runs: at a dim's unit every rank of each sharding holds as
    many positions as every other, and at a multiple of it the runs are the unit's scaled."""
    s, t = parse_placements(src, 2, mesh), parse_placements(dst, 2, mesh)
    s, t = check_placements(s, 2, mesh, "source"), check_placements(t, 2, mesh, "target")
    pair = plan_mod._pair(s, t, mesh, 2)
    assert pair.units == units
    for d, unit in enumerate(units):
        for side in (pair.levels[0][d], pair.levels[1][d]):
            levels = tuple(lv[1:] for lv in side)
            held = collections.Counter[tuple[int, ...]]()
            for a, b, label in dim_runs(unit, levels):
                held[label] += b - a
            ranks = math.prod(size for size, _ in levels)
            assert len(held) == ranks and set(held.values()) == {unit // ranks}, (unit, held)
            scaled = tuple((3 * a, 3 * b, label) for a, b, label in dim_runs(unit, levels))
            assert dim_runs(3 * unit, levels) == scaled


@pytest.mark.parametrize(
    ("shape", "mesh", "src", "dst"),
    [
        ((216, 4), (2, 2, 2), "S0,R,SS0:18", "S0,S0,S1"),
        ((64, 32), (2, 4), "SS0:4,S0", "S0,S0"),  # the FSDP2 + TP weight: its units are (8, 1)
        ((24, 12), (3, 2), "R,S0", "S0,SS0:2"),
        ((8, 16, 32), (2, 4), "S0,SS0:2", "S0,S1"),
        ((12, 12), (2, 2), "P,S0", "S1,R"),
    ],
)
def test_an_even_shape_plans_as_its_unit_scaled(
    shape: tuple[int, ...], mesh: tuple[int, ...], src: str, dst: str
) -> None:
    """``_Pair.units``' Post: the plan of a multiple of the units is the unit plan with every cut
    and count scaled, equal in every field to the plan built for the shape itself, and it
    moves every rank's data exactly."""
    case = Case.parse(shape, mesh, src, dst)
    plan = run(case)
    pair = plan_mod._pair(plan.src, plan.dst, mesh, len(shape))
    fresh = tuple(map(labels_mod.dim_labels.__wrapped__, shape, *pair.levels))
    built = plan_mod._build(shape, pair, True, fresh)
    assert plan == built
    assert [d.segments for d in plan.dims] == [d.segments for d in built.dims]
    assert plan.shape != pair.units
    assert plan.received == physical_limit(plan)

"""Errors of ``cute_shard.propagate_shape_and_sharding``.

* Bad input raises ``ValueError`` whose message names the problem -- never KeyError,
  AssertionError or IndexError -- in both modes.
* A strict view that needs communication raises ``RedistributionRequired`` (a RuntimeError, as
  DTensor raises for views) whose message names the tensor dim and the mesh dim, and whose
  ``.blocked`` lists ``Blocked(mesh_dim, tensor_dim, reason)`` entries; the non-strict call on the
  same input succeeds and replicates exactly those mesh dims.
"""

from __future__ import annotations

from typing import Any

import pytest
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

import cute_shard
import cute_shard.rules as R
from cute_shard import oracle as O

Rep = Replicate()
FLAT = R.view_groups((4, 6), (24,))

# (id, placements, global shape, rule, mesh, regex the message must match)
# fmt: off
BAD_INPUT: list[tuple[str, list[Any], tuple[int, ...], Any, tuple[int, ...], str]] = [
    ("shard dim too large", [Shard(2)], (4, 6), FLAT, (2,),
     r"dim 2.*out of range|out of range.*dim 2"),
    ("shard dim too negative", [Shard(-3)], (4, 6), FLAT, (2,),
     r"-3.*out of range|out of range.*-3"),
    ("strided dim out of range", [_StridedShard(5, split_factor=2)], (4, 6), FLAT, (2,),
     r"dim 5.*out of range|out of range.*dim 5"),
    ("fewer placements than mesh dims", [Shard(0)], (4, 6), FLAT, (2, 2),
     r"1 placements?.*2 dims|placements.*mesh"),
    ("more placements than mesh dims", [Shard(0), Rep], (4, 6), FLAT, (2,),
     r"2 placements?.*1 dims?|placements.*mesh"),
    ("mesh size 0", [Shard(0)], (4, 6), FLAT, (0,), r"size 0|mesh.*>= ?1|positive"),
    ("mesh size negative", [Rep, Shard(0)], (4, 6), FLAT, (2, -1), r"size -1|mesh.*>= ?1|positive"),
    ("split factor 0", [_StridedShard(0, split_factor=0)], (4, 6), FLAT, (2,),
     r"split_factor.*(>= ?1|0)"),
    ("split factor negative", [_StridedShard(0, split_factor=-2)], (4, 6), FLAT, (2,),
     r"split_factor.*(>= ?1|-2)"),
    ("rule for another shape: split sizes", [Shard(0)], (4, 5), R.view_groups((4, 6), (3, 8)),
     (2,), r"does not match|rule"),
    ("rule for another shape: unflatten", [Shard(0)], (24,), R.view_groups((12,), (3, 4)), (2,),
     r"does not match|rule"),
    ("rule for more dims", [Shard(0)], (4, 6), R.view_groups((4, 6, 1, 2), (48,)), (2,),
     r"input dim 2|does not match"),
    ("rule drops a non-size-1 dim", [Shard(0)], (4, 6), R.squeeze((4, 1), 1), (2,),
     r"dim 1|does not match"),
    ("rule broadcasts a non-size-1 dim", [Shard(0)], (4, 6), R.expand((4, 1), (4, 3)), (2,),
     r"dim 1|broadcast|does not match"),
    ("rule is not a rule", [Shard(0)], (4, 6), (1, 2), (2,), r"rule|DimSpec"),
    ("placement is not a placement", ["S0"], (4, 6), FLAT, (2,), r"placement"),
    ("negative global size", [Shard(0)], (4, -6), FLAT, (2,), r"-6|size|shape"),
    ("placements not a sequence", None, (4, 6), FLAT, (2,),
     r"^placements: expected a sequence, got None$"),
    ("shape not a sequence", [Shard(0)], 24, FLAT, (2,),
     r"^global_shape: expected a sequence, got 24$"),
    ("rule not a sequence", [Shard(0)], (4, 6), None, (2,), r"^rule: expected a sequence"),
    ("mesh not a sequence", [Shard(0)], (4, 6), FLAT, 2, r"^mesh_shape: expected a sequence"),
]
# fmt: on


@pytest.mark.parametrize(
    ("placements", "shape", "rule", "mesh", "match"),
    [row[1:] for row in BAD_INPUT],
    ids=[row[0] for row in BAD_INPUT],
)
@pytest.mark.parametrize("strict", [False, True], ids=["reshape", "view"])
def test_bad_input_raises_value_error(
    placements: list[Any],
    shape: tuple[int, ...],
    rule: Any,
    mesh: tuple[int, ...],
    match: str,
    strict: bool,
) -> None:
    with pytest.raises(ValueError, match=match):
        cute_shard.propagate_shape_and_sharding(placements, shape, rule, mesh, strict_view=strict)


# (id, placements, shape, view target, mesh, tensor dim, mesh dim the message must name)
# fmt: off
STRICT_FAILURES: list[tuple[str, list[Placement], tuple[int, ...], tuple[int, ...],
                            tuple[int, ...], int, int]] = [
    ("double shard split", [Shard(0), Shard(0)], (512,), (4, 128), (2, 4), 0, 1),
    ("double shard split, 3-d mesh", [Rep, Shard(0), Shard(0)], (512,), (4, 128), (1, 2, 4),
     0, 2),
    ("uneven split", [Rep, Rep, Shard(2)], (2, 3, 10), (2, 3, 2, 5), (1, 2, 4), 2, 2),
    ("uneven flatten", [Partial("sum"), Shard(1)], (3, 6, 4), (3, 24), (2, 4), 1, 1),
    ("strided to 3-d", [Rep, _StridedShard(0, split_factor=2)], (18,), (3, 1, 6), (2, 3), 0, 1),
    ("transpose-like reshape", [Rep, Shard(1)], (12, 20), (20, 12), (3, 8), 1, 1),
]
# fmt: on


@pytest.mark.parametrize(
    ("placements", "shape", "target", "mesh", "tensor_dim", "mesh_dim"),
    [row[1:] for row in STRICT_FAILURES],
    ids=[row[0] for row in STRICT_FAILURES],
)
def test_strict_failure_names_tensor_dim_and_mesh_dim(
    placements: list[Placement],
    shape: tuple[int, ...],
    target: tuple[int, ...],
    mesh: tuple[int, ...],
    tensor_dim: int,
    mesh_dim: int,
) -> None:
    # the premise: the oracle finds no zero-communication answer
    assert O.find_zero_comm_answer(shape, placements, mesh, "view", (target,)) is None
    rule = R.view_groups(shape, target)
    with pytest.raises(cute_shard.RedistributionRequired) as info:
        cute_shard.propagate_shape_and_sharding(placements, shape, rule, mesh, strict_view=True)
    err = info.value
    assert isinstance(err, RuntimeError)
    msg = str(err)
    assert f"tensor dim {tensor_dim}" in msg, msg
    assert f"mesh dim {mesh_dim}" in msg, msg
    assert err.blocked, msg
    assert any(b.mesh_dim == mesh_dim and b.tensor_dim == tensor_dim for b in err.blocked), (
        err.blocked
    )
    for b in err.blocked:
        assert isinstance(b, cute_shard.Blocked)
        p = placements[b.mesh_dim]
        assert isinstance(p, Shard | _StridedShard) and p.dim == b.tensor_dim
        assert b.reason
    # non-strict on the same input redistributes exactly the blocked mesh dims, validly
    in_tgt, out = cute_shard.propagate_shape_and_sharding(placements, shape, rule, mesh)
    moved = {i for i, (a, t) in enumerate(zip(placements, in_tgt, strict=True)) if a != t}
    assert moved == {b.mesh_dim for b in err.blocked}
    assert all(in_tgt[i] == Rep for i in moved)
    assert O.check_reshape(shape, target, in_tgt, out, mesh).ok


def test_redistribution_required_is_a_runtime_error() -> None:
    assert issubclass(cute_shard.RedistributionRequired, RuntimeError)


def test_a_refusal_pickles_with_its_note() -> None:
    """Errors cross process boundaries (gloo workers report them): the details and the note a
    caller added (where the view was met) survive a pickle round trip."""
    import pickle

    shape, target = (8, 16, 32), (16, 8, 32)
    rule = R.view_groups(shape, target)
    with pytest.raises(cute_shard.RedistributionRequired) as info:
        cute_shard.propagate_shape_and_sharding(
            [Shard(0), Shard(1)], shape, rule, (2, 4), strict_view=True
        )
    err = info.value
    err.note = "It was met in the backward (ViewBackward0)"
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err)
    assert str(err).endswith(". It was met in the backward (ViewBackward0)")
    assert back.blocked == err.blocked and back.suggestion == err.suggestion


def test_legal_but_odd_inputs_do_not_raise() -> None:
    """Legal corner cases: size-1 mesh dims, Shard of a size-1 dim, split factor above the dim
    size, a _StridedShard with split factor 1, negative placement dims."""
    flat = R.view_groups((4, 6), (24,))
    for placements, mesh in [
        ([Shard(0)], (1,)),
        ([Shard(-1), Shard(-2)], (2, 3)),
        ([_StridedShard(1, split_factor=1)], (2,)),
        ([_StridedShard(1, split_factor=7)], (2,)),
    ]:
        in_tgt, out = cute_shard.propagate_shape_and_sharding(placements, (4, 6), flat, mesh)
        assert O.check_reshape((4, 6), (24,), in_tgt, out, mesh).ok
        assert O.is_canonical(out, 1)
    sq = R.view_groups((1, 6), (6,))
    in_tgt, out = cute_shard.propagate_shape_and_sharding([Shard(0)], (1, 6), sq, (2,))
    assert O.check_reshape((1, 6), (6,), in_tgt, out, (2,)).ok


# (id, global shape, placements, mesh, regex the message must match)
# fmt: off
BAD_LAYOUT_INPUT: list[tuple[str, Any, Any, Any, str]] = [
    ("negative size", (8, -4), [Shard(0)], (2,), r"dim 1 has size -4; sizes must be ints >= 0"),
    ("a placement as a size", [Shard(0)], (8, 4), (2,), r"dim 0 has size Shard\(dim=0\)"),
    ("a float size", (8.0, 4), [Shard(0)], (2,), r"dim 0 has size 8\.0"),
    ("shape not a sequence", 8, [Shard(0)], (2,), r"^global_shape: expected a sequence"),
    ("mesh not a sequence", (8, 4), [Shard(0)], 2, r"^mesh_shape: expected a sequence"),
    ("placements not a sequence", (8, 4), None, (2,), r"^placements: expected a sequence"),
]
# fmt: on


@pytest.mark.parametrize(
    ("shape", "placements", "mesh", "match"),
    [row[1:] for row in BAD_LAYOUT_INPUT],
    ids=[row[0] for row in BAD_LAYOUT_INPUT],
)
def test_placements_to_layout_refuses_what_is_not_a_shape(
    shape: Any, placements: Any, mesh: Any, match: str
) -> None:
    """A negative size used to come back as a layout of it, and a shape that is not sizes as
    None ("cannot express"), the answer for a symbolic shape."""
    with pytest.raises(ValueError, match=match):
        cute_shard.placements_to_layout(shape, placements, mesh)


@pytest.mark.parametrize(
    ("shape", "placements"),
    [
        ((0, 8), [Shard(0)]),
        ((0,), [_StridedShard(0, split_factor=2)]),
        ((3, 0), [Shard(1), Shard(0)]),
    ],
)
def test_placements_to_layout_of_a_sharded_empty_dim_is_none(
    shape: tuple[int, ...], placements: list[Any]
) -> None:
    """A sharded dim of size 0 has no gpu sub-mode of M positions: no layout expresses it
    (it used to raise ZeroDivisionError); an empty dim that no mesh dim shards keeps its
    layout."""
    mesh = (2,) * len(placements)
    assert cute_shard.placements_to_layout(shape, placements, mesh) is None
    kept = cute_shard.placements_to_layout((0, 8), [Shard(1)], (2,))
    assert kept is not None and kept.global_shape == (0, 8)


def test_placements_to_layout_reads_numpy_sizes_as_ints() -> None:
    np = pytest.importorskip("numpy")
    got = cute_shard.placements_to_layout((np.int64(8), 4), [Shard(0)], (2,))
    assert got == cute_shard.placements_to_layout((8, 4), [Shard(0)], (2,))

"""Hand-checked cases for the DTensor rank simulator in ``cute_shard.oracle``."""

from __future__ import annotations

import doctest
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

from cute_shard import oracle
from cute_shard.oracle import (
    SearchLimitExceeded,
    Verdict,
    canonicalize,
    check_op,
    check_reshape,
    check_view,
    communication_cost,
    find_zero_comm_answer,
    identifiable_tensor,
    is_canonical,
    local_indices,
    local_shape,
    local_shard,
    mesh_coords,
    search_zero_comm,
    zero_comm_answers,
)

R = Replicate()
S = Shard


def SS(dim: int, sf: int) -> _StridedShard:
    return _StridedShard(dim, split_factor=sf)


def all_locals(
    shape: tuple[int, ...], placements: Sequence[Placement], mesh: tuple[int, ...]
) -> dict[tuple[int, ...], list[object]]:
    g = torch.arange(int(np.prod(shape))).reshape(shape)
    return {c: local_shard(g, placements, mesh, c).tolist() for c in mesh_coords(mesh)}


# ----------------------------------------------------------------- the simulator


def test_shard_is_torch_chunk_with_empty_tail() -> None:
    assert all_locals((9,), [S(0)], (4,)) == {
        (0,): [0, 1, 2],
        (1,): [3, 4, 5],
        (2,): [6, 7, 8],
        (3,): [],
    }
    # ceil(6 / 4) = 2: three chunks of 2 and an empty tail (not 2, 2, 1, 1)
    assert [local_shape((6,), [S(0)], (4,), (c,)) for c in range(4)] == [(2,), (2,), (2,), (0,)]


def test_strided_shard_uneven_matches_torch_docstring_example() -> None:
    # _StridedShard._to_replicate_tensor docstring: 9 elements, sf=2, 4 chunks
    assert all_locals((9,), [SS(0, 2)], (4,)) == {
        (0,): [0, 1, 5],
        (1,): [2, 3, 6],
        (2,): [4, 7],
        (3,): [8],
    }


def test_strided_shard_sf1_is_shard() -> None:
    assert all_locals((7, 3), [SS(0, 1)], (3,)) == all_locals((7, 3), [S(0)], (3,))


def test_left_to_right_two_mesh_dims() -> None:
    # compute_local_shape_and_global_offset comment: S(0), SS(0, sf=2) on mesh (2, 2)
    assert all_locals((8,), [S(0), SS(0, 2)], (2, 2)) == {
        (0, 0): [0, 2],
        (0, 1): [1, 3],
        (1, 0): [4, 6],
        (1, 1): [5, 7],
    }
    # _StridedShard class docstring: right-to-left sharding of rows
    rows = {
        c: [r[0] // 8 for r in v] for c, v in all_locals((8, 8), [SS(0, 2), S(0)], (2, 2)).items()
    }
    assert rows == {(0, 0): [0, 1], (0, 1): [4, 5], (1, 0): [2, 3], (1, 1): [6, 7]}


def test_local_shape_docstring_example() -> None:
    # compute_local_shape_and_global_offset docstring: (2, 5), [S(1), S(1)] on mesh (2, 2)
    shapes = [local_shape((2, 5), [S(1), S(1)], (2, 2), c) for c in mesh_coords((2, 2))]
    assert shapes == [(2, 2), (2, 1), (2, 1), (2, 1)]


def test_replicate_and_partial_keep_everything() -> None:
    g = np.arange(12).reshape(3, 4)
    out = local_shard(g, [R, Partial(), S(1)], (2, 2, 2), (1, 0, 1))
    assert isinstance(out, np.ndarray)
    assert out.tolist() == [[2, 3], [6, 7], [10, 11]]


def test_local_indices_are_global_positions() -> None:
    idx = local_indices((4, 6), [S(1), SS(1, 3)], (2, 2), (1, 1))
    # S(1): columns 3..5; SS(1, 3) on 3 columns: pieces of 1, rank 1 gets none
    assert [i.tolist() for i in idx] == [[0, 1, 2, 3], []]


def test_negative_shard_dim_is_normalised() -> None:
    assert all_locals((2, 4), [S(-1)], (2,)) == all_locals((2, 4), [S(1)], (2,))


def test_identifiable_tensor_dtypes() -> None:
    assert identifiable_tensor((2, 2)).tolist() == [[0, 1], [2, 3]]
    c = identifiable_tensor((2,), torch.complex128)
    assert torch.view_as_real(c).tolist() == [[0.0, 1.0], [2.0, 3.0]]
    with pytest.raises(ValueError, match="dtype"):
        identifiable_tensor((2,), torch.float16)


# ----------------------------------------------------------------- known facts


def test_fact_24_to_2x12() -> None:
    v = check_reshape((24,), (2, 12), [S(0), S(0)], [S(0), S(1)], (2, 3))
    assert v.ok, v.reason
    assert find_zero_comm_answer((24,), [S(0), S(0)], (2, 3), "view", ((2, 12),)) == (S(0), S(1))


def test_fact_flatten_3d_needs_strided_shard() -> None:
    args = ((8, 16, 32), (128, 32))
    assert check_reshape(*args, [S(0), S(1)], [S(0), SS(0, 4)], (2, 4)).ok
    bad = check_reshape(*args, [S(0), S(1)], [S(0), S(0)], (2, 4))
    assert not bad.ok
    assert "rank (0, 0)" in bad.reason and "values differ" in bad.reason
    answers = zero_comm_answers((8, 16, 32), [S(0), S(1)], (2, 4), "view", ((128, 32),))
    assert answers == [(S(0), SS(0, 4))]


def test_fact_18_to_3x1x6_has_no_answer() -> None:
    v = check_reshape((18,), (3, 1, 6), [R, SS(0, 2)], [R, SS(2, 2)], (2, 3))
    assert not v.ok
    assert zero_comm_answers((18,), [R, SS(0, 2)], (2, 3), "view", ((3, 1, 6),)) == []


def test_fact_512_to_4x128_has_no_answer() -> None:
    assert zero_comm_answers((512,), [S(0), S(0)], (2, 4), "view", ((4, 128),)) == []


def test_fact_uneven_merge_with_strided_shard() -> None:
    v = check_reshape((4, 15, 128), (60, 128), [S(1)], [SS(0, 4)], (4,))
    assert v.ok, v.reason
    assert zero_comm_answers((4, 15, 128), [S(1)], (4,), "view", ((60, 128),)) == [(SS(0, 4),)]


def test_fact_uneven_6x256_flatten_has_no_answer() -> None:
    # Fully exhaustive: every split factor 2..1536 is tried.
    res = search_zero_comm((6, 256), [S(0)], (8,), "view", ((1536,),), exhaustive_sf_limit=1536)
    assert res.exhausted and res.answers == ()
    assert find_zero_comm_answer((6, 256), [S(0)], (8,), "view", ((1536,),)) is None


# ----------------------------------------------------------------- verdicts


def test_local_view_that_raises_is_invalid_not_a_crash() -> None:
    # (6,) -> (2, 3) with S(0) on 2 ranks: locals hold 3 elements, out S(1) wants (2, 2)/(2, 1)
    v = check_reshape((6,), (2, 3), [S(0)], [S(1)], (2,))
    assert not v.ok
    assert "rank (0,)" in v.reason and "raised RuntimeError" in v.reason
    assert "local output shape (2, 2)" in v.reason


def test_shape_mismatch_reason() -> None:
    v = check_op((4, 6), "transpose", (0, 1), [S(0)], [S(0)], (2,))
    assert not v.ok
    assert "shape (6, 2)" in v.reason and "(3, 4)" in v.reason


def test_strict_view_and_reshape_agree_on_contiguous_locals() -> None:
    for out in ([S(0), SS(0, 4)], [S(0), S(0)]):
        a = check_reshape((8, 16, 32), (128, 32), [S(0), S(1)], out, (2, 4), strict_view=True)
        b = check_reshape((8, 16, 32), (128, 32), [S(0), S(1)], out, (2, 4), strict_view=False)
        assert a.ok == b.ok


def test_verdict_is_truthy() -> None:
    assert Verdict(True, "x") and not Verdict(False, "y")


def test_check_view_with_custom_ops() -> None:
    # local op that ignores the local shape and uses the global one: invalid when sharded
    v = check_view((4, 4), [S(0)], [S(0)], (2,), lambda t: t.view(16), lambda t, s: t.view(16))
    assert not v.ok and "raised" in v.reason
    v = check_view((4, 4), [S(0)], [S(0)], (2,), lambda t: t.view(16), lambda t, s: t.view(s))
    assert v.ok


def test_partial_rules() -> None:
    shape, out = (4, 6), ((24,),)
    assert check_op(shape, "view", out, [Partial()], [Partial()], (2,)).ok
    assert check_op(shape, "view", out, [Partial(), S(0)], [Partial(), S(0)], (2, 2)).ok
    assert not check_op(shape, "view", out, [Partial()], [R], (2,)).ok
    assert not check_op(shape, "view", out, [R], [Partial()], (2,)).ok
    v = check_op(shape, "view", out, [Partial("sum")], [Partial("max")], (2,))
    assert not v.ok and "mesh dim 0" in v.reason
    # the search keeps Partial exactly where the input has it
    assert zero_comm_answers(shape, [Partial("max"), S(0)], (2, 2), "view", out) == [
        (Partial("max"), S(0))
    ]


# ----------------------------------------------------------------- every op


def test_permute_transpose_movedim() -> None:
    assert zero_comm_answers((4, 6), [S(0)], (2,), "transpose", (0, 1)) == [(S(1),)]
    assert zero_comm_answers((2, 3, 4), [S(0), S(2)], (2, 2), "permute", ((2, 0, 1),)) == [
        (S(1), S(0))
    ]
    assert zero_comm_answers((2, 3, 4), [R, S(0)], (2, 2), "movedim", (0, 2)) == [(R, S(2))]


def test_unsqueeze_squeeze() -> None:
    assert zero_comm_answers((4, 6), [S(1)], (2,), "unsqueeze", (1,)) == [(S(2),)]
    assert zero_comm_answers((1, 4), [S(1)], (2,), "squeeze", ()) == [(S(0),)]
    assert zero_comm_answers((1, 4), [S(1)], (2,), "squeeze", (0,)) == [(S(0),)]
    # a sharded size-1 dim: rank 1 holds a (0, 4) tensor, which squeeze.dims leaves alone
    assert zero_comm_answers((1, 4), [S(0)], (2,), "squeeze", (0,)) == []
    # only global singletons are squeezed: a local length-1 sharded dim stays
    assert check_op((2, 3), "squeeze", (), [S(0)], [S(0)], (2,)).ok


def test_flatten_unflatten_use_local_view() -> None:
    assert zero_comm_answers((4, 6), [S(1)], (2,), "flatten", ()) == [(SS(0, 4),)]
    assert check_op((24,), "unflatten", (0, (4, 6)), [S(0)], [S(0)], (2,)).ok
    assert zero_comm_answers((24,), [S(0)], (2,), "unflatten", (0, (2, 12))) == [(S(0),)]
    # 4 ranks of 6 elements each hold half a row: no single placement describes that
    assert zero_comm_answers((24,), [S(0)], (4,), "unflatten", (0, (2, 12))) == []


def test_expand_broadcast_dims_may_be_sharded_without_comm() -> None:
    answers = zero_comm_answers((1, 4), [R, S(1)], (2, 2), "expand", ((6, 4),))
    assert (R, S(1)) in answers
    assert (S(0), S(1)) in answers  # each rank expands its columns to its own rows
    assert all(p[1] == S(1) for p in answers)


def test_repeat_needs_strided_shard() -> None:
    # rows [r0, r1] repeated twice; rank c holds r_c locally and repeats it: [r_c, r_c].
    # sf=2 (pieces [r0, r1], [r0, r1]) and sf=3 (pieces [r0, r1], [r0, r1], []) both
    # give rank c the rows {c, c + 2}.
    assert zero_comm_answers((2, 3), [S(0)], (2,), "repeat", ((2, 1),)) == [
        (SS(0, 2),),
        (SS(0, 3),),
    ]


def test_view_as_real_and_complex() -> None:
    assert zero_comm_answers((4, 3), [S(1)], (2,), "view_as_real", ()) == [(S(1),)]
    assert zero_comm_answers((4, 2), [S(0)], (2,), "view_as_complex", ()) == [(S(0),)]
    # sharding the (real, imag) pair leaves locals that view_as_complex rejects
    v = check_op((4, 2), "view_as_complex", (), [S(1)], [R], (2,))
    assert not v.ok and "raised" in v.reason
    assert zero_comm_answers((4, 2), [S(1)], (2,), "view_as_complex", ()) == []


# ----------------------------------------------------------------- search mechanics


def test_replicate_input_only_stays_replicate_for_views() -> None:
    assert zero_comm_answers((4, 6), [R, R], (2, 2), "view", ((24,),)) == [(R, R)]


def test_identity_view_returns_input_among_answers() -> None:
    pl = [S(0), SS(1, 2)]
    assert tuple(pl) in zero_comm_answers((6, 8), pl, (2, 2), "view", ((6, 8),))


def test_divisor_candidates_beyond_the_exhaustive_limit() -> None:
    # with a tiny limit, sf = 4 is still tried because it divides 60
    res = search_zero_comm((4, 15, 8), [S(1)], (4,), "view", ((60, 8),), exhaustive_sf_limit=2)
    assert res.exhausted and res.answers == ((SS(0, 4),),)


def test_node_cap() -> None:
    res = search_zero_comm((8, 16, 32), [S(0), S(1)], (2, 4), "view", ((128, 32),), max_nodes=3)
    assert not res.exhausted and res.nodes == 3
    with pytest.raises(SearchLimitExceeded):
        zero_comm_answers((8, 16, 32), [S(0), S(1)], (2, 4), "view", ((128, 32),), max_nodes=3)
    with pytest.raises(SearchLimitExceeded):
        find_zero_comm_answer((8, 16, 32), [S(0), S(1)], (2, 4), "view", ((128, 32),), max_nodes=3)


def test_stop_at_first_is_not_exhaustive() -> None:
    res = search_zero_comm((1, 4), [R, S(1)], (2, 2), "expand", ((6, 4),), stop_at_first=True)
    assert len(res.answers) == 1 and not res.exhausted


# ----------------------------------------------------------------- canonical form and cost


def test_canonical_form() -> None:
    assert is_canonical([R, S(0), SS(1, 2), Partial()])
    assert not is_canonical([SS(0, 1)])
    assert not is_canonical([S(-1)])
    assert not is_canonical([S(2)], ndim=2)
    assert is_canonical([S(1)], ndim=2)
    assert canonicalize([SS(0, 1), S(-1), SS(-2, 3), R], ndim=2) == (S(0), S(1), SS(0, 3), R)
    with pytest.raises(ValueError, match="placements\\[0\\]"):
        canonicalize([S(3)], ndim=2)


def test_communication_cost() -> None:
    none = communication_cost([S(0)], [S(0)], (8,), (2,))
    assert none.num_changed == 0 and none.elements_received == 0
    gather = communication_cost([S(0)], [R], (8,), (2,))
    assert gather.changed_mesh_dims == (0,) and gather.sharded_to_replicate == (0,)
    assert (gather.elements_received, gather.max_elements_received) == (8, 4)
    assert gather.bytes_received(4) == 32
    # rank 0 holds 0..3 and wants {0, 1, 4, 5}: receives 2; rank 1 likewise
    strided = communication_cost([S(0)], [SS(0, 2)], (8,), (2,))
    assert strided.sharded_to_replicate == () and strided.elements_received == 4
    # resolving a Partial counts every element of the new local tensor
    reduce = communication_cost([Partial(), S(0)], [R, S(0)], (8,), (2, 2))
    assert reduce.partial_resolved == (0,) and reduce.elements_received == 16
    # Replicate -> Shard is a local slice
    assert communication_cost([R], [S(0)], (8,), (2,)).elements_received == 0


# ----------------------------------------------------------------- argument validation


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: local_shape((4,), [S(0)], (0,), (0,)), "mesh_shape"),
        (lambda: local_shape((4,), [S(0), R], (2,), (0,)), "placements"),
        (lambda: local_shape((4,), [S(1)], (2,), (0,)), "placements\\[0\\]"),
        (lambda: local_shape((4,), [SS(0, 0)], (2,), (0,)), "split_factor"),
        (lambda: local_shape((4,), [S(0)], (2,), (2,)), "coord"),
        (lambda: local_shape((-1,), [S(0)], (2,), (0,)), "global_shape"),
        (lambda: local_shape((4,), ["S(0)"], (2,), (0,)), "placements\\[0\\]"),
        (lambda: local_shard([1, 2], [R], (2,), (0,)), "global_array"),
        (lambda: check_op((4,), "gather", (), [R], [R], (2,)), "op must be one of"),
        (lambda: check_op((4,), "view", (), [R], [R], (2,)), "args for 'view'"),
        (lambda: check_op((4,), "view", ((5,),), [R], [R], (2,)), "global_op fails"),
        (lambda: check_op((4,), "view", ((2, 2),), [R], [S(2)], (2,)), "out_placements\\[0\\]"),
        (lambda: search_zero_comm((4,), [R], (2,), "view", ((4,),), max_nodes=0), "max_nodes"),
    ],
)
def test_bad_arguments_raise_value_error(call: Callable[[], object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_module_docstring_example() -> None:
    failures, tried = doctest.testmod(oracle, verbose=False)
    assert tried >= 3 and failures == 0

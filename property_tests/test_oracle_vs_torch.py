"""The oracle's rank simulator against torch's own sharding code.

* ``local_shard`` vs ``Shard._split_tensor`` / ``_StridedShard._split_tensor``
  (``with_padding=False``) applied left to right over the mesh dims.
* ``local_shape`` and the first global offset vs
  ``torch.distributed.tensor._utils._compute_local_shape_and_global_offset`` (the
  plain-data core of ``compute_local_shape_and_global_offset``; it takes a mesh
  shape and a coordinate, so no process group is needed), plus a few cases through
  the public function on a real ``DeviceMesh`` over a fake process group.
* Real DTensor view ops run under ``LocalTensorMode`` (all ranks simulated in one
  process): whenever torch propagates a view without any collective, the oracle
  must accept torch's output placements and agree with torch's local tensors.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch.distributed.tensor._utils import (
    _compute_local_shape_and_global_offset,
    compute_local_shape_and_global_offset,
)
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)
from torch.testing._internal.distributed.fake_pg import FakeStore

from cute_shard.oracle import (
    check_op,
    identifiable_tensor,
    local_indices,
    local_shape,
    local_shard,
    mesh_coords,
    zero_comm_answers,
)

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Sizes 1..24 with primes and 1 well represented.
SIZES = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 11, 13, 17, 19, 23]), st.integers(1, 24))
MESHES = st.sampled_from(
    [
        (1,),
        (2,),
        (3,),
        (4,),
        (5,),
        (7,),
        (8,),
        (2, 2),
        (2, 3),
        (3, 2),
        (2, 4),
        (4, 2),
        (1, 4),
        (2, 2, 2),
        (1, 2, 3),
    ]
)


@st.composite
def sharded_cases(
    draw: st.DrawFn, *, allow_partial: bool = False
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Placement, ...]]:
    shape = tuple(draw(st.lists(SIZES, min_size=1, max_size=4)))
    mesh = draw(MESHES)
    ndim = len(shape)
    # Bias towards few tensor dims so several mesh dims often land on one tensor dim.
    dim = st.integers(0, min(ndim - 1, draw(st.integers(0, ndim - 1))))
    options = [
        st.just(Replicate()),
        st.builds(Shard, dim),
        st.builds(lambda d, sf: _StridedShard(d, split_factor=sf), dim, st.integers(1, 6)),
    ]
    if allow_partial:
        options.append(st.just(Partial()))
    placements = tuple(draw(st.lists(st.one_of(*options), min_size=len(mesh), max_size=len(mesh))))
    return shape, mesh, placements


def torch_local(
    global_tensor: torch.Tensor,
    placements: Sequence[Placement],
    mesh: Sequence[int],
    coord: Sequence[int],
) -> torch.Tensor:
    """Torch's own left-to-right split for one rank."""
    t = global_tensor
    for p, m, c in zip(placements, mesh, coord, strict=True):
        if isinstance(p, (Shard, _StridedShard)):
            shards, pads = p._split_tensor(t, m, with_padding=False)
            assert pads == []
            assert len(shards) == m
            t = shards[c]
    return t


@SETTINGS
@given(sharded_cases())
def test_local_shard_matches_split_tensor(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[Placement, ...]],
) -> None:
    shape, mesh, placements = case
    g = torch.arange(math.prod(shape)).reshape(shape)
    for coord in mesh_coords(mesh):
        ours = local_shard(g, placements, mesh, coord)
        theirs = torch_local(g, placements, mesh, coord)
        assert tuple(ours.shape) == tuple(theirs.shape), (coord, ours.shape, theirs.shape)
        assert torch.equal(ours, theirs), coord
        # numpy input gives the same data
        assert (local_shard(g.numpy(), placements, mesh, coord) == theirs.numpy()).all()


@SETTINGS
@given(sharded_cases(allow_partial=True))
def test_local_shape_and_offset_match_torch(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[Placement, ...]],
) -> None:
    shape, mesh, placements = case
    for coord in mesh_coords(mesh):
        t_shape, t_offset = _compute_local_shape_and_global_offset(
            shape, mesh, list(coord), placements
        )
        assert local_shape(shape, placements, mesh, coord) == tuple(t_shape), coord
        idx = local_indices(shape, placements, mesh, coord)
        for d, ix in enumerate(idx):
            sharded = any(isinstance(p, (Shard, _StridedShard)) and p.dim == d for p in placements)
            # torch reports the first global index held, or the dim size for an empty shard.
            want = (int(ix[0]) if len(ix) else shape[d]) if sharded else 0
            assert t_offset[d] == want, (coord, d)


@contextmanager
def fake_world(world_size: int, rank: int = 0) -> Iterator[None]:
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


PUBLIC_CASES = [
    ((9, 6), (2, 4), (Shard(0), _StridedShard(0, split_factor=2))),
    ((13, 5), (2, 3), (_StridedShard(1, split_factor=2), Shard(0))),
    ((60, 128), (4,), (_StridedShard(0, split_factor=4),)),
    ((7, 3, 5), (2, 2, 2), (Shard(2), Replicate(), _StridedShard(2, split_factor=3))),
]


@pytest.mark.parametrize(("shape", "mesh", "placements"), PUBLIC_CASES)
def test_public_compute_local_shape_on_fake_mesh(
    shape: tuple[int, ...], mesh: tuple[int, ...], placements: tuple[Placement, ...]
) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    for rank, coord in enumerate(mesh_coords(mesh)):
        with fake_world(math.prod(mesh), rank):
            dm = init_device_mesh("cpu", mesh)
            assert tuple(dm.get_coordinate()) == coord
            t_shape, _ = compute_local_shape_and_global_offset(shape, dm, placements)
        assert local_shape(shape, placements, mesh, coord) == tuple(t_shape), coord


# ---------------------------------------------------------------- real DTensor views


VIEW_OPS = st.sampled_from(
    [
        "flatten",
        "unflatten",
        "view",
        "transpose",
        "unsqueeze",
        "squeeze",
        "permute",
        "movedim",
        "expand",
        "view_as_real",
    ]
)


@st.composite
def view_cases(draw: st.DrawFn) -> tuple[tuple[int, ...], str, tuple[object, ...]]:
    op = draw(VIEW_OPS)
    shape = tuple(
        draw(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 9, 12]), min_size=1, max_size=3))
    )
    nd = len(shape)
    if op == "flatten":
        start = draw(st.integers(0, nd - 1))
        return shape, op, (start, draw(st.integers(start, nd - 1)))
    if op == "unflatten":
        d = draw(st.integers(0, nd - 1))
        divs = [k for k in range(1, shape[d] + 1) if shape[d] % k == 0]
        k = draw(st.sampled_from(divs))
        return shape, op, (d, (k, shape[d] // k))
    if op == "view":
        # merge everything then split into a random factorisation
        n = math.prod(shape)
        divs = [k for k in range(1, n + 1) if n % k == 0]
        k = draw(st.sampled_from(divs))
        return shape, op, ((k, n // k),)
    if op == "transpose":
        return shape, op, (draw(st.integers(0, nd - 1)), draw(st.integers(0, nd - 1)))
    if op == "unsqueeze":
        return shape, op, (draw(st.integers(0, nd)),)
    if op == "squeeze":
        return shape, op, ((draw(st.integers(0, nd - 1)),) if draw(st.booleans()) else ())
    if op == "permute":
        return shape, op, (tuple(draw(st.permutations(range(nd)))),)
    if op == "expand":
        # broadcast size-1 dims and maybe add a new leading dim
        lead = tuple(draw(st.lists(st.sampled_from([2, 3, 4]), max_size=1)))
        return (
            shape,
            op,
            (lead + tuple(draw(st.sampled_from([2, 4])) if s == 1 else s for s in shape),),
        )
    if op == "view_as_real":
        return shape, op, ()
    return shape, op, (draw(st.integers(0, nd - 1)), draw(st.integers(0, nd - 1)))  # movedim


def _global_call(g: torch.Tensor, op: str, args: tuple[object, ...]) -> torch.Tensor:
    if op == "view_as_real":
        return torch.view_as_real(g)
    return getattr(g, op)(*args)


@pytest.fixture()
def world8() -> Iterator[None]:
    with fake_world(8):
        yield


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    view_cases(),
    st.sampled_from([(8,), (2, 4), (4, 2), (2, 2, 2)]),
    st.data(),
)
def test_oracle_accepts_torch_zero_comm_views(
    world8: None,
    case: tuple[tuple[int, ...], str, tuple[object, ...]],
    mesh: tuple[int, ...],
    data: st.DataObject,
) -> None:
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor import _dispatch, distribute_tensor, init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    shape, op, args = case
    nd = len(shape)
    placement = st.one_of(
        st.just(Replicate()),
        st.builds(Shard, st.integers(0, nd - 1)),
        st.builds(
            lambda d, sf: _StridedShard(d, split_factor=sf),
            st.integers(0, nd - 1),
            st.integers(2, 4),
        ),
    )
    placements = tuple(data.draw(st.lists(placement, min_size=len(mesh), max_size=len(mesh))))
    g = identifiable_tensor(shape, torch.complex128 if op == "view_as_real" else torch.int64)
    global_out = _global_call(g, op, args)
    with LocalTensorMode(frozenset(range(8))):
        dm = init_device_mesh("cpu", mesh)
        try:
            d = distribute_tensor(g, dm, list(placements), src_data_rank=None)
        except Exception:  # LocalTensorMode cannot split some uneven empty shards
            event("torch could not distribute")
            return
        comm = CommDebugMode()
        redistributions: list[object] = []
        real_redistribute = _dispatch.redistribute_local_tensor

        def spy(*a: object, **k: object) -> torch.Tensor:
            redistributions.append(a)
            return real_redistribute(*a, **k)

        try:
            # The spy also catches communication-free redistributions (Replicate ->
            # Shard is a local slice), after which the input placements differ.
            with comm, mock.patch.object(_dispatch, "redistribute_local_tensor", spy):
                out = _global_call(d, op, args)
        except Exception:  # any torch failure (refusal, LocalTensor limits): no data
            event("torch raised")
            return
        if redistributions or comm.get_total_counts() != 0:
            event("torch redistributed")
            return  # torch changed the input first: its output is not a zero-comm answer
        out_placements = tuple(out.placements)
        local = out._local_tensor
        # A LocalTensor whose ranks all hold the same data may come back as a plain tensor.
        locals_by_rank = getattr(local, "_local_tensors", None) or {r: local for r in range(8)}
    # torch ran the local op on the unchanged local inputs; its output placements are
    # right iff each rank's local result is that rank's shard of the global result.
    torch_consistent = True
    for rank, coord in enumerate(mesh_coords(mesh)):
        want = local_shard(global_out.contiguous(), out_placements, mesh, coord)
        got = locals_by_rank[rank].contiguous()
        if tuple(got.shape) != tuple(want.shape) or not torch.equal(got, want):
            torch_consistent = False
    event(f"zero-comm {op}, torch consistent: {torch_consistent}")
    verdict = check_op(shape, op, args, placements, out_placements, mesh)
    # The oracle simulates the same local op, so it must accept exactly torch's
    # self-consistent answers (and reject the ones where torch mislabels its output).
    assert verdict.ok == torch_consistent, (
        shape,
        op,
        args,
        placements,
        out_placements,
        verdict.reason,
    )


# ---------------------------------------------------------------- search vs enumeration


@st.composite
def tiny_search_cases(
    draw: st.DrawFn,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Placement, ...], str, tuple[object, ...]]:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    mesh = draw(st.sampled_from([(2,), (3,), (4,), (2, 2), (3, 2)]))
    nd = len(shape)
    placement = st.one_of(
        st.just(Replicate()),
        st.builds(Shard, st.integers(0, nd - 1)),
        st.builds(
            lambda d, sf: _StridedShard(d, split_factor=sf),
            st.integers(0, nd - 1),
            st.integers(2, 3),
        ),
    )
    placements = tuple(draw(st.lists(placement, min_size=len(mesh), max_size=len(mesh))))
    op = draw(st.sampled_from(["view", "transpose", "flatten", "expand", "repeat", "unsqueeze"]))
    n = math.prod(shape)
    if op == "view":
        k = draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))
        return shape, mesh, placements, op, ((k, n // k),)
    if op == "transpose":
        return shape, mesh, placements, op, (draw(st.integers(0, nd - 1)), 0)
    if op == "flatten":
        return shape, mesh, placements, op, ()
    if op == "expand":
        return shape, mesh, placements, op, ((2, *shape),)
    if op == "repeat":
        return shape, mesh, placements, op, (tuple(draw(st.integers(1, 2)) for _ in shape),)
    return shape, mesh, placements, op, (draw(st.integers(0, nd)),)


@SETTINGS
@given(tiny_search_cases())
def test_pruned_search_equals_plain_enumeration(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[Placement, ...], str, tuple[object, ...]],
) -> None:
    """The prefix pruning never drops a valid list: compare with checking every list.

    The search skips split factors above the current local length of the dim (they act
    exactly like ``sf = length``), so compare the *behaviours* (every rank's index lists).
    """
    shape, mesh, placements, op, args = case
    found = set(zero_comm_answers(shape, placements, mesh, op, args))
    out_shape = tuple(_global_call(identifiable_tensor(shape), op, args).shape)
    per_dim: list[Placement] = [Replicate()]
    for d, size in enumerate(out_shape):
        per_dim += [Shard(d)] + [_StridedShard(d, split_factor=sf) for sf in range(2, size + 2)]
    expected = {
        cand
        for cand in itertools.product(per_dim, repeat=len(mesh))
        if check_op(shape, op, args, placements, cand, mesh).ok
    }

    def behaviour(cand: tuple[Placement, ...]) -> tuple[object, ...]:
        return tuple(
            tuple(tuple(i.tolist()) for i in local_indices(out_shape, cand, mesh, c))
            for c in mesh_coords(mesh)
        )

    assert found <= expected
    assert {behaviour(c) for c in found} == {behaviour(c) for c in expected}
    if op == "view" and out_shape == shape:
        # the identity view keeps its input placements (up to an equivalent split factor)
        assert behaviour(tuple(placements)) in {behaviour(c) for c in found}

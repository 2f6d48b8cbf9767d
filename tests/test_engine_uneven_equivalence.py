"""The uneven fallback's shortcuts give exactly the answers of the plain search.

``propagate_uneven`` was made faster without changing a single answer. The golden cases below
(answers and ``Blocked`` reasons) were recorded from the implementation before that work; the
other tests check the helpers the shortcuts rest on against their plain definitions:

- :func:`uneven._split_factors` (the exhaustive stage's split factors, as an int64 array for
  long runs) equals the sorted union of :func:`uneven._sf_classes`;
- :func:`uneven._keep` answers the same for an int64 array as for a list;
- a dead demand from positions (the input side's smallest period does not divide the output
  side's) rejects every split factor: ``_same_positions`` is False for all of them;
- a ``Blocked`` whose reason is written only when read behaves as the plain one.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle

import numpy as np
import pytest
from torch.distributed.tensor.placement_types import (
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

import cute_shard.rules as R
from cute_shard.engine import uneven
from cute_shard.engine.errors import Blocked

S = Shard
RR = Replicate()

# (shape, view to, mesh, placements, output placements, [(mesh dim, tensor dim, reason)])
GOLDEN = [
    (
        (4, 27, 15),
        (1620,),
        (4,),
        [S(1)],
        [RR],
        [
            (
                0,
                1,
                "the view flattens dims (0, 1, 2) (sizes (4, 27, 15)) into output dim 0 (size "
                "1620), and its 4 uneven chunks (ceil(27/4)=7 per rank) do not line up with any "
                "sharding of the output: e.g. the rank at coordinate (0) of mesh dims (0,) holds "
                "flat elements [0, 105), [405, 510), [810, 915), ... (420 elements) but "
                "_S(0, 4) would give it [0, 102), [405, 507), [810, 912), ... (408 elements)",
            )
        ],
    ),
    (
        (15, 16, 3, 13, 5),
        (240, 195),
        (8,),
        [S(0)],
        [RR],
        [
            (
                0,
                0,
                "the view flattens dims (0, 1) (sizes (15, 16)) into output dim 0 (size 240), "
                "and its 8 uneven chunks (ceil(15/8)=2 per rank) do not line up with any "
                "sharding of the output: e.g. the rank at coordinate (0) of mesh dims (0,) holds "
                "flat elements [0, 32) but S(0) would give it [0, 30)",
            )
        ],
    ),
    (
        (676,),
        (169, 4),
        (2, 2, 2),
        [S(0), S(0), S(0)],
        [RR, RR, RR],
        [
            (
                j,
                0,
                "the split (169, 4) of dim 0 (size 676), and its 2 uneven chunks "
                "(ceil(676/2)=338 per rank) do not line up with any sharding of the output: e.g. "
                f"the rank at coordinate (0) of mesh dims ({j},) holds flat elements [0, 338) "
                "but S(0) would give it [0, 340)",
            )
            for j in range(3)
        ],
    ),
    (
        (33, 3696, 17),
        (33, 7, 8976),
        (2, 2, 2),
        [S(1), S(0), S(0)],
        [RR, S(0), S(0)],
        [
            (
                0,
                1,
                "the split (7, 8976) of flat(dims (1, 2), sizes (3696, 17)) (size 62832), and "
                "its 2 uneven chunks (ceil(3696/2)=1848 per rank) do not line up with any "
                "sharding of the output: e.g. the rank at coordinate (0) of mesh dims (0,) holds "
                "flat elements [0, 31416) but S(1) would give it [0, 35904)",
            )
        ],
    ),
    (
        (6237, 9, 33),
        (1852389,),
        (4,),
        [S(0)],
        [RR],
        [
            (
                0,
                0,
                "the view flattens dims (0, 1, 2) (sizes (6237, 9, 33)) into output dim 0 (size "
                "1852389), and its 4 uneven chunks (ceil(6237/4)=1560 per rank) do not line up "
                "with any sharding of the output: e.g. the rank at coordinate (0) of mesh dims "
                "(0,) holds flat elements [0, 463320) but S(0) would give it [0, 463098)",
            )
        ],
    ),
    (
        (17, 11),
        (187,),
        (2, 2, 4),
        [S(1), S(0), S(0)],
        [_StridedShard(0, split_factor=17), RR, RR],
        [
            (
                1,
                0,
                "the view flattens dims (0, 1) (sizes (17, 11)) into output dim 0 (size 187), "
                "and its 2 uneven chunks (ceil(17/2)=9 per rank) do not line up with any "
                "sharding of the output: e.g. the rank at coordinate (0, 0) of mesh dims (0, 1) "
                "holds flat elements [0, 6), [11, 17), [22, 28), ... (54 elements) but S(0) "
                "would give it [0, 6), [11, 17), [22, 28), ... (51 elements)",
            ),
            (
                2,
                0,
                "the view flattens dims (0, 1) (sizes (17, 11)) into output dim 0 (size 187), "
                "and its 4 uneven chunks (ceil(17/4)=5 per rank) do not line up with any "
                "sharding of the output: e.g. the rank at coordinate (0, 0) of mesh dims (0, 2) "
                "holds flat elements [0, 6), [11, 17), [22, 28), ... (30 elements) but S(0) "
                "would give it [0, 6), [11, 17), [22, 28), ... (26 elements)",
            ),
        ],
    ),
]


@pytest.mark.parametrize(("shape", "to", "mesh", "placements", "expected", "reasons"), GOLDEN)
def test_golden_answers_and_reasons(
    shape: tuple[int, ...],
    to: tuple[int, ...],
    mesh: tuple[int, ...],
    placements: list[Placement],
    expected: list[Placement],
    reasons: list[tuple[int, int, str]],
) -> None:
    _, out, blocked = uneven.propagate_uneven(
        tuple(placements), shape, R.view_groups(shape, to), mesh
    )
    assert [repr(p) for p in out] == [repr(p) for p in expected]
    assert [(b.mesh_dim, b.tensor_dim, b.reason) for b in blocked] == reasons


def test_split_factors_are_the_sorted_chunking_classes() -> None:
    roots = (1, 2, 7, 19, 20, 21, 63, 64, 65, 100, 257)
    singles = [r * r + e for r in roots for e in (-1, 0, 1, r, 2 * r)] + [4095, 4096, 99991]
    for n in singles:
        got = uneven._split_factors({n})
        assert isinstance(got, list) or got.dtype == np.int64
        assert list(got) == sorted(uneven._sf_classes(n)), n
    for lengths in ({5, 7}, {4096, 12}, {0, 3}):
        want = sorted(set().union(*(uneven._sf_classes(n) for n in lengths)))
        assert list(uneven._split_factors(lengths)) == want


def test_keep_answers_the_same_for_arrays() -> None:
    sfs = [int(x) for x in uneven._split_factors({5000})]
    array = np.array(sfs, dtype=np.int64)
    for length, m in itertools.product((0, 1, 17, 4999, 5000), (1, 2, 3, 8)):
        for c in range(m):
            counts = {uneven._chunk_len(length, sf, m, c) for sf in sfs[::40]}
            for want in [None, *counts]:
                got = uneven._keep(array, length, m, c, want)
                assert got == uneven._keep(sfs, length, m, c, want)
                assert all(type(x) is int for x in got)


def _check_on_mesh(m: int) -> uneven._Check:
    view = uneven._analyse(R.view_groups((30,), (30,)), (30,), None)
    return uneven._Check(uneven._Problem(view, view.group_of[0], ((0, 1),), (), (m,)))


def test_a_period_that_does_not_divide_rejects_every_split_factor() -> None:
    for m in (2, 3, 4):
        check = _check_on_mesh(m)
        for n, inner, sf, lo, i_out in itertools.product(
            range(1, 13), (1, 2, 3), (1, 2, 3), range(1, 13), (1, 2, 5)
        ):
            for c in range(m):
                period = check.pattern(n, inner, sf, c)
                if period is None or lo * i_out % period[0] == 0:
                    continue
                for sf_out in range(1, lo + 2):
                    assert not check._same_positions(n, inner, sf, lo, i_out, sf_out, c)


def test_lazy_reasons_read_compare_and_pickle_as_plain_blocked() -> None:
    """A reason is written only when read; until then and after, the entry behaves as the
    plain ``Blocked`` with that reason (equality both ways, hash, repr, str, pickle, copy)."""
    shape, to, mesh, placements, _, reasons = GOLDEN[0]
    rule = R.view_groups(shape, to)
    _, _, (lazy,) = uneven.propagate_uneven(tuple(placements), shape, rule, mesh)
    (mesh_dim, tensor_dim, reason) = reasons[0]
    plain = Blocked(mesh_dim, tensor_dim, reason)
    assert isinstance(lazy, Blocked)
    assert lazy == plain and plain == lazy and not lazy != plain
    assert hash(lazy) == hash(plain) and {lazy, plain} == {plain}
    assert repr(lazy) == repr(plain) and str(lazy) == str(plain)
    assert dataclasses.asdict(lazy) == dataclasses.asdict(plain)
    for twin in (pickle.loads(pickle.dumps(lazy)), copy.copy(lazy), copy.deepcopy(lazy)):
        assert type(twin) is Blocked and twin == plain
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy.reason = "changed"  # type: ignore[misc]
    assert lazy.reason == reason

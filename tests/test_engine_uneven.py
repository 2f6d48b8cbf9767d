"""Golden cases for the uneven-size fallback (``cute_shard.engine.uneven``).

Every golden answer is also checked with the exact rank simulator (``oracle.check_op`` on the
returned input target), and where the fallback moves a mesh dim the brute force confirms that
no zero-communication answer exists (or that the only ones depend on which op has the rule).
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import numpy as np
import pytest
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

import cute_shard.rules as R
from cute_shard import oracle
from cute_shard.engine import uneven
from cute_shard.engine.errors import Blocked
from cute_shard.engine.uneven import propagate_uneven

S = Shard
RR = Replicate()


def SS(dim: int, sf: int) -> _StridedShard:
    return _StridedShard(dim, split_factor=sf)


def run(
    shape: tuple[int, ...],
    op: str,
    args: tuple[Any, ...],
    rule: R.Rule,
    placements: list[Placement],
    mesh: tuple[int, ...],
    **kw: Any,
) -> tuple[tuple[Placement, ...], tuple[Placement, ...], tuple[Blocked, ...]]:
    """Propagate and check the answer with the oracle (valid, canonical, only R moves)."""
    target, out, blocked = propagate_uneven(tuple(placements), shape, rule, mesh, **kw)
    verdict = oracle.check_op(shape, op, args, target, out, mesh)
    assert verdict.ok, verdict.reason
    assert oracle.is_canonical(out, len(rule))
    moved = [i for i, (p, t) in enumerate(zip(placements, target, strict=True)) if p != t]
    assert all(target[i] == RR for i in moved)
    assert [b.mesh_dim for b in blocked] == moved
    return target, out, blocked


def view(shape: tuple[int, ...], to: tuple[int, ...]) -> tuple[str, tuple[Any, ...], R.Rule]:
    return "view", (to,), R.view_groups(shape, to)


# ----------------------------------------------------------------- golden table

# (shape, (op, args, rule), input placements, mesh, expected output); input kept.
KEPT = [
    # (a) the sharded dim is the innermost of a flatten: whole chunks per outer index
    ((4, 15, 128), view((4, 15, 128), (60, 128)), [S(1)], (4,), [SS(0, 4)]),
    ((2, 1024, 768), view((2, 1024, 768), (2048, 768)), [S(1)], (3,), [SS(0, 2)]),
    ((1, 15, 3), view((1, 15, 3), (15, 3)), [S(1)], (4,), [S(0)]),  # outer product 1: Shard
    ((5, 6), view((5, 6), (30,)), [RR, S(1)], (2, 4), [RR, SS(0, 5)]),
    # (b) the sharded dim is outermost and the chunks happen to align
    ((7, 3), view((7, 3), (21,)), [S(0)], (4,), [S(0)]),
    ((7, 2), view((7, 2), (14,)), [S(0)], (4,), [S(0)]),
    # (c) splits: the shard lands whole in one piece
    ((30,), view((30,), (6, 5)), [SS(0, 6)], (4,), [S(1)]),
    ((21,), view((21,), (7, 3)), [S(0)], (4,), [S(0)]),
    ((3, 35), view((3, 35), (3, 5, 7)), [SS(1, 5)], (2,), [S(2)]),
    # (d) whole dims move with permute / transpose / unsqueeze, any sharding
    ((5, 7), ("transpose", (0, 1), R.transpose(2, 0, 1)), [S(0), SS(1, 2)], (2, 3),
     [S(1), SS(0, 2)]),
    ((5, 3, 7), ("permute", ((2, 0, 1),), R.permute(3, (2, 0, 1))), [S(2)], (4,), [S(0)]),
    ((5,), ("unsqueeze", (0,), R.unsqueeze(1, 0)), [S(0)], (2,), [S(1)]),
    # (e) several mesh dims on one tensor dim
    ((7, 5), view((7, 5), (35,)), [S(1), S(1)], (2, 2), [SS(0, 7), SS(0, 7)]),
    ((5, 6), view((5, 6), (30,)), [SS(0, 5), S(1)], (2, 2), [SS(0, 30), SS(0, 5)]),
    ((10, 6, 10), view((10, 6, 10), (600,)), [SS(2, 2), SS(2, 2), S(2)], (2, 2, 2),
     [SS(0, 120), SS(0, 120), SS(0, 60)]),
    # (f) repeat, broadcast, squeeze and view_as_real
    ((5,), ("repeat", ((3,),), R.repeat(1, (3,))), [S(0)], (2,), [SS(0, 3)]),
    ((5, 3), ("repeat", ((2, 3),), R.repeat(2, (2, 3))), [S(0), S(1)], (2, 2),
     [SS(0, 2), SS(1, 3)]),
    ((1, 4), ("expand", ((3, 4),), R.expand((1, 4), (3, 4))), [S(0)], (2,), [SS(0, 3)]),
    ((1, 4), ("squeeze", (), R.squeeze((1, 4))), [S(0), S(1)], (1, 3), [RR, S(0)]),
    ((5,), ("view_as_real", (), R.view_as_real((5,))), [S(0)], (2,), [S(0)]),
    # a rank whose whole tensor is empty may take any empty output shape under a local view
    ((1, 12, 1, 1), view((1, 12, 1, 1), (2, 6)), [S(0)], (3,), [SS(0, 2)]),
    # Partial and Replicate are carried on their mesh dims
    ((4, 15, 128), view((4, 15, 128), (60, 128)), [Partial(), S(1)], (2, 4),
     [Partial(), SS(0, 4)]),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "op", "placements", "mesh", "expected"), KEPT)
def test_kept(
    shape: tuple[int, ...],
    op: tuple[str, tuple[Any, ...], R.Rule],
    placements: list[Placement],
    mesh: tuple[int, ...],
    expected: list[Placement],
) -> None:
    name, args, rule = op
    target, out, blocked = run(shape, name, args, rule, placements, mesh)
    assert target == tuple(placements) and blocked == ()
    assert out == tuple(expected)


# (shape, op, input placements, mesh, expected input target / output); some mesh dims move.
MOVED = [
    # the design brief's row: 6 rows over 8 ranks cannot be flattened in place
    ((6, 256), view((6, 256), (1536,)), [S(0)], (8,), [RR], [RR]),
    # n = 6 with inner 2 does not align (n = 7 does, above)
    ((6, 2), view((6, 2), (12,)), [S(0)], (4,), [RR], [RR]),
    ((30,), view((30,), (6, 5)), [S(0)], (4,), [RR], [RR]),
    # the design brief's torch failures that are uneven
    ((18,), view((18,), (3, 1, 6)), [RR, SS(0, 2)], (2, 3), [RR, RR], [RR, RR]),
    ((512,), view((512,), (4, 128)), [S(0), S(0)], (2, 4), [S(0), RR], [S(0), RR]),
    ((12, 20), view((12, 20), (20, 12)), [S(0), SS(1, 2)], (2, 4), [S(0), RR], [S(0), RR]),
    # a later mesh dim on the same dim that cannot stay once the first has
    ((5, 3), view((5, 3), (15,)), [S(1), S(0)], (2, 2), [S(1), RR], [SS(0, 5), RR]),
    # a sharded size-1 dim that the view drops or broadcasts: other ranks hold nothing
    ((1, 4), ("squeeze", (), R.squeeze((1, 4))), [S(0)], (2,), [RR], [RR]),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "op", "placements", "mesh", "target", "expected"), MOVED)
def test_moved(
    shape: tuple[int, ...],
    op: tuple[str, tuple[Any, ...], R.Rule],
    placements: list[Placement],
    mesh: tuple[int, ...],
    target: list[Placement],
    expected: list[Placement],
) -> None:
    name, args, rule = op
    got_target, out, blocked = run(shape, name, args, rule, placements, mesh)
    assert got_target == tuple(target)
    assert out == tuple(expected)
    assert all(b.tensor_dim == placements[b.mesh_dim].dim for b in blocked)
    # Nothing better exists: the brute force finds no zero-comm answer either.
    assert oracle.find_zero_comm_answer(shape, placements, mesh, name, args) is None


def test_design_brief_flatten_of_uneven_rows() -> None:
    shape, to = (6, 256), (1536,)
    target, out, blocked = run(shape, "view", (to,), R.view_groups(shape, to), [S(0)], (8,))
    assert (target, out) == ((RR,), (RR,))
    assert oracle.find_zero_comm_answer(shape, [S(0)], (8,), "view", (to,)) is None
    (b,) = blocked
    assert (b.mesh_dim, b.tensor_dim) == (0, 0)
    assert "ceil(6/8)=1" in b.reason and "(6, 256)" in b.reason
    assert "[0, 256)" in b.reason and "[0, 192)" in b.reason  # rank 0: held vs Shard(0)'s


def test_design_brief_inner_dim_flatten() -> None:
    shape, to = (4, 15, 128), (60, 128)
    _, out, _ = run(shape, "view", (to,), R.view_groups(shape, to), [S(1)], (4,))
    assert out == (SS(0, 4),)


# ----------------------------------------------------------------- ops that share a rule


def test_view_as_complex_rule_is_checked_under_both_readings() -> None:
    # (4, 2) -> flatten is _S(0, 4); the same rule as view_as_complex, where it is wrong
    # (every rank needs whole (real, imag) pairs), so without knowing the op: replicate.
    rule = R.view_as_complex((4, 2))
    assert rule == R.view_groups((4, 2), (8,))
    target, out, blocked = run((4, 2), "view_as_complex", (), rule, [S(1)], (2,))
    assert (target, out) == ((RR,), (RR,)) and "view_as_complex" in blocked[0].reason
    _, out, _ = run((4, 2), "flatten", (), rule, [S(1)], (2,), complex_view=False)
    assert out == (SS(0, 4),)
    # Five complex rows over two ranks: exact for view_as_complex, not for a real flatten.
    rule = R.view_as_complex((5, 2))
    _, out, _ = run((5, 2), "view_as_complex", (), rule, [S(0)], (2,), complex_view=True)
    assert out == (S(0),)
    target, _, _ = run((5, 2), "view_as_complex", (), rule, [S(0)], (2,))
    assert target == (RR,)


def test_rule_shared_with_squeeze_keeps_shape_checks() -> None:
    # (1, 1) -> (1,) by view has the rule of squeeze(dim=1): the view op alone would accept
    # Shard(0) (rank 1's tensor is empty either way), squeeze would not; so replicate.
    rule = R.view_groups((1, 1), (1,))
    assert rule == R.squeeze((1, 1), 1)
    target, _, _ = run((1, 1), "squeeze", (1,), rule, [S(1)], (2,))
    assert target == (RR,)
    assert oracle.find_zero_comm_answer((1, 1), [S(1)], (2,), "squeeze", (1,)) is None


# ----------------------------------------------------------------- odd inputs


def test_size_one_mesh_dim_is_always_exact() -> None:
    _, out, blocked = run((1, 4), "squeeze", (), R.squeeze((1, 4)), [S(0)], (1,))
    assert blocked == () and out == (RR,)


def test_zero_sized_dims_do_not_crash() -> None:
    for shape, to in (((0, 3), (3, 0)), ((2, 0, 3), (0,)), ((0,), (0, 5))):
        rule = R.view_groups(shape, to)
        for ps in ([S(0)], [S(len(shape) - 1)], [S(0), S(0)]):
            mesh = (2,) * len(ps)
            run(shape, "view", (to,), rule, ps, mesh)


def test_negative_shard_dims_are_normalised() -> None:
    shape, to = (4, 15, 128), (60, 128)
    target, out, _ = propagate_uneven((S(-2),), shape, R.view_groups(shape, to), (4,))
    assert target == (S(-2),) and out == (SS(0, 4),)


def test_strided_input_carried_by_inputdim_is_canonical() -> None:
    _, out, _ = run((7,), "unsqueeze", (1,), R.unsqueeze(1, 1), [SS(0, 3)], (2,))
    assert out == (SS(0, 3),)


# ----------------------------------------------------------------- scale


def test_large_shapes_and_meshes_are_fast() -> None:
    cases = [
        ((2, 1024, 768), (2048, 768), [S(1), S(1)], (64, 64), [SS(0, 2), SS(0, 2)]),
        ((2, 1024, 768), (2 * 1024 * 768,), [S(2)], (4096,), [SS(0, 2048)]),
        ((100000, 15), (1500000,), [S(1)], (4,), [SS(0, 100000)]),
        ((2, 1024, 768), (2, 1024, 12, 64), [S(2)], (7,), [RR]),
    ]
    for shape, to, ps, mesh, expected in cases:
        start = time.perf_counter()
        _, out, _ = propagate_uneven(tuple(ps), shape, R.view_groups(shape, to), mesh)
        assert time.perf_counter() - start < 2.0
        assert out == tuple(expected)


# ----------------------------------------------------------------- the exact sets


def brute_set(s: uneven.IntSet) -> set[int]:
    return {a + t * st + k for a, w, st, c in s for t in range(c) for k in range(w)}


@pytest.mark.parametrize("size", [1, 5, 12, 13])
@pytest.mark.parametrize("mesh", [(2,), (3,), (4, 2), (2, 3)])
def test_dim_sets_match_the_oracle(size: int, mesh: tuple[int, ...]) -> None:
    kinds = [S(0), SS(0, 2), SS(0, 3), SS(0, 5)]
    for ps in itertools.product(kinds, repeat=len(mesh)):
        for coord in oracle.mesh_coords(mesh):
            steps = tuple(
                (p.split_factor if isinstance(p, _StridedShard) else 1, m, c)
                for p, m, c in zip(ps, mesh, coord, strict=True)
            )
            (want,) = oracle.local_indices((size,), ps, mesh, coord)
            got = uneven._dim_set(size, steps)
            assert sorted(brute_set(got)) == want.tolist()
            assert list(got) == sorted(got)


def test_flat_product_and_canonical_form() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = tuple(int(x) for x in rng.integers(1, 7, size=rng.integers(1, 4)))
        digits = []
        for n in sizes:
            steps = ((int(rng.integers(1, 4)), int(rng.integers(1, 4)), 0),)
            m = steps[0][1]
            steps = ((steps[0][0], m, int(rng.integers(0, m))),)
            digits.append((uneven._dim_set(n, steps), n))
        flat = uneven._flat(digits)
        grid = np.arange(math.prod(sizes)).reshape(sizes)
        want = grid[np.ix_(*[sorted(brute_set(s)) for s, _ in digits])].reshape(-1)
        assert sorted(brute_set(flat)) == want.tolist()
        # the canonical form is the same for any family split of the same set
        intervals = tuple((int(x), 1, 0, 1) for x in want)
        assert uneven._canonical(flat) == uneven._canonical(intervals)


@pytest.mark.parametrize(
    ("shape", "target", "mesh", "placements"),
    [
        ((1105, 3, 3), (9945,), (2, 4), [S(2), S(0)]),
        ((126, 63, 16), (2, 63504), (2, 4, 2), [S(0), S(2), S(1)]),
    ],
)
def test_too_ragged_to_prove_moves_instead_of_raising(
    shape: tuple[int, ...], target: tuple[int, ...], mesh: tuple[int, ...], placements: list[Any]
) -> None:
    """Found by the benchmark screening: a set past MAX_FAMILIES raised an internal exception
    out of a non-strict call. Such a mesh dim is now not proven, so it moves, with a reason."""
    import cute_shard

    rule = R.view_groups(shape, target)
    in_tgt, out = cute_shard.propagate_shape_and_sharding(placements, shape, rule, mesh)
    assert any(t != p for t, p in zip(in_tgt, placements, strict=True))
    v = oracle.check_op(shape, "view", (target,), in_tgt, out, mesh, strict_view=False)
    assert v.ok, v.reason
    with pytest.raises(cute_shard.RedistributionRequired) as info:
        cute_shard.propagate_shape_and_sharding(placements, shape, rule, mesh, strict_view=True)
    assert all(b.reason for b in info.value.blocked)


# ----------------------------------------------------------------- the fast check


def brute_restrict(s: uneven.IntSet, sf: int, m: int, c: int) -> list[int]:
    """What ``_restrict`` must return: chunk ``c`` of every ``torch.chunk`` piece of ``s``."""
    elems = sorted(brute_set(s))
    k1 = -(-len(elems) // sf) if elems else 1
    out: list[int] = []
    for start in range(0, len(elems), k1):
        piece = elems[start : start + k1]
        k = -(-len(piece) // m)
        out += piece[c * k : (c + 1) * k]
    return out


@pytest.mark.parametrize("length", [0, 1, 2, 5, 12, 13, 30, 97])
def test_chunk_arithmetic_counts_what_restrict_keeps(length: int) -> None:
    """``_chunk_len``, ``_chunk_lens`` and ``_keep`` (both of its paths) agree with the count
    of ``_restrict`` on every split factor, mesh size and coordinate."""
    s = uneven._full(length)
    sfs = list(range(1, length + 3))
    for m in range(1, 6):
        for c in range(m):
            want = [uneven._count(uneven._restrict(s, sf, m, c)) for sf in sfs]
            assert uneven._chunk_lens(length, sfs, m, c) == want
            assert [uneven._chunk_len(length, sf, m, c) for sf in sfs] == want
            many = sfs * (uneven._VECTOR // len(sfs) + 1)  # long enough for numpy
            for w in {None, 0, *want}:
                keep = [sf for sf, x in zip(sfs, want, strict=True) if (x if w is None else x == w)]
                assert uneven._keep(sfs, length, m, c, w) == keep
                long = [sf for sf in many if sf in set(keep)]
                assert uneven._keep(many, length, m, c, w) == long


def test_restrict_of_one_family_matches_brute_force() -> None:
    """Including its shortcut for a family whose intervals are exactly the pieces (a second
    _StridedShard with the same split factor)."""
    for x, w, cnt, gap in itertools.product((0, 3), (1, 2, 5), (1, 2, 4), (1, 3)):
        s = uneven._fam(x, w, w + gap, cnt)
        for sf in range(1, 9):
            for m in range(1, 5):
                for c in range(m):
                    got = sorted(brute_set(uneven._restrict(s, sf, m, c)))
                    assert got == brute_restrict(s, sf, m, c), (s, sf, m, c)


def _check_on_mesh(m: int) -> uneven._Check:
    """A check of mesh dim 0 of size ``m`` (its helpers depend only on ``m``)."""
    view_ = uneven._analyse(R.view_groups((30,), (30,)), (30,), None)
    return uneven._Check(uneven._Problem(view_, view_.group_of[0], ((0, 1),), (), (m,)))


def _product(copies: int, n: int, inner: int, q: list[int]) -> set[int]:
    """``copies x q x inner`` in mixed radix, by brute force."""
    return {(t * n + x) * inner + r for t in range(copies) for x in q for r in range(inner)}


def test_positions_and_their_smallest_period() -> None:
    """``positions`` is ``copies x Q x inner``; ``pattern``, where it answers, is the smallest
    period of that set as a subset of Z_N and what one period holds; ``_same_positions`` is
    set equality of two such sets of the same size."""
    check = _check_on_mesh(3)
    chunks = {}
    for n, inner, sf, c in itertools.product(range(1, 10), (1, 2, 3), range(1, 7), range(3)):
        q = brute_restrict(uneven._full(n), sf, 3, c)
        chunks[(n, inner, sf, c)] = q
        for copies in (1, 2, 4):
            got = check.positions(copies, n, inner, sf, c)
            assert brute_set(got) == _product(copies, n, inner, q)
            assert got == uneven._canonical(got)
        found = check.pattern(n, inner, sf, c)
        if found is not None:
            period, one = found
            size = 6 * n * inner
            s = _product(6, n, inner, q)
            shifts = [d for d in range(1, size + 1) if {(y + d) % size for y in s} == s]
            assert shifts[0] == period
            assert brute_set(one) == {y for y in s if y < period}
    keys = [k for k, q in chunks.items() if q]
    for a, b in itertools.product(keys[::5], keys[::3]):
        (n, i, sf, c), (n2, i2, sf2, c2) = a, b
        span = math.lcm(n * i, n2 * i2)
        left = _product(span // (n * i), n, i, chunks[a])
        right = _product(span // (n2 * i2), n2, i2, chunks[b])
        if c == c2 and len(left) == len(right):
            assert check._same_positions(n, i, sf, n2, i2, sf2, c) == (left == right), (a, b)


def test_describe_digits_equals_the_canonical_description() -> None:
    rng = np.random.default_rng(1)
    for _ in range(500):
        digits = []
        for _ in range(int(rng.integers(0, 4))):
            size = int(rng.integers(1, 9))
            m = int(rng.integers(1, 4))
            steps = ((int(rng.integers(1, 4)), m, int(rng.integers(0, m))),)
            digits.append((uneven._dim_set(size, steps), size))
        for limit in (1, 3):
            want = uneven._describe(uneven._canonical(uneven._flat(digits)), limit)
            assert uneven._describe_digits(digits, limit) == want


# Found while making the fallback fast: the previous fallback replicated these because a set
# it built on the way grew past MAX_FAMILIES; checking only the step needs no such set.
KEPT_NOW = [
    ((8505, 9), (76545,), [S(1), S(1), S(0)], (2, 2, 4), [SS(0, 8505), SS(0, 8505), RR]),
    ((33264, 27), (16, 56133), [S(1), S(1), S(1)], (2, 2, 2), [SS(1, 2079)] * 3),
]


@pytest.mark.parametrize(("shape", "to", "placements", "mesh", "expected"), KEPT_NOW)
def test_ragged_sets_no_longer_force_a_move(
    shape: tuple[int, ...],
    to: tuple[int, ...],
    placements: list[Placement],
    mesh: tuple[int, ...],
    expected: list[Placement],
) -> None:
    _, out, _ = run(shape, *view(shape, to), placements, mesh)
    assert out == tuple(expected)

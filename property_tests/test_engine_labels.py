"""The router's step (``cute_shard.engine.decide``) against brute force.

A placement of one mesh dim labels every element of the local flat index with the coordinate
of the rank that keeps it. The step's claims, each checked by writing the labels out:

1. ``chunk_lens`` is how many rows ``torch.chunk``-style ``Shard``/``_StridedShard`` leave the
   rank at each coordinate (the oracle's ``_owner``);
2. ``root`` is a complete invariant of the labelling: two axes (any lengths, split factors
   and row sizes, one mesh size, the same flat length) label the flat index alike exactly when
   their roots are equal;
3. ``place`` is sound and complete on one state: where it names an output axis and split
   factors, every one of them labels the flat index as the input does; where it fails, no
   output axis and split factor up to the axis length does.
"""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from cute_shard import oracle
from cute_shard.chunks import chunk_lens
from cute_shard.engine.decide import CONST, place, root
from cute_shard.engine.types import Fail, Group, State
from property_tests.engine_strategies import ENGINE

LENGTHS = st.integers(1, 24)
MESH = st.integers(2, 5)
SF = st.integers(1, 8)


def labels(length: int, sf: int, m: int, inner: int, outer: int) -> list[int]:
    """The coordinate owning each element of an (outer, length, inner) row-major block."""
    owner = oracle._owner(length, m, sf).tolist()
    return [owner[(x // inner) % length] for x in range(outer * length * inner)]


@ENGINE
@given(st.integers(0, 40), SF, MESH)
def test_chunk_len_counts_what_the_oracle_gives_each_rank(length: int, sf: int, m: int) -> None:
    owner = oracle._owner(length, m, sf).tolist()
    assert chunk_lens(length, sf, m) == [owner.count(c) for c in range(m)], (length, sf, m)


@ENGINE
@given(LENGTHS, SF, st.integers(1, 6), LENGTHS, SF, st.integers(1, 6), MESH)
def test_equal_roots_exactly_when_equal_labellings(
    l1: int, sf1: int, i1: int, l2: int, sf2: int, i2: int, m: int
) -> None:
    p1, p2 = l1 * i1, l2 * i2
    total = p1 * p2 // _gcd(p1, p2)
    assume(total <= 4000)
    a = labels(l1, sf1, m, i1, total // p1)
    b = labels(l2, sf2, m, i2, total // p2)
    r1, r2 = root(l1, sf1, m, i1), root(l2, sf2, m, i2)
    assert (a == b) == (r1 == r2), (l1, sf1, i1, l2, sf2, i2, m, r1, r2)
    if r1 is CONST:
        assert set(a) == {0}


@st.composite
def views(draw: st.DrawFn) -> tuple[tuple[int, ...], int, int, tuple[int, ...], int]:
    """Two factorings of one flat length, an input axis with its split factor, a mesh size."""
    outs = tuple(draw(st.lists(st.integers(1, 12), min_size=1, max_size=3)))
    total = 1
    for x in outs:
        total *= x
    assume(total <= 3000)
    ins: list[int] = []
    rest = total
    for _ in range(draw(st.integers(0, 2))):
        d = draw(st.sampled_from([x for x in range(1, rest + 1) if rest % x == 0]))
        ins.append(d)
        rest //= d
    ins.append(rest)
    ins_t = tuple(draw(st.permutations(ins)))
    ax = draw(st.integers(0, len(ins_t) - 1))
    return ins_t, ax, draw(SF), outs, draw(MESH)


@ENGINE
@given(views())
def test_place_is_sound_and_complete_on_one_state(
    case: tuple[tuple[int, ...], int, int, tuple[int, ...], int],
) -> None:
    ins, ax, sf, outs, m = case
    inner = 1
    for x in ins[ax + 1 :]:
        inner *= x
    outer = 1
    for x in ins[:ax]:
        outer *= x
    want = labels(ins[ax], sf, m, inner, outer)
    group = Group(ins, outs, home={ax: 0})
    got = place(group, [State(list(ins), list(outs), 0 in ins)], ax, sf, m)

    def out_labels(k: int, s: int) -> list[int]:
        j = 1
        for x in outs[k + 1 :]:
            j *= x
        o = 1
        for x in outs[:k]:
            o *= x
        return labels(outs[k], s, m, j, o)

    if isinstance(got, Fail):
        for k in range(len(outs)):
            for s in range(1, outs[k] + 1):
                assert out_labels(k, s) != want or set(want) == {0}, (case, k, s)
        return
    k, lo, hi = got.axis, got.lo, got.hi
    assert hi is None or lo <= hi, (case, got)
    top = outs[k] if hi is None else min(hi, outs[k] + 1)
    for s in range(lo, top + 1):
        assert out_labels(k, s) == want, (case, k, s, lo, hi)


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a

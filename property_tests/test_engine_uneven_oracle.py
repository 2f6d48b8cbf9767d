"""The uneven fallback (``cute_shard.engine.uneven``) against the exact rank simulator.

Cases: shapes of 1-4 dims with sizes 1-13 (1s and primes over-represented), meshes of 1-3 dims
with at most 8 ranks, placements with at least one uneven ``Shard``/``_StridedShard`` (plus
Replicate, Partial and several mesh dims on one tensor dim), and the rule of a random view op:
view (random factorisations of the numel), flatten, unflatten, permute, transpose, squeeze,
unsqueeze, expand, repeat, view_as_real or view_as_complex. For every case:

1. the output is valid (``oracle.check_op`` run on the returned input *target*);
2. the input target only replaces mesh dims by Replicate, and ``blocked`` names exactly those;
3. the output is canonical (no ``_StridedShard`` with split factor 1);
4. when the brute force finds no zero-communication answer, the input target differs from the
   input (the converse, a zero-comm answer that we replicated, is counted, not asserted).

Coverage (4's converse) is reported with ``hypothesis.event`` (``--hypothesis-show-statistics``)
and as a one-line summary at the end of the module, with misses split by cause:
``op-dependent`` misses have a rule of only InputDims and 1s, which squeeze/unsqueeze/permute
share with view; the brute force (run with the view op) finds answers that rely on a rank whose
whole tensor is empty, which ``local.view`` accepts but those ops' local calls do not, so a
propagator that sees only the rule must not use them. ``view_as_complex rule`` misses are
flattens of a trailing size-2 dim, which share view_as_complex's rule and are checked under both
readings. Plain ``missed`` ones are the fallback's real gaps.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st
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
from cute_shard.engine.uneven import propagate_uneven
from property_tests.engine_strategies import ENGINE

SIZES = st.sampled_from([1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])
MESHES = st.sampled_from(
    [(2,), (3,), (4,), (5,), (8,), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2), (1, 4), (2, 2, 2)]
)
#: The oracle simulates every element; keep cases in the millisecond range.
MAX_NUMEL = 1500
#: A capped brute force proves nothing: such examples are skipped for (4) and coverage.
SEARCH_MAX_NODES = 6000

COVERAGE: Counter[str] = Counter()


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    op: str
    args: tuple[Any, ...]
    rule: R.Rule
    mesh: tuple[int, ...]
    placements: tuple[Placement, ...]

    def __str__(self) -> str:
        return (
            f"shape={self.shape} {self.op}{self.args} mesh={self.mesh} "
            f"placements={list(self.placements)} rule={R.format_rule(self.rule)}"
        )


# --------------------------------------------------------------------------- strategies


def _factorisations(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def view_shapes(draw: st.DrawFn, numel: int) -> tuple[int, ...]:
    """A random factorisation of ``numel`` into 1-4 dims, with the odd size-1 dim."""
    out: list[int] = []
    rest = numel
    for _ in range(draw(st.integers(0, 3))):
        d = draw(st.sampled_from(_factorisations(rest)))
        out.append(d)
        rest //= d
    out.append(rest)
    if draw(st.booleans()):
        out.insert(draw(st.integers(0, len(out))), 1)
    return tuple(draw(st.permutations(out)))


@st.composite
def ops(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[str, tuple[Any, ...], R.Rule]:
    """A view op on ``shape``: the oracle's (op, args) and the matching rule."""
    n = len(shape)
    kinds = ["view", "view", "flatten", "unflatten", "permute", "transpose", "unsqueeze", "repeat"]
    if 1 in shape:
        kinds += ["squeeze", "squeeze", "expand"]
    kinds += ["view_as_real"] + (["view_as_complex"] * 2 if shape[-1] == 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "view":
        to = draw(view_shapes(math.prod(shape)))
        return "view", (to,), R.view_groups(shape, to)
    if kind == "flatten":
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start, n - 1))
        to = (*shape[:start], math.prod(shape[start : end + 1]), *shape[end + 1 :])
        return "flatten", (start, end), R.view_groups(shape, to)
    if kind == "unflatten":
        dim = draw(st.integers(0, n - 1))
        sizes = draw(view_shapes(shape[dim]))
        return "unflatten", (dim, sizes), R.unflatten(shape, dim, sizes)
    if kind == "permute":
        dims = tuple(draw(st.permutations(range(n))))
        return "permute", (dims,), R.permute(n, dims)
    if kind == "transpose":
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        return "transpose", (a, b), R.transpose(n, a, b)
    if kind == "unsqueeze":
        d = draw(st.integers(0, n))
        return "unsqueeze", (d,), R.unsqueeze(n, d)
    if kind == "repeat":
        reps = tuple(draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=n, max_size=n + 1)))
        return "repeat", (reps,), R.repeat(n, reps)
    if kind == "view_as_real":
        return "view_as_real", (), R.view_as_real(shape)
    if kind == "view_as_complex":
        return "view_as_complex", (), R.view_as_complex(shape)
    if kind == "squeeze":
        if draw(st.booleans()):
            return "squeeze", (), R.squeeze(shape)
        d = draw(st.sampled_from([i for i, s in enumerate(shape) if s == 1]))
        return "squeeze", (d,), R.squeeze(shape, d)
    lead = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=1)))
    sizes = (*lead, *(draw(st.sampled_from([1, 2, 3])) if s == 1 else s for s in shape))
    return "expand", (sizes,), R.expand(shape, sizes)


@st.composite
def placements(
    draw: st.DrawFn, shape: tuple[int, ...], mesh: tuple[int, ...]
) -> tuple[Placement, ...]:
    """Replicate, Partial, Shard and _StridedShard, biased to stack mesh dims on one dim."""
    favourite = draw(st.integers(0, len(shape) - 1))
    out: list[Placement] = []
    for _ in mesh:
        kind = draw(st.sampled_from(["shard", "shard", "strided", "replicate", "partial"]))
        dim = draw(st.one_of(st.just(favourite), st.integers(0, len(shape) - 1)))
        if kind == "replicate":
            out.append(Replicate())
        elif kind == "partial":
            out.append(Partial("sum"))
        elif kind == "shard":
            out.append(Shard(dim))
        else:
            out.append(_StridedShard(dim, split_factor=draw(st.integers(2, 6))))
    return tuple(out)


def is_uneven(shape: tuple[int, ...], ps: Sequence[Placement], mesh: tuple[int, ...]) -> bool:
    """Some placement chunks a (rank 0) local length that it does not divide."""
    lengths = list(shape)
    for p, m in zip(ps, mesh, strict=True):
        if isinstance(p, (Shard, _StridedShard)):
            sf = p.split_factor if isinstance(p, _StridedShard) else 1
            if lengths[p.dim] % (sf * m):
                return True
            lengths[p.dim] //= m
    return False


@st.composite
def cases(draw: st.DrawFn) -> Case:
    shape = tuple(draw(st.lists(SIZES, min_size=1, max_size=4)))
    assume(math.prod(shape) <= MAX_NUMEL)
    mesh = draw(MESHES)
    ps = draw(placements(shape, mesh))
    assume(is_uneven(shape, ps, mesh))
    op, args, rule = draw(ops(shape))
    return Case(shape, op, args, rule, mesh, ps)


# --------------------------------------------------------------------------- helpers


def _sharded(p: Placement) -> bool:
    return isinstance(p, (Shard, _StridedShard))


def _only_views_have(rule: R.Rule, shape: tuple[int, ...]) -> bool:
    """A Flatten or a size-keeping Split: no op but view/reshape/flatten/unflatten (and
    view_as_complex) has this rule. Rules of only InputDims and 1s are shared with squeeze,
    unsqueeze and permute, whose local ops check each dim's size: answers that rely on a rank
    holding an empty tensor (any empty shape is fine for ``local.view``) are not theirs."""
    for spec in rule:
        if isinstance(spec, R.Flatten):
            return True
        if isinstance(spec, R.Split):
            src = spec.input_dim
            dims = (src,) if isinstance(src, R.InputDim) else getattr(src, "input_dims", ())
            if math.prod(spec.group_shape) == math.prod(shape[d.input_dim] for d in dims):
                return True
    return False


def _complex_like(case: Case) -> bool:
    n = len(case.shape)
    return n >= 2 and case.shape[-1] == 2 and case.rule == R.view_as_complex(case.shape)


def _zero_comm(case: Case) -> tuple[Placement, ...] | bool | None:
    """The brute force's answer, None if there is none, False if the search was capped."""
    try:
        return oracle.find_zero_comm_answer(
            case.shape, case.placements, case.mesh, case.op, case.args, max_nodes=SEARCH_MAX_NODES
        )
    except oracle.SearchLimitExceeded:
        return False


def _record(label: str) -> None:
    COVERAGE[label] += 1
    event(label)


@pytest.fixture(scope="module", autouse=True)
def coverage_summary(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    found, misses = (
        COVERAGE["zero-comm: found"],
        sum(v for k, v in COVERAGE.items() if k.startswith("zero-comm: missed")),
    )
    detail = ", ".join(f"{k.removeprefix('zero-comm: ')}={v}" for k, v in sorted(COVERAGE.items()))
    line = f"uneven fallback coverage: {found}/{found + misses} zero-comm answers found ({detail})"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # visible without -s
            reporter.write_line(line)


# --------------------------------------------------------------------------- the properties


@ENGINE
@given(cases())
def test_uneven_fallback_against_oracle(case: Case) -> None:
    target, out, blocked = propagate_uneven(case.placements, case.shape, case.rule, case.mesh)

    # (1) valid for every rank, with the input redistributed to the target
    verdict = oracle.check_op(case.shape, case.op, case.args, target, out, case.mesh)
    assert verdict.ok, f"{case}: target={target} out={out}: {verdict.reason}"

    # (2) only sharded mesh dims move, only to Replicate, and blocked names exactly them
    moved = [i for i, (p, t) in enumerate(zip(case.placements, target, strict=True)) if p != t]
    for i in moved:
        assert _sharded(case.placements[i]) and target[i] == Replicate(), f"{case}: {target}"
    assert [b.mesh_dim for b in blocked] == moved, f"{case}: {blocked} vs moved {moved}"
    for b in blocked:
        assert b.tensor_dim == case.placements[b.mesh_dim].dim and b.reason, f"{case}: {b}"

    # (3) canonical
    assert oracle.is_canonical(out, len(case.rule)), f"{case}: {out}"

    # (4) no zero-comm answer exists -> something moves; count the converse
    answer = _zero_comm(case)
    if answer is False:
        _record("zero-comm: search capped")
        return
    if answer is None:
        assert moved, f"{case}: no zero-comm answer exists, yet nothing moved: {out}"
        _record("zero-comm: none exists")
    elif not moved:
        _record("zero-comm: found")
    elif not _only_views_have(case.rule, case.shape):
        _record("zero-comm: missed (op-dependent)")
    elif _complex_like(case):
        _record("zero-comm: missed (view_as_complex rule)")
    else:
        _record("zero-comm: missed")
        event(f"missed: {case} ours={out} brute={answer}")


# --------------------------------------------------------------------------- the step check


@ENGINE
@given(cases(), st.data())
def test_step_check_equals_the_rank_by_rank_sets(case: Case, data: st.DataObject) -> None:
    """``_Check`` decides a candidate from the step alone (the prefix is valid) and on the
    distinct rank states only. On every mesh dim, as ``propagate_uneven`` reaches it, its
    verdict equals comparing every rank's exact sets (``_mismatch_at`` on each rank of the
    checked mesh dims) for the structural candidates, a random one and Replicate."""
    view = uneven._analyse(case.rule, case.shape, None)
    ins: tuple[uneven.Sharding, ...] = ()
    outs: tuple[uneven.Sharding, ...] = ()
    for p in case.placements:
        s = uneven._sharding(p, len(case.shape))
        if s is None:
            ins, outs = (*ins, None), (*outs, None)
            continue
        pb = uneven._Problem(view, view.group_of[s[0]], (*ins, s), outs, case.mesh)
        check = uneven._Check(pb)
        own = sorted({q.dim for r in pb.group.readings for q in r.pieces})
        dims = sorted(view.out_sizes) if view.local_view else own
        cands: list[uneven.Sharding] = [*dict.fromkeys(uneven._structural(pb, s[0]))][:4]
        if dims:
            cands.append((data.draw(st.sampled_from(dims)), data.draw(st.integers(1, 9))))
        for cand in [*cands, None]:
            o, sf = cand if cand is not None else (None, 1)
            fast = bool(check.survivors(o, [sf])) and (cand is None or check.placed(cand))
            ranks = itertools.product(*(range(case.mesh[j]) for j in pb.checked_mesh_dims))
            slow = all(
                uneven._mismatch_at(pb, cand, tuple(zip(pb.checked_mesh_dims, r, strict=True)))
                is None
                for r in ranks
            )
            assert fast == slow, f"{case}: mesh dim {pb.i}, candidate {cand}"
        kept, choice, _ = uneven._decide(pb, s[0])
        ins, outs = (*ins, s if kept else None), (*outs, choice if kept else None)


# --------------------------------------------------------------------------- the exact sets


def _elements(s: uneven.IntSet) -> list[int]:
    return [a + t * st + k for a, w, st, c in s for t in range(c) for k in range(w)]


@st.composite
def dim_sets(draw: st.DrawFn) -> tuple[uneven.IntSet, int, np.ndarray]:
    """A dim of size 1-40 under 0-3 random placements: the fallback's set and the oracle's."""
    size = draw(st.integers(1, 40))
    mesh = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    ps = [
        Shard(0) if sf == 1 else _StridedShard(0, split_factor=sf)
        for sf in draw(st.lists(st.integers(1, 7), min_size=len(mesh), max_size=len(mesh)))
    ]
    coord = tuple(draw(st.integers(0, m - 1)) for m in mesh)
    steps = tuple(
        (p.split_factor if isinstance(p, _StridedShard) else 1, m, c)
        for p, m, c in zip(ps, mesh, coord, strict=True)
    )
    (want,) = oracle.local_indices((size,), ps, mesh, coord)
    return uneven._dim_set(size, steps), size, want


@ENGINE
@given(st.lists(dim_sets(), min_size=1, max_size=3))
def test_exact_sets_match_the_oracle(digits: list[tuple[uneven.IntSet, int, np.ndarray]]) -> None:
    """Per-dim sets equal the oracle's indices; their row-major product and its canonical form
    equal numpy's, whatever families the product happened to be built from."""
    for got, _, want in digits:
        assert _elements(got) == want.tolist()
    sizes = tuple(n for _, n, _ in digits)
    flat = uneven._flat([(s, n) for s, n, _ in digits])
    grid = np.arange(math.prod(sizes)).reshape(sizes)
    want_flat = grid[np.ix_(*[w for _, _, w in digits])].reshape(-1).tolist()
    assert _elements(flat) == want_flat
    singles = tuple((x, 1, 0, 1) for x in want_flat)
    assert uneven._canonical(flat) == uneven._canonical(singles)

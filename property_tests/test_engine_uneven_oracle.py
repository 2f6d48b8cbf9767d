"""Uneven sizes against the exact rank simulator.

Cases: shapes of 1-4 dims with sizes 1-13 (1s and primes over-represented), meshes of 1-3 dims
with at most 8 ranks, placements with at least one uneven ``Shard``/``_StridedShard`` (plus
Replicate, Partial and several mesh dims on one tensor dim), and the rule of a random view op:
view (random factorisations of the numel), flatten, unflatten, permute, transpose, squeeze,
unsqueeze, expand, repeat, view_as_real or view_as_complex. For every case:

1. the output is valid (``oracle.check_op`` run on the returned input *target*);
2. the input target only replaces mesh dims by Replicate, and ``blocked`` names exactly those;
3. the output is canonical (no ``_StridedShard`` with split factor 1);
4. the input target equals the input exactly when the brute force finds a zero-communication
   answer for the op (the rules come from ``cute_shard.rules``' builders, which say which op
   built them, so the engine knows e.g. a view from a squeeze with the same rule).

Coverage is also reported with ``hypothesis.event`` (``--hypothesis-show-statistics``) and as a
one-line summary at the end of the module.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

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

import cute_shard
import cute_shard.rules as R
from cute_shard import oracle
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
def test_uneven_sizes_against_oracle(case: Case) -> None:
    P = cute_shard.propagate_shape_and_sharding
    target, out = P(case.placements, case.shape, case.rule, case.mesh)

    # (1) valid for every rank, with the input redistributed to the target
    verdict = oracle.check_op(case.shape, case.op, case.args, target, out, case.mesh)
    assert verdict.ok, f"{case}: target={target} out={out}: {verdict.reason}"

    # (2) only sharded mesh dims move, only to Replicate; strict names exactly them
    moved = [i for i, (p, t) in enumerate(zip(case.placements, target, strict=True)) if p != t]
    for i in moved:
        assert _sharded(case.placements[i]) and target[i] == Replicate(), f"{case}: {target}"
    try:
        assert P(case.placements, case.shape, case.rule, case.mesh, True) == (target, out)
        blocked: tuple[Any, ...] = ()
    except cute_shard.RedistributionRequired as e:
        blocked = e.blocked
    assert [b.mesh_dim for b in blocked] == moved, f"{case}: {blocked} vs moved {moved}"
    for b in blocked:
        assert b.tensor_dim == case.placements[b.mesh_dim].dim and b.reason, f"{case}: {b}"

    # (3) canonical
    assert oracle.is_canonical(out, len(case.rule)), f"{case}: {out}"

    # (4) a zero-comm answer exists exactly when nothing moves
    answer = _zero_comm(case)
    if answer is False:
        _record("zero-comm: search capped")
        return
    if answer is None:
        assert moved, f"{case}: no zero-comm answer exists, yet nothing moved: {out}"
        _record("zero-comm: none exists")
    else:
        assert not moved, f"{case}: ours moves {moved} ({out}), the brute force keeps {answer}"
        _record("zero-comm: found")

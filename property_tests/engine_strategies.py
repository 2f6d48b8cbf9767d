"""Case generators and oracle helpers shared by the engine's property tests and quality report.

A :class:`Case` is one propagation question: a global input shape, a view op given twice -- as the
oracle's ``(op, args)`` (the global call, see :mod:`cute_shard.oracle`) and as the matching
``cute_shard.rules`` rule the engine consumes -- a mesh and input placements.  Worked example::

    Case(shape=(8, 16, 32), op="view", args=((128, 32),), rule=view_groups((8, 16, 32), (128, 32)),
         mesh=(2, 4), placements=(Shard(0), Shard(1)), label="view:merge")

Op <-> rule pairings (checked against the oracle on all-Replicate inputs in
``test_engine_oracle.py::test_case_pairing_is_consistent``):

=====================  =========================================  =============================
oracle op, args        rule                                        note
=====================  =========================================  =============================
view (shape,)          view_groups(shape, out)                    random factorisations, merges,
                                                                  splits, -1 inference
flatten (start, end)   view_groups(shape, flattened)              aten.flatten reaches DTensor as
                                                                  a view
unflatten (dim, sizes) unflatten(shape, dim, sizes)               a view_groups
view (padded,)         atleast_1d/2d/3d(ndim)                     a view to the padded shape
permute (dims,)        permute(ndim, dims)
transpose (d0, d1)     transpose / t
movedim (src, dst)     movedim(ndim, src, dst)
unsqueeze (d,)         unsqueeze(ndim, d)
squeeze () / (d,)      squeeze(shape, d)
expand (sizes,)        expand / broadcast_to(shape, sizes)
repeat (reps,)         repeat(ndim, reps) / tile(ndim, dims)       tile pads reps with leading 1s
view_as_real ()        view_as_real(shape)                        complex input of ``shape``
view_as_complex ()     view_as_complex(shape)                     ``shape[-1] == 2``
=====================  =========================================  =============================

Sizes are 1-24 with 1s and primes over-represented; ``numel <= MAX_NUMEL`` keeps the oracle in the
millisecond range.  Placements: Replicate, Shard, _StridedShard (split factors mostly making the
layout even -- a divisor ``sf`` of the dim size with ``M | size / sf`` -- but also uneven ones and
ones larger than the dim), Partial, and a bias that puts several mesh dims on one tensor dim.

Ground truth is rule-level: the engine sees only (shape, rule), and ``squeeze`` / ``view`` /
``view_as_complex`` can reach it with the same pair yet different answers, so validity and
"a zero-comm answer exists" are judged for the case's op and every such sibling op (see the
comment above :func:`sibling_ops`).

The engine is reached through :func:`engine` (looked up at call time), so this module imports
while ``cute_shard.propagate_shape_and_sharding`` is still being written.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import settings
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
from cute_shard import oracle as O
from cute_shard.oracle import _make_op

__all__ = [
    "MAX_NUMEL",
    "MESHES",
    "SEARCH_MAX_NODES",
    "Case",
    "Outcome",
    "cases",
    "engine",
    "even_view_cases",
    "oracle_ok",
    "run_engine",
    "run_torch",
    "seeded_cases",
    "sibling_ops",
    "view_cases",
    "whole_dim_cases",
    "zero_comm_exists",
    "zero_comm_exists_for_op",
]

# The engine properties run four times the profile's examples: 2000 each in CI (thousands per
# property, as the contract asks), 80000 in the slow profile.
ENGINE = settings(max_examples=4 * settings.default.max_examples)

MAX_NUMEL = 2048
#: Node cap for the brute-force search; a capped search proves nothing and the example is skipped.
SEARCH_MAX_NODES = 4000

SMALL_SIZES = (1, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 16, 17, 19, 23, 24)
MESHES: tuple[tuple[int, ...], ...] = (  # hypothesis favours the first entry: make it a 2-d mesh
    (2, 2),
    (2, 4),
    (2, 3),
    (4,),
    (3, 2),
    (4, 2),
    (2,),
    (3,),
    (5,),
    (7,),
    (8,),
    (1, 4),
    (3, 1),
    (2, 2, 2),
    (1, 2, 3),
    (2, 1, 2),
    (1,),
)
PARTIALS = (Partial("sum"), Partial("max"), Partial("avg"))


# --------------------------------------------------------------------------- the case


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    op: str
    args: tuple[Any, ...]
    rule: R.Rule
    mesh: tuple[int, ...]
    placements: tuple[Placement, ...]
    label: str

    def __str__(self) -> str:
        return (
            f"{self.label}: shape={self.shape} {self.op}{self.args} mesh={self.mesh} "
            f"placements={list(self.placements)} rule={R.format_rule(self.rule)}"
        )


@dataclass(frozen=True)
class Outcome:
    """What a propagator did: a result, a RuntimeError (refusal) or another exception (crash)."""

    in_tgt: tuple[Placement, ...] | None = None
    out: tuple[Placement, ...] | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def refused(self) -> bool:
        return isinstance(self.error, RuntimeError)

    @property
    def crashed(self) -> bool:
        return self.error is not None and not isinstance(self.error, RuntimeError)


# --------------------------------------------------------------------------- engines


def engine() -> Callable[..., tuple[tuple[Placement, ...], tuple[Placement, ...]]]:
    return cute_shard.propagate_shape_and_sharding  # type: ignore[attr-defined]


def run_engine(case: Case, strict: bool) -> Outcome:
    try:
        in_tgt, out = engine()(
            case.placements, case.shape, case.rule, case.mesh, strict_view=strict
        )
    except Exception as exc:
        return Outcome(error=exc)
    return Outcome(in_tgt, out)


def run_torch(case: Case, strict: bool) -> Outcome:
    from torch.distributed.tensor._ops._view_ops import propagate_shape_and_sharding

    from cute_shard.rules.torch_compat import to_torch

    try:
        in_tgt, out = propagate_shape_and_sharding(
            list(case.placements), case.shape, to_torch(case.rule), case.mesh, strict
        )
    except Exception as exc:
        return Outcome(error=exc)
    return Outcome(tuple(in_tgt), tuple(out))


# --------------------------------------------------------------------------- oracle helpers
#
# The engine sees only (shape, rule), and different ops can reach it with the same pair:
#
# * ``squeeze(dims)`` and ``view`` to the squeezed shape -- both give the rule that drops the
#   size-1 dims -- but a rank whose shard of a size-1 dim is empty keeps that dim under a local
#   ``squeeze`` (its size is 0, not 1) while a local ``view`` drops it;
# * ``view_as_complex`` of ``(..., n, 2)`` and ``view`` to ``(..., 2n)`` -- both
#   ``(..., flat(d_{k-2}, d_{k-1}))`` -- but an uneven Shard of the ``n`` dim is exact for the
#   first (the output dim has n complex elements) and not for the second (2n reals).
#
# So the ground truth for "a zero-comm answer exists" is rule-level: some output placement list is
# valid, with the input unchanged, for the case's op *and* every sibling op with the same rule.
# The engine's answers are checked against the siblings as well. A rule that says which op built
# it (``cute_shard.rules.ViewRule``, ``ComplexRule``) has no siblings: the engine knows the op.


def _out_shape(case_op: str, args: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    spec = _make_op(case_op, args, shape, True)
    return tuple(spec.global_fn(torch.empty(shape, dtype=spec.dtype, device="meta")).shape)


@functools.lru_cache(maxsize=4096)
def _siblings(
    shape: tuple[int, ...], op: str, args: tuple[Any, ...], rule: R.Rule, tag: type
) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if op in ("view_as_real", "expand", "repeat", "permute", "transpose", "movedim"):
        return ()
    if tag in (R.ViewRule, R.ComplexRule):  # (the type is in the cache key: equal rules)
        return ()
    out = _out_shape(op, args, shape)
    sibs: list[tuple[str, tuple[Any, ...]]] = []
    if op == "view_as_complex":  # compare as the real view (..., n, 2) -> (..., 2n)
        out = (*shape[:-2], 2 * shape[-2]) if len(shape) >= 2 else ()
    if (
        op not in ("view", "reshape", "flatten", "unflatten")
        and math.prod(out) == math.prod(shape)
        and R.view_groups(shape, out) == rule
    ):
        sibs.append(("view", (out,)))
    n = len(shape)
    if op != "squeeze" and all(isinstance(x, R.InputDim) for x in rule):
        used = [x.input_dim for x in rule]
        dropped = tuple(d for d in range(n) if d not in used)
        if used == sorted(used) and dropped and all(shape[d] == 1 for d in dropped):
            sibs.append(("squeeze", (dropped,)))
    if (
        op in ("view", "reshape", "flatten", "unflatten")
        and n >= 2
        and shape[-1] == 2
        and R.view_as_complex(shape) == rule
    ):
        sibs.append(("view_as_complex", ()))
    return tuple(sibs)


def sibling_ops(case: Case) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """Other (op, args) that reach the engine with the same shape and rule as ``case``."""
    return _siblings(case.shape, case.op, case.args, case.rule, type(case.rule))


def oracle_ok(
    case: Case,
    in_tgt: Sequence[Placement],
    out: Sequence[Placement],
    strict: bool,
    *,
    siblings: bool = True,
) -> O.Verdict:
    """Validity of ``out`` for ``case`` (and, with ``siblings``, for every sibling op with the
    same rule) with the input redistributed to ``in_tgt``: the first failing verdict, or the
    case op's."""
    v = O.check_op(case.shape, case.op, case.args, in_tgt, out, case.mesh, strict_view=strict)
    if not v.ok or not siblings:
        return v
    for op, args in sibling_ops(case):
        w = O.check_op(case.shape, op, args, in_tgt, out, case.mesh, strict_view=strict)
        if not w.ok:
            return O.Verdict(
                False, f"valid for {case.op} but not for {op}{args} (same rule): {w.reason}"
            )
    return v


@functools.lru_cache(maxsize=4096)
def _zero_comm(case: Case, rule_level: bool) -> bool | None:
    sibs = sibling_ops(case) if rule_level else ()
    res = O.search_zero_comm(
        case.shape,
        case.placements,
        case.mesh,
        case.op,
        case.args,
        max_nodes=SEARCH_MAX_NODES,
        stop_at_first=not sibs,
    )
    for ans in res.answers:
        if all(
            O.check_op(case.shape, op, args, case.placements, ans, case.mesh).ok
            for op, args in sibs
        ):
            return True
    return False if res.exhausted else None  # not exhausted: the node cap stopped it


def zero_comm_exists(case: Case) -> bool | None:
    """True/False: some output placement list is valid with the input left unchanged, for the
    case's op and every sibling op (see above); None: the capped search could not tell.
    (``view`` and ``reshape`` have the same verdicts on contiguous local inputs, so one search
    serves strict and non-strict.)"""
    return _zero_comm(case, True)


def zero_comm_exists_for_op(case: Case) -> bool | None:
    """As :func:`zero_comm_exists`, for the case's op alone (ignoring sibling ops)."""
    return _zero_comm(case, False)


# --------------------------------------------------------------------------- sizes and shapes


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


SIZE = st.one_of(st.sampled_from(SMALL_SIZES), st.integers(1, 24))


@st.composite
def shapes(
    draw: st.DrawFn, min_dims: int = 1, max_dims: int = 5, max_numel: int = MAX_NUMEL
) -> tuple[int, ...]:
    n = draw(st.integers(min_dims, max_dims))
    out: list[int] = []
    for _ in range(n):
        budget = max_numel // max(1, math.prod(out))
        out.append(max(1, min(draw(SIZE), budget)))
    return tuple(out)


# --------------------------------------------------------------------------- placements


def _split_factor_choices(size: int, mesh_size: int) -> tuple[list[int], list[int]]:
    """(even, other): split factors that make ``_StridedShard`` even on a dim of ``size``, and the
    uneven / oversized rest worth trying."""
    even = [sf for sf in _divisors(size) if sf > 1 and (size // sf) % mesh_size == 0]
    other = sorted({*range(2, 7), *(d for d in _divisors(size) if d > 1), size + 1} - set(even))
    return even, other


@st.composite
def placements_for(
    draw: st.DrawFn,
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    *,
    allow_partial: bool = True,
    dims: Sequence[int] | None = None,
) -> tuple[Placement, ...]:
    """One placement per mesh dim; ``dims`` restricts which tensor dims may be sharded."""
    shardable = list(range(len(shape))) if dims is None else list(dims)
    focus = draw(st.sampled_from(shardable)) if shardable else None
    out: list[Placement] = []
    kinds = ["R", "S", "S", "S", "SS", "SS"] + (["P"] if allow_partial else [])
    for m in mesh:
        kind = draw(st.sampled_from(kinds)) if shardable else draw(st.sampled_from(["R", "P"]))
        if kind == "R" or (kind == "P" and not allow_partial):
            out.append(Replicate())
            continue
        if kind == "P":
            out.append(draw(st.sampled_from(PARTIALS)))
            continue
        d = draw(st.one_of(st.just(focus), st.sampled_from(shardable)))
        if kind == "S":
            out.append(Shard(d))
            continue
        even, other = _split_factor_choices(shape[d], m)
        pool = st.sampled_from(even) if even and draw(st.integers(0, 3)) else st.sampled_from(other)
        if draw(st.integers(0, 15)) == 0:
            pool = st.just(1)  # legal input, the same as Shard(d); never in an output
        out.append(_StridedShard(d, split_factor=draw(pool)))
    return tuple(out)


# --------------------------------------------------------------------------- view targets


@st.composite
def factorisation(draw: st.DrawFn, numel: int) -> tuple[int, ...]:
    """A random shape with ``numel`` elements: prime factors dealt into bins, plus 1s."""
    k = draw(st.integers(1, 5))
    bins = [1] * k
    for p in _prime_factors(numel):
        bins[draw(st.integers(0, k - 1))] *= p
    for _ in range(draw(st.integers(0, 1))):
        bins.insert(draw(st.integers(0, len(bins))), 1)
    return tuple(bins)


@st.composite
def merged(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Runs of adjacent dims multiplied together (flatten-like)."""
    out: list[int] = []
    for s in shape:
        if out and draw(st.booleans()):
            out[-1] *= s
        else:
            out.append(s)
    return tuple(out)


@st.composite
def split(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Some dims split into factors (unflatten-like), maybe with a 1 inserted."""
    out: list[int] = []
    for s in shape:
        fs = _prime_factors(s)
        if len(fs) > 1 and draw(st.booleans()):
            cut = draw(st.integers(1, len(fs) - 1))
            order = draw(st.permutations(fs))
            out += [math.prod(order[:cut]), math.prod(order[cut:])]
        else:
            out.append(s)
    if draw(st.integers(0, 4)) == 0:
        out.insert(draw(st.integers(0, len(out))), 1)
    return tuple(out)


@st.composite
def view_target(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    numel = math.prod(shape)
    kind = draw(st.sampled_from(["factor", "merge", "split", "merge+split", "identity"]))
    if kind == "factor":
        tgt = draw(factorisation(numel))
    elif kind == "merge":
        tgt = draw(merged(shape))
    elif kind == "split":
        tgt = draw(split(shape))
    elif kind == "merge+split":
        tgt = draw(split(draw(merged(shape))))
    else:
        tgt = shape
    if draw(st.integers(0, 5)) == 0 and numel > 0:
        i = draw(st.integers(0, len(tgt) - 1))
        tgt = (*tgt[:i], -1, *tgt[i + 1 :])
    return tgt, kind


# --------------------------------------------------------------------------- ops


def _meta(shape: Sequence[int]) -> torch.Tensor:
    return torch.empty(tuple(shape), device="meta")


OP_KINDS = (
    ["view"] * 8
    + ["flatten"] * 2
    + ["unflatten"] * 2
    + ["permute", "transpose", "movedim", "unsqueeze", "squeeze", "squeeze_all"]
    + ["expand", "broadcast_to", "repeat", "tile", "atleast", "t"]
    + ["view_as_real", "view_as_complex"]
)
#: Ops whose rule only moves whole dims (InputDim / Singleton): placements must map through.
WHOLE_DIM_KINDS = (
    "identity",
    "permute",
    "transpose",
    "movedim",
    "unsqueeze",
    "squeeze",
    "squeeze_all",
    "atleast",
    "t",
)


@st.composite
def op_for(
    draw: st.DrawFn, shape: tuple[int, ...], kinds: Sequence[str] = OP_KINDS
) -> tuple[tuple[int, ...], str, tuple, R.Rule, str]:
    """(possibly adjusted input shape, oracle op, oracle args, rule, label)."""
    n = len(shape)
    kind = draw(st.sampled_from(list(kinds)))
    if kind == "identity":
        return shape, "view", (shape,), R.view_groups(shape, shape), "view:identity"
    if kind == "view":
        tgt, how = draw(view_target(shape))
        return shape, "view", (tgt,), R.view_groups(shape, tgt), f"view:{how}"
    if kind == "flatten":
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start, n - 1))
        flat = (*shape[:start], math.prod(shape[start : end + 1]), *shape[end + 1 :])
        # negative dims sometimes, normalised by torch.flatten
        a_start = start - n if draw(st.booleans()) else start
        a_end = end - n if draw(st.booleans()) else end
        return shape, "flatten", (a_start, a_end), R.view_groups(shape, flat), "flatten"
    if kind == "unflatten":
        d = draw(st.integers(0, n - 1))
        fs = _prime_factors(shape[d])
        sizes: list[int] = [1] * draw(st.integers(1, 3))
        for p in fs:
            sizes[draw(st.integers(0, len(sizes) - 1))] *= p
        if draw(st.booleans()):
            sizes[draw(st.integers(0, len(sizes) - 1))] = -1
        args = (d, tuple(sizes))
        return shape, "unflatten", args, R.unflatten(shape, d, tuple(sizes)), "unflatten"
    if kind == "permute":
        dims = tuple(draw(st.permutations(range(n))))
        return shape, "permute", (dims,), R.permute(n, dims), "permute"
    if kind == "transpose":
        d0, d1 = draw(st.integers(-n, n - 1)), draw(st.integers(-n, n - 1))
        return shape, "transpose", (d0, d1), R.transpose(n, d0, d1), "transpose"
    if kind == "t":
        shape = shape[:2]
        if len(shape) == 2:
            return shape, "transpose", (0, 1), R.t(2), "t"
        return shape, "permute", ((0,),), R.t(1), "t"
    if kind == "movedim":
        k = draw(st.integers(1, n))
        src = tuple(draw(st.permutations(range(n)))[:k])
        dst = tuple(draw(st.permutations(range(n)))[:k])
        if k == 1 and draw(st.booleans()):
            return shape, "movedim", (src[0], dst[0]), R.movedim(n, src[0], dst[0]), "movedim"
        return shape, "movedim", (src, dst), R.movedim(n, src, dst), "movedim"
    if kind == "unsqueeze":
        d = draw(st.integers(-n - 1, n))
        return shape, "unsqueeze", (d,), R.unsqueeze(n, d), "unsqueeze"
    if kind in ("squeeze", "squeeze_all"):
        # make sure some size-1 dims exist
        if 1 not in shape or draw(st.booleans()):
            i = draw(st.integers(0, n))
            shape = (*shape[:i], 1, *shape[i:])[:5]
            n = len(shape)
        if kind == "squeeze_all":
            return shape, "squeeze", (), R.squeeze(shape), "squeeze:all"
        d = draw(st.integers(-n, n - 1))
        if draw(st.booleans()):
            return shape, "squeeze", (d,), R.squeeze(shape, d), "squeeze:dim"
        ds = tuple(sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n)))))
        return shape, "squeeze", (ds,), R.squeeze(shape, ds), "squeeze:dims"
    if kind in ("expand", "broadcast_to"):
        # make sure some size-1 dims exist to broadcast
        if 1 not in shape:
            i = draw(st.integers(0, n - 1))
            shape = (*shape[:i], 1, *shape[i + 1 :])
        lead = draw(st.lists(st.sampled_from([1, 2, 3, 4]), max_size=max(0, min(2, 5 - n))))
        body = []
        for s in shape:
            if s == 1:
                body.append(draw(st.sampled_from([1, 2, 3, 4, 5, 8, -1])))
            else:
                body.append(draw(st.sampled_from([s, -1])))
        sizes = (*lead, *body)
        out_numel = math.prod(abs(x) for x in sizes) * 1
        if out_numel > 4 * MAX_NUMEL:
            sizes = (*[1] * len(lead), *[-1] * len(body))
        builder = R.expand if kind == "expand" else R.broadcast_to
        return shape, "expand", (sizes,), builder(shape, sizes), kind
    if kind in ("repeat", "tile"):
        extra = draw(st.integers(0, max(0, min(2, 5 - n))))
        if kind == "tile":
            short = draw(st.integers(0, n))
            reps = tuple(
                draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=short, max_size=short))
            )
            lead = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), min_size=extra, max_size=extra)))
            dims = (*lead, *reps) if extra else reps
            padded = (1,) * max(0, n - len(dims)) + dims
            if math.prod(shape) * math.prod(padded) > 4 * MAX_NUMEL:
                dims, padded = (), (1,) * n
            return shape, "repeat", (padded,), R.tile(n, dims), "tile"
        reps = tuple(
            draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=n + extra, max_size=n + extra))
        )
        if math.prod(shape) * math.prod(reps) > 4 * MAX_NUMEL:
            reps = (1,) * len(reps)
        return shape, "repeat", (reps,), R.repeat(n, reps), "repeat"
    if kind == "atleast":
        shape = shape[: draw(st.integers(1, 3))]
        k = draw(st.sampled_from([1, 2, 3]))
        fn = {1: torch.atleast_1d, 2: torch.atleast_2d, 3: torch.atleast_3d}[k]
        builder = {1: R.atleast_1d, 2: R.atleast_2d, 3: R.atleast_3d}[k]
        out_shape = tuple(fn(_meta(shape)).shape)
        return shape, "view", (out_shape,), builder(len(shape)), f"atleast_{k}d"
    if kind == "view_as_real":
        return shape, "view_as_real", (), R.view_as_real(shape), "view_as_real"
    # view_as_complex: the last dim must be 2
    shape = (*shape[:4], 2)
    if math.prod(shape) > MAX_NUMEL:
        shape = (*shape[:-2], 2)
    return shape, "view_as_complex", (), R.view_as_complex(shape), "view_as_complex"


@st.composite
def cases(
    draw: st.DrawFn,
    *,
    allow_partial: bool = True,
    ops: Callable[[tuple[int, ...]], st.SearchStrategy[Any]] | None = None,
    max_numel: int = MAX_NUMEL,
) -> Case:
    shape0 = draw(shapes(max_numel=max_numel))
    shape, op, args, rule, label = draw((ops or op_for)(shape0))
    mesh = draw(st.sampled_from(MESHES))
    placements = draw(placements_for(shape, mesh, allow_partial=allow_partial))
    return Case(shape, op, tuple(args), rule, mesh, placements, label)


@st.composite
def _views(
    draw: st.DrawFn, shape: tuple[int, ...]
) -> tuple[tuple[int, ...], str, tuple, R.Rule, str]:
    tgt, how = draw(view_target(shape))
    return shape, "view", (tgt,), R.view_groups(shape, tgt), f"view:{how}"


def whole_dim_cases() -> st.SearchStrategy[Case]:
    """Ops whose rules only move, add or drop whole dims (permute, transpose, movedim,
    (un)squeeze, t, atleast_nd, identity views)."""
    return cases(ops=lambda shape: op_for(shape, WHOLE_DIM_KINDS))


def view_cases() -> st.SearchStrategy[Case]:
    """Only view/reshape ops and no Partial: the hard part (flatten, unflatten, factorisations of
    sharded dims), drawn more often than in :func:`cases`."""
    return cases(allow_partial=False, ops=_views)


EVEN_SIZES = (2, 3, 4, 6, 8, 12, 16, 24)


@st.composite
def even_placements(
    draw: st.DrawFn, shape: tuple[int, ...], mesh: tuple[int, ...]
) -> tuple[Placement, ...]:
    """Shards the sizes divide, as models use them: mesh dims apply left to right, so each
    one divides what the mesh dims before it left of its tensor dim."""
    local = list(shape)
    out: list[Placement] = []
    for m in mesh:
        fits = [d for d, n in enumerate(local) if n % m == 0]
        if not fits or draw(st.integers(0, 5)) == 0:
            out.append(Replicate())
            continue
        d = draw(st.sampled_from(fits))
        factors = [f for f in _divisors(local[d] // m) if f > 1]
        if factors and draw(st.integers(0, 2)) == 0:
            out.append(_StridedShard(d, split_factor=draw(st.sampled_from(factors))))
        else:
            out.append(Shard(d))
        local[d] //= m
    return tuple(out)


@st.composite
def even_view_cases(draw: st.DrawFn) -> Case:
    """Views of evenly sharded tensors: most are zero-communication, and those that are not
    need some mesh dims to move (the hot path's search for what moves)."""
    n = draw(st.integers(1, 4))
    shape: list[int] = []
    for _ in range(n):
        size = draw(st.sampled_from(EVEN_SIZES))
        if math.prod(shape) * size > MAX_NUMEL:
            break
        shape.append(size)
    shape_t = tuple(shape)
    tgt, how = draw(view_target(shape_t))
    mesh = draw(st.sampled_from(MESHES))
    placements = draw(even_placements(shape_t, mesh))
    rule = R.view_groups(shape_t, tgt)
    return Case(shape_t, "view", (tgt,), rule, mesh, placements, f"view:{how}")


# --------------------------------------------------------------------------- seeded batches


def seeded_cases(n: int, seed: int, *, allow_partial: bool = True) -> list[Case]:
    """``n`` cases from :func:`cases`, reproducible from ``seed`` (hypothesis' generate phase
    only, no example database, no shrinking): the quality report's case set."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    collected: list[Case] = []

    @settings(
        max_examples=n,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @hseed(seed)
    @given(cases(allow_partial=allow_partial))
    def collect(case: Case) -> None:
        collected.append(case)

    collect()
    return collected[:n]

"""Differential tests: ``cute_shard.rules`` builders against torch 2.13's DTensor view rules.

For every op family, hypothesis draws legal arguments (shapes of 0-5 dims with
sizes 1-24, biased to 1s and primes; -1 inference; negative dims) and checks

* ``to_torch(ours) == theirs`` and ``from_torch(theirs) == ours``, where
  ``theirs`` is the rule of torch's builder in
  ``torch.distributed.tensor._ops._view_ops`` (``view_groups`` or the
  ``dim_maps`` entry the op reaches, directly or by decomposition), and
* ``len(ours)`` equals the rank of the op's real output on a meta tensor.

Where torch's builder is wrong or crashes on legal input (documented in
``cute_shard.rules``), the test checks ours against the correct rule instead;
those branches are marked ``torch bug``.  Illegal arguments must give
``ValueError`` from ours.  A last group checks SymInt shapes: a symbolic rule
is either ``UndecidableRule`` or the concrete rule at the hints, and no guard
is installed.  ``view_groups`` is one walk over a size comparator; every view
runs through each (ints, monomial codes, the ShapeEnv) and they must agree.

The number of examples comes from the hypothesis profile (property_tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch._dynamo.source import ConstantSource
from torch.distributed.tensor._ops import _view_ops as tv
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import cute_shard.rules as R
from cute_shard.rules import AskedSizes, CodedSizes, IntSizes, UndecidableRule, map_sizes
from cute_shard.rules.torch_compat import from_torch, to_torch

from .engine_strategies import merged

# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

SIZE = st.one_of(st.sampled_from([1, 1, 1, 2, 3, 5, 7, 11, 13, 23, 24]), st.integers(1, 24))
SHAPE = st.lists(SIZE, min_size=0, max_size=5).map(tuple)
NDIM = st.integers(0, 5)


def _factor(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


@st.composite
def reshape_target(draw: st.DrawFn, numel: int, *, allow_infer: bool = True) -> tuple[int, ...]:
    """A shape with ``numel`` elements: prime factors dealt into 0-5 bins, plus 1s, maybe a -1."""
    k = draw(st.integers(0 if numel == 1 else 1, 5))
    bins = [1] * k
    for p in _factor(numel):
        bins[draw(st.integers(0, k - 1))] *= p
    for _ in range(draw(st.integers(0, 2))):
        bins.insert(draw(st.integers(0, len(bins))), 1)
    if allow_infer and bins and draw(st.booleans()):
        bins[draw(st.integers(0, len(bins) - 1))] = -1
    return tuple(bins)


@st.composite
def dim_of(draw: st.DrawFn, ndim: int, *, extra: int = 0) -> int:
    """A legal dim for rank ``ndim`` (+``extra`` positions), positive or negative."""
    n = max(ndim + extra, 1)
    return draw(st.integers(-n, n - 1))


def _meta(shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(tuple(shape), device="meta", dtype=dtype)


def same(ours: R.Rule, theirs: tuple[tv.DimSpec, ...]) -> None:
    assert to_torch(ours) == theirs, f"ours {R.format_rule(ours)} vs torch {theirs}"
    assert from_torch(theirs) == ours


# ---------------------------------------------------------------------------
# view / reshape / unflatten
# ---------------------------------------------------------------------------


@given(data=st.data(), src=SHAPE)
def test_view_groups_matches_torch(data: st.DataObject, src: tuple[int, ...]) -> None:
    numel = 1
    for s in src:
        numel *= s
    dst = data.draw(st.one_of(reshape_target(numel), merged(src)))
    ours = R.view_groups(src, dst)
    _same_with_every_comparator(src, dst, ours)
    assert R.canonicalize(ours) == ours
    assert len(ours) == _meta(src).view(dst).ndim
    if dst == ():
        # torch bug: normalize_sizes(()) raises IndexError on a legal view to 0-d
        with pytest.raises(IndexError):
            tv.view_groups(src, dst)
        assert ours == ()
        return
    same(ours, tv.view_groups(src, dst))


def _same_with_every_comparator(src: tuple[int, ...], dst: tuple[int, ...], ours: R.Rule) -> None:
    """On ints, every size comparator makes the same decisions: the same rule, recording the
    same ``out_shape`` and ``carry`` (which obey ``ViewRule``'s Post)."""
    if ours.shape is not None:  # type: ignore[attr-defined]
        assert ours.out_shape == _meta(src).view(dst).shape  # type: ignore[attr-defined]
        whole = {s.input_dim: o for o, s in enumerate(ours) if type(s) is R.InputDim}
        assert ours.carry == whole  # type: ignore[attr-defined]
    for sizes in (IntSizes(), CodedSizes("view_groups"), AskedSizes("view_groups")):
        rule = R.view_groups(src, dst, sizes=sizes)
        assert type(rule) is R.ViewRule and rule == ours
        assert (rule.shape, rule.out_shape, rule.carry) == (
            ours.shape,  # type: ignore[attr-defined]
            ours.out_shape,  # type: ignore[attr-defined]
            ours.carry,  # type: ignore[attr-defined]
        )


SMALL_SIZES = st.lists(st.sampled_from([0, 1, 2, 3, 4, 6]), max_size=2).map(tuple)


@given(data=st.data(), ends=st.tuples(SMALL_SIZES, SMALL_SIZES))
def test_view_groups_of_empty_tensors(
    data: st.DataObject, ends: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    """Views of numel 0: legal exactly when torch's are, the rank of torch's output, and the
    same rule from every size comparator."""
    src = (*ends[0], 0, *ends[1])
    dst = data.draw(st.lists(st.sampled_from([-1, 0, 1, 2, 3, 4, 6]), max_size=4).map(tuple))
    try:
        out_ndim = _meta(src).view(dst).ndim
    except RuntimeError:
        with pytest.raises(ValueError, match="view_groups"):
            R.view_groups(src, dst)
        return
    ours = R.view_groups(src, dst)
    assert len(ours) == out_ndim
    assert R.canonicalize(ours) == ours
    _same_with_every_comparator(src, dst, ours)


@given(data=st.data(), src=SHAPE)
def test_view_groups_rejects_bad_targets_like_torch(
    data: st.DataObject, src: tuple[int, ...]
) -> None:
    dst = data.draw(st.lists(st.one_of(SIZE, st.just(-1)), max_size=5).map(tuple))
    try:
        _meta(src).view(dst)
        legal = True
    except RuntimeError:
        legal = False
    assume(not legal)
    with pytest.raises(ValueError, match="view_groups"):
        R.view_groups(src, dst)


@given(data=st.data(), shape=SHAPE.filter(bool))
def test_unflatten_matches_torch_view_groups(data: st.DataObject, shape: tuple[int, ...]) -> None:
    dim = data.draw(dim_of(len(shape)))
    sizes = data.draw(reshape_target(shape[dim]).filter(bool))
    out_shape = _meta(shape).unflatten(dim, sizes).shape
    ours = R.unflatten(shape, dim, sizes)
    same(ours, tv.view_groups(shape, tuple(out_shape)))


# ---------------------------------------------------------------------------
# flatten / ravel / view_as_complex / view_as_real
# ---------------------------------------------------------------------------


@given(data=st.data(), ndim=NDIM)
def test_flatten_matches_dim_flatten(data: st.DataObject, ndim: int) -> None:
    a, b = data.draw(dim_of(ndim)), data.draw(dim_of(ndim))
    n = max(ndim, 1)
    start, end = (a, b) if a % n <= b % n else (b, a)
    ours = R.flatten(ndim, start, end)
    assert len(ours) == _meta((2,) * ndim).flatten(start, end).ndim
    # torch bug: dim_flatten does not normalise a negative start_dim, so pass it normalised
    same(ours, tv.dim_flatten(ndim, start % n, end))


@given(ndim=NDIM)
def test_ravel_and_atleast_match_dim_maps(ndim: int) -> None:
    x = _meta((2,) * ndim)
    same(R.ravel(ndim), tv.dim_maps[torch.ravel](x))
    same(R.atleast_1d(ndim), tv.dim_maps[torch.atleast_1d](x))
    same(R.atleast_2d(ndim), tv.dim_maps[torch.atleast_2d](x))
    same(R.atleast_3d(ndim), tv.dim_maps[torch.atleast_3d](x))
    assert len(R.atleast_3d(ndim)) == torch.atleast_3d(x).ndim


@given(shape=SHAPE)
def test_view_as_real_matches_torch(shape: tuple[int, ...]) -> None:
    ours = R.view_as_real(shape)
    assert len(ours) == torch.view_as_real(_meta(shape, torch.complex64)).ndim
    if not shape:
        # torch bug: dim_view_as_real indexes shape[-1] of a 0-d tensor
        assert R.format_rule(ours) == "(new(2),)"
        return
    same(ours, tv.dim_maps[torch.view_as_real](_meta(shape, torch.complex64)))


@given(shape=SHAPE)
def test_view_as_complex_matches_torch(shape: tuple[int, ...]) -> None:
    shape = (*shape, 2)
    x = _meta(shape)
    ours = R.view_as_complex(shape)
    assert len(ours) == torch.view_as_complex(x).ndim
    if len(shape) == 1:
        # torch bug: dim_flatten(1, -1) gives (d0,) for the 0-d output
        assert ours == ()
        return
    same(ours, tv.dim_maps[torch.view_as_complex](x))


# ---------------------------------------------------------------------------
# squeeze / unsqueeze
# ---------------------------------------------------------------------------


@given(data=st.data(), shape=SHAPE)
def test_squeeze_matches_dim_squeeze(data: st.DataObject, shape: tuple[int, ...]) -> None:
    n = len(shape)
    kind = data.draw(st.sampled_from(["none", "int", "dims"]))
    dim: int | tuple[int, ...] | None
    if kind == "none":
        dim = None
    elif kind == "int":
        dim = data.draw(dim_of(n))
    else:
        picked = data.draw(st.lists(st.integers(0, max(n, 1) - 1), unique=True, max_size=max(n, 1)))
        dim = tuple(d - max(n, 1) if data.draw(st.booleans()) else d for d in picked)
    ours = R.squeeze(shape, dim)
    x = _meta(shape)
    assert len(ours) == (x.squeeze() if dim is None else x.squeeze(dim)).ndim
    same(ours, tv.dim_squeeze(shape, dim))


@given(data=st.data(), ndim=NDIM)
def test_unsqueeze_matches_dim_unsqueeze(data: st.DataObject, ndim: int) -> None:
    dim = data.draw(st.integers(-ndim - 1, ndim))
    ours = R.unsqueeze(ndim, dim)
    assert len(ours) == _meta((2,) * ndim).unsqueeze(dim).ndim
    same(ours, tv.dim_unsqueeze(ndim, dim))


# ---------------------------------------------------------------------------
# expand / broadcast_to, repeat / tile
# ---------------------------------------------------------------------------


@st.composite
def expand_target(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    lead = draw(st.lists(st.one_of(SIZE, st.just(0)), max_size=2))
    out = list(lead)
    for s in shape:
        options = [st.just(s), st.just(-1)]
        if s == 1:
            options += [SIZE, st.just(0)]
        out.append(draw(st.one_of(*options)))
    return tuple(out)


@given(data=st.data(), shape=SHAPE)
def test_expand_matches_torch(data: st.DataObject, shape: tuple[int, ...]) -> None:
    target = data.draw(expand_target(shape))
    x = _meta(shape)
    assert len(R.expand(shape, target)) == x.expand(target).ndim
    same(R.broadcast_to(shape, target), tv.dim_maps[torch.broadcast_to](x, target))
    if not target:
        # torch bug: Tensor.expand's dim_map calls normalize_sizes(()), an IndexError,
        # although x.expand() of a 0-d x is legal
        assert R.expand(shape, target) == ()
        return
    same(R.expand(shape, target), tv.dim_maps[torch.Tensor.expand](x, *target))


@given(data=st.data(), shape=SHAPE)
def test_expand_rejects_what_torch_rejects(data: st.DataObject, shape: tuple[int, ...]) -> None:
    target = data.draw(st.lists(st.one_of(SIZE, st.just(-1), st.just(0)), max_size=6).map(tuple))
    try:
        _meta(shape).expand(target)
        legal = True
    except RuntimeError:
        legal = False
    assume(not legal)
    with pytest.raises(ValueError, match="expand"):
        R.expand(shape, target)


@given(data=st.data(), ndim=NDIM)
def test_repeat_matches_dim_repeat(data: st.DataObject, ndim: int) -> None:
    sizes = tuple(
        data.draw(st.lists(st.one_of(SIZE, st.just(0)), min_size=ndim, max_size=ndim + 2))
    )
    ours = R.repeat(ndim, sizes)
    assert len(ours) == _meta((2,) * ndim).repeat(sizes).ndim
    if not sizes:
        # torch bug: dim_repeat calls normalize_sizes(()), an IndexError, for a 0-d
        # x.repeat(()), which is legal
        assert ours == ()
        return
    same(ours, tv.dim_maps[torch.Tensor.repeat](_meta((2,) * ndim), *sizes))


@given(data=st.data(), ndim=NDIM)
def test_tile_matches_dim_tile(data: st.DataObject, ndim: int) -> None:
    dims = tuple(data.draw(st.lists(SIZE, max_size=6)))
    ours = R.tile(ndim, dims)
    assert len(ours) == torch.tile(_meta((2,) * ndim), dims).ndim
    if ndim == 0 and not dims:
        # torch bug: dim_tile(0, ()) reaches normalize_sizes(()), an IndexError
        assert ours == ()
        return
    same(ours, tv.dim_maps[torch.tile](_meta((2,) * ndim), dims))


# ---------------------------------------------------------------------------
# permute / transpose / t / movedim
# ---------------------------------------------------------------------------


@given(data=st.data(), ndim=NDIM)
def test_permute_matches_torch(data: st.DataObject, ndim: int) -> None:
    perm = data.draw(st.permutations(range(ndim)))
    dims = tuple(d - ndim if data.draw(st.booleans()) else d for d in perm)
    ours = R.permute(ndim, dims)
    assert len(ours) == _meta((2,) * ndim).permute(dims).ndim
    same(ours, tv.dim_maps[torch.permute](_meta((2,) * ndim), dims))


@given(data=st.data(), ndim=NDIM)
def test_transpose_and_t_match_dim_transpose(data: st.DataObject, ndim: int) -> None:
    a, b = data.draw(dim_of(ndim)), data.draw(dim_of(ndim))
    ours = R.transpose(ndim, a, b)
    assert len(ours) == _meta((2,) * ndim).transpose(a, b).ndim
    if ndim == 0:
        # torch bug: dim_transpose asserts on a 0-d tensor, which torch.transpose accepts
        assert ours == ()
        assert R.t(0) == ()
        return
    same(ours, tv.dim_transpose(ndim, a, b))
    if ndim <= 2:
        # t() decomposes to transpose(0, ndim - 1)
        same(R.t(ndim), tv.dim_transpose(ndim, 0, ndim - 1))


@given(data=st.data(), ndim=NDIM.filter(bool))
def test_movedim_matches_dim_movedim(data: st.DataObject, ndim: int) -> None:
    k = data.draw(st.integers(1, ndim))
    src = data.draw(st.lists(st.integers(0, ndim - 1), min_size=k, max_size=k, unique=True))
    dst = data.draw(st.lists(st.integers(0, ndim - 1), min_size=k, max_size=k, unique=True))
    src = [d - ndim if data.draw(st.booleans()) else d for d in src]
    source: int | tuple[int, ...] = src[0] if k == 1 and data.draw(st.booleans()) else tuple(src)
    destination: int | tuple[int, ...] = dst[0] if isinstance(source, int) else tuple(dst)
    ours = R.movedim(ndim, source, destination)
    assert len(ours) == torch.movedim(_meta((2,) * ndim), source, destination).ndim
    same(ours, tv.dim_movedim(ndim, source, destination))


# ---------------------------------------------------------------------------
# SymInt shapes: decidable => equal to the concrete rule at the hints; never a guard
# ---------------------------------------------------------------------------

ATOM_HINTS = st.lists(st.integers(2, 9), min_size=1, max_size=5)


@st.composite
def partition(draw: st.DrawFn, n: int) -> list[tuple[int, int]]:
    """Cut ``range(n)`` into consecutive non-empty runs."""
    cuts = sorted(draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def _products(atoms: Sequence[Any], runs: Sequence[tuple[int, int]]) -> tuple[Any, ...]:
    out = []
    for lo, hi in runs:
        p: Any = 1
        for a in atoms[lo:hi]:
            p = p * a
        out.append(p)
    return tuple(out)


@settings(deadline=None)
@given(data=st.data(), hints=ATOM_HINTS)
def test_symint_view_groups_equals_concrete_at_hints(data: st.DataObject, hints: list[int]) -> None:
    """Each view runs through every size comparator: the default (ints, else the codes and
    then the ShapeEnv), the codes alone and the ShapeEnv alone. A rule any of them returns
    is the concrete rule at the hints; the ShapeEnv decides whatever the codes decide; none
    installs a guard."""
    env = ShapeEnv()
    # each atom is a backed symbol or (sometimes) a plain int; sometimes one is 0 (numel 0)
    atoms: list[Any] = []
    for i, h in enumerate(hints):
        if data.draw(st.booleans()):
            atoms.append(h)
        else:
            sym = env.create_symbol(h, ConstantSource(f"atom{i}"))
            atoms.append(env.create_symintnode(sym, hint=h))
    empty = data.draw(st.integers(0, 4)) == 0
    if empty:
        at = data.draw(st.integers(0, len(atoms)))
        atoms.insert(at, 0)
        hints = [*hints[:at], 0, *hints[at:]]
    src_runs = data.draw(partition(len(atoms)))
    dst_runs = data.draw(partition(len(atoms)))
    # Sometimes the target regroups the atoms in another order: same numel, but
    # comparisons like s0 == s1 then decide the structure and may be undecidable.
    order = data.draw(st.permutations(range(len(atoms)))) if data.draw(st.booleans()) else None
    dst_atoms = [atoms[i] for i in order] if order else atoms
    dst_hints = [hints[i] for i in order] if order else hints
    src, dst = _products(atoms, src_runs), _products(dst_atoms, dst_runs)
    src_h, dst_h = _products(hints, src_runs), _products(dst_hints, dst_runs)
    if not empty and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(dst) - 1))
        dst, dst_h = (*dst[:i], -1, *dst[i + 1 :]), (*dst_h[:i], -1, *dst_h[i + 1 :])
    concrete = R.view_groups(src_h, dst_h)
    guards = len(env.guards)
    rules: dict[str, R.Rule | None] = {}
    for name, sizes in (
        ("default", None),
        ("codes", CodedSizes("view_groups")),
        ("asked", AskedSizes("view_groups")),
    ):
        try:
            rules[name] = R.view_groups(src, dst, sizes=sizes)
        except UndecidableRule:
            rules[name] = None
        assert len(env.guards) == guards, f"view_groups ({name}) installed a guard"
    for rule in rules.values():
        if rule is not None:
            assert map_sizes(rule, _hint) == concrete
    if rules["codes"] is not None:
        assert rules["asked"] is not None
    assert (rules["default"] is None) == (rules["codes"] is None and rules["asked"] is None)
    # Same atom order: every comparison is between prefix products, one a multiple of the
    # other, so the codes decide it (an empty tensor's view compares single dims instead).
    if not empty and (order is None or list(order) == sorted(order)):
        assert rules["codes"] is not None


def _hint(x: Any) -> int:
    return int(x.node.hint) if isinstance(x, torch.SymInt) else int(x)


@settings(deadline=None)
@given(data=st.data(), shape_hints=st.lists(st.integers(1, 9), max_size=4))
def test_symint_other_builders_equal_concrete_at_hints(
    data: st.DataObject, shape_hints: list[int]
) -> None:
    env = ShapeEnv()
    shape = tuple(
        env.create_symintnode(env.create_symbol(h, ConstantSource(f"s{i}")), hint=h)
        for i, h in enumerate(shape_hints)
    )
    n = len(shape)
    calls: list[tuple[Callable[..., R.Rule], tuple[Any, ...], tuple[Any, ...]]] = [
        (R.squeeze, (shape,), (tuple(shape_hints),)),
        (R.view_as_real, (shape,), (tuple(shape_hints),)),
    ]
    reps = data.draw(st.lists(st.integers(1, 4), min_size=n, max_size=n + 1))
    rep_syms = tuple(
        env.create_symintnode(env.create_symbol(r, ConstantSource(f"r{i}")), hint=r)
        for i, r in enumerate(reps)
    )
    calls.append((R.repeat, (n, rep_syms), (n, tuple(reps))))
    target = tuple(-1 if data.draw(st.booleans()) else s for s in shape)
    calls.append((R.expand, (shape, (3, *target)), (tuple(shape_hints), (3, *map(_hint, target)))))
    for build, sym_args, int_args in calls:
        guards = len(env.guards)
        rule = build(*sym_args)
        assert len(env.guards) == guards, f"{build.__name__} installed a guard"
        assert map_sizes(rule, _hint) == build(*int_args)

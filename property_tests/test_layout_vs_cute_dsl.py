"""Differential tests: ``cute_shard.layout`` against NVIDIA's CuTe DSL (``cutlass.cute``).

The DSL computes the layout algebra of static layouts on the CPU while tracing a
``@cute.jit`` function; :mod:`property_tests.cute_dsl` runs a whole batch of cases in
one trace (in a worker process, so that a DSL crash only loses one case).

The DSL is lenient: for some inputs it returns a layout that is not the promised
function (e.g. ``composition((3,5):(5,1), 4:2) = (2,2):(10,1)``).  Our library
never returns a wrong function, so each case falls in one of three classes:

1. the DSL raises (or its native code crashes)      -> ours must raise ``ValueError``;
2. the DSL returns R and R satisfies the operation's post-condition (checked by
   brute force here, independently of ``cute_shard``)
                                                    -> ours must return a layout equal to R
                                                       as a function on its whole domain AND
                                                       with the same mode structure;
3. the DSL returns R that fails the post-condition  -> ours must raise ``ValueError``.

Cases come from seeded ``random.Random`` generators (``dsl_gen_*`` below), so a run is
reproducible.  Environment knobs: ``CUTE_DSL_SEED`` (other seeds), ``CUTE_DSL_CASES``
(cases per operation, default 1500), ``CUTE_DSL_REPORT=1`` (print class counts and the
smallest examples of each class), ``CUTE_DSL_SHRINK_S`` (seconds per failing test spent
shrinking its smallest failures to minimal cases, default 10; 0 disables).

Layout evaluation (brute force, CuTe semantics): a flat index is split into a
coordinate colexicographically over the *flattened* modes (first mode fastest); the
last flattened mode is not reduced modulo its size, so an index past the size
extends along that mode.  value = sum(coord_k * stride_k).  size = product of the
shape; cosize = L(size - 1) + 1.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

try:
    from property_tests import cute_dsl
except ImportError:  # property_tests/ itself on sys.path
    import cute_dsl  # type: ignore[no-redef]

Crashed = cute_dsl.Crashed
DslLayout = cute_dsl.DslLayout
HarnessError = cute_dsl.HarnessError
Rejected = cute_dsl.Rejected
Spec = cute_dsl.Spec

SEED = int(os.environ.get("CUTE_DSL_SEED", "20240611"))
N_CASES = int(os.environ.get("CUTE_DSL_CASES", "1500"))
REPORT = os.environ.get("CUTE_DSL_REPORT", "") not in ("", "0")
SHRINK_SECONDS = float(os.environ.get("CUTE_DSL_SHRINK_S", "10"))
BATCH = 1000  # cases per @cute.jit trace
MAX_SIZE = 2048  # cap on size(layout) of generated layouts (keeps brute force cheap)


# ======================================================================================
# Plain nested-int helpers (independent of cute_shard)
# ======================================================================================


def flat(t: Any) -> list[int]:
    if isinstance(t, tuple):
        out: list[int] = []
        for e in t:
            out.extend(flat(e))
        return out
    return [int(t)]


def prod(xs: Sequence[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def size_of(L: Any) -> int:
    return prod(flat(L.shape))


def depth_of(t: Any) -> int:
    if isinstance(t, tuple):
        return 1 + max((depth_of(e) for e in t), default=0)
    return 0


def norm_shape(t: Any) -> Any:
    """Nested shape as CuTe prints it: a 1-tuple ``(x,)`` is the same as ``x``."""
    if isinstance(t, tuple):
        if len(t) == 1:
            return norm_shape(t[0])
        return tuple(norm_shape(e) for e in t)
    return int(t)


def fmt(t: Any) -> str:
    if isinstance(t, tuple):
        return "(" + ",".join(fmt(e) for e in t) + ")"
    return str(t)


def sfmt(L: Any) -> str:
    return f"{fmt(L.shape)}:{fmt(L.stride)}"


def modes(L: Any) -> list[Spec]:
    """Top-level modes; a layout with an int shape has the single mode itself."""
    if isinstance(L.shape, tuple):
        return [Spec(s, d) for s, d in zip(L.shape, L.stride, strict=True)]
    return [Spec(L.shape, L.stride)]


def rank_of(L: Any) -> int:
    return len(L.shape) if isinstance(L.shape, tuple) else 1


def concat(*Ls: Any) -> Spec:
    """make_layout(L0, L1, ...): the layouts become the top-level modes."""
    return Spec(tuple(L.shape for L in Ls), tuple(L.stride for L in Ls))


def same_congruence(shape: Any, stride: Any) -> bool:
    if isinstance(shape, tuple):
        return (
            isinstance(stride, tuple)
            and len(shape) == len(stride)
            and all(same_congruence(s, d) for s, d in zip(shape, stride, strict=True))
        )
    return not isinstance(stride, tuple)


def image(L: Any) -> np.ndarray:
    """[L(0), L(1), ..., L(size-1)] by brute force (first flattened mode fastest)."""
    vals = np.zeros(1, dtype=np.int64)
    for s, d in zip(flat(L.shape), flat(L.stride), strict=True):
        vals = (vals[None, :] + (np.arange(s, dtype=np.int64) * d)[:, None]).ravel()
    return vals


def eval_at(L: Any, idx: np.ndarray) -> np.ndarray:
    """L(i) for arbitrary i >= 0, with CuTe's extension along the last flattened mode."""
    idx = np.asarray(idx, dtype=np.int64).copy()
    shp, std = flat(L.shape), flat(L.stride)
    acc = np.zeros_like(idx)
    for s, d in zip(shp[:-1], std[:-1], strict=True):
        acc += (idx % s) * d
        idx //= s
    acc += idx * std[-1]
    return acc


def cosize_of(L: Any) -> int:
    n = size_of(L)
    return int(eval_at(L, np.array([n - 1]))[0]) + 1 if n > 0 else 0


def same_function(X: Any, Y: Any) -> bool:
    return size_of(X) == size_of(Y) and np.array_equal(image(X), image(Y))


def nonzero_modes(L: Any) -> Spec:
    """The flattened modes of L with stride != 0 and size != 1 (CuTe's filter)."""
    ms = [(s, d) for s, d in zip(flat(L.shape), flat(L.stride), strict=True) if d != 0 and s != 1]
    if not ms:
        return Spec(1, 0)
    return Spec(tuple(s for s, _ in ms), tuple(d for _, d in ms))


def is_injective(L: Any) -> bool:
    im = image(L)
    return len(np.unique(im)) == len(im)


# ======================================================================================
# Brute-force post-conditions.  Each returns None when satisfied, else a reason string.
# ======================================================================================


def pc_coalesce(L: Any, R: Any) -> str | None:
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if depth_of(R.shape) > 1:
        return f"depth {depth_of(R.shape)} > 1"
    if size_of(R) != size_of(L):
        return f"size {size_of(R)} != {size_of(L)}"
    if not np.array_equal(image(R), image(L)):
        return "R(i) != L(i) for some i < size"
    return None


def pc_coalesce_profile(L: Spec, profile: tuple, R: Any) -> str | None:
    """Profile of all 1s with len(profile) == rank(L): mode k of R is coalesce(L[k])."""
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if rank_of(R) != rank_of(L) or not isinstance(R.shape, tuple):
        return f"rank {rank_of(R)} != {rank_of(L)}"
    for k, (Lk, Rk) in enumerate(zip(modes(L), modes(R), strict=True)):
        why = pc_coalesce(Lk, Rk)
        if why:
            return f"mode {k}: {why}"
    return None


def pc_composition_single(A: Any, B: Any, R: Any, a: str = "A") -> str | None:
    """size(R) == size(B) and R(i) == A(B(i)) for i < size(B) (A with the extension)."""
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if size_of(R) != size_of(B):
        return f"size(R)={size_of(R)} != size(B)={size_of(B)}"
    b = image(B)
    want = eval_at(A, b)
    got = image(R)
    if not np.array_equal(got, want):
        bad = np.nonzero(got != want)[0]
        inside = bad[b[bad] < size_of(A)]
        i = int(inside[0]) if inside.size else int(bad[0])
        past = (
            ""
            if inside.size
            else f" [B({i})={int(b[i])} is past size({a})={size_of(A)}: "
            "only wrong under the last-mode extension]"
        )
        return f"R({i})={int(got[i])} but {a}(B({i}))={a}({int(b[i])})={int(want[i])}{past}"
    return None


def pc_composition(A: Spec, B: Any, R: Any) -> str | None:
    if isinstance(B, Spec):
        return pc_composition_single(A, B, R)
    # by-mode: R[k] = A[k] o B[k] for k < len(B); R[j] = A[j] for the remaining modes
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if rank_of(R) != rank_of(A):
        return f"rank {rank_of(R)} != rank(A) {rank_of(A)}"
    Am, Rm = modes(A), modes(R)
    for k, Bk in enumerate(B):
        why = pc_composition_single(Am[k], Bk, Rm[k])
        if why:
            return f"mode {k}: {why}"
    for j in range(len(B), len(Am)):
        if not same_function(Am[j], Rm[j]):
            return f"mode {j} differs from A's"
    return None


def pc_complement(A: Any, M: int, R: Any) -> str | None:
    """Predicate used for complement(A, M) = R.

    Let A' be A without its stride-0 (and size-1) modes, and N = size(A') * size(R).
    Required: R is congruent; the concatenation (A', R) is a bijection from [0, N)
    onto [0, N) (so R is injective, and A', R only share the value 0); and N >= M.
    """
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if size_of(R) == 0:
        return "size(R) == 0"
    C = concat(nonzero_modes(A), R)
    n = size_of(C)
    if not np.array_equal(np.sort(image(C)), np.arange(n)):
        return f"(A', R) is not a bijection onto [0, {n})"
    if n < M:
        return f"size(A')*size(R) = {n} < cotarget {M}"
    return None


def pc_divide_mode(A: Any, B: Spec, C: Any, R: Any) -> str | None:
    """R = composition(A, make_layout(B, C)) with C a valid complement(B, size(A))."""
    if not isinstance(C, DslLayout):
        return f"DSL complement(B, size(A)) = {C}"
    why = pc_complement(B, size_of(A), C)
    if why:
        return f"DSL complement(B, size(A)) = {sfmt(C)} invalid: {why}"
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if rank_of(R) != 2:
        return f"rank(R) = {rank_of(R)} != 2"
    if size_of(modes(R)[0]) != size_of(B):
        return f"size(R[0]) = {size_of(modes(R)[0])} != size(B) = {size_of(B)}"
    why = pc_composition_single(A, concat(B, C), R)
    if why:
        return f"R != A o (B, B*): {why}"
    return None


def pc_logical_divide(A: Spec, T: Any, comps: Any, R: Any) -> str | None:
    if isinstance(T, Spec):
        return pc_divide_mode(A, T, comps, R)
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if rank_of(R) != rank_of(A):
        return f"rank {rank_of(R)} != rank(A) {rank_of(A)}"
    Am, Rm = modes(A), modes(R)
    for k, Tk in enumerate(T):
        why = pc_divide_mode(Am[k], Tk, comps[k], Rm[k])
        if why:
            return f"mode {k}: {why}"
    for j in range(len(T), len(Am)):
        if not same_function(Am[j], Rm[j]):
            return f"mode {j} differs from A's"
    return None


def pc_zipped_divide(A: Spec, T: Any, comps: Any, R: Any) -> str | None:
    if isinstance(T, Spec):
        return pc_divide_mode(A, T, comps, R)
    # ((A0/T0 tile, A1/T1 tile, ...), (rest0, rest1, ..., A[len(T)], ...))
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if rank_of(R) != 2:
        return f"rank(R) = {rank_of(R)} != 2"
    tiles, rests = modes(R)
    r, k = rank_of(A), len(T)
    if rank_of(tiles) != k or rank_of(rests) != r:
        return f"ranks of R[0], R[1] = {rank_of(tiles)}, {rank_of(rests)} != {k}, {r}"
    Am, Tm, Rm = modes(A), modes(tiles), modes(rests)
    for i, Ti in enumerate(T):
        why = pc_divide_mode(Am[i], Ti, comps[i], concat(Tm[i], Rm[i]))
        if why:
            return f"mode {i}: {why}"
    for j in range(k, r):
        if not same_function(Am[j], Rm[j]):
            return f"rest mode {j} differs from A's"
    return None


def pc_logical_product(A: Spec, B: Spec, C: Any, R: Any) -> str | None:
    """R = make_layout(A, composition(C, B)), C = complement(A, size(A) * cosize(B))."""
    if not isinstance(C, DslLayout):
        return f"DSL complement(A, size(A)*cosize(B)) = {C}"
    why = pc_complement(A, size_of(A) * cosize_of(B), C)
    if why:
        return f"DSL complement(A, size(A)*cosize(B)) = {sfmt(C)} invalid: {why}"
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    if rank_of(R) != 2:
        return f"rank(R) = {rank_of(R)} != 2"
    R0, R1 = modes(R)
    if norm_shape(R0.shape) != norm_shape(A.shape) or not same_function(R0, A):
        return "R[0] != A"
    why = pc_composition_single(C, B, R1, a="C")
    if why:
        return f"R[1] != C o B: {why}"
    return None


def pc_right_inverse(A: Any, R: Any) -> str | None:
    """R maps into A's domain and A(R(i)) == i for i < size(R)."""
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    r = image(R)
    if r.size and (r.min() < 0 or r.max() >= size_of(A)):
        return f"R maps outside A's domain [0, {size_of(A)})"
    got = eval_at(A, r)
    if not np.array_equal(got, np.arange(r.size)):
        i = int(np.nonzero(got != np.arange(r.size))[0][0])
        return f"A(R({i})) = {int(got[i])} != {i}"
    return None


def pc_left_inverse(A: Any, R: Any) -> str | None:
    """A's image lies in R's domain and R(A(i)) == i for i < size(A)."""
    if not same_congruence(R.shape, R.stride):
        return "shape/stride not congruent"
    a = image(A)
    if a.size and a.max() >= size_of(R):
        return f"A's image reaches {int(a.max())} >= size(R) = {size_of(R)}"
    got = eval_at(R, a)
    if not np.array_equal(got, np.arange(a.size)):
        i = int(np.nonzero(got != np.arange(a.size))[0][0])
        return f"R(A({i})) = {int(got[i])} != {i}"
    return None


# ======================================================================================
# Seeded case generators (ours; independent of property_tests/layout_strategies.py)
# ======================================================================================

_NICE_SIZES = [1, 2, 2, 2, 3, 4, 4, 4, 6, 8, 8, 12]


def dsl_gen_size(rng: random.Random) -> int:
    return rng.choice(_NICE_SIZES) if rng.random() < 0.7 else rng.randint(1, 12)


def dsl_gen_shape(rng: random.Random, max_depth: int = 3, max_leaves: int = 5) -> Any:
    """A shape of depth <= max_depth (0 = an int) with <= max_leaves leaves of size 1..12."""
    for _ in range(100):
        shape = _gen_shape_rec(rng, max_depth, [max_leaves])
        if prod(flat(shape)) <= MAX_SIZE:
            return shape
    return dsl_gen_size(rng)


def _gen_shape_rec(rng: random.Random, depth_left: int, budget: list[int]) -> Any:
    if depth_left == 0 or budget[0] <= 1 or rng.random() < 0.35:
        budget[0] -= 1
        return dsl_gen_size(rng)
    n = rng.choice([1, 2, 2, 2, 3, 3])
    n = max(1, min(n, budget[0]))
    return tuple(_gen_shape_rec(rng, depth_left - 1, budget) for _ in range(n))


def unflatten(leaves: list[int], like: Any) -> Any:
    it = iter(leaves)

    def rec(t: Any) -> Any:
        if isinstance(t, tuple):
            return tuple(rec(e) for e in t)
        return next(it)

    return rec(like)


def compact_strides(
    shape: Any, order: list[int] | None = None, scale: int = 1, gaps: list[int] | None = None
) -> Any:
    """Strides of a compact layout whose leaves are laid out in ``order`` (fastest first)."""
    leaves = flat(shape)
    order = list(range(len(leaves))) if order is None else order
    strides = [0] * len(leaves)
    cur = scale
    for j, i in enumerate(order):
        if gaps is not None:
            cur *= gaps[j]
        strides[i] = cur
        cur *= leaves[i]
    return unflatten(strides, shape)


def dsl_gen_strides(rng: random.Random, shape: Any, kind: str | None = None) -> Any:
    """Strides for ``shape``: compact (column-major / permuted / scaled / with gaps),
    compact with some zeros, or arbitrary in 0..64 (biased toward 0, 1, 2, 4, 8)."""
    leaves = flat(shape)
    kind = kind or rng.choice(
        ["col", "perm", "perm", "scaled", "gappy", "random", "random", "zeros"]
    )
    order = list(range(len(leaves)))
    rng.shuffle(order)
    if kind == "col":
        return compact_strides(shape)
    if kind == "perm":
        return compact_strides(shape, order)
    if kind == "scaled":
        return compact_strides(shape, order, scale=rng.choice([1, 2, 3, 4]))
    if kind == "gappy":
        gaps = [rng.choice([1, 1, 1, 2, 3]) for _ in leaves]
        return compact_strides(shape, order, gaps=gaps)
    if kind == "zeros":
        st = flat(compact_strides(shape, order))
        st = [0 if rng.random() < 0.35 else d for d in st]
        return unflatten(st, shape)
    st = [rng.choice([0, 1, 1, 2, 4, 8, rng.randint(0, 64), rng.randint(0, 16)]) for _ in leaves]
    return unflatten(st, shape)


def dsl_gen_layout(
    rng: random.Random, max_depth: int = 3, max_leaves: int = 5, kind: str | None = None
) -> Spec:
    shape = dsl_gen_shape(rng, max_depth, max_leaves)
    return Spec(shape, dsl_gen_strides(rng, shape, kind))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def dsl_gen_tiler_for(rng: random.Random, A: Any) -> Spec:
    """A right operand for composition / divide, biased toward ones CuTe can handle for A:
    sizes and strides built from divisors / prefix products of A's (flattened) shape."""
    n = size_of(A)
    if rng.random() < 0.3:
        return dsl_gen_layout(rng, max_depth=2, max_leaves=3)
    pref = [1]
    for s in flat(A.shape):
        pref.append(pref[-1] * s)
    k = rng.choice([1, 1, 2, 2, 3])
    shp, st = [], []
    budget = n
    for _ in range(k):
        s = rng.choice(_divisors(max(1, budget))) if rng.random() < 0.8 else dsl_gen_size(rng)
        r = rng.random()
        if r < 0.45:
            d = rng.choice(pref[:-1] or [1])
        elif r < 0.7:
            d = rng.choice(_divisors(max(1, n)))
        elif r < 0.8:
            d = 0
        else:
            d = rng.randint(1, 12)
        shp.append(s)
        st.append(d)
        budget = max(1, budget // max(1, s))
    if k == 1:
        return Spec(shp[0], st[0])
    if rng.random() < 0.25:  # nest the first two modes
        return Spec(((shp[0], shp[1]), *shp[2:]), ((st[0], st[1]), *st[2:]))
    return Spec(tuple(shp), tuple(st))


# --------------------------- case generators per operation ---------------------------


def cases_coalesce(rng: random.Random, n: int) -> list[tuple]:
    return [(dsl_gen_layout(rng),) for _ in range(n)]


def cases_coalesce_profile(rng: random.Random, n: int) -> list[tuple]:
    out: list[tuple] = []
    while len(out) < n:
        r = rng.choice([2, 2, 3])
        L = concat(*[dsl_gen_layout(rng, max_depth=2, max_leaves=3) for _ in range(r)])
        if size_of(L) <= MAX_SIZE:
            out.append((L, (1,) * r))
    return out


def cases_composition(rng: random.Random, n: int) -> list[tuple]:
    out: list[tuple] = []
    while len(out) < n:
        A = dsl_gen_layout(rng)
        if rng.random() < 0.25 and rank_of(A) >= 2:
            # by-mode: one tiler per mode of A.  (With a SHORTER tuple the DSL's composition
            # drops A's remaining modes, unlike C++ CuTe which keeps them, so that case is
            # not differential-tested.)
            B: Any = tuple(dsl_gen_tiler_for(rng, m) for m in modes(A))
        else:
            B = dsl_gen_tiler_for(rng, A)
        out.append((A, B))
    return out


def cases_complement(rng: random.Random, n: int) -> list[tuple]:
    out: list[tuple] = []
    for _ in range(n):
        A = dsl_gen_layout(
            rng,
            max_depth=2,
            max_leaves=3,
            kind=rng.choice([None, "gappy", "scaled", "perm", "random"]),
        )
        c = cosize_of(A)
        M = rng.choice(
            [size_of(A), c, c * rng.randint(1, 4), rng.randint(1, 4 * c + 4), c + rng.randint(0, 8)]
        )
        out.append((A, max(1, M)))
    return out


def cases_divide(rng: random.Random, n: int) -> list[tuple]:
    out: list[tuple] = []
    while len(out) < n:
        A = dsl_gen_layout(rng)
        if rng.random() < 0.35 and rank_of(A) >= 2:
            k = rng.randint(1, min(2, rank_of(A)))
            T: Any = tuple(dsl_gen_tiler_for(rng, m) for m in modes(A)[:k])
        else:
            T = dsl_gen_tiler_for(rng, A)
        out.append((A, T))
    return out


def cases_logical_product(rng: random.Random, n: int) -> list[tuple]:
    out: list[tuple] = []
    while len(out) < n:
        A = dsl_gen_layout(
            rng, max_depth=2, max_leaves=3, kind=rng.choice([None, "gappy", "perm", "col"])
        )
        B = dsl_gen_layout(rng, max_depth=2, max_leaves=3)
        if size_of(A) * max(1, cosize_of(B)) <= 4 * MAX_SIZE:
            out.append((A, B))
    return out


def cases_inverse(rng: random.Random, n: int) -> list[tuple]:
    return [(dsl_gen_layout(rng),) for _ in range(n)]


# ======================================================================================
# Operation table: how to run the DSL, the companion DSL calls, the post-condition, ours
# ======================================================================================


def _complement_companions(pairs: list[Any]) -> list[Any]:
    """DSL complement for each (layout, cotarget) pair, or a tuple of such pairs."""
    flat_cases: list[tuple] = []
    index: list[Any] = []
    for p in pairs:
        if isinstance(p, list):
            index.append(tuple(range(len(flat_cases), len(flat_cases) + len(p))))
            flat_cases.extend(p)
        else:
            index.append(len(flat_cases))
            flat_cases.append(p)
    comp = cute_dsl.run_batches("complement", flat_cases, BATCH)
    return [comp[i] if isinstance(i, int) else tuple(comp[j] for j in i) for i in index]


def _divide_aux(cases: list[tuple]) -> list[Any]:
    """B* = DSL complement(T_k, size(A_k)) per tiler mode (the divide identity's complement)."""
    pairs: list[Any] = []
    for A, T in cases:
        if isinstance(T, Spec):
            pairs.append((T, size_of(A)))
        else:
            pairs.append([(Tk, size_of(Ak)) for Ak, Tk in zip(modes(A), T, strict=False)])
    return _complement_companions(pairs)


def _product_aux(cases: list[tuple]) -> list[Any]:
    return _complement_companions([(A, size_of(A) * cosize_of(B)) for A, B in cases])


def _same_layout(X: Any, Y: Any) -> bool:
    return norm_shape(X.shape) == norm_shape(Y.shape) and same_function(X, Y)


def _divide_oracle(op_name: str) -> Callable[[list[tuple]], tuple[list, list, list]]:
    """The divide identity evaluated with DSL operations, mode by mode:
    ``R_k = DSL composition(A_k, make_layout(T_k, DSL complement(T_k, size(A_k))))``.

    Why not the DSL's own ``logical_divide``: it takes the complement with respect to
    ``shape(coalesce(A))`` (a tuple: the rest is ceil-divided mode by mode), not
    ``size(A)``, so it differs from the identity when the tiler does not align with A's
    mode boundaries.  Its result is still computed and compared with the identity; the
    outcome is recorded as a note per case.  When a complement does not exist (the DSL
    returns an invalid one), the DSL's own divide is used (class 1 or 3).
    """

    def oracle(cases: list[tuple]) -> tuple[list, list, list]:
        own = cute_dsl.run_batches(op_name, cases, BATCH)
        comps = _divide_aux(cases)
        comp_cases: list[tuple] = []
        where: list[tuple[int, int, int]] = []
        for i, ((A, T), C) in enumerate(zip(cases, comps, strict=True)):
            if isinstance(T, Spec):
                pairs = [(A, T, C)]
            else:
                pairs = list(zip(modes(A), T, C, strict=False))
            if all(
                isinstance(c, DslLayout) and pc_complement(Tk, size_of(Ak), c) is None
                for Ak, Tk, c in pairs
            ):
                where.append((i, len(comp_cases), len(pairs)))
                comp_cases += [(Ak, concat(Tk, Spec(c.shape, c.stride))) for Ak, Tk, c in pairs]
        comp = cute_dsl.run_batches("composition", comp_cases, BATCH)
        results: list[Any] = list(own)
        notes: list[Any] = [None] * len(cases)
        for i, start, n in where:
            parts = comp[start : start + n]
            bad = next((p for p in parts if not isinstance(p, DslLayout)), None)
            R = bad if bad is not None else _assemble_divide(op_name, cases[i], parts)
            results[i] = R
            mine, theirs = isinstance(R, DslLayout), isinstance(own[i], DslLayout)
            if mine and theirs:
                notes[i] = (
                    "DSL's own divide == identity"
                    if _same_layout(R, own[i])
                    else "DSL's own divide != identity"
                )
            elif theirs:
                notes[i] = "DSL's own divide accepts, identity rejects"
            elif mine:
                notes[i] = "DSL's own divide rejects, identity accepts"
            if notes[i] and "==" not in notes[i]:
                notes[i] += f": own {own[i]}, identity {R}"
        return results, comps, notes

    return oracle


def _assemble_divide(op_name: str, case: tuple, parts: list) -> Any:
    A, T = case
    if isinstance(T, Spec):
        return parts[0]
    rest = modes(A)[len(T) :]
    if op_name == "logical_divide":
        L = concat(*parts, *rest)
    else:
        if any(rank_of(p) != 2 for p in parts):
            return HarnessError(f"composition(A_k, (T_k, C_k)) of rank != 2: {parts}")
        L = concat(
            concat(*[modes(p)[0] for p in parts]), concat(*[modes(p)[1] for p in parts], *rest)
        )
    return DslLayout(L.shape, L.stride)


def to_ours(lib: Any, x: Any) -> Any:
    if isinstance(x, Spec):
        return lib.Layout(x.shape, x.stride)
    if isinstance(x, tuple) and x and all(isinstance(e, Spec) for e in x):
        return tuple(to_ours(lib, e) for e in x)
    return x


@dataclass(frozen=True)
class Op:
    name: str
    dsl_op: str
    gen: Callable[[random.Random, int], list[tuple]]
    salt: str
    # post-condition: (case, R, aux) -> reason or None
    pc: Callable[[tuple, Any, Any], str | None]
    # our library: (lib, case converted with to_ours) -> Layout
    ours: Callable[[Any, tuple], Any]
    aux: Callable[[list[tuple]], list[Any]] | None = None
    valid_case: Callable[[tuple], bool] = lambda case: True
    # custom oracle: cases -> (DSL results, aux per case, note per case)
    oracle: Callable[[list[tuple]], tuple[list, list, list]] | None = None


def _bymode_ok(case: tuple, exact: bool) -> bool:
    A, B = case
    if isinstance(B, Spec):
        return True
    return len(B) == rank_of(A) if exact else 1 <= len(B) <= rank_of(A)


OPS = {
    "coalesce": Op(
        "coalesce",
        "coalesce",
        cases_coalesce,
        "coalesce",
        lambda c, R, aux: pc_coalesce(c[0], R),
        lambda lib, c: lib.coalesce(c[0]),
    ),
    "coalesce_profile": Op(
        "coalesce(profile)",
        "coalesce_profile",
        cases_coalesce_profile,
        "coalesce_profile",
        lambda c, R, aux: pc_coalesce_profile(c[0], c[1], R),
        lambda lib, c: lib.coalesce(c[0], c[1]),
        valid_case=lambda c: rank_of(c[0]) >= 2 and c[1] == (1,) * rank_of(c[0]),
    ),
    "composition": Op(
        "composition",
        "composition",
        cases_composition,
        "composition",
        lambda c, R, aux: pc_composition(c[0], c[1], R),
        lambda lib, c: lib.composition(c[0], c[1]),
        valid_case=lambda c: _bymode_ok(c, exact=True),
    ),
    "complement": Op(
        "complement",
        "complement",
        cases_complement,
        "complement",
        lambda c, R, aux: pc_complement(c[0], c[1], R),
        lambda lib, c: lib.complement(c[0], c[1]),
        valid_case=lambda c: c[1] >= 1,
    ),
    "logical_divide": Op(
        "logical_divide",
        "logical_divide",
        cases_divide,
        "divide",
        lambda c, R, aux: pc_logical_divide(c[0], c[1], aux, R),
        lambda lib, c: lib.logical_divide(c[0], c[1]),
        valid_case=lambda c: _bymode_ok(c, exact=False),
        oracle=_divide_oracle("logical_divide"),
    ),
    "zipped_divide": Op(
        "zipped_divide",
        "zipped_divide",
        cases_divide,
        "divide",
        lambda c, R, aux: pc_zipped_divide(c[0], c[1], aux, R),
        lambda lib, c: lib.zipped_divide(c[0], c[1]),
        valid_case=lambda c: _bymode_ok(c, exact=False),
        oracle=_divide_oracle("zipped_divide"),
    ),
    "logical_product": Op(
        "logical_product",
        "logical_product",
        cases_logical_product,
        "logical_product",
        lambda c, R, aux: pc_logical_product(c[0], c[1], aux, R),
        lambda lib, c: lib.logical_product(c[0], c[1]),
        _product_aux,
    ),
    "right_inverse": Op(
        "right_inverse",
        "right_inverse",
        cases_inverse,
        "right_inverse",
        lambda c, R, aux: pc_right_inverse(c[0], R),
        lambda lib, c: lib.right_inverse(c[0]),
    ),
    "left_inverse": Op(
        "left_inverse",
        "left_inverse",
        cases_inverse,
        "left_inverse",
        lambda c, R, aux: pc_left_inverse(c[0], R),
        lambda lib, c: lib.left_inverse(c[0]),
    ),
}


# ======================================================================================
# Running our library, classifying, comparing
# ======================================================================================


@dataclass
class Ours:
    kind: str  # "ok" | "value_error" | "other_error"
    layout: Spec | None = None
    error: str = ""

    def __str__(self) -> str:
        if self.kind == "ok":
            return sfmt(self.layout)
        return f"<{self.kind}: {self.error[:200]}>"


def run_ours(lib: Any, op: Op, case: tuple) -> Ours:
    try:
        res = op.ours(lib, tuple(to_ours(lib, a) for a in case))
    except ValueError as exc:
        return Ours("value_error", error=str(exc))
    except Exception as exc:  # any other exception is a failure
        return Ours("other_error", error=f"{type(exc).__name__}: {exc}")
    try:
        return Ours("ok", Spec(res.shape, res.stride))
    except Exception as exc:
        return Ours("other_error", error=f"result is not a Layout: {type(exc).__name__}: {exc}")


def case_str(case: tuple) -> str:
    parts = []
    for a in case:
        if isinstance(a, Spec):
            parts.append(sfmt(a))
        elif isinstance(a, tuple) and a and all(isinstance(e, Spec) for e in a):
            parts.append("<" + ", ".join(sfmt(e) for e in a) + ">")
        else:
            parts.append(fmt(a))
    return ", ".join(parts)


def _specs(a: Any) -> list[Spec]:
    if isinstance(a, Spec):
        return [a]
    if isinstance(a, tuple):
        return [e for e in a if isinstance(e, Spec)]
    return []


def case_weight(case: tuple) -> int:
    """A complexity used to list (and shrink toward) the smallest failing cases first."""
    w = 0
    for a in case:
        for s in _specs(a):
            w += 1000 * len(flat(s.shape)) + 100 * depth_of(s.shape) + 10 * size_of(s)
            w += sum(flat(s.stride))
        if isinstance(a, int):
            w += a
    return w


@dataclass
class Report:
    op: str
    counts: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)  # (weight, category, text, case)
    per_case: list = field(default_factory=list)  # failure category (or None) per case
    dsl_invalid: list = field(default_factory=list)  # class-3 examples (weight, text)
    rejected: list = field(default_factory=list)  # class-1 examples (weight, text)
    structure_only: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # DSL oddities that are not failures
    shrunk: list = field(default_factory=list)

    def fail(self, case: tuple, category: str, text: str) -> None:
        self.counts["FAIL " + category] += 1
        self.failures.append((case_weight(case), category, text, case))
        self.per_case[-1] = category

    def summary(self) -> str:
        lines = [f"== {self.op}: " + ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))]
        for title, rows in (
            ("class 3 (DSL output fails post-condition)", self.dsl_invalid),
            ("class 1 (DSL rejects / crashes)", self.rejected),
            ("mode-structure-only differences", self.structure_only),
            ("notes", self.notes),
        ):
            if rows:
                lines.append(f"  {title}: {len(rows)}; smallest:")
                for _, text in sorted(rows, key=lambda r: r[0])[:6]:
                    lines.append("    " + text)
        return "\n".join(lines)

    def check(self) -> None:
        if REPORT:
            print("\n" + self.summary())
        if self.failures:
            by_cat = Counter(f[1] for f in self.failures)
            shown = sorted(self.failures, key=lambda f: f[0])[:20]
            msg = [
                f"{self.op}: {len(self.failures)} disagreement(s) with the differential rules "
                f"({dict(by_cat)})"
            ]
            if self.shrunk:
                msg.append("shrunk to minimal cases:")
                msg += [f"  [{c}] {t}" for c, t in self.shrunk]
            msg.append("smallest generated cases:")
            msg += [f"  [{f[1]}] {f[2]}" for f in shown]
            msg.append(self.summary())
            pytest.fail("\n".join(msg), pytrace=False)


def _ours_note(op: Op, case: tuple, ours: Ours, aux: Any) -> tuple[str, str]:
    """(sub-category, note): does our returned layout satisfy the post-condition itself?"""
    try:
        why = op.pc(case, ours.layout, aux)
    except Exception as exc:
        why = f"(post-condition check raised {type(exc).__name__}: {exc})"
    if why is None:
        return " [ours satisfies the post-condition]", " -- ours satisfies the post-condition"
    sub = " [ours wrong only past size(A)]" if "is past size(" in why else " [ours wrong]"
    return sub, f" -- ours is WRONG too: {why}"


def judge(rep: Report, op: Op, case: tuple, dsl: Any, aux: Any, ours: Ours) -> None:
    """Apply the three differential rules to one case."""
    rep.per_case.append(None)
    text_case = f"{rep.op}({case_str(case)})"
    if isinstance(dsl, HarnessError) or any(
        isinstance(x, HarnessError) for x in (aux if isinstance(aux, tuple) else (aux,))
    ):
        rep.fail(case, "harness", f"{text_case}: DSL {dsl}; companion {aux}")
        return
    if ours.kind == "other_error":
        rep.fail(
            case, "non-ValueError exception", f"{text_case}: DSL {dsl}; ours raised {ours.error}"
        )
        return
    if isinstance(dsl, (Rejected, Crashed)):
        what = "crashes" if isinstance(dsl, Crashed) else "rejects"
        rep.counts[f"class1 DSL {what}"] += 1
        rep.rejected.append((case_weight(case), f"{text_case} -> {dsl}"))
        if ours.kind != "value_error":
            sub, note = _ours_note(op, case, ours, aux)
            rep.fail(
                case,
                f"class1: DSL {what}, ours returns{sub}",
                f"{text_case}: DSL {dsl}; ours {ours}{note}",
            )
        return
    why_invalid = op.pc(case, dsl, aux)
    if why_invalid is not None:
        rep.counts["class3 DSL output invalid"] += 1
        rep.dsl_invalid.append(
            (case_weight(case), f"{text_case} -> DSL {sfmt(dsl)}: {why_invalid}")
        )
        if ours.kind != "value_error":
            sub, note = _ours_note(op, case, ours, aux)
            rep.fail(
                case,
                f"class3: DSL output invalid, ours returns{sub}",
                f"{text_case}: DSL {sfmt(dsl)} fails the post-condition ({why_invalid}); "
                f"ours {ours}{note}",
            )
        return
    rep.counts["class2 DSL output valid"] += 1
    if ours.kind != "ok":
        rep.fail(
            case,
            "class2: ours raises on a valid DSL result",
            f"{text_case}: DSL {sfmt(dsl)} (valid); ours {ours}",
        )
        return
    mine = ours.layout
    func_ok = same_congruence(mine.shape, mine.stride) and same_function(mine, dsl)
    struct_ok = norm_shape(mine.shape) == norm_shape(dsl.shape)
    if func_ok and struct_ok:
        rep.counts["class2 agree"] += 1
    elif func_ok:
        rep.structure_only.append(
            (case_weight(case), f"{text_case}: DSL {sfmt(dsl)}; ours {sfmt(mine)}")
        )
        rep.fail(
            case,
            "class2: same function, different mode structure",
            f"{text_case}: DSL {sfmt(dsl)}; ours {sfmt(mine)}",
        )
    else:
        rep.fail(
            case, "class2: different function", f"{text_case}: DSL {sfmt(dsl)}; ours {sfmt(mine)}"
        )


def evaluate(lib: Any, op: Op, cases: list[tuple], extra: Callable | None = None) -> Report:
    """Run the DSL (one trace per BATCH cases) and ours on every case; judge each."""
    if op.oracle is not None:
        dsl, aux, notes = op.oracle(cases)
    else:
        dsl = cute_dsl.run_batches(op.dsl_op, cases, BATCH)
        aux = op.aux(cases) if op.aux is not None else [None] * len(cases)
        notes = [None] * len(cases)
    rep = Report(op.name)
    for case, R, X, note in zip(cases, dsl, aux, notes, strict=True):
        if note:
            key = note.split(":")[0]
            rep.counts["note: " + key] += 1
            if key != note:
                rep.notes.append((case_weight(case), f"{rep.op}({case_str(case)}): {note}"))
        ours = run_ours(lib, op, case)
        judge(rep, op, case, R, X, ours)
        if extra is not None and ours.kind == "ok":
            extra(rep, case, ours)
    return rep


# ======================================================================================
# Shrinking a failing case to a minimal one (greedy, candidates evaluated in one batch)
# ======================================================================================


def _tree_paths(t: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every node (leaves and tuples) of a nested tuple."""
    out = [path]
    if isinstance(t, tuple):
        for i, e in enumerate(t):
            out += _tree_paths(e, (*path, i))
    return out


def _get(t: Any, path: tuple) -> Any:
    for i in path:
        t = t[i]
    return t


def _replace(t: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    i = path[0]
    return (*t[:i], _replace(t[i], path[1:], new), *t[i + 1 :])


def _splice(t: Any, path: tuple, new_items: tuple) -> Any:
    """Replace the node at ``path`` (not the root) by ``new_items`` inside its parent."""
    parent, i = path[:-1], path[-1]
    p = _get(t, parent)
    return _replace(t, parent, (*p[:i], *new_items, *p[i + 1 :]))


def _spec_moves(s: Spec) -> list[Spec]:
    out: list[Spec] = []
    shape, stride = s.shape, s.stride
    if isinstance(shape, tuple):
        out.append(Spec(tuple(flat(shape)), tuple(flat(stride))))
        for p in _tree_paths(shape)[1:]:
            node_s, node_d = _get(shape, p), _get(stride, p)
            parent = _get(shape, p[:-1])
            if len(parent) > 1:  # remove this node
                out.append(Spec(_splice(shape, p, ()), _splice(stride, p, ())))
            if isinstance(node_s, tuple):  # unwrap this tuple into its parent
                out.append(Spec(_splice(shape, p, node_s), _splice(stride, p, node_d)))
        if len(shape) == 1:
            out.append(Spec(shape[0], stride[0]))
    for p in _tree_paths(shape):
        v = _get(shape, p)
        if isinstance(v, tuple):
            continue
        for nv in {1, 2, v // 2, v - 1}:
            if 1 <= nv < v:
                out.append(Spec(_replace(shape, p, nv), stride))
        d = _get(stride, p)
        for nd in {0, 1, d // 2, d - 1}:
            if 0 <= nd < d:
                out.append(Spec(shape, _replace(stride, p, nd)))
    leaves = [d for d in flat(stride) if d]
    if leaves:
        g = np.gcd.reduce(leaves)
        if g > 1:
            out.append(Spec(shape, unflatten([d // int(g) for d in flat(stride)], stride)))
    return out


def _case_moves(case: tuple) -> list[tuple]:
    out: list[tuple] = []
    for i, a in enumerate(case):
        if isinstance(a, Spec):
            out += [(*case[:i], m, *case[i + 1 :]) for m in _spec_moves(a)]
        elif isinstance(a, tuple) and a and all(isinstance(e, Spec) for e in a):
            for j, e in enumerate(a):
                for m in _spec_moves(e):
                    out.append((*case[:i], (*a[:j], m, *a[j + 1 :]), *case[i + 1 :]))
            if len(a) > 1:
                for j in range(len(a)):
                    out.append((*case[:i], (*a[:j], *a[j + 1 :]), *case[i + 1 :]))
            if len(a) == 1:
                out.append((*case[:i], a[0], *case[i + 1 :]))
        elif isinstance(a, int):
            for nv in {1, a // 2, a - 1}:
                if 1 <= nv < a:
                    out.append((*case[:i], nv, *case[i + 1 :]))
    return out


def _fix_case(op: Op, case: tuple) -> tuple:
    if op.dsl_op == "coalesce_profile":
        return (case[0], (1,) * rank_of(case[0]))
    return case


def shrink(lib: Any, op: Op, case: tuple, category: str, deadline: float) -> tuple[tuple, str]:
    """Greedily shrink ``case`` while it keeps failing with ``category``."""
    best = case
    best_text = ""
    while time.monotonic() < deadline:
        w0 = case_weight(best)
        seen: set = set()
        cands = []
        for c in _case_moves(best):
            c = _fix_case(op, c)
            key = case_str(c)
            if (
                key not in seen
                and op.valid_case(c)
                and case_weight(c) < w0
                and all(size_of(s) <= MAX_SIZE for a in c for s in _specs(a))
            ):
                seen.add(key)
                cands.append(c)
        if not cands:
            break
        rep = evaluate(lib, op, cands)
        hits = [(case_weight(c), k) for k, c in enumerate(cands) if rep.per_case[k] == category]
        if not hits:
            break
        _, k = min(hits)
        best = cands[k]
        best_text = next(f[2] for f in rep.failures if f[3] is best)
    if not best_text:
        rep = evaluate(lib, op, [best])
        best_text = rep.failures[0][2] if rep.failures else case_str(best)
    return best, best_text


def run_op(lib: Any, key: str, extra: Callable | None = None) -> Report:
    op = OPS[key]
    cases = op.gen(random.Random(f"{SEED}:{op.salt}"), N_CASES)
    rep = evaluate(lib, op, cases, extra)
    if rep.failures and SHRINK_SECONDS > 0:
        deadline = time.monotonic() + SHRINK_SECONDS
        tried: Counter = Counter()
        seen: set = set()
        for _, cat, _, case in sorted(rep.failures, key=lambda f: f[0]):
            if tried[cat] >= 3 or cat == "harness" or time.monotonic() > deadline:
                continue
            tried[cat] += 1
            small, text = shrink(lib, op, case, cat, deadline)
            if case_str(small) not in seen:
                seen.add(case_str(small))
                rep.shrunk.append((cat, text))
    return rep


def require_min(rep: Report, minimum: dict) -> None:
    """Guard against a generator that silently stops exercising a class."""
    for key, lo in minimum.items():
        got = rep.counts[key]
        assert got >= lo, (
            f"{rep.op}: only {got} cases in {key!r} (want >= {lo}); {dict(rep.counts)}"
        )


# ======================================================================================
# Tests
# ======================================================================================


@pytest.fixture(scope="module")
def lib():
    cute_dsl.require_dsl()
    import cute_shard.layout as layout_lib

    return layout_lib


def test_dsl_available():
    """Visible skip reason when the DSL cannot be imported; smoke test of the harness."""
    cute_dsl.require_dsl()
    res = cute_dsl.run_batch(
        "composition", [(Spec((2, 3), (1, 2)), Spec(6, 1)), (Spec((3, 5), (5, 1)), Spec(3, 2))]
    )
    assert res[0] == DslLayout(6, 1)
    assert isinstance(res[1], Rejected) and res[1].error_type == "MLIRError"


def test_coalesce(lib):
    rep = run_op(lib, "coalesce")
    rep.check()
    require_min(rep, {"class2 agree": N_CASES // 2})


def test_coalesce_by_mode(lib):
    rep = run_op(lib, "coalesce_profile")
    rep.check()
    require_min(rep, {"class2 agree": N_CASES // 2})


def test_composition(lib):
    rep = run_op(lib, "composition")
    rep.check()
    require_min(
        rep,
        {
            "class1 DSL rejects": N_CASES // 30,
            "class2 agree": N_CASES // 3,
            "class3 DSL output invalid": N_CASES // 150,
        },
    )


def test_complement(lib):
    rep = run_op(lib, "complement")
    rep.check()
    require_min(rep, {"class2 agree": N_CASES // 3, "class3 DSL output invalid": N_CASES // 30})


def _divide_identity(lib: Any, op_name: str) -> Callable:
    """Ours: logical_divide(A, B) == composition(A, make_layout(B, complement(B, size(A))))
    (mode by mode for a tuple tiler; zipped_divide regroups), as functions and structure."""

    def check(rep: Report, case: tuple, ours: Ours) -> None:
        A, T = case
        pairs = [(A, T)] if isinstance(T, Spec) else list(zip(modes(A), T, strict=False))
        parts = []
        try:
            for Ak, Tk in pairs:
                LA, LT = to_ours(lib, Ak), to_ours(lib, Tk)
                Z = lib.make_layout(LT, lib.complement(LT, LA.size))
                R = lib.composition(LA, Z)
                parts.append(Spec(R.shape, R.stride))
        except Exception as exc:
            rep.fail(
                case,
                "ours: divide identity",
                f"{op_name}({case_str(case)}) = {ours} but composition(A, (B, complement("
                f"B, size(A)))) raised {type(exc).__name__}: {exc}",
            )
            return
        rest = modes(A)[len(T) :] if isinstance(T, tuple) else []
        if isinstance(T, Spec):
            expect = parts[0]
        elif op_name == "logical_divide":
            expect = concat(*parts, *rest)
        else:
            expect = concat(
                concat(*[modes(p)[0] for p in parts]), concat(*[modes(p)[1] for p in parts], *rest)
            )
        mine = ours.layout
        if not (same_function(mine, expect) and norm_shape(mine.shape) == norm_shape(expect.shape)):
            rep.fail(
                case,
                "ours: divide identity",
                f"{op_name}({case_str(case)}) = {sfmt(mine)} but the identity gives {sfmt(expect)}",
            )

    return check


def test_logical_divide(lib):
    rep = run_op(lib, "logical_divide", _divide_identity(lib, "logical_divide"))
    rep.check()
    require_min(
        rep,
        {
            "class1 DSL rejects": N_CASES // 30,
            "class2 agree": N_CASES // 3,
            "class3 DSL output invalid": N_CASES // 150,
        },
    )


def test_zipped_divide(lib):
    rep = run_op(lib, "zipped_divide", _divide_identity(lib, "zipped_divide"))
    rep.check()
    require_min(rep, {"class1 DSL rejects": N_CASES // 30, "class2 agree": N_CASES // 3})


def test_logical_product(lib):
    rep = run_op(lib, "logical_product")
    rep.check()
    require_min(rep, {"class1 DSL rejects": N_CASES // 30, "class2 agree": N_CASES // 3})


def test_right_inverse(lib):
    rep = run_op(lib, "right_inverse")
    rep.check()
    require_min(rep, {"class2 agree": N_CASES // 2})


def test_left_inverse(lib):
    rep = run_op(lib, "left_inverse")
    rep.check()
    require_min(
        rep,
        {
            "class1 DSL rejects": N_CASES // 100,
            "class2 agree": N_CASES // 2,
            "class3 DSL output invalid": N_CASES // 30,
        },
    )

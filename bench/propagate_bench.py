"""Propagation-latency benchmark: cute_shard against torch's DTensor view propagator.

Both sides answer the same cases (``propagate_cases.py``): cute_shard's rule builders
(``cute_shard.rules``) and ``cute_shard.propagate_shape_and_sharding`` against torch's rule
builders (``view_groups`` / ``dim_*`` from ``torch.distributed.tensor._ops._view_ops``) and its
``propagate_shape_and_sharding``. Every family runs on 1-D, 2-D and 3-D meshes, in four cells:

- **cold**: every call is timed alone, after every cute_shard cache was emptied (torch's view
  path keeps none), and each round takes a different slice of a pool of distinct cases. This is
  what a DTensor sharding-cache miss pays (new shapes, dynamic shapes, tracing).
- **warm**: the round's cases are called once untimed, then again in a timed loop, so every
  cache hits. It shows what caching buys.
- **rule+prop**: building the rule is part of the call; **prop**: the rule is built beforehand.

Rounds interleave the two sides (alternating which goes first); a cell reports the median over
rounds of the mean µs per call, and the speed-up ``torch µs / cute_shard µs``. The overall
figure is the geometric mean of the per-row speed-ups; beside it, the ratio of total times
(the sum of torch's µs over the rows / the sum of cute_shard's), which a slow row cannot hide
in.

Before timing, each case is run once by each side: a case where either side raises is counted
and left out (cute_shard should never raise without ``strict_view``), and so is one where
cute_shard's answer changes between a cold call, a warm call and a call with the rule
prebuilt. Whether an answer is right is for the tests (``property_tests``), not for this file.

``profile(family)`` runs cProfile over cold cute_shard calls of one family and prints where the
time goes (``python -m bench --profile reshape``).
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from torch.distributed.tensor._ops import _view_ops as V

import cute_shard
import cute_shard.rules

from . import dtensor_bench
from .harness import Call, geomean, interleave, speedup, table, time_each, time_loop
from .propagate_cases import BUILDERS, FAMILIES, Case, SymCase, make_pool, materialize

MODES = ("rule+prop", "prop")
TEMPS = ("cold", "warm")
MESH_RANKS = (1, 2, 3)


@dataclass(frozen=True)
class Settings:
    rounds: int
    pool: int  # distinct cases per (family, mesh rank)
    batch: int  # cases per side per round
    # Symbolic sizes: every round gets fresh symbols anyway (materialize), so a small pool is
    # enough, and symbolic calls are slow, so the batch is small.
    sym_pool: int
    sym_batch: int
    passes: int  # warm: timed passes over the batch
    cell_budget_s: float  # a cell stops adding rounds after this long (min 3 rounds)
    dtensor_cases: int  # DTensor family: view-op calls per mesh, and per side per round
    dtensor_batch: int


DEFAULT = Settings(
    rounds=21,
    pool=192,
    batch=32,
    sym_pool=24,
    sym_batch=8,
    passes=4,
    cell_budget_s=3.0,
    dtensor_cases=48,
    dtensor_batch=16,
)
QUICK = Settings(
    rounds=5,
    pool=48,
    batch=12,
    sym_pool=8,
    sym_batch=4,
    passes=2,
    cell_budget_s=0.3,
    dtensor_cases=16,
    dtensor_batch=6,
)


def settings(rounds: int | None = None, quick: bool = False) -> Settings:
    base = QUICK if quick else DEFAULT
    return base if rounds is None else replace(base, rounds=rounds)


@dataclass(frozen=True)
class Side:
    name: str
    propagate: Callable[..., Any]
    builder: int  # index into BUILDERS[op]: 0 cute_shard, 1 torch


def sides() -> tuple[Side, Side]:
    # Bound once: cute_shard resolves the engine's names lazily through a module __getattr__,
    # which a caller like DTensor pays once, not per call.
    return (
        Side("cute_shard", cute_shard.propagate_shape_and_sharding, 0),
        Side("torch", V.propagate_shape_and_sharding, 1),
    )


def clear_caches() -> None:
    """Empty every cute_shard cache (the engine's, the rules' and the layout algebra's)."""
    cute_shard.cache_clear()
    rules_clear = getattr(cute_shard.rules, "cache_clear", None)
    if rules_clear is not None:
        rules_clear()


def leftover_caches() -> list[str]:
    """Names of cute_shard's module-level caches that ``clear_caches`` left non-empty."""
    clear_caches()
    out = []
    for mod_name, mod in sorted(sys.modules.items()):
        if not mod_name.startswith("cute_shard") or mod is None:
            continue
        for name, obj in vars(mod).items():
            info = getattr(obj, "cache_info", None)
            if callable(info) and getattr(info(), "currsize", 0):
                out.append(f"{mod_name}.{name}")
    return out


# --------------------------------------------------------------------------------------------
# Calls


def _rule_then_propagate(
    propagate: Callable[..., Any],
    build: Callable[..., Any],
    args: tuple[Any, ...],
    placements: tuple[Any, ...],
    shape: tuple[Any, ...],
    mesh: tuple[int, ...],
) -> Any:
    return propagate(placements, shape, build(*args), mesh)


def calls(side: Side, cases: Sequence[Case], mode: str) -> list[Call]:
    """One call per case; for ``prop`` the rule is built here, outside any timing."""
    out: list[Call] = []
    for c in cases:
        build = BUILDERS[c.op][side.builder]
        if mode == "rule+prop":
            out.append(
                (
                    _rule_then_propagate,
                    (side.propagate, build, c.args, c.placements, c.shape, c.mesh),
                )
            )
        else:
            out.append((side.propagate, (c.placements, c.shape, build(*c.args), c.mesh)))
    return out


# --------------------------------------------------------------------------------------------
# The guard: which cases are timed


@dataclass
class Screen:
    cases: int = 0
    cute_shard_raised: int = 0
    torch_raised: int = 0
    inconsistent: int = 0  # cute_shard's cold, warm and prebuilt-rule answers differ
    examples: list[str] = field(default_factory=list)


def _answer(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    # str, not ==: comparing SymInt split factors with == would install guards.
    return str(fn(*args))


def screen(pool: Sequence[Case | SymCase]) -> tuple[list[Case | SymCase], Screen]:
    """The cases both sides answer, with cute_shard giving the same answer cold and warm."""
    ours, theirs = sides()
    # Separate symbols for each side, so one side's guards cannot change the other's answers.
    our_cases, their_cases = materialize(pool), materialize(pool)
    kept, s = [], Screen(cases=len(pool))
    for item, oc, tc in zip(pool, our_cases, their_cases, strict=True):
        (rp_call,) = calls(ours, [oc], "rule+prop")
        try:
            clear_caches()
            cold = _answer(*rp_call)
            warm = _answer(*rp_call)
            clear_caches()
            (p_call,) = calls(ours, [oc], "prop")
            prebuilt = _answer(*p_call)
        except Exception as e:
            s.cute_shard_raised += 1
            s.examples.append(f"cute_shard raised {type(e).__name__}: {e} on {oc}")
            continue
        if not cold == warm == prebuilt:
            s.inconsistent += 1
            s.examples.append(f"cold {cold} / warm {warm} / prebuilt {prebuilt} on {oc}")
            continue
        try:
            (t_call,) = calls(theirs, [tc], "rule+prop")
            _answer(*t_call)
        except Exception:
            s.torch_raised += 1
            continue
        kept.append(item)
    return kept, s


# --------------------------------------------------------------------------------------------
# Timing


def _round_slice(items: Sequence[Any], r: int, n: int) -> list[Any]:
    start = (r * n) % len(items)
    return [items[(start + i) % len(items)] for i in range(min(n, len(items)))]


def _measure(
    side: Side, items: Sequence[Case | SymCase], mode: str, temp: str, st: Settings
) -> Callable[[int], float]:
    symbolic = isinstance(items[0], SymCase)
    n = st.sym_batch if symbolic else st.batch

    def measure(r: int) -> float:
        batch = calls(side, materialize(_round_slice(items, r, n)), mode)
        if temp == "cold":
            return time_each(batch, clear_caches)
        for fn, args in batch:
            fn(*args)
        return time_loop(batch, st.passes)

    return measure


@dataclass(frozen=True)
class Row:
    family: str
    mesh: str
    temp: str
    mode: str
    cases: int
    rounds: int
    cute_shard_us: float
    torch_us: float
    speedup: float
    cute_shard_min_us: float
    torch_min_us: float


def run_family(family: str, mesh_rank: int, st: Settings) -> tuple[list[Row], Screen]:
    pool = make_pool(family, mesh_rank, st.pool)
    if isinstance(pool[0], SymCase):
        pool = pool[: st.sym_pool]
    items, s = screen(pool)
    rows: list[Row] = []
    if not items:
        return rows, s
    ours, theirs = sides()
    for temp in TEMPS:
        for mode in MODES:
            t = interleave(
                {side.name: _measure(side, items, mode, temp, st) for side in (ours, theirs)},
                st.rounds,
                budget_s=st.cell_budget_s,
            )
            o, th = t["cute_shard"], t["torch"]
            rows.append(
                Row(
                    family,
                    f"{mesh_rank}-D",
                    temp,
                    mode,
                    len(items),
                    o.rounds,
                    o.median_us,
                    th.median_us,
                    speedup(th.median_us, o.median_us),
                    o.min_us,
                    th.min_us,
                )
            )
    return rows, s


# --------------------------------------------------------------------------------------------
# The suite


def run(
    st: Settings = DEFAULT,
    families: Sequence[str] | None = None,
    e2e: bool = True,
    mesh_ranks: Sequence[int] = MESH_RANKS,
) -> dict[str, Any]:
    """Run the suite, print its tables and return the results (JSON-ready).

    ``families`` is a subset of FAMILIES and "dtensor" (default: all of them);
    ``mesh_ranks`` limits the view-op families (not "dtensor") to meshes of those ranks.
    """
    names = [f for f in (families or FAMILIES) if f in FAMILIES]
    rows: list[Row] = []
    screens: dict[str, dict[str, Any]] = {}
    for family in names:
        for rank in mesh_ranks:
            t0 = time.perf_counter()
            fam_rows, s = run_family(family, rank, st)
            rows += fam_rows
            screens[f"{family} {rank}-D"] = asdict(s)
            timed = fam_rows[0].cases if fam_rows else 0
            print(
                f"  {family} {rank}-D: {timed} of {s.cases} cases timed "
                f"({time.perf_counter() - t0:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    leftovers = leftover_caches()
    overall = {
        f"{temp} {mode}": geomean([r.speedup for r in rows if (r.temp, r.mode) == (temp, mode)])
        for temp in TEMPS
        for mode in MODES
    }
    if rows:
        print(format_tables(rows, overall, st))
        print(format_screens(screens, leftovers))
    e2e_rows: list[dtensor_bench.E2ERow] = []
    want_e2e = e2e and (families is None or "dtensor" in families)
    if want_e2e:
        e2e_rows = dtensor_bench.run(st.rounds, st.dtensor_cases, st.dtensor_batch, st.passes)
    return {
        "settings": asdict(st),
        "rows": [asdict(r) for r in rows],
        "overall_speedup": overall,
        "family_speedup": family_speedups(rows),
        "family_total_speedup": family_speedups(rows, total=True),
        "overall_total_speedup": {
            f"{temp} {mode}": total_speedup(rows, temp, mode) for temp in TEMPS for mode in MODES
        }
        if rows
        else {},
        "screen": screens,
        "uncleared_caches": leftovers,
        "dtensor": [asdict(r) for r in e2e_rows],
    }


def format_tables(rows: Sequence[Row], overall: dict[str, float], st: Settings) -> str:
    out = []
    header = ["family", "mesh", "cases", "rounds"]
    for mode in MODES:
        header += [f"cute_shard {mode} µs", f"torch {mode} µs", f"{mode} x"]
    for temp in TEMPS:
        body = []
        keys = sorted(
            {(r.family, r.mesh) for r in rows if r.temp == temp},
            key=lambda k: (list(FAMILIES).index(k[0]), k[1]),
        )
        for family, mesh in keys:
            cells: list[object] = [family, mesh]
            by_mode = {
                r.mode: r for r in rows if (r.family, r.mesh, r.temp) == (family, mesh, temp)
            }
            cells.append(next(iter(by_mode.values())).cases)
            cells.append(min(r.rounds for r in by_mode.values()))
            for mode in MODES:
                r = by_mode[mode]
                cells += [r.cute_shard_us, r.torch_us, f"{r.speedup:.1f}x"]
            body.append(cells)
        geo: list[object] = ["geomean", "", "", ""]
        for mode in MODES:
            geo += ["", "", f"{overall[f'{temp} {mode}']:.1f}x"]
        body.append(geo)
        out.append(
            f"\n{temp}: median over rounds (up to {st.rounds}; fewer where a cell hit its "
            f"{st.cell_budget_s:g} s budget) of µs per call; x = torch µs / cute_shard µs"
        )
        out.append(table(body, header))
    out.append("\nspeed-up by family (geomean over its 1-D, 2-D and 3-D rows):")
    by_family = family_speedups(rows)
    cells = [f"{t} {m}" for t in TEMPS for m in MODES]
    out.append(
        table(
            [[f, *(f"{g[c]:.2f}x" for c in cells)] for f, g in by_family.items()],
            ["family", *cells],
        )
    )
    out.append(
        "\nspeed-up by family in total time (the sum of torch's µs over its rows / the sum of "
        "cute_shard's: what a program of these calls feels):"
    )
    totals = family_speedups(rows, total=True)
    out.append(
        table(
            [[f, *(f"{g[c]:.2f}x" for c in cells)] for f, g in totals.items()],
            ["family", *cells],
        )
    )
    out.append("\noverall speed-up (geomean over families and meshes; total time in brackets):")
    for temp in TEMPS:
        out.append(
            f"  {temp}:  "
            + "   ".join(
                f"{mode} {overall[f'{temp} {mode}']:.2f}x ({total_speedup(rows, temp, mode):.2f}x)"
                for mode in MODES
            )
        )
    return "\n".join(out)


def total_speedup(rows: Sequence[Row], temp: str, mode: str, family: str | None = None) -> float:
    """The sum of torch's µs / the sum of cute_shard's over the rows of a cell (and family)."""
    cell = [
        r
        for r in rows
        if (r.temp, r.mode) == (temp, mode) and (family is None or r.family == family)
    ]
    return sum(r.torch_us for r in cell) / sum(r.cute_shard_us for r in cell)


def family_speedups(rows: Sequence[Row], total: bool = False) -> dict[str, dict[str, float]]:
    """Per family and cell ("cold rule+prop", ...): the geomean speed-up over its meshes, or
    with ``total`` the ratio of total times (:func:`total_speedup`)."""
    return {
        family: {
            f"{temp} {mode}": (
                total_speedup(rows, temp, mode, family)
                if total
                else geomean(
                    [r.speedup for r in rows if (r.family, r.temp, r.mode) == (family, temp, mode)]
                )
            )
            for temp in TEMPS
            for mode in MODES
        }
        for family in dict.fromkeys(r.family for r in rows)
    }


def format_screens(screens: dict[str, dict[str, Any]], leftovers: Sequence[str]) -> str:
    out = []
    bad = {
        k: s
        for k, s in screens.items()
        if s["cute_shard_raised"] or s["inconsistent"] or s["torch_raised"]
    }
    total = {
        k: sum(s[k] for s in screens.values())
        for k in ("cases", "cute_shard_raised", "torch_raised", "inconsistent")
    }
    out.append(
        f"\nscreened {total['cases']} cases: cute_shard raised on {total['cute_shard_raised']}, "
        f"gave inconsistent cold/warm/prebuilt answers on {total['inconsistent']}; torch raised "
        f"on {total['torch_raised']} (all of these left out of the timings)"
    )
    for k, s in bad.items():
        out.append(
            f"  {k}: cute_shard raised {s['cute_shard_raised']}, inconsistent "
            f"{s['inconsistent']}, torch raised {s['torch_raised']}"
        )
        out += [f"    e.g. {e}" for e in s["examples"][:2]]
    if total["cute_shard_raised"] or total["inconsistent"]:
        out.append("WARNING: cute_shard raised or was inconsistent on some cases (see above)")
    if leftovers:
        out.append(
            f"WARNING: cute_shard.cache_clear() leaves caches filled: {leftovers}; "
            "cold timings may be hitting them"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Profiling


def profile(
    family: str,
    mode: str = "rule+prop",
    calls_n: int = 2000,
    top: int = 15,
    pool: int = 128,
    sort: str = "tottime",
) -> str:
    """cProfile of cold cute_shard calls of ``family`` (all mesh ranks): the top ``top`` by
    ``sort`` (a pstats key: tottime, cumulative, ncalls).

    ``calls_n`` calls cycle through ``pool`` cases per mesh rank (symbolic cases run once
    each: they are slow and their symbols are single-use). The profiler is on only during the
    calls; clearing the caches between them is not profiled.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {list(FAMILIES)}")
    ours, _ = sides()
    items: list[Case | SymCase] = []
    for rank in MESH_RANKS:
        cases = make_pool(family, rank, pool)
        if isinstance(cases[0], SymCase):
            cases = cases[: DEFAULT.sym_pool]  # seconds per call on some: keep it short
        items += screen(cases)[0]
    n = len(items) if isinstance(items[0], SymCase) else calls_n
    cycle = [items[i % len(items)] for i in range(n)]
    cold_us = time_each(calls(ours, materialize(cycle), mode), clear_caches)
    batch = calls(ours, materialize(cycle), mode)  # fresh symbols: the timing warmed the old
    prof = cProfile.Profile()
    gc.disable()  # as in the timings: a full collection (~0.2 s with torch) would skew a frame
    try:
        for fn, args in batch:
            clear_caches()
            prof.enable()
            fn(*args)
            prof.disable()
    finally:
        gc.enable()
    buf = io.StringIO()
    buf.write(
        f"cProfile: {len(batch)} cold cute_shard calls of {family} ({mode}) over "
        f"{len(items)} cases on 1-D, 2-D and 3-D meshes; {cold_us:.1f} µs per call "
        "unprofiled\n"
    )
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(sort).print_stats(top)
    return buf.getvalue()

"""Quality report: our engine vs torch 2.13's reference on seeded random view cases.

    python -m property_tests.engine_quality [--cases N] [--seed S] [--show K]

Cases come from ``engine_strategies.seeded_cases`` (the same families as the property tests:
view/reshape factorisations, flatten, unflatten, permute, transpose, movedim, (un)squeeze,
expand, repeat, tile, atleast_nd, view_as_real/complex; Replicate, Shard, _StridedShard,
Partial; meshes of 1-3 dims up to 8 ranks), reproducible from ``--seed``.  For every case and
both modes (reshape = ``strict_view=False``, view = ``strict_view=True``) the report counts:

* zero-comm exists: the oracle's brute force finds an output placement list that is valid with
  the input left as it is.  The engine sees only (shape, rule), and a few rules are reached by two
  ops with different answers (``squeeze`` vs ``view`` to the squeezed shape when a size-1 dim is
  sharded; ``view_as_complex`` vs ``view`` to ``(..., 2n)`` when the ``n`` dim is unevenly
  sharded; see ``engine_strategies``), so coverage is measured against the rule-level count: an
  answer valid for every op with that rule.  The op-level count is shown for reference.  Cases
  where the capped search cannot tell are "unknown" and left out of the coverage ratios;
* found: the propagator returns ``input_target == input`` and an output the oracle accepts;
* wrong: it returns an output the oracle rejects for the case's op (under its own input
  target); "wrong for a same-rule op": accepted for the case's op but rejected for another op
  that reaches the propagator with the same shape and rule (so wrong for that op at run time);
* crash: it raises something other than a RuntimeError;
* refused: it raises a RuntimeError (for strict, the right answer when nothing zero-comm exists);
* the regression count that must be 0: torch's answer is valid and needs no communication, but
  ours communicates, refuses, crashes or is wrong.

Definitions of validity and of the zero-comm search are in ``cute_shard.oracle``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import dataclass

from property_tests.engine_strategies import (
    Case,
    Outcome,
    oracle_ok,
    run_engine,
    run_torch,
    seeded_cases,
    zero_comm_exists,
    zero_comm_exists_for_op,
)


@dataclass
class Judged:
    outcome: Outcome
    valid_op: bool  # returned an output the oracle accepts for the case's op
    valid: bool  # ... and for every other op that reaches the engine with the same rule
    zero_comm: bool  # valid, with input_target == input

    @property
    def kind(self) -> str:
        if self.outcome.crashed:
            return "crash"
        if self.outcome.refused:
            return "refused"
        if not self.valid_op:
            return "wrong"
        return "valid" if self.valid else "wrong for sibling"


def judge(case: Case, outcome: Outcome, strict: bool) -> Judged:
    if not outcome.ok:
        return Judged(outcome, False, False, False)
    assert outcome.in_tgt is not None and outcome.out is not None
    try:
        valid_op = oracle_ok(case, outcome.in_tgt, outcome.out, strict, siblings=False).ok
        valid = valid_op and oracle_ok(case, outcome.in_tgt, outcome.out, strict).ok
    except ValueError:  # e.g. a placement on a dim the output does not have
        valid_op = valid = False
    return Judged(outcome, valid_op, valid, valid and tuple(outcome.in_tgt) == case.placements)


def _pct(n: int, d: int) -> str:
    return f"{n} ({100 * n / d:.1f}%)" if d else str(n)


def run(n: int, seed: int, show: int) -> int:
    t0 = time.perf_counter()
    cases = seeded_cases(n, seed)
    t_gen = time.perf_counter() - t0
    modes = {"reshape (non-strict)": False, "view (strict)": True}
    stats: dict[str, Counter[str]] = {m: Counter() for m in modes}
    misses: dict[str, list[str]] = {m: [] for m in modes}
    t_ours = t_torch = t_oracle = 0.0
    for case in cases:
        t = time.perf_counter()
        exists = zero_comm_exists(case)
        t_oracle += time.perf_counter() - t
        for_op = zero_comm_exists_for_op(case)
        for name, strict in modes.items():
            c = stats[name]
            t = time.perf_counter()
            ours_o = run_engine(case, strict)
            t_ours += time.perf_counter() - t
            t = time.perf_counter()
            theirs_o = run_torch(case, strict)
            t_torch += time.perf_counter() - t
            t = time.perf_counter()
            ours, theirs = judge(case, ours_o, strict), judge(case, theirs_o, strict)
            t_oracle += time.perf_counter() - t
            c["cases"] += 1
            c["exists for op"] += bool(for_op)
            c[f"ours {ours.kind}"] += 1
            c[f"torch {theirs.kind}"] += 1
            if exists:
                c["exists"] += 1
                c["ours found"] += ours.zero_comm
                c["torch found"] += theirs.zero_comm
                if not ours.zero_comm and len(misses[name]) < show:
                    misses[name].append(f"{case}\n      ours: {_fmt(ours_o)}")
            elif exists is None:
                c["unknown"] += 1
            if exists is False:
                # a "zero-comm" claim when none exists must be wrong; the oracle said so above
                c["ours zero-comm but none exists"] += ours.zero_comm
            if theirs.zero_comm and not ours.zero_comm:
                c["regression"] += 1
                if len(misses[name]) < show:
                    misses[name].append(f"REGRESSION {case}\n      ours: {_fmt(ours_o)}")

    rows = [
        ("cases", lambda c: str(c["cases"])),
        ("zero-comm answer exists for the op", lambda c: _pct(c["exists for op"], c["cases"])),
        ("  ... and for every op with the same rule", lambda c: _pct(c["exists"], c["cases"])),
        ("  search capped: unknown", lambda c: str(c["unknown"])),
        ("found zero-comm: ours", lambda c: _pct(c["ours found"], c["exists"])),
        ("found zero-comm: torch", lambda c: _pct(c["torch found"], c["exists"])),
        ("wrong (oracle rejects): ours", lambda c: str(c["ours wrong"])),
        ("wrong (oracle rejects): torch", lambda c: str(c["torch wrong"])),
        (
            "valid for the op, wrong for a same-rule op: ours",
            lambda c: str(c["ours wrong for sibling"]),
        ),
        (
            "valid for the op, wrong for a same-rule op: torch",
            lambda c: str(c["torch wrong for sibling"]),
        ),
        ("crash (non-RuntimeError): ours", lambda c: str(c["ours crash"])),
        ("crash (non-RuntimeError): torch", lambda c: str(c["torch crash"])),
        ("refused (RuntimeError): ours", lambda c: str(c["ours refused"])),
        ("refused (RuntimeError): torch", lambda c: str(c["torch refused"])),
        ("torch valid & zero-comm, ours not (must be 0)", lambda c: str(c["regression"])),
    ]
    width = max(len(r[0]) for r in rows)
    cols = list(modes)
    print(f"engine quality: {n} cases, seed {seed}")
    print(f"{'':{width}}  " + "  ".join(f"{m:>22}" for m in cols))
    for label, f in rows:
        print(f"{label:{width}}  " + "  ".join(f"{f(stats[m]):>22}" for m in cols))
    print(
        f"\ntime: generate {t_gen:.1f}s, ours {t_ours:.1f}s, torch {t_torch:.1f}s, "
        f"oracle {t_oracle:.1f}s, total {time.perf_counter() - t0:.1f}s"
    )
    for m in cols:
        if misses[m]:
            print(f"\nfirst misses, {m}:")
            for line in misses[m]:
                print(f"  - {line}")
    bad = ("regression", "ours wrong", "ours wrong for sibling", "ours crash")
    return 0 if all(stats[m][k] == 0 for m in cols for k in bad) else 1


def _fmt(o: Outcome) -> str:
    if o.error is not None:
        return f"{type(o.error).__name__}: {str(o.error)[:200]}"
    return f"input_target={list(o.in_tgt or ())} output={list(o.out or ())}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000, help="number of cases (default 2000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the case generator (default 0)")
    ap.add_argument("--show", type=int, default=5, help="print up to K missed cases per mode")
    args = ap.parse_args(argv)
    return run(args.cases, args.seed, args.show)


if __name__ == "__main__":
    raise SystemExit(main())

"""Run the benchmark suites, print their tables and write bench/results/<suite>.json.

    python -m bench                          # every suite (make bench), ~15 min on 2 cores
    python -m bench --quick                  # the same with few rounds and cases
    python -m bench --suite propagate --families reshape,strided --rounds 41
    python -m bench --profile reshape        # cProfile of cold cute_shard calls, top 15
    python -m bench --suite mix              # the random mix: total, tail and worst view
    python -m bench attention                # the attention block; its profile:
    python -m bench.attention_bench --profile
    python -m bench --suite redistribute     # redistribute-bytes, -planning, -execute, -fsdp
    python -m bench redistribute-bytes --cases 60

The attention suite times a forward step (two configurations) and a forward and backward
step (the first configuration; a torch step takes seconds there), and cProfiles one
variable-length forward and backward step with install(). The fixed-length cells (cheap on
both sides) run 15 rounds. With --quick: one round of one step per variable-length cell, 5
rounds per fixed-length one; torch's variable-length steps still make that minutes.

The propagate suite also writes bench/results/propagate.png when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from . import (
    attention_bench,
    execute_bench,
    layout_bench,
    mix_bench,
    propagate_bench,
    redistribute_bench,
)
from .propagate_cases import FAMILIES

RESULTS = pathlib.Path(__file__).parent / "results"


def _layout(args: argparse.Namespace) -> dict[str, Any]:
    return layout_bench.run(rounds=args.rounds or (5 if args.quick else 21))


def _propagate(args: argparse.Namespace) -> dict[str, Any]:
    families = args.families.split(",") if args.families else None
    st = propagate_bench.settings(args.rounds, args.quick)
    results = propagate_bench.run(st, families=families, e2e=not args.no_dtensor)
    if _plot(results, RESULTS / "propagate.png"):
        print("wrote bench/results/propagate.png")
    return results


def _mix(args: argparse.Namespace) -> dict[str, Any]:
    if args.quick:
        return mix_bench.run(n=60, rounds=args.rounds or 5)
    return mix_bench.run(n=300, rounds=args.rounds or 15)


def _attention(args: argparse.Namespace) -> dict[str, Any]:
    rows = attention_bench.run(
        rounds=args.rounds or (1 if args.quick else 5),
        steps=1 if args.quick else 3,
        grad_rounds=args.rounds or (1 if args.quick else 3),
        grad_steps=1,
        fixed_rounds=args.rounds or (5 if args.quick else 15),
        large_rounds=0 if args.quick else args.rounds or 3,
    )
    profile = attention_bench.profile_step(next(iter(attention_bench.CONFIGS)), top=20)
    print(profile)
    return {"rows": [asdict(r) for r in rows], "profile": profile}


def _redistribute_bytes(args: argparse.Namespace) -> dict[str, Any]:
    return redistribute_bench.run_bytes(n=args.cases or (24 if args.quick else 120))


def _redistribute_planning(args: argparse.Namespace) -> dict[str, Any]:
    return redistribute_bench.run_planning(
        n=args.cases or (24 if args.quick else 120), rounds=args.rounds or (3 if args.quick else 7)
    )


def _redistribute_execute(args: argparse.Namespace) -> dict[str, Any]:
    return execute_bench.run_execute(
        n=args.cases or (24 if args.quick else 120), rounds=args.rounds or (3 if args.quick else 5)
    )


def _redistribute_fsdp(args: argparse.Namespace) -> dict[str, Any]:
    return redistribute_bench.run_fsdp((1024, 256) if args.quick else redistribute_bench.FSDP_SHAPE)


SUITES: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "layout": _layout,
    "propagate": _propagate,
    "mix": _mix,
    "attention": _attention,
    "redistribute-bytes": _redistribute_bytes,
    "redistribute-planning": _redistribute_planning,
    "redistribute-execute": _redistribute_execute,
    "redistribute-fsdp": _redistribute_fsdp,
}
# Names that run several suites.
GROUPS = {
    "redistribute": [
        "redistribute-bytes",
        "redistribute-planning",
        "redistribute-execute",
        "redistribute-fsdp",
    ]
}


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("suites", nargs="*", metavar="SUITE", help=f"any of {[*SUITES, *GROUPS]} (all)")
    p.add_argument(
        "--suite", choices=[*SUITES, *GROUPS, "all"], help="the same as naming one SUITE"
    )
    p.add_argument("--rounds", type=int, help="interleaved rounds per cell (default 21)")
    p.add_argument("--quick", action="store_true", help="few rounds and cases: a smoke run")
    p.add_argument(
        "--families",
        help=f"propagate: comma-separated subset of {[*FAMILIES, 'dtensor']} (all)",
    )
    p.add_argument("--no-dtensor", action="store_true", help="propagate: skip the DTensor family")
    p.add_argument(
        "--cases", type=int, help="redistribute-bytes / -planning: drawn cases (120 each)"
    )
    p.add_argument(
        "--profile",
        metavar="FAMILY",
        choices=list(FAMILIES),
        help="instead of timing, cProfile cold cute_shard calls of FAMILY and print the top",
    )
    p.add_argument("--profile-mode", choices=propagate_bench.MODES, default="rule+prop")
    p.add_argument("--top", type=int, default=15, help="--profile: functions to show")
    p.add_argument("--sort", default="tottime", help="--profile: pstats sort key (tottime)")
    args = p.parse_args()

    if args.profile:
        print(
            propagate_bench.profile(args.profile, args.profile_mode, top=args.top, sort=args.sort)
        )
        return
    named = list(args.suites)
    if args.suite and args.suite != "all":
        named.append(args.suite)
    unknown = set(named) - set(SUITES) - set(GROUPS)
    if unknown:
        p.error(f"unknown suite(s) {sorted(unknown)}; choose from {[*SUITES, *GROUPS]}")
    chosen = [s for name in named for s in GROUPS.get(name, [name])]
    if args.families:
        bad = set(args.families.split(",")) - {*FAMILIES, "dtensor"}
        if bad:
            p.error(f"unknown families {sorted(bad)}; choose from {[*FAMILIES, 'dtensor']}")
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "quick": args.quick,
    }
    for name in chosen or SUITES:
        print(f"== {name} ==", flush=True)
        t0 = time.perf_counter()
        results = SUITES[name](args)
        meta_s = {**meta, "seconds": round(time.perf_counter() - t0, 1)}
        out = RESULTS / f"{name}.json"
        out.write_text(json.dumps({"meta": meta_s, "results": results}, indent=2))
        print(f"({meta_s['seconds']} s; wrote {out.relative_to(RESULTS.parent.parent)})\n")


def _plot(results: dict[str, Any], path: pathlib.Path) -> bool:
    """A bar chart of the per-family speed-ups (log scale), if matplotlib is installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = results["rows"]
    if not rows:
        return False
    labels = sorted(
        {(r["family"], r["mesh"]) for r in rows}, key=lambda k: (list(FAMILIES).index(k[0]), k[1])
    )
    cells = [(t, m) for t in propagate_bench.TEMPS for m in propagate_bench.MODES]
    fig, ax = plt.subplots(figsize=(max(8, len(labels) * 0.45), 4.5))
    width = 0.8 / len(cells)
    for k, (temp, mode) in enumerate(cells):
        by = {
            (r["family"], r["mesh"]): r["speedup"]
            for r in rows
            if (r["temp"], r["mode"]) == (temp, mode)
        }
        ax.bar(
            [i + k * width for i in range(len(labels))],
            [by.get(lab, 0) for lab in labels],
            width,
            label=f"{temp} {mode}",
        )
    ax.set_yscale("log")
    ax.axhline(1, color="black", linewidth=0.8)
    ax.axhline(5, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
    ax.set_xticklabels([f"{f} {m}" for f, m in labels], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("speed-up (torch µs / cute_shard µs)")
    ax.set_title("cute_shard vs torch view propagation (above 1: cute_shard faster)")
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


if __name__ == "__main__":
    main()

"""Run the benchmark suites, print their tables and write bench/results/<suite>.json."""

from __future__ import annotations

import argparse
import json
import pathlib

from . import layout_bench

SUITES = {"layout": layout_bench.run}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("suites", nargs="*", metavar="SUITE", help=f"any of {list(SUITES)} (all)")
    p.add_argument("--rounds", type=int, default=21)
    args = p.parse_args()
    unknown = set(args.suites) - set(SUITES)
    if unknown:
        p.error(f"unknown suite(s) {sorted(unknown)}; choose from {list(SUITES)}")
    out_dir = pathlib.Path(__file__).parent / "results"
    out_dir.mkdir(exist_ok=True)
    for name in args.suites or SUITES:
        print(f"== {name} ==")
        results = SUITES[name](rounds=args.rounds)
        (out_dir / f"{name}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""The ``cute-shard`` command line.

``cute-shard layout LAYOUT [--divide TILER] [--complement M] [--compose B]`` prints a layout in
CuTe notation and what the algebra makes of it: its size and cosize, its coalesced form, and
optionally a complement, a composition or a logical_divide. Bad arguments print one line and
exit 2.

Example::

    $ cute-shard layout '(8,16):(16,1)' --divide 4:1
    layout          (8,16):(16,1)   size 128, cosize 128
    coalesce        (8,16):(16,1)
    logical_divide  by 4:1 -> (4,(2,16)):(16,(64,1))
"""

from __future__ import annotations

import argparse
import sys

from .layout import Layout, coalesce, complement, composition, logical_divide


def _layout_arg(text: str) -> Layout:
    try:
        return Layout.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _int_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cute-shard",
        description="Propagate DTensor sharding through view ops with CuTe layout algebra.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    lay = sub.add_parser(
        "layout",
        help="print a CuTe layout and what the algebra makes of it",
        description="Layouts are written in CuTe notation, shape:stride, e.g. '(8,16):(16,1)'.",
    )
    lay.add_argument("layout", type=_layout_arg, help="the layout, e.g. '(2,(3,4)):(12,(4,1))'")
    lay.add_argument("--divide", type=_layout_arg, metavar="TILER", help="logical_divide by it")
    lay.add_argument("--compose", type=_layout_arg, metavar="B", help="print layout ∘ B")
    lay.add_argument("--complement", type=_int_arg, metavar="M", help="complement up to M")
    return p


def _run_layout(args: argparse.Namespace) -> list[str]:
    a: Layout = args.layout
    lines = [
        f"{'layout':<15} {a}   size {a.size}, cosize {a.cosize}",
        f"{'coalesce':<15} {coalesce(a)}",
    ]
    if args.complement is not None:
        c = complement(a, args.complement)
        lines.append(f"{'complement':<15} up to {args.complement} -> {c}")
    if args.compose is not None:
        lines.append(f"{'composition':<15} {a} ∘ {args.compose} -> {composition(a, args.compose)}")
    if args.divide is not None:
        lines.append(f"{'logical_divide':<15} by {args.divide} -> {logical_divide(a, args.divide)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        lines = _run_layout(args)
    except ValueError as e:
        print(f"cute-shard: error: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``cute-shard`` command line.

``cute-shard layout LAYOUT [--divide TILER] [--complement M] [--compose B]`` prints a layout in
CuTe notation and what the algebra makes of it: its size and cosize, its coalesced form, and
optionally a complement, a composition or a logical_divide.

``cute-shard explain --shape S --mesh M --placements P (--view SHAPE | --op NAME [ARG ...])``
shows what a view op does to a DTensor sharding: layouts, rule, placements, communication and
which rank holds what (see ``cute_shard.explanation``).

``cute-shard redistribute --shape S --mesh M --from P --to Q`` shows the plan that
redistributes a DTensor from placements P to Q: the sharded layouts, each mesh dim's move, the
steps with their collectives, local shapes and bytes, who sends what to whom, the bytes against
the physical limit, and with ``--compare-torch`` torch's own plan, bytes and result (see
``cute_shard.redistribute.report``).

Bad arguments print one line, ``cute-shard <command>: error: ...``, and exit 2. ``layout`` does
not import torch; ``explain`` and ``redistribute`` do, once their arguments are valid.

Example::

    $ cute-shard layout '(8,16):(16,1)' --divide 4:1
    layout          (8,16):(16,1)   size 128, cosize 128
    coalesce        (8,16):(16,1)
    logical_divide  by 4:1 -> (4,(2,16)):(16,(64,1))
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import __version__
from .layout import Layout, coalesce, complement, composition, logical_divide


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


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
    p = _Parser(
        prog="cute-shard",
        description="Propagate DTensor sharding through view ops with CuTe layout algebra.",
    )
    p.add_argument("--version", action="version", version=f"cute-shard {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    lay = sub.add_parser(
        "layout",
        help="print a CuTe layout and what the algebra makes of it",
        description="Layouts are written in CuTe notation, shape:stride, e.g. '(8,16):(16,1)'.",
    )
    lay.add_argument("layout", type=_layout_arg, help="the layout, e.g. '(2,(3,4)):(12,(4,1))'")
    lay.add_argument("--divide", type=_layout_arg, metavar="TILER", help="logical_divide by it")
    lay.add_argument("--compose", type=_layout_arg, metavar="B", help="print layout ∘ B")
    lay.add_argument("--complement", type=_int_arg, metavar="M", help="complement up to M")
    _add_explain(sub)
    _add_redistribute(sub)
    return p


_EXPLAIN_EPILOG = """\
placements: R, S<dim>, SS<dim>:<split_factor> (_StridedShard), P or P:<op> (Partial)
ops and their arguments (lists are comma-separated, e.g. 128,32):
  view SHAPE | reshape SHAPE | expand SHAPE | repeat SIZES | permute DIMS
  transpose DIM0 DIM1 | movedim SOURCE DEST | flatten [START [END]]
  unflatten DIM SIZES | squeeze [DIMS] | unsqueeze DIM
  -1 works in any list: --op view -1,32, --op expand -1,16,32
view and squeeze are strict, as on a DTensor: where data would have to move they raise
(shown as "strict view raises ..."); reshape, flatten and unflatten redistribute.

example:
  cute-shard explain --shape 8,16,32 --mesh 2,4 --placements S0,S1 --view 128,32
"""


def _add_explain(sub: argparse._SubParsersAction[_Parser]) -> None:
    exp = sub.add_parser(
        "explain",
        help="show what a view op does to a DTensor sharding",
        description="Show how a view op moves a DTensor sharding: the sharded layouts, the\n"
        "rule, the placements, the communication needed and which rank holds what.",
        epilog=_EXPLAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    exp.add_argument("--shape", required=True, help="global tensor shape, e.g. 8,16,32")
    exp.add_argument("--mesh", required=True, help="device mesh shape, e.g. 2,4")
    exp.add_argument(
        "--placements", required=True, help="one placement per mesh dim, e.g. S0,S1 or R,SS0:4"
    )
    what = exp.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--view", metavar="SHAPE", help="Tensor.view to SHAPE, strict (same as --op view SHAPE)"
    )
    what.add_argument(
        "--op", nargs="+", metavar=("NAME", "ARG"), help="a view op and its arguments"
    )
    exp.add_argument(
        "--strict",
        action="store_true",
        help="view semantics for any op: report the error a strict view raises instead of "
        "redistributing (view always has them)",
    )
    exp.add_argument(
        "--dtype", default="float32", help="element type for byte counts (default float32)"
    )
    exp.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    exp.add_argument("--png", metavar="FILE", help="draw the rank pictures (needs matplotlib)")
    exp.add_argument(
        "--compare-torch",
        action="store_true",
        help="also run torch's reference propagator and judge both answers with the oracle",
    )
    exp.add_argument("--no-grid", action="store_true", help="leave out the rank grids")


_REDISTRIBUTE_EPILOG = """\
placements: R, S<dim>, SS<dim>:<split_factor> (_StridedShard, as distribute_tensor places it),
P or P:<op> (Partial; op: sum, avg, max, min, product), one per mesh dim, comma-separated

example (an FSDP2 + TP weight back to plain shards: one permutation among the ranks):
  cute-shard redistribute --shape 64,32 --mesh 2,4 --from SS0:4,S0 --to S0,S0
"""


def _add_redistribute(sub: argparse._SubParsersAction[_Parser]) -> None:
    red = sub.add_parser(
        "redistribute",
        help="show the plan that redistributes a DTensor between two shardings",
        description="Show how cute_shard redistributes a DTensor from one sharding to another:\n"
        "the sharded layouts, what each mesh dim does and why, the steps with their\n"
        "collectives, local shapes and bytes, who sends what to whom, and the bytes against\n"
        "the physical limit (what the busiest rank lacks of its target shard).",
        epilog=_REDISTRIBUTE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    red.add_argument("--shape", required=True, help="global tensor shape, e.g. 64,32")
    red.add_argument("--mesh", required=True, help="device mesh shape, e.g. 2,4")
    red.add_argument(
        "--from", dest="src", required=True, metavar="PLACEMENTS",
        help="source placements, one per mesh dim, e.g. SS0:4,S0",
    )  # fmt: skip
    red.add_argument(
        "--to", dest="dst", required=True, metavar="PLACEMENTS",
        help="target placements, one per mesh dim, e.g. S0,S0",
    )  # fmt: skip
    red.add_argument(
        "--dtype", default="float32", help="element type for byte counts (default float32)"
    )
    red.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    red.add_argument(
        "--compare-torch",
        action="store_true",
        help="also plan and run torch's own redistribution on a simulated world of the mesh's "
        "size: its steps, its bytes against the limit, and whether its result is right",
    )
    red.add_argument("--no-grid", action="store_true", help="leave out the rank grids")


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


def _run_explain(args: argparse.Namespace) -> list[str]:
    from . import explanation as ex  # torch-free until a valid case is explained

    if args.png:
        ex.check_png_path(args.png)
    op, op_args = ("view", [args.view]) if args.view is not None else (args.op[0], args.op[1:])
    case = ex.parse_case(
        args.shape, args.mesh, args.placements, op, op_args, strict=args.strict, dtype=args.dtype
    )
    result = ex.explain(case, compare_torch=args.compare_torch)
    if args.png:
        ex.write_png(result, args.png)
    if args.json:
        return [json.dumps(ex.to_json(result), indent=2)]
    return ex.render_text(result, grid=not args.no_grid)


def _run_redistribute(args: argparse.Namespace) -> list[str]:
    from .redistribute import report  # torch-free until a valid request is explained

    request = report.parse_request(args.shape, args.mesh, args.src, args.dst, args.dtype)
    result = report.explain_redistribution(request, compare_torch=args.compare_torch)
    if args.json:
        return [json.dumps(result.to_json(), indent=2)]
    return report.render_text(result, grid=not args.no_grid)


# A comma list of integers that starts with a minus sign, e.g. -1,32.
_NEGATIVE_LIST = re.compile(r"-\d+(\s*,\s*-?\d+)+")


def _shield_negative_lists(argv: Sequence[str]) -> list[str]:
    """argv with each list such as ``-1,32`` behind a leading space.

    argparse takes an argument that starts with ``-`` for an option unless it is a single
    negative number, so ``--op view -1,32`` would fail; behind a space it is a value, and the
    list parsers strip the space again.
    """
    return [" " + a if _NEGATIVE_LIST.fullmatch(a) else a for a in argv]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(_shield_negative_lists(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        parser.print_help()
        return 0
    runs = {"explain": _run_explain, "redistribute": _run_redistribute, "layout": _run_layout}
    run = runs[args.command]
    try:
        lines = run(args)
    except ValueError as e:
        print(f"cute-shard {args.command}: error: {e}", file=sys.stderr)
        return 2
    try:
        print("\n".join(lines))
    except BrokenPipeError:  # e.g. piped into head: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

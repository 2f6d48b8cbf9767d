"""The text and JSON both reports share: ``cute-shard explain``'s (``explanation.py``) and
``cute-shard redistribute``'s (``redistribute/report.py``).

Torch-free. Aligned ``label  value`` rows (``row``), byte counts (``fmt_bytes``), the rank grids
(``grid_rows``), a sharded layout's gpu sub-modes (``gpu_modes``, ``layout_json``), the sizes
and dtypes the command lines read (``parse_sizes``, ``DTYPES``), and ``Printed``: a report read
at a prompt shows its text. Below both reports, so neither imports the other's helpers.

    >>> row("mesh", "(2,4), 8 ranks, float32")
    ['mesh           (2,4), 8 ranks, float32']
    >>> fmt_bytes(3 << 10), tuple_text((2, 4))
    ('3 KiB', '(2,4)')
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .layout import Layout
from .notation import Placements, PlacementSpec, placements_str
from .ownership import Picture, grid_lines, row_strides

if TYPE_CHECKING:
    from .engine import ShardedLayout

__all__ = [
    "DTYPES",
    "LABEL",
    "TEXT_WIDTH",
    "GpuMode",
    "Printed",
    "fmt_bytes",
    "gpu_modes",
    "grid_rows",
    "layout_json",
    "layout_rows",
    "parse_int",
    "parse_int_list",
    "parse_sizes",
    "row",
    "tuple_text",
]


class Printed:
    """A report that is read, not rebuilt: ``str`` and, at a prompt, ``repr`` show its text
    (``lines``, one entry per line); ``grid=False`` leaves the rank grids out."""

    __slots__ = ()

    def lines(self, *, grid: bool = True) -> list[str]:
        raise NotImplementedError

    def text(self, *, grid: bool = True) -> str:
        """The text the command prints (``grid=False``: as with ``--no-grid``)."""
        return "\n".join(self.lines(grid=grid))

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()


LABEL = 15  # width of the label column of the text output
TEXT_WIDTH = 100

# Bytes per element, by torch dtype name (torch-free): every name ``str(dtype)``
# gives for the numeric dtypes of every supported torch release (bcomplex32 is 2.14's), and the
# common aliases (a test checks them against the installed torch).
DTYPES: dict[str, int] = {
    "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2,
    "bfloat16": 2, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1,
    "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "complex128": 16, "cdouble": 16, "complex64": 8, "cfloat": 8, "complex32": 4, "chalf": 4,
    "bcomplex32": 4,
    "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
}  # fmt: skip


def parse_sizes(
    text: str, what: str, *, allow_minus_one: bool = False, least: int = 0
) -> tuple[int, ...]:
    """``"8,16,32"`` (or ``"(8,16,32)"``) as ints; ValueError unless every size is >= ``least``
    (0: a tensor may be empty; a mesh's sizes are read with ``least=1``).

    ``allow_minus_one`` admits ``-1`` (a size torch infers).
    """
    sizes = parse_int_list(text, what)
    for i, n in enumerate(sizes):
        if n < least and not (allow_minus_one and n == -1):
            raise ValueError(
                f"{what}: sizes must be >= {least}, got {n} at position {i} of {text!r}"
            )
    return sizes


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    """``"8,16,32"`` (or ``"(8,16,32)"``) as ints, or ValueError naming ``what``."""
    body = text.strip().strip("()[]").strip()
    try:
        return tuple(int(tok) for tok in body.split(",") if tok.strip())
    except ValueError:
        raise ValueError(
            f"{what}: expected comma-separated integers such as 8,16,32, got {text!r}"
        ) from None


def parse_int(text: str, what: str) -> int:
    """``text`` as an int, or ValueError naming ``what``."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{what}: expected an integer, got {text!r}") from None


@dataclass(frozen=True, slots=True)
class GpuMode:
    """Mesh dim ``mesh_dim``'s gpu sub-mode in tensor dim ``tensor_dim``, with global strides."""

    mesh_dim: int
    tensor_dim: int
    layout: Layout

    def __str__(self) -> str:
        return f"m{self.mesh_dim} = {self.layout} in d{self.tensor_dim}"


def gpu_modes(sl: ShardedLayout) -> tuple[GpuMode, ...]:
    """Each mesh dim's gpu sub-mode, with strides in elements of the global row-major tensor."""
    out: list[GpuMode] = []
    for d, (dim, row) in enumerate(zip(sl.dims, row_strides(sl.global_shape), strict=True)):
        for m, leaves in dim.modes()[1].items():
            shape = tuple(s for s, _ in leaves)
            stride = tuple(t * row for _, t in leaves)
            lay = Layout(shape[0], stride[0]) if len(leaves) == 1 else Layout(shape, stride)
            out.append(GpuMode(m, d, lay))
    return tuple(sorted(out, key=lambda g: g.mesh_dim))


def tuple_text(xs: Sequence[int]) -> str:
    """``(2,4)``: sizes as the reports print them."""
    return "(" + ",".join(str(x) for x in xs) + ")"


def row(label: str, value: str, indent: int = 0) -> list[str]:
    """One aligned ``label  value`` line, wrapped under the value column."""
    head = (" " * indent + label).ljust(LABEL - 1) + " "
    return textwrap.wrap(
        value,
        TEXT_WIDTH,
        initial_indent=head,
        subsequent_indent=" " * LABEL,
        break_on_hyphens=False,
        break_long_words=False,
    ) or [head.rstrip()]


def fmt_bytes(n: int) -> str:
    """``n`` bytes as ``768 B``, ``3 KiB``, ``1.5 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def grid_rows(pictures: Sequence[Picture]) -> list[str]:
    """The ``ranks`` rows: each picture's text grid under its title and legend."""
    lines = row(
        "ranks",
        "who holds each element: rows = leading dims flattened, cols = last dim; equal "
        "neighbouring rows and columns are merged and labelled by their index range",
    )
    for pic in pictures:
        if pic.rows is not None and pic.cols is not None and pic.sharded:
            size = f"{len(pic.cols)} cols ({pic.col_dims})"
            if pic.row_dims != "none":
                size = f"{len(pic.rows)} rows ({pic.row_dims}) x {size}"
            lines += ["", f"  {pic.title}: {size}", f"  {pic.legend}"]
            lines += ["    " + x for x in grid_lines(pic)]
        else:
            lines += ["", f"  {pic.title}: {pic.note or pic.legend}"]
    return lines


def layout_json(sl: ShardedLayout | None) -> dict[str, object] | None:
    """A sharded layout and its gpu sub-modes as ``--json`` writes them (None: no layout)."""
    if sl is None:
        return None
    return {
        "layout": str(sl.to_layout()),
        "gpu_modes": [
            {"mesh_dim": g.mesh_dim, "tensor_dim": g.tensor_dim, "layout": str(g.layout)}
            for g in gpu_modes(sl)
        ],
    }


def layout_rows(
    label: str, placements: Placements, sl: ShardedLayout | None, no_layout: str
) -> list[str]:
    """The rows of one sharding: its placements, its sharded layout with each mesh dim's gpu
    sub-mode and pending reductions, or ``no_layout`` (why that is fine) when it has none."""
    lines = row(label, placements_str(placements))
    if sl is None:
        return lines + row("layout", f"none: no layout expresses this sharding {no_layout}", 2)
    gpu = "   ".join(str(g) for g in gpu_modes(sl)) or "none"
    lines += row("layout", str(sl.to_layout()), 2) + row("gpu modes", gpu, 2)
    if sl.partial:
        partial = ", ".join(f"m{m} {PlacementSpec.of(p)}" for m, p in sl.partial)
        lines += row("partial", f"{partial}: a pending reduction, not part of the layout", 2)
    return lines

"""Who holds what: which rank holds each block of a sharded tensor, as text, boxes or a PNG.

A tensor of any rank is folded to 2-D: rows are its leading dims (row-major), columns its last
dim. For every mesh dim that shards (``S``/``SS``), each position of the tensor dim it shards
has an owner coordinate on that mesh dim (the dim's runs decide, ``labels.dim_runs``, uneven
and strided shards included); a cell's *shard id* is those coordinates as one row-major number
over the sharding mesh dims, so it is the global rank when every mesh dim shards. Each axis of
the fold is kept as runs (``Axis``), so a long dim costs its runs, not its length. Mesh dims that
replicate (``R``) or hold partial values (``P``) do not split the data: the ranks along them
hold the same block, and a block's *holders* are all of those ranks.

- ``picture``: the folded owner grid (a ``Picture``), the one computation every view uses;
- ``grid_lines``: the compact text grid ``cute-shard explain`` prints (shard ids);
- ``diagram`` / ``visualize``: boxes labelled with the ranks that hold them, coloured in a
  terminal that supports it (like ``jax.debug.visualize_array_sharding``);
- ``write_png``: the same pictures drawn with matplotlib (the ``plot`` extra).

Equal neighbouring rows and columns merge into one block, labelled by its index range, and past
a dozen blocks the middle ones are elided.

Worked example: a (4, 8) tensor on a (2, 2) mesh with ``[S0, R]``; rows 0-1 are on the ranks
whose mesh-dim-0 coordinate is 0, and mesh dim 1 copies them::

    >>> from cute_shard.notation import parse_placements
    >>> pic = picture("x", (4, 8), parse_placements("S0,R", 2, (2, 2)), (2, 2))
    >>> print("\\n".join(diagram(pic)))
    x
    rows d0 (4) x cols d1 (8); each block is held by the ranks named in it
             0-7
        ┌───────────┐
    0-1 │ ranks 0,1 │
        ├───────────┤
    2-3 │ ranks 2,3 │
        └───────────┘
"""

from __future__ import annotations

import math
import operator
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import numpy as np

from .notation import Placements, PlacementSpec, placements_str
from .redistribute.labels import dim_runs

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from torch.distributed.tensor import DTensor

__all__ = [
    "Axis",
    "DTensorFacts",
    "Picture",
    "diagram",
    "grid_lines",
    "picture",
    "png_figure",
    "read_dtensor",
    "use_color",
    "visualize",
    "write_png",
]

# The fold is (product of leading dims) x (last dim); more rows than this are not drawn at all.
GRID_MAX_ROWS = 1 << 22
GRID_ROW_RUNS = 12  # blocks of rows shown (half from the top, half from the bottom)
GRID_COL_RUNS = 12
DIAGRAM_WIDTH = 100  # used where the terminal's width is unknown
LEGEND_ENTRIES = 16  # holder sets named in a PNG panel's legend

# Background colours (xterm 256-colour codes, light enough for black text), one per holder
# set, chosen by the lowest rank holding the block so that a rank keeps its colour from one
# picture to the next.
PALETTE = (153, 223, 151, 217, 183, 229, 152, 216, 189, 194, 225, 187, 159, 222, 146, 158)


@dataclass(frozen=True, slots=True)
class Axis:
    """One axis of the fold as runs: run i covers the positions from ``starts[i]`` up to the
    next run's start (the last one up to ``length``) and adds ``values[i]`` to the shard id of
    each; neighbouring runs differ. It costs its number of runs, not its length: a dim of
    10**9 elements sharded 8 ways is 8 runs.

    >>> _axis(10, [0, 4, 8], [0, 0, 1]).runs()
    [(0, 8, 0), (8, 10, 1)]
    """

    length: int
    starts: np.ndarray  # int64, increasing from 0 (empty when length is 0)
    values: np.ndarray  # int64, one per run

    def __len__(self) -> int:
        return self.length

    def runs(self) -> list[tuple[int, int, int]]:
        """``(start, stop, value)`` of every run, in order."""
        if not self.length:
            return []
        stops = [*self.starts[1:].tolist(), self.length]
        return list(zip(self.starts.tolist(), stops, self.values.tolist(), strict=True))

    def max(self) -> int:
        return int(self.values.max()) if len(self.values) else 0

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The value at each of ``positions`` (ints in ``[0, length)``)."""
        return self.values[np.searchsorted(self.starts, positions, side="right") - 1]

    def dense(self) -> np.ndarray:
        """The value at every position."""
        return np.repeat(self.values, np.diff(np.append(self.starts, self.length)))


def _axis(length: int, starts: Sequence[int], values: Sequence[int] | np.ndarray) -> Axis:
    """The Axis of runs starting at ``starts`` (increasing from 0) with ``values``, equal
    neighbours merged."""
    a = np.asarray(starts, dtype=np.int64)
    v = np.asarray(values, dtype=np.int64)
    if len(v) > 1:
        new = np.concatenate(([True], v[1:] != v[:-1]))
        a, v = a[new], v[new]
    return Axis(length, a, v)


@dataclass(frozen=True, slots=True)
class Picture:
    """Which shard holds each element of a tensor, folded to 2-D.

    The cell at (i, j) of the fold is the value of ``rows`` at i plus the value of ``cols``
    at j: the shard id (see the module docstring). Where no mesh dim shards both are zeros
    (one shard, on every rank). They are None only when there is nothing to draw (too many
    rows, or no elements), and ``note`` says so.
    """

    title: str
    shape: tuple[int, ...]
    mesh: tuple[int, ...]
    placements: Placements
    rows: Axis | None
    cols: Axis | None
    note: str | None = None

    @property
    def sharded(self) -> list[int]:
        """The mesh dims that split the data, in order."""
        return [m for m, p in enumerate(self.placements) if p.shards]

    @property
    def row_dims(self) -> str:
        return "·".join(f"d{d}" for d in range(len(self.shape) - 1)) or "none"

    @property
    def col_dims(self) -> str:
        return f"d{len(self.shape) - 1}" if self.shape else "none"

    @property
    def legend(self) -> str:
        """What a cell of the text grid means, and what the other mesh dims do."""
        sharded = self.sharded
        partial = _partial_note(self.placements)
        if not sharded:
            return "no mesh dim shards: every rank holds all of it" + (
                f"; {partial}" if partial else ""
            )
        terms = []
        for i, m in enumerate(sharded):
            w = math.prod(self.mesh[k] for k in sharded[i + 1 :])
            terms.append(f"c{m}*{w}" if w > 1 else f"c{m}")
        formula = "+".join(terms)
        others = [m for m in range(len(self.mesh)) if m not in sharded]
        if not others:
            return f"cell = {formula}, the rank holding the element"
        copies = math.prod(self.mesh[m] for m in others)
        what = ", ".join(f"m{m} ({self.placements[m]})" for m in others)
        return (
            f"cell = {formula} (c = mesh coordinate); {what} does not split the data: "
            f"each cell is on {copies} ranks" + (f"; {partial}" if partial else "")
        )


def _partial_note(placements: Placements) -> str:
    """``m1 (P) holds partial values (a pending sum)``, or "" without Partial mesh dims."""
    parts = [
        f"m{m} ({p}) holds partial values (a pending {p.reduce_op})"
        for m, p in enumerate(placements)
        if p.kind == "P"
    ]
    return "; ".join(parts)


def picture(
    title: str, shape: tuple[int, ...], placements: Placements, mesh: tuple[int, ...]
) -> Picture:
    """The owner grid of a tensor of ``shape`` under ``placements`` on ``mesh``."""
    n_rows = math.prod(shape[:-1])
    if n_rows > GRID_MAX_ROWS:
        note = f"not drawn: more than {GRID_MAX_ROWS} rows"
        return Picture(title, shape, mesh, placements, None, None, note)
    if 0 in shape:
        note = f"not drawn: no elements (dim {shape.index(0)} has size 0)"
        return Picture(title, shape, mesh, placements, None, None, note)
    lead = shape[:-1]
    ids = _dim_ids(shape, placements, mesh)
    rows = np.zeros(lead, dtype=np.int64)
    if n_rows:  # (then no leading dim is longer than the fold's rows)
        for d, axis in ids.items():
            if d < len(lead):
                rows = rows + axis.dense().reshape([-1 if i == d else 1 for i in range(len(lead))])
    cols = ids.get(len(shape) - 1) if shape else None
    if cols is None:  # the last dim unsharded (a scalar: one column)
        n = shape[-1] if shape else 1
        cols = _axis(n, [0] if n else [], [0] if n else [])
    rows = rows.reshape(-1)
    return Picture(title, shape, mesh, placements, _axis(len(rows), range(len(rows)), rows), cols)


def _dim_ids(
    shape: tuple[int, ...], placements: Placements, mesh: tuple[int, ...]
) -> dict[int, Axis]:
    """Per tensor dim that some mesh dim shards, what each position adds to its shard id:
    the sum, over the mesh dims sharding it, of the coordinate that holds the position times
    the mesh dim's weight in the id. Read off the dim's runs (``labels.dim_runs``: its
    positions cut where an owner changes, uneven and strided shards included), so a long dim
    costs its runs, not its length."""
    sharded = [m for m, p in enumerate(placements) if p.shards]
    weights = row_strides([mesh[m] for m in sharded])
    by_dim: dict[int, list[tuple[int, int]]] = {}  # tensor dim -> (mesh dim, weight), in order
    for m, w in zip(sharded, weights, strict=True):
        by_dim.setdefault(placements[m].dim % len(shape), []).append((m, w))
    out = {}
    for d, on in by_dim.items():
        levels = tuple((mesh[m], placements[m].split_factor) for m, _ in on)
        runs = dim_runs(shape[d], levels)
        ws = [w for _, w in on]
        out[d] = _axis(
            shape[d],
            [start for start, _, _ in runs],
            [sum(map(operator.mul, ws, label)) for _, _, label in runs],
        )
    return out


def row_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a row-major tensor of ``shape``, in elements."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return tuple(strides)


# --------------------------------------------------------------------------------------------
# Blocks: runs of equal rows and columns


Run = tuple[int, int, int]  # (start, stop, value): one run of an Axis


def _elide(runs: list[Run], limit: int) -> list[Run | None]:
    if len(runs) <= limit:
        return list(runs)
    half = limit // 2
    return [*runs[:half], None, *runs[-half:]]


def _span(run: Run) -> str:
    start, stop, _ = run
    return str(start) if stop - start == 1 else f"{start}-{stop - 1}"


def grid_lines(pic: Picture) -> list[str]:
    """The picture as text, one shard id per block: runs of equal rows and of equal columns
    are merged, and past ``GRID_ROW_RUNS`` / ``GRID_COL_RUNS`` runs the middle is elided."""
    if pic.rows is None or pic.cols is None:
        return []
    rows = _elide(pic.rows.runs(), GRID_ROW_RUNS)
    cols = _elide(pic.cols.runs(), GRID_COL_RUNS)
    heads = [_span(c) if c else "…" for c in cols]
    top = pic.rows.max() + pic.cols.max()
    w = max(len(str(top)), *(len(h) for h in heads))
    labels = [_span(r) if r else "⋮" for r in rows]
    lw = max(len(x) for x in labels)
    lines = [" " * lw + "  " + " ".join(h.rjust(w) for h in heads)]
    for r, label in zip(rows, labels, strict=True):
        cells = [("⋮" if r is None else "…" if c is None else str(r[2] + c[2])) for c in cols]
        lines.append(label.rjust(lw) + "  " + " ".join(x.rjust(w) for x in cells))
    return lines


# --------------------------------------------------------------------------------------------
# Holders: the ranks that hold a block


def _rank_grid(mesh: tuple[int, ...], ranks: np.ndarray | None) -> np.ndarray:
    """The global rank at each mesh coordinate (``ranks``, or row-major numbering)."""
    if ranks is None:
        return np.arange(math.prod(mesh), dtype=np.int64).reshape(mesh)
    grid = np.asarray(ranks, dtype=np.int64)
    if grid.shape != mesh:
        raise ValueError(f"ranks: expected an array of the mesh's shape {mesh}, got {grid.shape}")
    return grid


def holders(pic: Picture, shard_id: int, ranks: np.ndarray | None = None) -> tuple[int, ...]:
    """The global ranks holding the block whose shard id is ``shard_id``, ascending."""
    grid = _rank_grid(pic.mesh, ranks)
    sharded = pic.sharded
    coords = np.unravel_index(shard_id, [pic.mesh[m] for m in sharded]) if sharded else ()
    index: list[int | slice] = [slice(None)] * len(pic.mesh)
    for m, c in zip(sharded, coords, strict=True):
        index[m] = int(c)
    return tuple(sorted(int(r) for r in np.asarray(grid[tuple(index)]).reshape(-1)))


def rank_list(ranks: Sequence[int]) -> str:
    """``0-3,8`` for (0, 1, 2, 3, 8): runs of three or more consecutive ranks as ranges."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ranks[i]}-{ranks[j]}")
        else:
            parts.extend(str(r) for r in ranks[i : j + 1])
        i = j + 1
    return ",".join(parts)


def holders_label(ranks: Sequence[int]) -> str:
    """``rank 3`` or ``ranks 0,4``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"


def _present_ids(pic: Picture) -> set[int]:
    """The shard ids some element has: every row id plus every column id (the fold is an
    outer sum), so a shard id missing here is a shard that holds nothing (uneven sizes)."""
    if pic.rows is None or pic.cols is None:
        return set()
    rows, cols = np.unique(pic.rows.values), np.unique(pic.cols.values)
    return {int(r + c) for r in rows for c in cols}


def _empty_note(pic: Picture, ranks: np.ndarray | None) -> str | None:
    if pic.rows is None or not pic.sharded:
        return None
    total = math.prod(pic.mesh[m] for m in pic.sharded)
    present = _present_ids(pic)
    empty = sorted(r for s in range(total) if s not in present for r in holders(pic, s, ranks))
    if not empty:
        return None
    verb = "holds" if len(empty) == 1 else "hold"
    return f"{holders_label(empty)} {verb} nothing (uneven shards)"


# --------------------------------------------------------------------------------------------
# The box diagram


def diagram(
    pic: Picture,
    ranks: np.ndarray | None = None,
    *,
    color: bool = False,
    width: int = DIAGRAM_WIDTH,
) -> list[str]:
    """Boxes, one per block of the fold, each naming the ranks that hold it.

    ``ranks`` is the global rank at each mesh coordinate (default: row-major numbering).
    ``color`` paints each block's background with its holders' colour (ANSI escapes);
    columns beyond ``width`` characters are elided.
    """
    grid = _rank_grid(pic.mesh, ranks)
    lines = [pic.title]
    if pic.rows is None or pic.cols is None:
        return [*lines, pic.note or ""]
    fold = f"cols {pic.col_dims} ({len(pic.cols)})" if pic.shape else "a scalar"
    if pic.row_dims != "none":
        fold = f"rows {pic.row_dims} ({len(pic.rows)}) x {fold}"
    lines.append(f"{fold}; each block is held by the ranks named in it")
    if not pic.sharded:
        lines.append("no mesh dim shards: every rank holds all of it")
    for note in (_partial_note(pic.placements), _empty_note(pic, grid)):
        if note:
            lines.append(note)
    return lines + [line.rstrip() for line in _boxes(pic, grid, color, width)]


def _boxes(pic: Picture, grid: np.ndarray, color: bool, width: int) -> list[str]:
    rows_v, cols_v = pic.rows, pic.cols
    if rows_v is None or cols_v is None:
        return []
    rows = _elide(rows_v.runs(), GRID_ROW_RUNS)
    row_heads = [_span(r) if r else "⋮" for r in rows] if pic.row_dims != "none" else [""]
    lw = max(len(h) for h in row_heads)
    labels: dict[int, tuple[str, int]] = {}  # shard id -> (label, palette colour)

    def cell(r: Run | None, c: Run | None) -> tuple[str, int | None]:
        if r is None:
            return "⋮", None
        if c is None:
            return "…", None
        sid = r[2] + c[2]
        if sid not in labels:
            who = holders(pic, sid, grid)
            labels[sid] = (holders_label(who), PALETTE[who[0] % len(PALETTE)])
        return labels[sid]

    limit = GRID_COL_RUNS
    while True:
        cols = _elide(cols_v.runs(), limit)
        table = [[cell(r, c) for c in cols] for r in rows]
        heads = [_span(c) if c else "…" for c in cols] if pic.shape else [""]
        widths = [
            max(len(heads[j]), *(len(row[j][0]) for row in table)) + 2 for j in range(len(cols))
        ]
        if lw + 1 + sum(widths) + len(widths) + 1 <= width or limit <= 2:
            break
        limit -= 2

    pad = " " * lw + " "
    out = [pad + " " + " ".join(h.center(w) for h, w in zip(heads, widths, strict=True))]
    out = [line for line in out if line.strip()]  # a scalar has no column indices
    out.append(pad + "┌" + "┬".join("─" * w for w in widths) + "┐")
    for i, (head, row) in enumerate(zip(row_heads, table, strict=True)):
        cells = [
            _paint(text.center(w), colour if color else None)
            for (text, colour), w in zip(row, widths, strict=True)
        ]
        out.append(head.rjust(lw) + " │" + "│".join(cells) + "│")
        if i < len(table) - 1:
            out.append(pad + "├" + "┼".join("─" * w for w in widths) + "┤")
    out.append(pad + "└" + "┴".join("─" * w for w in widths) + "┘")
    return out


def _paint(text: str, colour: int | None) -> str:
    if colour is None:
        return text
    return f"\x1b[30;48;5;{colour}m{text}\x1b[0m"


def use_color(file: TextIO) -> bool:
    """Whether to colour output to ``file``: a terminal, unless NO_COLOR is set or TERM is
    ``dumb``; FORCE_COLOR turns it on anywhere (both as in no-color.org and force-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(file, "isatty", None)
    return bool(isatty is not None and isatty())


# --------------------------------------------------------------------------------------------
# A live DTensor


@dataclass(frozen=True, slots=True)
class DTensorFacts:
    """What the explainers read off a DTensor: global shape, mesh, placements in CLI notation,
    dtype name, and the global rank at each mesh coordinate."""

    shape: tuple[int, ...]
    mesh: tuple[int, ...]
    placements: Placements
    dtype: str
    ranks: np.ndarray


def read_dtensor(dtensor: DTensor, what: str = "dtensor") -> DTensorFacts:
    """The facts of ``dtensor``; ValueError (naming ``what``) if it is not a DTensor."""
    from torch.distributed.tensor import DTensor

    if not isinstance(dtensor, DTensor):
        raise ValueError(
            f"{what}: expected a DTensor, got {type(dtensor).__module__}.{type(dtensor).__name__}"
            "; make one with torch.distributed.tensor.distribute_tensor or DTensor.from_local"
        )
    mesh = dtensor.device_mesh
    return DTensorFacts(
        shape=tuple(int(n) for n in dtensor.shape),
        mesh=tuple(int(n) for n in mesh.shape),
        placements=tuple(PlacementSpec.of(p) for p in dtensor.placements),
        dtype=str(dtensor.dtype).removeprefix("torch."),
        ranks=np.asarray(mesh.mesh.tolist(), dtype=np.int64).reshape(mesh.shape),
    )


def _shape_text(xs: Sequence[int]) -> str:
    return "(" + ",".join(str(x) for x in xs) + ")"


def visualize(
    dtensor: DTensor,
    *,
    file: TextIO | None = None,
    color: bool | None = None,
    width: int | None = None,
) -> None:
    """Print which rank holds which block of ``dtensor``, as boxes (see ``diagram``).

    ``file`` defaults to stdout; ``color`` to ``use_color(file)`` (a terminal without
    NO_COLOR); ``width`` to the terminal's width.
    """
    facts = read_dtensor(dtensor, "visualize")
    out = sys.stdout if file is None else file
    title = (
        f"DTensor {_shape_text(facts.shape)} {facts.dtype} on mesh {_shape_text(facts.mesh)}, "
        f"{placements_str(facts.placements)}"
    )
    pic = picture(title, facts.shape, facts.placements, facts.mesh)
    columns = width if width is not None else shutil.get_terminal_size((DIAGRAM_WIDTH, 24))[0]
    lines = diagram(
        pic, facts.ranks, color=use_color(out) if color is None else color, width=columns
    )
    print("\n".join(lines), file=out)


# --------------------------------------------------------------------------------------------
# PNG


def png_available() -> bool:
    """Whether matplotlib (the optional ``plot`` extra) is importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_png(
    pics: Sequence[Picture],
    path: str,
    title: str,
    ranks: np.ndarray | None = None,
    max_pixels: int = 512,
) -> None:
    """Draw ``pics`` side by side into a PNG at ``path`` (needs matplotlib); OSError if
    ``path`` cannot be written. See ``png_figure``."""
    import matplotlib.pyplot as plt

    fig = png_figure(pics, title, ranks, max_pixels)
    try:
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def png_figure(
    pics: Sequence[Picture],
    title: str,
    ranks: np.ndarray | None = None,
    max_pixels: int = 512,
) -> Figure:
    """The pictures as a matplotlib figure, one panel each.

    A panel is the fold, one colour per block's holders, with a legend titled "rank" naming
    them and, over the image, what the text says too: "every rank holds all of it" where no
    mesh dim shards, the Partial mesh dims, and ranks left empty by uneven shards. Folds
    longer than ``max_pixels`` are sampled at evenly spaced indices.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    palette = plt.get_cmap("tab20")
    colours = [palette(i) for i in range(palette.N)]
    fig, axes = plt.subplots(1, len(pics), figsize=(5.5 * len(pics), 4.8), squeeze=False)
    for ax, pic in zip(axes[0], pics, strict=True):
        ax.set_title(pic.title, fontsize=10)
        if pic.rows is None or pic.cols is None:
            ax.text(0.5, 0.5, pic.note or "", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        grid = _rank_grid(pic.mesh, ranks)
        rows, cols = _sample(pic.rows, max_pixels), _sample(pic.cols, max_pixels)
        ids = rows[:, None] + cols[None, :]
        ids_present, inverse = np.unique(ids, return_inverse=True)
        who = {int(s): holders(pic, int(s), grid) for s in ids_present}
        colour_of = np.array([who[int(s)][0] % len(colours) for s in ids_present])
        image = np.asarray(colours)[colour_of[inverse.reshape(ids.shape)]]
        extent = (-0.5, len(pic.cols) - 0.5, len(pic.rows) - 0.5, -0.5)
        ax.imshow(image, aspect="auto", interpolation="nearest", extent=extent)
        ax.set_ylabel(f"rows: {pic.row_dims}")
        ax.set_xlabel(f"cols: {pic.col_dims}")
        notes = [n for n in (_partial_note(pic.placements), _empty_note(pic, grid)) if n]
        if not pic.sharded:
            notes.insert(0, "every rank holds all of it")
        if notes:
            ax.text(
                0.5, 0.5, "\n".join(notes), ha="center", va="center", transform=ax.transAxes,
                fontsize=9, bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"},
            )  # fmt: skip
        shown = sorted(who.items())[:LEGEND_ENTRIES]
        handles = [Patch(color=colours[ranks_[0] % len(colours)]) for _, ranks_ in shown]
        names = [holders_label(ranks_) for _, ranks_ in shown]
        if len(who) > len(shown):
            handles.append(Patch(color="white"))
            names.append(f"… {len(who) - len(shown)} more")
        ax.legend(handles, names, title="rank", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  fontsize=8, title_fontsize=9, frameon=False)  # fmt: skip
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _sample(axis: Axis, n: int) -> np.ndarray:
    """The values at ``n`` evenly spaced positions of ``axis`` (at every one if it is no
    longer)."""
    if len(axis) <= n:
        return axis.dense()
    return axis.at(np.linspace(0, len(axis) - 1, n).round().astype(np.int64))

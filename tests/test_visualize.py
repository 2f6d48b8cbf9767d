"""``cute_shard.visualize(dtensor)``: which rank holds which block, drawn in the terminal.

The diagrams are checked against the oracle: each box is read back (its row and column index
ranges and the ranks it names), and every element inside it must be held by exactly those
ranks, as ``oracle.local_indices`` says, with the global rank ids of the DTensor's own mesh.
Cases cover 1-D, 2-D and 3-D meshes, tensors of 0 to 4 dims, Shard, _StridedShard, Replicate
and Partial, uneven shards and submeshes. Two even cases are pinned as golden text, and the
colour rules (a terminal, NO_COLOR, FORCE_COLOR, TERM=dumb) are checked one by one.
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections.abc import Sequence

import numpy as np
import pytest
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

import cute_shard
from cute_shard import oracle

from .live_dtensor import make, world8

pytestmark = pytest.mark.usefixtures("world8")
__all__ = ["world8"]  # the fixture, imported for pytest

S, R, P = Shard, Replicate, Partial
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def SS(dim: int, sf: int) -> Placement:  # the notation's name
    return _StridedShard(dim, split_factor=sf)


def draw(x: DTensor, **kwargs: object) -> str:
    out = io.StringIO()
    cute_shard.visualize(x, file=out, **kwargs)  # type: ignore[arg-type]
    return out.getvalue()


# --------------------------------------------------------------------------------------------
# Golden (even shards)

GOLDEN_2D = """\
DTensor (8,16) float32 on mesh (2,4), [S0, S1]
rows d0 (8) x cols d1 (16); each block is held by the ranks named in it
       0-3      4-7      8-11    12-15
    ┌────────┬────────┬────────┬────────┐
0-3 │ rank 0 │ rank 1 │ rank 2 │ rank 3 │
    ├────────┼────────┼────────┼────────┤
4-7 │ rank 4 │ rank 5 │ rank 6 │ rank 7 │
    └────────┴────────┴────────┴────────┘
"""

GOLDEN_REPLICATED_PARTIAL = """\
DTensor (4,8) bfloat16 on mesh (2,2,2), [S0, R, P]
rows d0 (4) x cols d1 (8); each block is held by the ranks named in it
m2 (P) holds partial values (a pending sum)
         0-7
    ┌───────────┐
0-1 │ ranks 0-3 │
    ├───────────┤
2-3 │ ranks 4-7 │
    └───────────┘
"""


def test_golden_2d() -> None:
    assert draw(make((8, 16), (2, 4), [S(0), S(1)])) == GOLDEN_2D


def test_golden_replicated_and_partial() -> None:
    import torch

    x = make((4, 8), (2, 2, 2), [S(0), R(), P()], dtype=torch.bfloat16)
    assert draw(x) == GOLDEN_REPLICATED_PARTIAL


# --------------------------------------------------------------------------------------------
# Every box against the oracle


def _holders_by_oracle(x: DTensor) -> np.ndarray:
    """For each element of the fold (rows x cols), the sorted global ranks holding it, as a
    tuple in an object array."""
    shape = tuple(x.shape)
    mesh = tuple(x.device_mesh.shape)
    ranks = np.asarray(x.device_mesh.mesh.tolist()).reshape(mesh)
    fold = (math.prod(shape[:-1]), shape[-1] if shape else 1)
    held = np.empty(fold, dtype=object)
    for i, j in itertools.product(range(fold[0]), range(fold[1])):
        held[i, j] = []
    for coord in oracle.mesh_coords(mesh):
        idx = oracle.local_indices(shape, list(x.placements), mesh, coord)
        cells = np.zeros(shape, dtype=bool)
        cells[np.ix_(*idx)] = True
        for i, j in zip(*np.nonzero(cells.reshape(fold)), strict=True):
            held[i, j].append(int(ranks[coord]))
    return held


def _read_range(text: str) -> range:
    start, _, end = text.partition("-")
    return range(int(start), int(end or start) + 1)


def _read_ranks(label: str) -> list[int]:
    """``rank 3`` -> [3]; ``ranks 0-3,8`` -> [0, 1, 2, 3, 8]."""
    body = label.removeprefix("ranks ").removeprefix("rank ")
    return [r for part in body.split(",") for r in _read_range(part)]


def _read_boxes(text: str) -> list[tuple[range, range, list[int]]]:
    """(row range, column range, ranks) of every box of a diagram without elision."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if "┌" in line)
    bounds = [i for i, ch in enumerate(lines[top]) if ch in "┌┬┐"]
    spans = list(itertools.pairwise(bounds))
    # the column indices stand over the boxes (a scalar has none: a note is there instead)
    over = lines[top - 1] if lines[top - 1].startswith(" ") else ""
    heads = [over[a + 1 : b].strip() for a, b in spans]
    boxes = []
    for line in lines[top + 1 :]:
        if "│" not in line:
            continue
        head = line[: bounds[0]].strip()
        for (a, b), col in zip(spans, heads, strict=True):
            label = line[a + 1 : b].strip()
            rows = _read_range(head) if head else range(1)
            cols = _read_range(col) if col else range(1)
            boxes.append((rows, cols, _read_ranks(label)))
    return boxes


def test_reading_boxes_back() -> None:
    # the reader the oracle checks rely on, on the golden diagram
    assert _read_boxes(GOLDEN_2D) == [
        (range(r * 4, r * 4 + 4), range(c * 4, c * 4 + 4), [r * 4 + c])
        for r in range(2)
        for c in range(4)
    ]


def _mesh(shape: Sequence[int], names: tuple[str, ...] | None = None) -> DeviceMesh:
    return init_device_mesh("cpu", tuple(shape), mesh_dim_names=names)


CASES: list[tuple[str, tuple[int, ...], tuple[int, ...], list[Placement]]] = [
    ("1-D mesh, 1-D tensor", (8,), (8,), [S(0)]),
    ("1-D mesh, uneven: ranks left empty", (3,), (8,), [S(0)]),
    ("2-D mesh, transposed mesh order", (8, 16), (2, 4), [S(1), S(0)]),
    ("2-D mesh, one dim sharded twice, uneven", (10, 6), (2, 4), [S(0), S(0)]),
    ("2-D mesh, strided", (8, 4), (2, 4), [SS(0, 2), S(1)]),
    ("2-D mesh, strided leaving ranks empty", (12, 6), (2, 4), [S(0), SS(0, 3)]),
    ("2-D mesh, replicate and partial", (4, 4), (2, 4), [R(), P()]),
    ("3-D mesh, 3-D tensor, uneven", (6, 5, 4), (2, 2, 2), [S(0), S(2), S(1)]),
    ("3-D mesh, partial and replicate", (4, 8), (2, 2, 2), [P("max"), S(1), R()]),
    ("4-D tensor", (2, 3, 4, 5), (2, 4), [S(3), S(1)]),
    ("0-D tensor", (), (2, 4), [R(), R()]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "mesh", "placements"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_every_box_names_exactly_the_ranks_the_oracle_says(
    shape: tuple[int, ...], mesh: tuple[int, ...], placements: list[Placement]
) -> None:
    x = make(shape, mesh, placements)
    _check_against_oracle(x)


def _check_against_oracle(x: DTensor) -> None:
    text = draw(x, color=False)
    held = _holders_by_oracle(x)
    boxes = _read_boxes(text)
    covered = np.zeros(held.shape, dtype=bool)
    for rows, cols, ranks in boxes:
        for i, j in itertools.product(rows, cols):
            assert sorted(held[i, j]) == ranks, (i, j, text)
            covered[i, j] = True
    assert covered.all(), text  # the boxes tile the whole tensor
    everyone = {int(r) for r in x.device_mesh.mesh.reshape(-1).tolist()}
    empty = everyone - {r for cell in held.reshape(-1) for r in cell}
    if empty:
        assert "hold nothing (uneven shards)" in text or "holds nothing" in text
        for r in empty:
            assert not any(r in ranks for _, _, ranks in boxes)


def test_submesh_boxes_name_the_global_ranks() -> None:
    mesh2d = _mesh((2, 4), ("dp", "tp"))
    across = make((8, 4), mesh2d["dp"], [S(0)])  # rank 0's dp group: global ranks 0 and 4
    assert "rank 4" in draw(across)
    _check_against_oracle(across)
    _check_against_oracle(make((8, 4), mesh2d["tp"], [S(1)]))  # ranks 0-3


def test_replicated_says_every_rank_holds_all_of_it() -> None:
    text = draw(make((4, 4), (8,), [R()]))
    assert "no mesh dim shards: every rank holds all of it" in text
    assert "│ ranks 0-7 │" in text


def test_elided_when_large_and_narrow() -> None:
    text = draw(make((64, 64), (8,), [S(1)]), width=50)
    boxes = [line for line in text.splitlines()[2:] if line.strip()]
    assert all(len(line) <= 50 for line in boxes), text
    assert "…" in text
    rows = draw(make((64, 64), (8,), [SS(0, 4)]))
    assert "⋮" in rows  # 32 blocks of rows: the middle ones are left out


def test_an_empty_tensor_says_there_is_nothing_to_draw() -> None:
    """A DTensor with a dim of size 0 (an empty batch) has no blocks: the diagram says so
    (it used to index its first block and raise IndexError)."""
    text = draw(make((0, 4), (8,), [S(0)]))
    assert "not drawn: no elements (dim 0 has size 0)" in text


def test_a_long_flat_tensor_is_drawn_from_its_runs() -> None:
    """A 1-D DTensor of 10**9 elements (a flat parameter): one box per rank, without a
    value per element (that would be 8 GB)."""
    import torch

    mesh = init_device_mesh("cpu", (8,))
    local = torch.empty(10**9 // 8)  # (never written: the picture reads the spec alone)
    x = DTensor.from_local(local, mesh, [S(0)], run_check=False, shape=(10**9,), stride=(1,))
    text = draw(x, width=200)
    assert "0-124999999" in text and "875000000-999999999" in text


def test_not_a_dtensor_is_a_value_error() -> None:
    import torch

    with pytest.raises(ValueError, match=r"^visualize: expected a DTensor, got torch\.Tensor"):
        cute_shard.visualize(torch.zeros(4))


# --------------------------------------------------------------------------------------------
# Colour


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def plain_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    return monkeypatch


def _shown(file: io.StringIO, **kwargs: object) -> str:
    cute_shard.visualize(make((8, 16), (2, 4), [S(0), S(1)]), file=file, **kwargs)  # type: ignore[arg-type]
    return file.getvalue()


def test_a_terminal_gets_colour(plain_env: pytest.MonkeyPatch) -> None:
    coloured = _shown(_Terminal())
    assert ANSI.search(coloured)
    assert ANSI.sub("", coloured) == GOLDEN_2D  # the same diagram under the colour


@pytest.mark.parametrize(
    ("env", "file", "kwargs", "coloured"),
    [
        ({}, "pipe", {}, False),  # not a terminal
        ({"NO_COLOR": "1"}, "tty", {}, False),
        ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, "tty", {}, False),  # NO_COLOR wins
        ({"TERM": "dumb"}, "tty", {}, False),
        ({"FORCE_COLOR": "1"}, "pipe", {}, True),
        ({}, "pipe", {"color": True}, True),
        ({}, "tty", {"color": False}, False),
    ],
    ids=["pipe", "NO_COLOR", "NO_COLOR+FORCE_COLOR", "TERM=dumb", "FORCE_COLOR", "color=True",
         "color=False"],
)  # fmt: skip
def test_colour_rules(
    plain_env: pytest.MonkeyPatch,
    env: dict[str, str],
    file: str,
    kwargs: dict[str, object],
    coloured: bool,
) -> None:
    for name, value in env.items():
        plain_env.setenv(name, value)
    out = _shown(_Terminal() if file == "tty" else io.StringIO(), **kwargs)
    assert bool(ANSI.search(out)) is coloured

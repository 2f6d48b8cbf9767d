"""The executor's own decisions that no plan field states: when an all-gather's blocks are
already the target (``execute._in_order``), so the gathered buffer is returned as it is;
when boxes cut a tensor into equal pieces along one dim (``execute._tiles``), so a buffer
is one strided copy of it (``_blocks_of``, undone by ``_from_blocks``); and the order of
dims a chunk's result keeps."""

from __future__ import annotations

import pytest
import torch

from cute_shard.notation import parse_placements
from cute_shard.redistribute import plan_redistribution
from cute_shard.redistribute.execute import (
    IN_ORDER,
    REPEATED,
    _blocks_of,
    _from_blocks,
    _in_order,
    _layout,
    _tiles,
    _Tiling,
    execute,
)


def test_row_slabs_in_order_are_the_tensor() -> None:
    # (4, 6) as rows [0, 2) then [2, 4): the blocks, one after another, are the tensor
    assert _in_order([(((0, 2),), ((0, 6),)), (((2, 4),), ((0, 6),))], (4, 6), 24)


def test_column_slabs_are_not() -> None:
    assert not _in_order([(((0, 4),), ((0, 3),)), (((0, 4),), ((3, 6),))], (4, 6), 24)


def test_slabs_out_of_order_are_not() -> None:
    assert not _in_order([(((2, 4),), ((0, 6),)), (((0, 2),), ((0, 6),))], (4, 6), 24)


def test_parts_of_one_row_are_slabs() -> None:
    # (2, 6) as row 0 in halves, then row 1: each piece is a run of the row-major order
    boxes = [(((0, 1),), ((0, 3),)), (((0, 1),), ((3, 6),)), (((1, 2),), ((0, 6),))]
    assert _in_order(boxes, (2, 6), 12)


def test_a_box_of_several_ranges_is_not_a_slab() -> None:
    boxes = [(((0, 1), (2, 3)), ((0, 6),)), (((1, 2), (3, 4)), ((0, 6),))]
    assert not _in_order(boxes, (4, 6), 24)


def test_empty_blocks_are_skipped_and_every_element_must_be_covered() -> None:
    rows = [(((0, 2),), ((0, 6),)), ((), ((0, 6),)), (((2, 4),), ((0, 6),))]
    assert _in_order(rows, (4, 6), 24)
    assert not _in_order(rows[:1], (4, 6), 24)  # rows 2-3 missing
    assert not _in_order(rows, (4, 6), 30)  # a gathered buffer of another size


COLUMNS = [(((0, 4),), ((0, 3),)), (((0, 4),), ((3, 6),))]  # (4, 6) in two column halves
# (4, 6)'s columns dealt to two peers in three rounds: 0, 2, 4 and 1, 3, 5
DEALT = [(((0, 4),), ((0, 1), (2, 3), (4, 5))), (((0, 4),), ((1, 2), (3, 4), (5, 6)))]


def test_column_halves_tile_dim_1_in_one_round() -> None:
    assert _tiles(COLUMNS, (4, 6)) == _Tiling(1, 1)


def test_dealt_columns_tile_dim_1_in_three_rounds() -> None:
    assert _tiles(DEALT, (4, 6)) == _Tiling(1, 3)


# (4, 6)'s columns as torch.chunk cuts 6 into 4: 2, 2, 2, 0 (the last peer's box is empty)
CHUNKED = [
    (((0, 4),), ((0, 2),)),
    (((0, 4),), ((2, 4),)),
    (((0, 4),), ((4, 6),)),
    (((0, 4),), ()),
]


def test_uneven_columns_tile_dim_1_in_pieces() -> None:
    assert _tiles(CHUNKED, (4, 6)) == _Tiling(1, 1, (2, 2, 2, 0))
    halves = [(((0, 4),), ((0, 4),)), (((0, 4),), ((4, 6),))]
    assert _tiles(halves, (4, 6)) == _Tiling(1, 1, (4, 2))


@pytest.mark.parametrize(
    "boxes",
    [
        [(((0, 4),), ((0, 2),)), (((0, 4),), ((3, 6),))],  # a gap
        [(((0, 4),), ((0, 2),)), (((0, 4),), ((2, 5),))],  # short of the end
        [(((0, 4),), ((3, 6),)), (((0, 4),), ((0, 3),))],  # out of group order
        [(((0, 2),), ((0, 3),)), (((2, 4),), ((3, 6),))],  # cut along two dims
        [(((0, 4),), ((0, 3),))],  # one peer
        [(((0, 4),), ((0, 2), (3, 4))), (((0, 4),), ((2, 3), (4, 6)))],  # uneven rounds
        [((), ((0, 3),)), ((), ((3, 6),))],  # an empty dim
    ],
)
def test_other_cuts_do_not_tile(boxes: list[tuple[tuple[tuple[int, int], ...], ...]]) -> None:
    assert _tiles(boxes, (4, 6)) is None


@pytest.mark.parametrize(
    ("boxes", "tiling"),
    [
        (COLUMNS, _Tiling(1, 1)),
        (DEALT, _Tiling(1, 3)),
        (CHUNKED, _Tiling(1, 1, (2, 2, 2, 0))),
        ([(((0, 4),), ((0, 6),))], IN_ORDER),
    ],
)
def test_blocks_are_the_boxes_in_order_and_put_back(
    boxes: list[tuple[tuple[tuple[int, int], ...], ...]], tiling: _Tiling
) -> None:
    """The buffer is each box's elements, row-major, one box after another (what the
    general path packs), contiguous also from a transposed tensor, and ``_from_blocks``
    rebuilds the tensor from it, contiguous."""
    x = torch.arange(24.0).reshape(6, 4).t()  # (4, 6), not row-major
    pieces = [
        torch.cat([x[:, a:b] for a, b in box[1]], dim=1).reshape(-1) if box[1] else x[:0, 0]
        for box in boxes
    ]
    buf = _blocks_of(x, tiling, len(boxes))
    assert buf.is_contiguous()
    assert torch.equal(buf, torch.cat(pieces))
    back = _from_blocks(buf, tiling, len(boxes), (4, 6))
    assert back.is_contiguous()
    assert torch.equal(back, x)


def test_a_buffer_of_whole_tensors_repeats_it() -> None:
    """An uneven gather's send side: every member needs all of the local tensor, so the
    buffer is it, once per member, in one op."""
    whole = (((0, 4),), ((0, 6),))
    assert _layout([whole] * 3, (4, 6)) == REPEATED
    assert _layout([whole], (4, 6)) == IN_ORDER  # one member: the tensor itself
    x = torch.arange(24.0).reshape(6, 4).t()
    assert torch.equal(_blocks_of(x, REPEATED, 3), torch.cat([x.reshape(-1)] * 3))


@pytest.mark.parametrize(("target", "columns"), [("S2", [(4, 8)]), ("SS2:2", [(2, 4), (10, 12)])])
def test_a_chunk_keeps_the_local_tensors_order_of_dims(
    target: str, columns: list[tuple[int, int]]
) -> None:
    """A chunk of a local tensor whose dims are not in row-major order (a transposed
    activation's) is dense in the same order, as torch's chunk clones it: the DTensor's
    global strides keep that order, and a later local view relies on it. It came out
    row-major, and a reshape in a backward then failed ('view size is not compatible with
    input tensor's size and stride'). One range (S2) and several (SS2:2) of the last dim."""
    shape, mesh = (4, 6, 16), (4,)
    plan = plan_redistribution(
        shape, mesh, parse_placements("R", 3, mesh), parse_placements(target, 3, mesh)
    )
    local = torch.arange(4 * 6 * 16.0).reshape(16, 4, 6).permute(1, 2, 0)  # strides (6, 1, 24)
    out = execute(local, plan, None, (1,), None)  # type: ignore[arg-type]  # (no collective)
    assert torch.equal(out, torch.cat([local[:, :, a:b] for a, b in columns], dim=2))
    assert out.stride() == (6, 1, 24)
    row_major = execute(local.contiguous(), plan, None, (1,), None)  # type: ignore[arg-type]
    assert row_major.is_contiguous() and torch.equal(row_major, out)

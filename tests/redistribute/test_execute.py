"""The executor's own decisions that no plan field states: when an all-gather's blocks are
already the target (``execute._in_order``), so the gathered buffer is returned as it is."""

from __future__ import annotations

from cute_shard.redistribute.execute import _in_order


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

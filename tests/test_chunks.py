"""The chunk model (``cute_shard.chunks``) against torch.

Two references: ``torch.chunk`` itself, composed as the model says DTensor composes it (one
cut for a ``Shard``; ``split_factor`` pieces, each cut over the ranks, for a
``_StridedShard``), and DTensor's own ``Shard`` / ``_StridedShard`` splitting a tensor, so a
change in either torch's semantics or the model shows here. Sizes, split factors and mesh
sizes run over every small case, uneven and empty ones included.
"""

from __future__ import annotations

import doctest
import itertools
import subprocess
import sys

import pytest
import torch
from torch.distributed.tensor.placement_types import Shard, _StridedShard

from cute_shard import chunks, meta
from cute_shard.chunks import Chunking, chunk_len, chunk_lens, chunking

LENGTHS = range(0, 41)
SPLIT_FACTORS = range(1, 7)
MESH_SIZES = range(1, 7)
CASES = list(itertools.product(LENGTHS, SPLIT_FACTORS, MESH_SIZES))


def torch_chunk_lens(n: int, parts: int) -> list[int]:
    """``torch.chunk`` of ``n`` rows into ``parts``, padded with empty chunks (as DTensor
    pads them)."""
    got = [len(c) for c in torch.chunk(torch.arange(n), parts)] if n else []
    return got + [0] * (parts - len(got))


def torch_model_lens(n: int, sf: int, m: int) -> list[int]:
    """Each rank's rows: ``torch.chunk`` into ``sf`` pieces, each piece chunked over ``m``."""
    per_piece = [torch_chunk_lens(piece, m) for piece in torch_chunk_lens(n, sf)]
    return [sum(piece[r] for piece in per_piece) for r in range(m)]


def dtensor_lens(n: int, sf: int, m: int) -> list[int]:
    """Each rank's rows as DTensor's placement splits a tensor of ``n`` rows over ``m``."""
    placement = Shard(0) if sf == 1 else _StridedShard(0, split_factor=sf)
    pieces, _ = placement._split_tensor(torch.arange(n), m, with_padding=False)
    return [len(p) for p in pieces]


@pytest.mark.parametrize("parts", MESH_SIZES)
def test_chunking_is_torch_chunk(parts: int) -> None:
    for n in LENGTHS:
        c = chunking(n, parts)
        assert c.lengths(parts) == torch_chunk_lens(n, parts), (n, parts)
        # Post: size * full + last == n; 0 <= last < size; at most ``parts`` chunks used
        assert c.size * c.full + c.last == n
        assert (0 <= c.last < c.size) if n else c == Chunking(0, 0, 0)
        assert c.full + (c.last > 0) <= parts


@pytest.mark.parametrize("m", MESH_SIZES)
def test_chunk_lens_is_torch_chunk_composed(m: int) -> None:
    for n, sf in itertools.product(LENGTHS, SPLIT_FACTORS):
        assert chunk_lens(n, sf, m) == torch_model_lens(n, sf, m), (n, sf, m)


@pytest.mark.parametrize("m", MESH_SIZES)
def test_chunk_lens_is_dtensor_split(m: int) -> None:
    for n, sf in itertools.product(range(1, 41), SPLIT_FACTORS):  # torch needs a row to split
        assert chunk_lens(n, sf, m) == dtensor_lens(n, sf, m), (n, sf, m)


def test_chunk_lens_posts() -> None:
    for n, sf, m in CASES:
        lens = chunk_lens(n, sf, m)
        assert len(lens) == m
        assert sum(lens) == n
        assert lens == [chunk_len(n, sf, m, r) for r in range(m)], (n, sf, m)


@pytest.mark.parametrize(
    ("n", "sf", "m", "want"),
    [
        (10, 1, 4, [3, 3, 3, 1]),  # uneven: the last rank short
        (5, 1, 4, [2, 2, 1, 0]),  # torch.chunk gives 3 chunks: the fourth rank empty
        (1, 1, 4, [1, 0, 0, 0]),
        (0, 1, 3, [0, 0, 0]),  # empty
        (0, 4, 2, [0, 0]),
        (12, 2, 3, [4, 4, 4]),  # even pieces of 6, chunks of 2
        (10, 3, 4, [3, 3, 2, 2]),  # pieces 4, 4, 2
        (5, 4, 2, [3, 2]),  # pieces 2, 2, 1 (the fourth empty)
        (7, 1, 1, [7]),  # one rank keeps everything
        (7, 7, 3, [7, 0, 0]),  # pieces of 1 row: rank 0 keeps each
    ],
)
def test_chunk_lens_examples(n: int, sf: int, m: int, want: list[int]) -> None:
    assert chunk_lens(n, sf, m) == want
    assert chunk_lens(n, sf, m) == torch_model_lens(n, sf, m)


def test_local_size_folds_mesh_dims_left_to_right() -> None:
    """``meta.local_size`` over two mesh dims: DTensor's split of the first rank's piece."""
    for n, sf0, sf1 in itertools.product(range(0, 25), (1, 2, 3), (1, 2, 3)):
        for m0, m1 in itertools.product((1, 2, 3), (2, 4)):
            for c0, c1 in itertools.product(range(m0), range(m1)):
                want = torch_model_lens(torch_model_lens(n, sf0, m0)[c0], sf1, m1)[c1]
                got = meta.local_size(n, [(m0, c0, sf0), (m1, c1, sf1)])
                assert got == want, (n, (m0, c0, sf0), (m1, c1, sf1))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: chunk_lens(-1, 1, 2), r"length=-1"),
        (lambda: chunk_lens(4, 0, 2), r"split factor=0"),
        (lambda: chunk_lens(4, 1, 0), r"mesh dim size=0"),
        (lambda: chunk_len(4, 1, 2, 2), r"rank must be in \[0, 2\).*got 2"),
        (lambda: chunk_len(4, 1, 2, -1), r"rank must be in \[0, 2\).*got -1"),
        (lambda: chunking(4, 0), r"parts >= 1.*parts=0"),
        (lambda: chunking(-3, 2), r"n >= 0.*n=-3"),
    ],
)
def test_bad_arguments_are_value_errors(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]


def test_docstring_examples() -> None:
    result = doctest.testmod(chunks)
    assert result.attempted and not result.failed
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(meta.local_size, globs=vars(meta)):
        runner.run(test)
    assert runner.tries and not runner.failures


def test_module_is_torch_free() -> None:
    code = "import sys, cute_shard.chunks, cute_shard.meta; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]

"""The chunk model: how many rows of a tensor dim each rank of a mesh dim keeps.

DTensor shards with ``torch.chunk``. ``Shard(d)`` over a mesh dim of ``m`` ranks cuts the
``n`` rows of dim ``d`` into chunks of ``ceil(n / m)`` rows, handed out in rank order: the
last non-empty chunk may be shorter, and the ranks after it hold nothing (``torch.chunk``
returns fewer than ``m`` chunks and DTensor pads the list with empty ones).
``_StridedShard(d, split_factor=sf)`` first cuts the dim the same way into ``sf`` pieces
(``ceil(n / sf)`` rows each, the last shorter, later ones empty), chunks every piece over the
``m`` ranks, and each rank keeps its chunk of every piece, in piece order. A split factor of
1 is a ``Shard``: one piece, the whole dim.

Worked example, 10 rows over 4 ranks. ``Shard``: chunks of ``ceil(10/4) = 3`` rows::

    >>> chunk_lens(10, 1, 4)
    [3, 3, 3, 1]

5 rows over 4 ranks: chunks of 2, so the third chunk is the last and rank 3 holds none::

    >>> chunk_lens(5, 1, 4)
    [2, 2, 1, 0]

``_StridedShard(split_factor=3)`` of the 10 rows: pieces of ``ceil(10/3) = 4`` rows, so
``4, 4, 2``; each 4-row piece gives every rank 1 row, the 2-row piece gives ranks 0 and 1 one
row each and ranks 2 and 3 none::

    >>> chunk_lens(10, 3, 4)
    [3, 3, 2, 2]
    >>> chunk_len(10, 3, 4, 3)
    2

``chunking(n, parts)`` names the one cut both levels make (chunk size, how many full chunks,
the short chunk after them); ``chunk_lens`` and ``chunk_len`` apply it twice. Plain ints
only, no torch: the integration's fast path and the engine read the model from here.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Chunking", "chunk_len", "chunk_lens", "chunk_size", "chunking"]


class Chunking(NamedTuple):
    """``torch.chunk`` of ``n`` rows into ``parts``: ``full`` chunks of ``size`` rows, then one
    chunk of ``last`` rows if ``last`` is not 0, then empty chunks up to ``parts``.

    Post: ``size * full + last == n``; ``0 <= last < size`` (for ``n >= 1``);
    ``full + (last > 0) <= parts``.
    """

    size: int  # rows of each full chunk: ceil(n / parts)
    full: int  # how many full chunks: n // size
    last: int  # rows of the short chunk after them: n % size (0: there is none)

    def lengths(self, parts: int) -> list[int]:
        """The rows of each of the ``parts`` chunks, in order."""
        if self.last:
            return [self.size] * self.full + [self.last] + [0] * (parts - self.full - 1)
        return [self.size] * self.full + [0] * (parts - self.full)


def chunk_size(n: int, parts: int) -> int:
    """The rows of each full chunk when ``torch.chunk`` cuts ``n`` rows into ``parts``:
    ``ceil(n / parts)``, 0 for no rows (the one formula the model rests on; unchecked, for
    the planners' hot paths: ``n >= 0``, ``parts >= 1``).

    >>> chunk_size(10, 4), chunk_size(5, 4), chunk_size(0, 4)
    (3, 2, 0)
    """
    return -(-n // parts)


def chunking(n: int, parts: int) -> Chunking:
    """How ``torch.chunk`` cuts ``n`` rows into ``parts`` (DTensor pads to ``parts`` chunks).

    >>> chunking(10, 4)   # 3 + 3 + 3 + 1
    Chunking(size=3, full=3, last=1)
    >>> chunking(5, 4)    # 2 + 2 + 1, and a fourth chunk that is empty
    Chunking(size=2, full=2, last=1)
    >>> chunking(0, 4)
    Chunking(size=0, full=0, last=0)
    """
    if n < 0 or parts < 1:
        raise ValueError(f"chunking: expected n >= 0 rows and parts >= 1, got n={n}, parts={parts}")
    if not n:
        return _NONE
    size = chunk_size(n, parts)
    return _make(Chunking, (size, *divmod(n, size)))


_NONE = Chunking(0, 0, 0)
# (a named tuple's own constructor is a Python function; ``tuple.__new__`` makes the same
# value in C)
_make = tuple.__new__


def chunk_lens(length: int, sf: int, m: int) -> list[int]:
    """How many of ``length`` rows the rank at each coordinate ``0..m-1`` keeps under
    ``_StridedShard(split_factor=sf)`` on a mesh dim of size ``m`` (``sf`` 1: ``Shard``).

    Post: ``sum(chunk_lens(length, sf, m)) == length``; ``len(...) == m``;
    ``chunk_lens(length, sf, m)[r] == chunk_len(length, sf, m, r)``.

    >>> chunk_lens(12, 2, 3)   # pieces 6, 6; each chunked 2, 2, 2
    [4, 4, 4]
    """
    _check(length, sf, m)
    if sf == 1:  # a Shard, the common case (the planners' counts): one piece
        return chunking(length, m).lengths(m)
    pieces = chunking(length, sf)
    # every full piece is chunked alike: its chunk lengths, ``pieces.full`` times over
    out = [pieces.full * n for n in chunking(pieces.size, m).lengths(m)]
    if pieces.last:
        last = chunking(pieces.last, m).lengths(m)
        return [a + b for a, b in zip(out, last, strict=True)]
    return out


def chunk_len(length: int, sf: int, m: int, rank: int) -> int:
    """How many of ``length`` rows the rank at coordinate ``rank`` keeps under
    ``_StridedShard(split_factor=sf)`` on a mesh dim of size ``m`` (``sf`` 1: ``Shard``):
    :func:`chunk_lens` for one rank, without the list.

    >>> chunk_len(10, 1, 4, 3)   # chunks 3, 3, 3, 1
    1
    """
    _check(length, sf, m)
    if not 0 <= rank < m:
        raise ValueError(f"chunk_len: rank must be in [0, {m}) (the mesh dim's size), got {rank}")
    if sf == 1:  # a Shard, the common case (the integration's fast path): one piece
        return _rows(length, m, rank)
    pieces = chunking(length, sf)
    return pieces.full * _rows(pieces.size, m, rank) + _rows(pieces.last, m, rank)


def _rows(n: int, parts: int, index: int) -> int:
    """The rows of chunk ``index`` of ``n`` rows cut into ``parts``: :func:`chunking`'s
    ``size``, ``last`` or 0, read off the chunk's bounds without building the Chunking."""
    size = chunk_size(n, parts)
    return max(0, min(size * (index + 1), n) - size * index)


def _check(length: int, sf: int, m: int) -> None:
    if length < 0 or sf < 1 or m < 1:
        raise ValueError(
            "chunks: expected a dim length >= 0, a split factor >= 1 and a mesh dim size "
            f">= 1, got length={length}, split factor={sf}, mesh dim size={m}"
        )

"""The global shape and stride of a view op's output, computed without running the op.

DTensor learns a view op's output shape, stride and dtype by running the op on fake tensors
of the global shape (``ShardingPropagator._propagate_tensor_meta_non_cached``), most of the
cost of a DTensor cache miss. The integration computes them here instead, from the input's
global shape and stride and the op's arguments, with torch's conventions (the ones its meta
kernels follow, checked against the fake run in ``property_tests/test_integration_meta.py``):

- ``view``/``_unsafe_view``: the shape with one ``-1`` inferred; the strides as the fake run
  gives them (``refs_view_stride``: output dims built left to right by keeping, merging and
  splitting input dims). ``reshape``: a view where the real kernel's rule (``view_stride``:
  the input cut into chunks of mutually contiguous dims, each covered by whole output dims)
  allows one, else a contiguous copy viewed. The two rules differ only around size-1 dims.
- ``permute``/``transpose``: shape and stride permuted.
- ``expand``: a dim that grows from 1 (or a new leading dim of size > 1) gets stride 0; a new
  leading dim of size 1 gets the stride of a dim just outside the one after it.
- ``squeeze``: size-1 dims dropped; ``unsqueeze(d)``: a size-1 dim whose stride is that of
  the dim it precedes times that dim's size (1 at the end).
- ``view_as_real``: a trailing (2,):(1,) and every stride doubled; ``view_as_complex``: the
  inverse, only for a trailing (2,):(1,) and even strides (where the size is not 1).
- copies (``repeat``, ``view_copy``): contiguous strides.

Every function returns ``(shape, stride)`` as tuples of ints, or None where torch would raise
(an illegal argument, a view the strides do not allow), so the caller can let torch's own
path raise torch's own error. Shapes and strides are row-major, as torch's.

Worked example: a (2, 4, 3) tensor with strides (3, 6, 1) (dims 0 and 1 of a contiguous
(4, 2, 3) swapped). Dims 0 and 1 are not contiguous with each other (3 != 4 * 6), so
``view(8, 3)`` would have to merge them: no view (None). ``view(2, 2, 2, 3)`` splits dim 1
(size 4, stride 6) into (2, 2) with strides (12, 6): strides (3, 12, 6, 1).

Also here: ``local_size``, the size a tensor dim has on one rank after the mesh dims that
shard it, each mesh dim's cut read from the chunk model (``cute_shard.chunks``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .chunks import chunk_len

Shape = tuple[int, ...]
Meta = tuple[Shape, Shape]  # (shape, stride)


def contiguous_stride(shape: Shape) -> Shape:
    """Row-major strides of ``shape`` as torch gives a new tensor (a size-0 dim counts as 1)."""
    stride = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        stride[d] = stride[d + 1] * max(shape[d + 1], 1)
    return tuple(stride)


def infer_size(sizes: Sequence[int], numel: int) -> Shape | None:
    """``sizes`` with its one ``-1`` inferred so that the product is ``numel``; None if there
    is no such shape (several -1, another negative size, a product that does not match, or
    a -1 beside a zero size, which could be anything)."""
    known, infer = 1, -1
    for i, s in enumerate(sizes):
        if type(s) is not int:
            return None
        if s == -1:
            if infer >= 0:
                return None
            infer = i
        elif s < 0:
            return None
        else:
            known *= s
    if infer < 0:
        return tuple(sizes) if known == numel else None
    if known == 0 or numel % known:
        return None
    shape = list(sizes)
    shape[infer] = numel // known
    return tuple(shape)


def view_stride(shape: Shape, stride: Shape, new_shape: Shape) -> Shape | None:
    """The strides of ``new_shape`` viewing a tensor of ``shape``/``stride`` (same numel), or
    None if no view of that shape exists (torch's ``computeStride``)."""
    if not shape:
        return (1,) * len(new_shape)
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        # The strides of an empty tensor are arbitrary: kept if the shape is, else as a
        # newly allocated tensor of the new shape would have them.
        return stride if shape == new_shape else contiguous_stride(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    base = stride[-1]  # stride of the innermost element of the current chunk
    chunk_numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        chunk_numel *= shape[d]
        # A chunk ends at dim 0 or where the dim before is not contiguous with this chunk
        # (a size-1 dim before never ends it: its stride is meaningless).
        if d == 0 or (shape[d - 1] != 1 and stride[d - 1] != chunk_numel * base):
            while view_d >= 0 and (view_numel < chunk_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != chunk_numel:
                return None
            if d > 0:
                base = stride[d - 1]
                chunk_numel = view_numel = 1
    return None if view_d != -1 else tuple(new_stride)


def view(shape: Shape, stride: Shape, sizes: Sequence[int]) -> Meta | None:
    """``x.view(sizes)`` as torch's fake run computes it (``refs_view_stride``): None if
    ``sizes`` is illegal or no view exists."""
    numel = 1
    for s in shape:
        numel *= s
    new_shape = infer_size(sizes, numel)
    if new_shape is None:
        return None
    new_stride = refs_view_stride(shape, stride, new_shape)
    return None if new_stride is None else (new_shape, new_stride)


def reshape(shape: Shape, stride: Shape, sizes: Sequence[int]) -> Meta | None:
    """``x.reshape(sizes)``: torch decides by ``view_stride`` whether it is a view (then it is
    ``view``), else it copies to a contiguous tensor and views that."""
    numel = 1
    for s in shape:
        numel *= s
    new_shape = infer_size(sizes, numel)
    if new_shape is None:
        return None
    if view_stride(shape, stride, new_shape) is None:
        stride = contiguous_stride(shape)
    new_stride = refs_view_stride(shape, stride, new_shape)
    return None if new_stride is None else (new_shape, new_stride)


def view_copy(shape: Shape, stride: Shape, sizes: Sequence[int]) -> Meta | None:
    """``view_copy(x, sizes)``: a contiguous copy of the shape (whatever the strides)."""
    numel = 1
    for s in shape:
        numel *= s
    new_shape = infer_size(sizes, numel)
    return None if new_shape is None else (new_shape, contiguous_stride(new_shape))


def refs_view_stride(shape: Shape, stride: Shape, new_shape: Shape) -> Shape | None:
    """The strides torch's fake run gives ``view(new_shape)`` (same numel), or None where it
    raises. It builds the output dims left to right: an input dim of the right size is kept,
    a run of input dims is merged (only if each neighbour is contiguous with the next or
    either is size 1; the merged stride is the smallest of the dims of size > 1 and the last)
    until its size divides by the output dim's, and split (outer stride = stride * inner);
    an extra trailing size-1 output dim repeats the last stride, trailing size-1 input dims
    are dropped. Special cases: an empty tensor gets contiguous strides; a 0-d tensor all 1s;
    a contiguous tensor viewed as 1-d gets (1,), a contiguous 1-d viewed as 2-d (n, 1).

    It differs from ``view_stride`` (the real kernel's) only where size-1 dims stand between
    dims that are not contiguous with each other: it may call a view legal that the kernel
    refuses, and it gives size-1 dims other strides."""
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        return contiguous_stride(new_shape)
    if not shape:
        return None if any(n != 1 for n in new_shape) else (1,) * len(new_shape)
    if not new_shape:
        return ()
    if _is_contiguous(shape, stride):
        if len(new_shape) == 1 and len(shape) > 1:
            return (1,)
        if len(new_shape) == 2 and len(shape) == 1:
            return (new_shape[1], 1)
    sizes, strides = list(shape), list(stride)
    d = 0
    for length in new_shape:
        if d >= len(sizes):  # a trailing size-1 output dim
            if length != 1:
                return None
            sizes.append(1)
            strides.append(strides[-1])
            d += 1
            continue
        if length == sizes[d]:
            d += 1
            continue
        accum, end = sizes[d], d
        while accum % length:
            end += 1
            if end >= len(sizes):
                return None
            accum *= sizes[end]
        if end != d:
            if not all(
                sizes[i] == 1 or sizes[i + 1] == 1 or strides[i] == strides[i + 1] * sizes[i + 1]
                for i in range(d, end)
            ):
                return None
            merged = min([strides[end], *(strides[i] for i in range(d, end) if sizes[i] != 1)])
            sizes[d : end + 1] = [accum]
            strides[d : end + 1] = [merged]
        if accum != length:
            inner = accum // length
            sizes[d : d + 1] = [length, inner]
            strides[d : d + 1] = [strides[d] * inner, strides[d]]
        d += 1
    if any(n != 1 for n in sizes[d:]):
        return None
    return tuple(strides[:d])


def _is_contiguous(shape: Shape, stride: Shape) -> bool:
    """torch's ``is_contiguous``: fewer than 2 elements, or row-major strides wherever the
    size is not 1."""
    expected, numel = 1, 1
    for n in shape:
        numel *= n
    if numel < 2:
        return True
    for n, s in zip(reversed(shape), reversed(stride), strict=True):
        if n == 1:
            continue
        if s != expected:
            return False
        expected *= n
    return True


def _wrap_dim(dim: object, ndim: int) -> int | None:
    """``dim`` in [0, ndim) (a 0-d tensor accepts 0 and -1), or None if out of range."""
    if type(dim) is not int:
        return None
    n = max(ndim, 1)
    return dim % n if -n <= dim < n else None


def permute(shape: Shape, stride: Shape, dims: Sequence[int]) -> Meta | None:
    if len(dims) != len(shape):
        return None
    order = [_wrap_dim(d, len(shape)) for d in dims]
    if None in order or len(set(order)) != len(order):
        return None
    return tuple(shape[d] for d in order), tuple(stride[d] for d in order)  # type: ignore[index]


def transpose(shape: Shape, stride: Shape, dim0: int, dim1: int) -> Meta | None:
    d0, d1 = _wrap_dim(dim0, len(shape)), _wrap_dim(dim1, len(shape))
    if d0 is None or d1 is None:
        return None
    if not shape:
        return shape, stride
    new_shape, new_stride = list(shape), list(stride)
    new_shape[d0], new_shape[d1] = shape[d1], shape[d0]
    new_stride[d0], new_stride[d1] = stride[d1], stride[d0]
    return tuple(new_shape), tuple(new_stride)


def expand(shape: Shape, stride: Shape, sizes: Sequence[int]) -> Meta | None:
    """``x.expand(sizes)`` (torch's ``inferExpandGeometry``)."""
    ndim = len(sizes)
    extra = ndim - len(shape)
    if extra < 0:
        return None
    new_shape, new_stride = [0] * ndim, [0] * ndim
    for i in range(ndim - 1, -1, -1):
        d = i - extra
        target = sizes[i]
        if type(target) is not int:
            return None
        if d >= 0:
            size, st = shape[d], stride[d]
        else:
            # A new leading dim: if it stays size 1, its stride is that of a dim just
            # outside the one after it.
            size, st = 1, new_shape[i + 1] * new_stride[i + 1] if i + 1 < ndim else 0
        if target == -1:
            if d < 0:
                return None
            target = size
        elif target < 0:
            return None
        if size != target:
            if size != 1:
                return None
            size, st = target, 0
        new_shape[i], new_stride[i] = size, st
    return tuple(new_shape), tuple(new_stride)


def squeeze(shape: Shape, stride: Shape, dims: Sequence[int] | None) -> Meta | None:
    """``x.squeeze(dims)`` (None: every size-1 dim); a listed dim of another size stays."""
    if dims is None:
        drop = {d for d, s in enumerate(shape) if s == 1}
    else:
        wrapped = [_wrap_dim(d, len(shape)) for d in dims]
        if None in wrapped or len(set(wrapped)) != len(wrapped):
            return None
        drop = {d for d in wrapped if d is not None and shape and shape[d] == 1}
    keep = [d for d in range(len(shape)) if d not in drop]
    return tuple(shape[d] for d in keep), tuple(stride[d] for d in keep)


def unsqueeze(shape: Shape, stride: Shape, dim: int) -> Meta | None:
    d = _wrap_dim(dim, len(shape) + 1)
    if d is None:
        return None
    new_stride = shape[d] * stride[d] if d < len(shape) else 1
    return (*shape[:d], 1, *shape[d:]), (*stride[:d], new_stride, *stride[d:])


def view_as_real(shape: Shape, stride: Shape) -> Meta:
    return (*shape, 2), (*(2 * s for s in stride), 1)


def view_as_complex(shape: Shape, stride: Shape) -> Meta | None:
    """The complex view of (real, imag) pairs: only a trailing (2,):(1,) with even strides."""
    if not shape or shape[-1] != 2 or stride[-1] != 1:
        return None
    if any(st % 2 and n != 1 for n, st in zip(shape[:-1], stride[:-1], strict=True)):
        return None  # (a size-1 dim's stride is never used, so it may be odd)
    return shape[:-1], tuple(s // 2 for s in stride[:-1])


def repeat(shape: Shape, stride: Shape, repeats: Sequence[int]) -> Meta | None:
    """``x.repeat(repeats)``: a contiguous copy tiled ``repeats`` times (leading 1s added)."""
    extra = len(repeats) - len(shape)
    if extra < 0 or any(type(r) is not int or r < 0 for r in repeats):
        return None
    padded = (1,) * extra + shape
    new_shape = tuple(s * r for s, r in zip(padded, repeats, strict=True))
    return new_shape, contiguous_stride(new_shape)


def local_size(size: int, shards: Sequence[tuple[int, int, int]]) -> int:
    """The size a tensor dim of global ``size`` has on one rank, after the mesh dims that
    shard it, left to right: ``shards`` holds one (mesh dim size, the rank's coordinate on
    it, split factor) per such mesh dim (split factor 1 for a ``Shard``). Each mesh dim cuts
    what the ones before it left, as :func:`cute_shard.chunks.chunk_len` says.

    >>> local_size(10, [(4, 3, 1)])  # chunks 3, 3, 3, 1
    1
    >>> local_size(12, [(2, 0, 1), (3, 1, 2)])  # 6, then pieces (3, 3): chunks 1 of each
    2
    """
    for mesh_size, coord, split_factor in shards:
        size = chunk_len(size, split_factor, mesh_size, coord)
    return size

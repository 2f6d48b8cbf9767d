"""The ``Layout`` value: a shape and a congruent stride, read as a function of coordinates.

``Layout(shape, stride)`` maps a coordinate ``c`` (congruent with ``shape``) to
``sum(c_i * stride_i)`` over the leaves. It also accepts a flat index, turned into a coordinate
colexicographically (first mode fastest), with CuTe's rule that the last leaf is not reduced
modulo its size: a layout extends past its size along its last mode.

Worked example::

    >>> L = Layout((2, (3, 4)), (12, (4, 1)))
    >>> str(L)
    '(2,(3,4)):(12,(4,1))'
    >>> L(1), L(2), L((1, (2, 3)))
    (12, 4, 23)
    >>> L.size, L.cosize, L.rank, L.depth
    (24, 24, 2, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .inttuple import IntTuple, flatten, is_int, parse_inttuple, prefix_product

__all__ = ["Layout", "make_layout"]


_set = object.__setattr__


@dataclass(frozen=True, slots=True, init=False)
class Layout:
    """An immutable, hashable CuTe layout ``shape:stride``.

    Pre: ``shape`` and ``stride`` are congruent IntTuples, sizes are ints >= 0, strides ints.
    Two layouts are ``==`` when shape and stride are identical; two layouts that are the same
    function with different structure (``6:1`` and ``(2,3):(1,2)``) are not ``==``.
    """

    shape: IntTuple
    stride: IntTuple
    # Flattened leaves, computed once: every algebra operation works on these.
    flat_shape: tuple[int, ...] = field(repr=False, compare=False)
    flat_stride: tuple[int, ...] = field(repr=False, compare=False)

    def __init__(self, shape: IntTuple, stride: IntTuple) -> None:
        # Fast paths for the two common forms (an int mode, a flat tuple); else a full walk.
        if type(shape) is int and type(stride) is int and shape >= 0:
            flat_shape: tuple[int, ...] = (shape,)
            flat_stride: tuple[int, ...] = (stride,)
        elif _is_flat(shape, stride):
            flat_shape, flat_stride = shape, stride  # type: ignore[assignment]
        else:
            fs: list[int] = []
            fd: list[int] = []
            _collect(shape, stride, fs, fd)
            flat_shape, flat_stride = tuple(fs), tuple(fd)
        _set(self, "shape", shape)
        _set(self, "stride", stride)
        _set(self, "flat_shape", flat_shape)
        _set(self, "flat_stride", flat_stride)

    @classmethod
    def _trusted(
        cls,
        shape: IntTuple,
        stride: IntTuple,
        flat_shape: tuple[int, ...],
        flat_stride: tuple[int, ...],
    ) -> Layout:
        """Build without validation: for algebra results that are valid by construction."""
        self = object.__new__(cls)
        _set(self, "shape", shape)
        _set(self, "stride", stride)
        _set(self, "flat_shape", flat_shape)
        _set(self, "flat_stride", flat_stride)
        return self

    @classmethod
    def parse(cls, text: str) -> Layout:
        """Read CuTe notation ``shape:stride`` (``"(2,(3,4)):(12,(4,1))"``), or a bare shape
        (compact column-major strides, as ``make_layout``)."""
        shape_text, sep, stride_text = text.partition(":")
        shape = parse_inttuple(shape_text)
        if not sep:
            return make_layout(shape)
        return cls(shape, parse_inttuple(stride_text))

    @property
    def size(self) -> int:
        """Number of coordinates: the product of the shape."""
        p = 1
        for s in self.flat_shape:
            p *= s
        return p

    @property
    def cosize(self) -> int:
        """``L(size - 1) + 1``: one past the largest index the layout reaches (0 if empty)."""
        if any(s == 0 for s in self.flat_shape):
            return 0
        return sum((s - 1) * d for s, d in zip(self.flat_shape, self.flat_stride, strict=True)) + 1

    @property
    def rank(self) -> int:
        return len(self.shape) if isinstance(self.shape, tuple) else 1

    @property
    def depth(self) -> int:
        from .inttuple import depth

        return depth(self.shape)

    def __getitem__(self, i: int) -> Layout:
        """Mode ``i`` as a layout. An int layout has the single mode 0 (itself)."""
        if not isinstance(self.shape, tuple):
            if i in (0, -1):
                return self
            raise IndexError(f"mode {i} out of range for rank-1 layout {self}")
        # the stride is congruent with the shape: a tuple here, an int wherever s is one
        s, d = self.shape[i], self.stride[i]  # type: ignore[index]
        if type(s) is int:
            return Layout._trusted(s, d, (s,), (d,))  # type: ignore[arg-type]
        return Layout._trusted(s, d, flatten(s), flatten(d))

    def __call__(self, *crd: IntTuple) -> int:
        """``L(i)`` for a flat index, ``L(c)`` for a coordinate, ``L(c0, c1, ...)`` for modes."""
        if len(crd) == 1:
            c = crd[0]
            if is_int(c):
                return _flat_index(c, self.flat_shape, self.flat_stride)
        else:
            c = crd
        return _crd2idx(c, self.shape, self.stride)

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({self})"


def make_layout(*args: IntTuple | Layout, stride: IntTuple | None = None) -> Layout:
    """``make_layout(shape, stride=None)`` or ``make_layout(L0, L1, ...)``.

    With a shape, ``stride`` defaults to the compact column-major strides (CuTe's LayoutLeft):
    ``make_layout((2, 3)) == Layout((2, 3), (1, 2))``. With layouts, the result has one mode
    per argument: ``make_layout(Layout(2, 3), Layout(4, 1)) == Layout((2, 4), (3, 1))`` (a
    single layout becomes a rank-1 tuple layout, as in CuTe).
    """
    if args and all(type(a) is Layout for a in args):
        if stride is not None:
            raise ValueError("make_layout: pass either a shape (and stride) or layouts, not both")
        return concat(args)  # type: ignore[arg-type]
    if len(args) != 1 or isinstance(args[0], Layout):
        raise ValueError(
            f"make_layout: expected one shape or only Layouts, got {len(args)} arguments"
        )
    shape = args[0]
    return Layout(shape, prefix_product(shape) if stride is None else stride)


def concat(layouts: tuple[Layout, ...] | list[Layout]) -> Layout:
    """The layout with one mode per element of ``layouts`` (``make_layout(*layouts)``)."""
    shape: list[IntTuple] = []
    stride: list[IntTuple] = []
    flat_shape: list[int] = []
    flat_stride: list[int] = []
    for a in layouts:
        shape.append(a.shape)
        stride.append(a.stride)
        flat_shape += a.flat_shape
        flat_stride += a.flat_stride
    return Layout._trusted(tuple(shape), tuple(stride), tuple(flat_shape), tuple(flat_stride))


def _is_flat(shape: IntTuple, stride: IntTuple) -> bool:
    """True for congruent flat tuples of ints with sizes >= 0 (a plain loop: it is hot)."""
    if type(shape) is not tuple or type(stride) is not tuple or len(shape) != len(stride):
        return False
    for x in shape:
        if type(x) is not int or x < 0:
            return False
    for x in stride:
        if type(x) is not int:
            return False
    return True


def _collect(shape: IntTuple, stride: IntTuple, out_s: list[int], out_d: list[int]) -> None:
    """Check congruence and value types while gathering the leaves of shape and stride."""
    if isinstance(shape, tuple):
        if not isinstance(stride, tuple) or len(stride) != len(shape):
            raise ValueError(
                f"Layout: stride {_fmt_any(stride)} is not congruent with shape "
                f"{_fmt_any(shape)}; give one stride per shape leaf, nested the same way"
            )
        for s, d in zip(shape, stride, strict=True):
            _collect(s, d, out_s, out_d)
        return
    if isinstance(stride, tuple):
        raise ValueError(
            f"Layout: stride {_fmt_any(stride)} is not congruent with shape {_fmt_any(shape)}"
        )
    if not is_int(shape) or shape < 0:
        raise ValueError(f"Layout: shape leaves must be ints >= 0, got {shape!r}")
    if not is_int(stride):
        raise ValueError(f"Layout: stride leaves must be ints, got {stride!r}")
    out_s.append(shape)
    out_d.append(stride)


def _flat_index(i: int, flat_shape: tuple[int, ...], flat_stride: tuple[int, ...]) -> int:
    """Colexicographic flat index to value; the last leaf absorbs what is left (CuTe)."""
    total = 0
    last = len(flat_shape) - 1
    for k in range(last):
        i, r = divmod(i, flat_shape[k])
        total += r * flat_stride[k]
    return total + i * flat_stride[last] if last >= 0 else 0


def _crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple) -> int:
    if isinstance(crd, tuple):
        if not isinstance(shape, tuple) or len(crd) != len(shape):
            raise ValueError(f"coordinate {_fmt_any(crd)} does not match shape {_fmt_any(shape)}")
        # stride is congruent with shape, so a tuple here too
        return sum(_crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride, strict=True))  # type: ignore[arg-type, misc]
    if not is_int(crd):
        raise ValueError(f"coordinate leaves must be ints, got {crd!r}")
    return _flat_index(crd, flatten(shape), flatten(stride))


def _fmt(t: IntTuple) -> str:
    if isinstance(t, tuple):
        return "(" + ",".join(_fmt(x) for x in t) + ")"
    return str(t)


def _fmt_any(t: object) -> str:
    return _fmt(t) if isinstance(t, (tuple, int)) else repr(t)

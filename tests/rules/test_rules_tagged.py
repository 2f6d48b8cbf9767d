"""Rules that say which op built them (``ViewRule``, ``ComplexRule``), and view rules of empty
tensors.

A tagged rule is the same tuple as the untagged one (equal, same hash, same printing, pickles
back to the same type); only a propagator that looks at its type learns the op. Views of
empty tensors (numel 0) get rules whose sizes multiply out and that use every input dim.
"""

from __future__ import annotations

import math
import pickle

import pytest

from cute_shard.rules import (
    ComplexRule,
    Flatten,
    InputDim,
    Singleton,
    Split,
    ViewRule,
    format_rule,
    squeeze,
    unflatten,
    view_as_complex,
    view_groups,
)


@pytest.mark.parametrize(
    ("src", "dst"),
    [((8, 16, 32), (128, 32)), ((2, 16, 6), (8, 4, 6)), ((1, 4), (4,)), ((6,), (6,)), ((), ())],
)
def test_view_rules_are_tagged_tuples(src: tuple[int, ...], dst: tuple[int, ...]) -> None:
    rule = view_groups(src, dst)
    plain = tuple(rule)
    assert type(rule) is ViewRule and type(plain) is tuple
    assert rule == plain and hash(rule) == hash(plain) and format_rule(rule) == format_rule(plain)
    back = pickle.loads(pickle.dumps(rule))
    assert back == rule and type(back) is ViewRule


def test_view_as_complex_is_tagged_and_the_same_tuple_as_the_view() -> None:
    rule = view_as_complex((3, 4, 2))
    assert type(rule) is ComplexRule
    assert rule == view_groups((3, 4, 2), (3, 8))
    assert type(view_groups((3, 4, 2), (3, 8))) is ViewRule


def test_unflatten_is_a_view_and_squeeze_is_not_tagged() -> None:
    assert type(unflatten((12,), 0, (3, 4))) is ViewRule
    assert type(squeeze((1, 4), 0)) is tuple
    assert squeeze((1, 4), 0) == view_groups((1, 4), (4,))


def _dims_of(spec: object) -> list[int]:
    if isinstance(spec, InputDim):
        return [spec.input_dim]
    if isinstance(spec, Flatten):
        return list(spec.dims)
    if isinstance(spec, Split):
        return _dims_of(spec.input_dim)
    return []


def _sizes(rule: tuple[object, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for spec in rule:
        if isinstance(spec, InputDim):
            out.append(shape[spec.input_dim])
        elif isinstance(spec, Flatten):
            out.append(math.prod(shape[d] for d in spec.dims))
        elif isinstance(spec, Split):
            out.append(spec.group_shape[spec.split_id])
        else:
            assert isinstance(spec, Singleton), spec
            out.append(1)
    return tuple(out)


EMPTY = [
    ((0, 8), (0,), "(flat(d0,d1),)"),
    ((0,), (0, 5), "(split(d0, (0,5), 0), split(d0, (0,5), 1))"),
    ((2, 0, 3), (0,), "(flat(d0,d1,d2),)"),
    ((0, 3), (3, 0), "(split(flat(d0,d1), (3,0), 0), split(flat(d0,d1), (3,0), 1))"),
    ((0, 8), (0, 8), "(d0, d1)"),
    ((5, 0, 2), (5, 0, 3), "(d0, split(flat(d1,d2), (0,3), 0), split(flat(d1,d2), (0,3), 1))"),
    ((4, 0), (2, 2, 0), None),
    ((0, 1, 4), (0, 4), None),
    ((3, 0, 1), (1, 0, 3), None),
]


@pytest.mark.parametrize(("src", "dst", "text"), EMPTY)
def test_views_of_empty_tensors(
    src: tuple[int, ...], dst: tuple[int, ...], text: str | None
) -> None:
    """Every input dim is used once (or is a dropped size-1 dim), every output dim has its
    size, and the dims equal at both ends move whole."""
    rule = view_groups(src, dst)
    assert _sizes(rule, src) == dst
    sources = {spec.input_dim if isinstance(spec, Split) else spec for spec in rule}
    used = [d for src in sources for d in _dims_of(src)]
    assert sorted(used) == sorted(set(used))
    assert all(src[d] == 1 for d in range(len(src)) if d not in used)
    if text is not None:
        assert format_rule(rule) == text

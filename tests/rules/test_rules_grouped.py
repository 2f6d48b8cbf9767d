"""``GroupedRule``: the rules ``view_groups`` builds carry their groups (each Post line).

The structure is checked against one read off the DimSpecs themselves, over every way of
regrouping small shapes (size-1 dims included).
"""

from __future__ import annotations

import math
import pickle

import pytest

from cute_shard.rules import (
    Flatten,
    GroupedRule,
    InputDim,
    Split,
    format_rule,
    parse_rule,
    view_groups,
)


def _regroupings(total: int, n: int) -> list[tuple[int, ...]]:
    """Every shape of n dims (sizes >= 1) with ``total`` elements."""
    if n == 0:
        return [()] if total == 1 else []
    out = []
    for first in range(1, total + 1):
        if total % first == 0:
            out += [(first, *rest) for rest in _regroupings(total // first, n - 1)]
    return out


def _pairs() -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    pairs = []
    for total in (1, 2, 4, 6, 8, 12, 24):
        shapes = [s for n in range(4) for s in _regroupings(total, n)]
        pairs += [(a, b) for a in shapes for b in shapes if len(a) + len(b) <= 6]
    return pairs


PAIRS = _pairs()


def _read_off(rule: tuple[object, ...], ndim: int) -> tuple[dict[int, object], set[object]]:
    """Per input dim: its output dim (moved whole) or its group; and the groups, as
    ``(src, pieces, targets)``: read from the DimSpecs, with no shortcut."""
    owner: dict[int, object] = {}
    splits: dict[object, list[int]] = {}
    groups: set[object] = set()
    for o, spec in enumerate(rule):
        if isinstance(spec, InputDim):
            owner[spec.input_dim] = o
        elif isinstance(spec, Flatten):
            group = (tuple(spec.dims), None, (o,))
            groups.add(group)
            for d in spec.dims:
                owner[d] = group
        elif isinstance(spec, Split):
            source = spec.input_dim
            src = (source.input_dim,) if isinstance(source, InputDim) else tuple(source.dims)
            targets = splits.setdefault((src, spec.group_shape), [-1] * len(spec.group_shape))
            targets[spec.split_id] = o
    for (src, pieces), targets in splits.items():
        group = (src, pieces, tuple(targets))
        groups.add(group)
        for d in src:
            owner[d] = group
    assert len(owner) <= ndim
    return owner, groups


def _check(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Each Post line of GroupedRule for ``view_groups(a, b)``; whether it has a table."""
    rule = view_groups(a, b)
    has_split = any(isinstance(spec, Split) for spec in rule)
    assert (type(rule) is GroupedRule) == has_split, (a, b, format_rule(rule))
    if not has_split:
        assert type(rule) is tuple
        return False
    shape, where, groups = rule.table
    assert shape == a
    owner, expected = _read_off(rule, len(a))
    got = {(src, pieces, tuple(targets)) for src, pieces, targets in groups}
    assert got == expected, (a, b, format_rule(rule))
    for d, w in enumerate(where):
        if w >= 0:  # moved whole
            assert rule[w] == InputDim(d)
        elif w == -1:  # dropped: a size-1 dim
            assert a[d] == 1 and d not in owner
        else:  # in group g, which holds it
            src, pieces, targets = groups[-2 - w]
            assert d in src
            assert owner[d] == (src, pieces, tuple(targets))
    for src, pieces, _ in groups:
        if pieces is not None:
            assert math.prod(pieces) == math.prod(a[d] for d in src)
    return True


@pytest.mark.parametrize("chunk", range(4))
def test_the_groups_are_the_rules_own(chunk: int) -> None:
    assert sum(_check(a, b) for a, b in PAIRS[chunk::4]) > 100


def test_groups_of_more_than_64_dims() -> None:
    # (past the builder's interned InputDims: the other way of building a Flatten)
    many = (2,) * 65
    assert _check((4, *many), (2, 2, 2**65))
    assert _check((*many, 4), (2**65, 2, 2))
    assert _check((4, *many), (2, 2**66))


def test_a_grouped_rule_is_the_same_tuple() -> None:
    rule = view_groups((24, 64), (2, 12, 8, 8))
    plain = tuple(rule)
    assert type(rule) is GroupedRule
    assert rule == plain and plain == rule and hash(rule) == hash(plain)
    assert format_rule(rule) == format_rule(plain)
    assert parse_rule(format_rule(rule)) == rule
    assert {rule: 1}[plain] == 1
    copy = pickle.loads(pickle.dumps(rule))
    assert copy == rule and copy.table == rule.table
    with pytest.raises(AttributeError):
        rule.table = ((1,), (), ())  # type: ignore[misc]


def test_size_zero_views_are_plain_rules() -> None:
    # (the hot path leaves size-0 dims to the general engine: no table to trust)
    for a, b in [((0, 3), (3, 0)), ((2, 0, 3), (0, 6)), ((0, 4), (0, 2, 2))]:
        assert type(view_groups(a, b)) is tuple


def test_the_cache_gives_the_grouped_rule_back() -> None:
    first = view_groups((4, 6), (2, 2, 6))
    assert type(first) is GroupedRule and view_groups((4, 6), (2, 2, 6)) is first

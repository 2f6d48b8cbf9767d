"""Converters to/from torch's DimSpec classes, and import isolation from torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from torch.distributed.tensor._ops import _view_ops as tv

import cute_shard.rules as R
from cute_shard.rules import format_rule, parse_rule
from cute_shard.rules.torch_compat import from_torch, to_torch

RULES = [
    "()",
    "(d0,)",
    "(1, 1)",
    "(flat(d0,d1), d2)",
    "(split(flat(d0,d1), (4,8), 0), split(flat(d0,d1), (4,8), 1), d2)",
    "(split(d0, (1,2), 0), split(d0, (1,2), 1))",
    "(bcast(1, 3), d0, bcast(d1, 4))",
    "(bcast(1, 3), d0, repeat(d1, 2))",
    "(new(2),)",
    "(split(1, (2,0), 0), split(1, (2,0), 1))",
]


@pytest.mark.parametrize("text", RULES)
def test_round_trip(text: str) -> None:
    rule = parse_rule(text)
    theirs = to_torch(rule)
    assert all(isinstance(s, tv.DimSpec) for s in theirs)
    assert from_torch(theirs) == rule
    assert to_torch(from_torch(theirs)) == theirs
    assert format_rule(from_torch(theirs)) == text


def test_to_torch_matches_torch_constructors() -> None:
    rule = parse_rule("(split(flat(d0,d1), (4,8), 1), 1, bcast(d2, 3), new(5), repeat(d3, 2))")
    flat = tv.Flatten((tv.InputDim(0), tv.InputDim(1)))
    assert to_torch(rule) == (
        tv.Split(flat, (4, 8), 1),
        tv.Singleton(),
        tv.Broadcast(tv.InputDim(2), 3),
        tv.NewDim(5),
        tv.Repeat(tv.InputDim(3), 2),
    )


def test_to_torch_equals_torch_builders() -> None:
    assert to_torch(R.view_groups((2, 3, 4), (6, 4))) == tv.view_groups((2, 3, 4), (6, 4))
    assert to_torch(R.expand((3, 1), (2, -1, 4))) == tv.expand((3, 1), (2, -1, 4))
    assert to_torch(R.view_as_real((5, 1))) == tv.dim_view_as_real((5, 1))


def test_from_torch_canonical() -> None:
    raw = (tv.Split(tv.InputDim(0), (1, 2), 0), tv.Split(tv.InputDim(0), (1, 2), 1), tv.NewDim(1))
    assert format_rule(from_torch(raw)) == "(split(d0, (1,2), 0), split(d0, (1,2), 1), new(1))"
    assert format_rule(from_torch(raw, canonical=True)) == "(1, d0, 1)"
    # torch's Flatten may hold a list; ours is always a tuple
    listy = (tv.Flatten([tv.InputDim(0), tv.InputDim(1)]),)
    assert format_rule(from_torch(listy)) == "(flat(d0,d1),)"


def test_converters_reject_foreign_objects() -> None:
    with pytest.raises(ValueError, match="to_torch"):
        to_torch((tv.InputDim(0),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="from_torch"):
        from_torch((R.InputDim(0),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="InputDim"):
        from_torch((tv.InputDim(-1),))  # torch happily builds negative dims; ours does not


def test_rules_package_does_not_import_torch() -> None:
    code = (
        "import sys, cute_shard.rules as R; "
        "R.view_groups((2, 3), (6,)); R.expand((1,), (4,)); R.squeeze((1, 2)); "
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

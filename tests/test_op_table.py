"""The op table (``cute_shard.rules.OP_RULES``) and its two readers give the rules they gave
before the table was written once.

Golden tables, in DimMap notation: the explainer's ``op_rule`` (CLI op names and argument
forms; flatten as the view it decomposes to) and the integration's ``BUILDERS`` (keyed by
torch's local ops, with aten's argument forms: sizes as one list or unpacked, ``implicit``).
The rows were produced by the per-caller tables this one replaced; the error rows pin the
builders' messages for bad arguments, which both paths pass through unchanged.
"""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from typing import Any

import pytest
import torch

from cute_shard import explanation, integration, rules
from cute_shard.rules import ops

T = torch.Tensor

# (op, input shape, the parsed CLI arguments, the rule DTensor propagates)
EXPLAIN = [
    (
        "view",
        (2, 16, 6),
        ((8, 4, 6),),
        "(split(flat(d0,d1), (8,4), 0), split(flat(d0,d1), (8,4), 1), d2)",
    ),
    ("view", (8, 16), ((-1,),), "(flat(d0,d1),)"),
    ("reshape", (2, 3, 4), ((6, 4),), "(flat(d0,d1), d2)"),
    ("reshape", (6, 4), ((2, -1, 4),), "(split(d0, (2,3), 0), split(d0, (2,3), 1), d1)"),
    ("flatten", (2, 3, 4), (), "(flat(d0,d1,d2),)"),
    ("flatten", (2, 3, 4), (1,), "(d0, flat(d1,d2))"),
    ("flatten", (2, 3, 4), (0, 1), "(flat(d0,d1), d2)"),
    ("flatten", (2, 3, 4), (-2, -1), "(d0, flat(d1,d2))"),
    ("flatten", (2, 1, 3), (0, 1), "(d0, d2)"),
    ("unflatten", (6, 4), (0, (2, 3)), "(split(d0, (2,3), 0), split(d0, (2,3), 1), d1)"),
    ("unflatten", (6, 4), (-1, (2, -1)), "(d0, split(d1, (2,2), 0), split(d1, (2,2), 1))"),
    ("permute", (2, 3, 4), ((2, 0, 1),), "(d2, d0, d1)"),
    ("transpose", (2, 3, 4), (0, 2), "(d2, d1, d0)"),
    ("transpose", (2, 3, 4), (-1, 0), "(d2, d1, d0)"),
    ("squeeze", (2, 1, 3), (), "(d0, d2)"),
    ("squeeze", (2, 1, 3), (1,), "(d0, d2)"),
    ("squeeze", (1, 1, 3), ((0, 1),), "(d2,)"),
    ("unsqueeze", (2, 3), (0,), "(1, d0, d1)"),
    ("unsqueeze", (2, 3), (-1,), "(d0, d1, 1)"),
    ("expand", (1, 3), ((4, 3),), "(bcast(d0, 4), d1)"),
    ("expand", (1, 3), ((2, 5, -1),), "(bcast(1, 2), bcast(d0, 5), d1)"),
    ("movedim", (2, 3, 4), (0, 2), "(d1, d2, d0)"),
    ("movedim", (2, 3, 4), ((0, 1), (2, 0)), "(d1, d2, d0)"),
    ("repeat", (2, 3), ((2, 1, 3),), "(bcast(1, 2), d0, repeat(d1, 3))"),
]

# (op, input shape, arguments, the ValueError's message)
EXPLAIN_ERRORS = [
    (
        "transpose",
        (2, 3),
        (0, 5),
        (
            "transpose: dim1=5 is out of range for a 2-d tensor; expected a dim in [-2, 1]; "
            "fix: pass a dim within the tensor's rank"
        ),
    ),
    ("transpose", (2, 3), ((0, 1), 1), "expected one integer, got the list 0,1"),
    (
        "flatten",
        (2, 3, 4),
        (2, 0),
        (
            "flatten: start_dim=2 comes after end_dim=0 for a 3-d tensor; "
            "fix: pass start_dim <= end_dim"
        ),
    ),
    ("flatten", (2, 3, 4), ((0, 1),), "expected one integer, got the list 0,1"),
    (
        "view",
        (2, 3),
        ((4,),),
        (
            "view_groups: to_shape=(4,) has 4 elements but the input has 6; "
            "expected equal element counts; fix: make the sizes multiply to the input numel"
        ),
    ),
    (
        "permute",
        (2, 3),
        ((0, 0),),
        (
            "permute: dim 0 appears more than once in dims; expected distinct dims; "
            "fix: remove the duplicate"
        ),
    ),
    ("unflatten", (6,), ((0, 1), (2, 3)), "expected one integer, got the list 0,1"),
    (
        "unflatten",
        (6,),
        (0, (4, 2)),
        (
            "unflatten: sizes=(4, 2) has 8 elements but the input has 6; "
            "expected equal element counts; fix: make the sizes multiply to the input numel"
        ),
    ),
    (
        "repeat",
        (2, 3),
        ((2,),),
        (
            "repeat: sizes=(2,) has fewer entries than the tensor's 2 dims; "
            "fix: give one repeat count per dim (tile pads with 1s for you)"
        ),
    ),
    (
        "squeeze",
        (2, 3),
        (5,),
        (
            "squeeze: dim=5 is out of range for a 2-d tensor; expected a dim in [-2, 1]; "
            "fix: pass a dim within the tensor's rank"
        ),
    ),
    (
        "unsqueeze",
        (2, 3),
        (4,),
        (
            "unsqueeze: dim=4 is out of range for a 3-d tensor; expected a dim in [-3, 2]; "
            "fix: pass a dim within the tensor's rank"
        ),
    ),
    (
        "movedim",
        (2, 3),
        ((0, 1), 0),
        (
            "movedim: source has 2 dims but destination has 1; expected the same number; "
            "fix: pair every source dim with a destination"
        ),
    ),
    (
        "expand",
        (2, 3),
        ((4, 3),),
        (
            "expand: cannot expand input dim 0 of size 2 to 4 (shape=(4, 3)); "
            "only size-1 dims can be broadcast; fix: use -1 or the input size for that dim"
        ),
    ),
]

# (torch's local op, input shape, aten's arguments, kwargs, the rule)
BUILT = [
    (
        T.view,
        (2, 16, 6),
        ((8, 4, 6),),
        {},
        "(split(flat(d0,d1), (8,4), 0), split(flat(d0,d1), (8,4), 1), d2)",
    ),
    (
        T.view,
        (2, 16, 6),
        (8, 4, 6),
        {},
        "(split(flat(d0,d1), (8,4), 0), split(flat(d0,d1), (8,4), 1), d2)",
    ),
    (torch.reshape, (2, 3, 4), ((6, -1),), {}, "(flat(d0,d1), d2)"),
    (torch.squeeze, (2, 1, 3), (), {}, "(d0, d2)"),
    (torch.squeeze, (2, 1, 3), (1,), {}, "(d0, d2)"),
    (torch.squeeze, (1, 1, 3), ((0, 1),), {}, "(d2,)"),
    (torch.unsqueeze, (2, 3), (1,), {}, "(d0, 1, d1)"),
    (T.expand, (1, 3), ((2, 5, 3),), {}, "(bcast(1, 2), bcast(d0, 5), d1)"),
    (T.expand, (1, 3), (2, 5, 3), {}, "(bcast(1, 2), bcast(d0, 5), d1)"),
    (T.expand, (1, 3), ((5, 3),), {"implicit": True}, "(bcast(d0, 5), d1)"),
    (torch.permute, (2, 3, 4), ((1, 2, 0),), {}, "(d1, d2, d0)"),
    (T.repeat, (2, 3), ((2, 2),), {}, "(repeat(d0, 2), repeat(d1, 2))"),
    (T.repeat, (2, 3), (3, 1, 2), {}, "(bcast(1, 3), d0, repeat(d1, 2))"),
    (torch.transpose, (2, 3, 4), (1, -1), {}, "(d0, d2, d1)"),
    (torch.t, (2, 3), (), {}, "(d1, d0)"),
    (torch.t, (3,), (), {}, "(d0,)"),
    (torch.t, (), (), {}, "()"),
    (torch.view_as_real, (2, 3), (), {}, "(d0, split(d1, (3,2), 0), split(d1, (3,2), 1))"),
    (torch.view_as_complex, (2, 3, 2), (), {}, "(d0, flat(d1,d2))"),
    (torch.flatten, (2, 3, 4), (), {}, "(flat(d0,d1,d2),)"),
    (torch.flatten, (2, 3, 4), (1, 2), {}, "(d0, flat(d1,d2))"),
    (torch.flatten, (2, 1, 3), (0, 1), {}, "(flat(d0,d1), d2)"),
    (torch.ravel, (2, 3, 4), (), {}, "(flat(d0,d1,d2),)"),
    (torch.movedim, (2, 3, 4), (0, -1), {}, "(d1, d2, d0)"),
    (torch.tile, (2, 3), ((2,),), {}, "(d0, repeat(d1, 2))"),
    (torch.atleast_1d, (), (), {}, "(1,)"),
    (torch.atleast_2d, (3,), (), {}, "(1, d0)"),
    (torch.atleast_3d, (2, 3), (), {}, "(d0, d1, 1)"),
]

# (torch's local op, input shape, arguments, the ValueError's message)
BUILD_ERRORS = [
    (
        torch.permute,
        (2, 3),
        ((0, 0),),
        (
            "permute: dim 0 appears more than once in dims; expected distinct dims; "
            "fix: remove the duplicate"
        ),
    ),
    (
        torch.transpose,
        (2, 3),
        (0, 2),
        (
            "transpose: dim1=2 is out of range for a 2-d tensor; expected a dim in [-2, 1]; "
            "fix: pass a dim within the tensor's rank"
        ),
    ),
    (
        T.view,
        (2, 3),
        (4, 2),
        (
            "view_groups: to_shape=(4, 2) has 8 elements but the input has 6; "
            "expected equal element counts; fix: make the sizes multiply to the input numel"
        ),
    ),
    (
        torch.unsqueeze,
        (2, 3),
        (3,),
        (
            "unsqueeze: dim=3 is out of range for a 3-d tensor; expected a dim in [-3, 2]; "
            "fix: pass a dim within the tensor's rank"
        ),
    ),
    (
        torch.flatten,
        (2, 3, 4),
        (2, 1),
        (
            "flatten: start_dim=2 comes after end_dim=1 for a 3-d tensor; "
            "fix: pass start_dim <= end_dim"
        ),
    ),
    (
        T.repeat,
        (2, 3),
        (2,),
        (
            "repeat: sizes=(2,) has fewer entries than the tensor's 2 dims; "
            "fix: give one repeat count per dim (tile pads with 1s for you)"
        ),
    ),
    # rules.t's message (the integration's own t builder said "expects ...; use transpose");
    # torch's meta kernel rejects a 3-d t() before any rule is asked for.
    (
        torch.t,
        (2, 3, 4),
        (),
        "t: expected a tensor with <= 2 dims, got 3; fix: use transpose(ndim, dim0, dim1)",
    ),
]


@pytest.mark.parametrize(("op", "shape", "args", "want"), EXPLAIN)
def test_explanation_rule(op: str, shape: tuple[int, ...], args: Any, want: str) -> None:
    assert rules.format_rule(explanation.op_rule(op, shape, args)) == want


@pytest.mark.parametrize(("op", "shape", "args", "message"), EXPLAIN_ERRORS)
def test_explanation_bad_arguments(
    op: str, shape: tuple[int, ...], args: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        explanation.op_rule(op, shape, args)


@pytest.mark.parametrize(("local", "shape", "args", "kwargs", "want"), BUILT)
def test_integration_rule(
    local: Any, shape: tuple[int, ...], args: Any, kwargs: dict[str, Any], want: str
) -> None:
    assert rules.format_rule(integration.BUILDERS[local](shape, *args, **kwargs)) == want


@pytest.mark.parametrize(("local", "shape", "args", "message"), BUILD_ERRORS)
def test_integration_bad_arguments(
    local: Any, shape: tuple[int, ...], args: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        integration.BUILDERS[local](shape, *args)


def test_integration_reads_the_table() -> None:
    """Every builder the integration holds is the table's entry for its op's name."""
    by_name = {local.__name__: local for local in integration.BUILDERS}
    assert len(by_name) == len(integration.BUILDERS) == 18
    for name, local in by_name.items():
        assert integration.BUILDERS[local] is rules.OP_RULES[name], name


def test_explanation_ops_are_table_ops() -> None:
    assert set(explanation.OPS) <= set(rules.OP_RULES)


def test_integration_covers_torch_dim_maps() -> None:
    """Each local op torch builds a view rule for has ours, but broadcast_to (decomposed)."""
    from torch.distributed.tensor._ops import _view_ops

    assert set(_view_ops.dim_maps) - set(integration.BUILDERS) == {torch.broadcast_to}


def test_shape_arg() -> None:
    assert rules.shape_arg((6, 4)) == (6, 4)
    assert rules.shape_arg(((6, 4),)) == (6, 4)
    assert rules.shape_arg(([6, 4],)) == [6, 4]
    assert rules.shape_arg((6,)) == (6,)
    assert rules.shape_arg(()) == ()


def test_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        rules.OP_RULES["view"] = rules.OP_RULES["reshape"]  # type: ignore[index]


def test_docstring_examples() -> None:
    result = doctest.testmod(ops)
    assert result.attempted and not result.failed


def test_table_is_torch_free() -> None:
    code = "import sys, cute_shard.rules.ops; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]

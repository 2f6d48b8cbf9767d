"""``cute_shard.explain(dtensor, op, *args)``: the command line's explanation of a live DTensor.

Every case makes a DTensor on an 8-rank fake process group and checks that ``str`` of its
explanation is exactly what ``cute-shard explain`` prints for the same global shape, mesh,
placements, dtype and op, and that ``to_json()`` is exactly what ``--json`` prints. The
answers themselves are the engine's (tested elsewhere); here the oracle only confirms that the
explanation reports a valid one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

import cute_shard
from cute_shard import cli
from cute_shard.explanation import DTYPES, Explanation

from .live_dtensor import make, world8

pytestmark = pytest.mark.usefixtures("world8")
__all__ = ["world8"]  # the fixture, imported for pytest


def _cli(capsys: pytest.CaptureFixture[str], argv: Sequence[str]) -> str:
    code = cli.main(["explain", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _argv(
    shape: tuple[int, ...], mesh: tuple[int, ...], placements: str, op: str, *op_args: str
) -> list[str]:
    return [
        *("--shape", ",".join(map(str, shape)), "--mesh", ",".join(map(str, mesh))),
        *("--placements", placements, "--op", op, *op_args),
    ]


S, R, P = Shard, Replicate, Partial


def SS(dim: int, sf: int) -> Placement:  # the notation's name
    return _StridedShard(dim, split_factor=sf)


# (shape, mesh, placements, the same in CLI notation, op, Python args, CLI args)
Row = tuple[
    tuple[int, ...], tuple[int, ...], list[Placement], str, str, tuple[object, ...], tuple[str, ...]
]
CASES: list[Row] = [
    ((8, 16, 32), (2, 4), [S(0), S(1)], "S0,S1", "view", (128, 32), ("128,32",)),
    ((8, 16, 32), (2, 4), [S(0), S(1)], "S0,S1", "reshape", (-1, 32), ("-1,32",)),
    ((512,), (2, 4), [S(0), S(0)], "S0,S0", "view", (4, 128), ("4,128",)),
    ((4, 15, 128), (4,), [S(1)], "S1", "flatten", (0, 1), ("0", "1")),
    ((6, 256), (8,), [S(0)], "S0", "reshape", (1536,), ("1536",)),
    ((12, 20), (2, 4), [S(0), SS(1, 2)], "S0,SS1:2", "view", (20, 12), ("20,12",)),
    ((4, 1, 6), (2, 2), [P("avg"), S(2)], "P:avg,S2", "squeeze", (), ()),
    ((8, 16), (2, 2, 2), [S(0), R(), S(1)], "S0,R,S1", "permute", (1, 0), ("1,0",)),
    ((8, 6, 4), (2, 2, 2), [S(0), S(1), P()], "S0,S1,P", "unflatten", (1, (3, 2)), ("1", "3,2")),
    ((8, 16), (8,), [R()], "R", "expand", (2, 8, 16), ("2,8,16",)),
    ((8, 16), (2, 4), [S(1), S(0)], "S1,S0", "transpose", (0, 1), ("0", "1")),
    ((8, 16, 4), (2, 4), [S(2), R()], "S2,R", "movedim", ((0, 1), (1, 2)), ("0,1", "1,2")),
    ((8, 16), (2, 4), [S(0), R()], "S0,R", "repeat", (1, 2), ("1,2",)),
    ((8, 16), (2, 4), [S(0), R()], "S0,R", "unsqueeze", (1,), ("1",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "mesh", "placements", "notation", "op", "args", "cli_args"),
    CASES,
    ids=[f"{c[4]}-{c[3]}-{'x'.join(map(str, c[0]))}" for c in CASES],
)
def test_explain_dtensor_equals_the_command_line(
    capsys: pytest.CaptureFixture[str],
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    placements: list[Placement],
    notation: str,
    op: str,
    args: tuple[object, ...],
    cli_args: tuple[str, ...],
) -> None:
    x = make(shape, mesh, placements)
    ex = cute_shard.explain(x, op, *args)
    argv = _argv(shape, mesh, notation, op, *cli_args)
    assert str(ex) + "\n" == _cli(capsys, argv)
    assert json.dumps(ex.to_json(), indent=2) + "\n" == _cli(capsys, [*argv, "--json"])
    assert ex.text(grid=False) + "\n" == _cli(capsys, [*argv, "--no-grid"])


def test_explain_dtensor_with_compare_torch_and_strict(capsys: pytest.CaptureFixture[str]) -> None:
    x = make((24,), (2, 3), [S(0), S(0)])
    ex = cute_shard.explain(x, "reshape", 2, 12, strict=True, compare_torch=True)
    argv = _argv((24,), (2, 3), "S0,S0", "reshape", "2,12")
    assert str(ex) + "\n" == _cli(capsys, [*argv, "--strict", "--compare-torch"])
    d = ex.to_json()
    assert d["strict"] is True and d["oracle"] == {"valid": True, "detail": d["oracle"]["detail"]}  # type: ignore[index]


def test_the_dtype_is_the_dtensors(capsys: pytest.CaptureFixture[str]) -> None:
    x = make((512,), (2, 4), [S(0), S(0)], dtype=torch.bfloat16)
    d = cute_shard.explain(x, "reshape", 4, 128).to_json()
    assert d["dtype"] == "bfloat16"
    argv = _argv((512,), (2, 4), "S0,S0", "reshape", "4,128")
    assert d == json.loads(_cli(capsys, [*argv, "--json", "--dtype", "bfloat16"]))


def test_an_empty_dtensor_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    """A DTensor with a sharded dim of size 0 (its shards hold nothing) is explained like any
    other, as the command explains its sizes (reading its layout raised ZeroDivisionError)."""
    x = make((0, 16), (2, 4), [S(0), S(1)])
    ex = cute_shard.explain(x, "view", 16, 0, compare_torch=True)
    assert ex.to_json()["oracle"]["valid"] is True  # type: ignore[index]
    argv = _argv((0, 16), (2, 4), "S0,S1", "view", "16,0")
    assert str(ex) + "\n" == _cli(capsys, [*argv, "--compare-torch"])
    moved = cute_shard.explain(x, "redistribute", [R(), S(0)])
    assert moved.plan.received == 0
    assert "a sharded dim of size 0" in str(moved)


def test_a_live_answer_is_valid_by_the_oracle() -> None:
    x = make((8, 16, 32), (2, 4), [S(0), S(1)])
    d = cute_shard.explain(x, "view", 128, 32, compare_torch=True).to_json()
    assert d["output"] == ["S0", "SS0:4"] and d["communication"] == []
    assert d["oracle"]["valid"] is True  # type: ignore[index]


@pytest.mark.parametrize(
    ("op", "forms"),
    [
        ("view", [(128, 32), ((128, 32),), ([128, 32],), (torch.Size([128, 32]),)]),
        ("permute", [(2, 0, 1), ((2, 0, 1),), ([2, 0, 1],)]),
        ("expand", [(2, 8, 16, 32), ((2, -1, 16, 32),), (2, -1, -1, -1)]),
        ("flatten", [(), (0,), (0, -1)]),
        ("unflatten", [(1, (4, 4)), (1, [4, 4]), (1, (-1, 4))]),
    ],
)
def test_argument_forms_of_the_tensor_methods(op: str, forms: list[tuple[object, ...]]) -> None:
    # Tensor.view(128, 32) and Tensor.view((128, 32)) are the same call; so are the
    # explanations, apart from how the arguments are written when -1 is inferred.
    x = make((8, 16, 32), (2, 4), [S(0), S(1)])
    answers = {
        json.dumps(
            {k: v for k, v in cute_shard.explain(x, op, *f).to_json().items() if k != "op_args"}
        )
        for f in forms
    }
    assert len(answers) == 1


def test_explain_returns_an_explanation_that_prints_its_text() -> None:
    x = make((8, 16), (2, 4), [S(0), R()])
    ex = cute_shard.explain(x, "transpose", 0, 1)
    assert isinstance(ex, Explanation)
    assert repr(ex) == str(ex) and str(ex).startswith(
        "op             transpose 0 1: (8,16) -> (16,8)"
    )


# (id, op, args, a fragment of the message), on a DTensor of (8, 16)
BAD: list[tuple[str, object, tuple[object, ...], str]] = [
    ("unknown op", "frobnicate", (1,), "explain: op: expected one of view, reshape"),
    ("op not a string", torch.Tensor.view, (8, 16), "explain: op: expected one of"),
    ("string size", "view", ("8", 16),
     "explain: view SHAPE: expected an int or a sequence of ints, got ('8', 16)"),
    ("float dim", "transpose", (0.5, 1), "explain: transpose DIM0: expected an int"),
    ("bool dim", "unsqueeze", (True,), "explain: unsqueeze DIM: expected an int"),
    ("too many", "transpose", (0, 1, 2), "expected arguments DIM0 DIM1, got 3"),
    ("too few", "transpose", (0,), "expected arguments DIM0 DIM1, got 1"),
    ("numel", "view", (100, 3), "has 300 elements but the input has 128"),
    ("dim range", "transpose", (0, 5), "dim1=5 is out of range"),
    ("negative size", "view", (-2, 64), "sizes must be >= 0"),
    ("empty", "view", (0, 128), "has 0 elements but the input has 128"),
]  # fmt: skip


@pytest.mark.parametrize(("op", "args", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_are_value_errors(op: str, args: tuple[object, ...], fragment: str) -> None:
    x = make((8, 16), (2, 4), [S(0), R()])
    with pytest.raises(ValueError) as info:
        cute_shard.explain(x, op, *args)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_not_a_dtensor_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^explain: expected a DTensor, got torch\.Tensor; "):
        cute_shard.explain(torch.zeros(4), "view", 4)


def test_dtype_table_matches_torch() -> None:
    # Every numeric dtype torch names has its size here, so a live DTensor of any of them can
    # be explained; and each entry the installed torch has is torch's own item size (the
    # table also holds dtypes that only some supported releases name: 2.14 added bcomplex32).
    for name, size in DTYPES.items():
        if hasattr(torch, name):
            assert getattr(torch, name).itemsize == size, name
    names = {
        str(d).removeprefix("torch.")
        for d in vars(torch).values()
        if isinstance(d, torch.dtype) and (d.is_floating_point or d.is_complex or d == torch.bool)
    }
    ints = {f"int{b}" for b in (8, 16, 32, 64)} | {f"uint{b}" for b in (8, 16, 32, 64)}
    assert names | ints <= set(DTYPES)


def test_write_png_draws_what_the_cli_draws(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    x = make((8, 16), (2, 4), [S(0), R()])
    ex = cute_shard.explain(x, "transpose", 0, 1)
    ex.write_png(str(tmp_path / "ranks.png"))
    assert (tmp_path / "ranks.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match=r"^--png: cannot write"):
        ex.write_png(str(tmp_path / "no" / "ranks.png"))

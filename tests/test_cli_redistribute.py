"""``cute-shard redistribute``: the plan's rows, bytes against the limit, JSON round trips, bad
arguments, ``--compare-torch``, and ``cute_shard.explain(x, "redistribute", ...)``.

The cases are the design brief's (section 6) plus uneven, Partial and no-op ones. Everything
runs ``cli.main`` in-process except the exit-2 and torch-import checks, which need a fresh
interpreter. The tests of a live DTensor come last: their fake process group (``world8``) is
module-scoped, and ``--compare-torch`` simulates in this process only while no other process
group of another size is up.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

import cute_shard
from cute_shard import cli, oracle
from cute_shard.notation import parse_placements
from cute_shard.redistribute.report import RedistributionReport
from cute_shard.redistribute.torch_reference import _piece, torch_reference

from .live_dtensor import make, world8

# (major, minor) of the installed torch: releases differ in what their redistribution does
TORCH_RELEASE = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])

__all__ = ["world8"]  # the fixture, imported for pytest

# (id, shape, mesh, from, to)
BRIEF = [
    ("strided-target-12", "12", "3,2", "R,S0", "S0,SS0:2"),
    ("fsdp2-tp-64x32", "64,32", "2,4", "SS0:4,S0", "S0,S0"),
    ("head-merge-32x24x16", "32,24,16", "2,4", "S0,SS0:2", "S0,S1"),
]
MORE = [
    ("uneven-5x7", "5,7", "2,4", "S0,SS1:2", "R,S0"),
    ("uneven-9x8-swap", "9,8", "2,4", "S0,S1", "S1,S0"),
    ("partial-source", "8,8", "2,4", "P,S1", "S0,R"),
    ("partial-avg-kept", "8,6", "2,3", "P:avg,S0", "P:avg,S1"),
    ("partial-target", "8,6", "2,3", "R,R", "P,S1"),
    ("nothing-moves", "8,8", "2,4", "S0,S1", "S0,S1"),
    ("three-mesh-dims", "8,12,4", "2,2,2", "S0,SS1:3,S2", "S1,R,S0"),
]
CASES = BRIEF + MORE


def argv(shape: str, mesh: str, src: str, dst: str, *extra: str) -> list[str]:
    return ["redistribute", "--shape", shape, "--mesh", mesh, "--from", src, "--to", dst, *extra]


def run_main(capsys: pytest.CaptureFixture[str], args: Sequence[str]) -> str:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err == ""  # torch's own warnings about its plan stay off the terminal
    return out


def text(capsys: pytest.CaptureFixture[str], *case: str, extra: Sequence[str] = ()) -> list[str]:
    return run_main(capsys, argv(*case, "--no-grid", *extra)).splitlines()


def as_json(capsys: pytest.CaptureFixture[str], *case: str, extra: Sequence[str] = ()) -> dict:  # type: ignore[type-arg]
    return json.loads(run_main(capsys, argv(*case, "--json", *extra)))


# --------------------------------------------------------------------------------------------
# The plan, as printed


GOLDEN_FSDP = """\
redistribute   (64,32) from [SS0:4, S0] to [S0, S0]
mesh           (2,4), 8 ranks, float32
from           [SS0:4, S0]
  layout       ((8,(2,4)),32):((32,(256,512)),1)
  gpu modes    m0 = 2:256 in d0   m1 = 4:512 in d0
to             [S0, S0]
  layout       ((8,(2,4)),32):((32,(1024,256)),1)
  gpu modes    m0 = 2:1024 in d0   m1 = 4:256 in d0
moves          m0, m1 move
  m0           SS0:4 -> S0: permutation
    why        m0's sub-mode changes position within d0; it moves together with m1
  m1           S0 -> S0: permutation
    why        m1's sub-mode changes position within d0; it moves together with m0
plan           1 step, 1 collective
  step 1       permutation over m0,m1 (8 ranks): all_to_all_single
    local      (8,32) -> (8,32) on every rank
    receives   up to 1 KiB per rank, from 1 peer
    transfers  rank 1 <- rank 4: 1 KiB
               rank 2 <- rank 1: 1 KiB
               rank 3 <- rank 5: 1 KiB
               rank 4 <- rank 2: 1 KiB
               rank 5 <- rank 6: 1 KiB
               rank 6 <- rank 3: 1 KiB
received       1 KiB by the busiest rank (float32)
limit          1 KiB, the most of its target shard a rank lacks: received / limit = 1.00x
"""


def test_golden_fsdp2_tp_weight(capsys: pytest.CaptureFixture[str]) -> None:
    """Rank (c0, c1) holds rows 16*c1 + 8*c0 + [0, 8) and needs 32*c0 + 8*c1 + [0, 8): one
    permutation of 8-row blocks over both mesh dims; ranks 0 and 7 keep theirs."""
    assert run_main(capsys, argv(*BRIEF[1][1:], "--no-grid")) == GOLDEN_FSDP


def test_strided_target_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """(12,) on (3, 2), [R, S0] -> [S0, SS0:2]: a local chunk on m0, then each rank gets its 2
    elements from its m1 peer (rank 1 needs 1 and 3, which rank 0 holds)."""
    lines = text(capsys, *BRIEF[0][1:])
    for want in [
        "  gpu modes    m0 = 3:4 in d0   m1 = 2:1 in d0",
        "moves          m0, m1 move",
        "  m0           R -> S0: chunk",
        "  m1           S0 -> SS0:2: permutation",
        "plan           2 steps, 1 collective, in this order",
        "  step 1       chunk on m0: local, nothing is sent",
        "    local      ranks 0,5 (6) -> (4); ranks 1,4 (6) -> (0); ranks 2,3 (6) -> (2)",
        "  step 2       permutation over m1 (2 ranks): all_to_all_single",
        "    receives   up to 8 B per rank, from 1 peer",
        "    transfers  rank 1 <- rank 0: 8 B",
        "               rank 2 <- rank 3: 4 B",
        "               rank 3 <- rank 2: 4 B",
        "               rank 4 <- rank 5: 8 B",
        "received       8 B by the busiest rank (float32)",
        "limit          8 B, the most of its target shard a rank lacks: received / limit = 1.00x",
    ]:
        assert want in lines, (want, lines)


def test_head_merge_is_one_all_to_all(capsys: pytest.CaptureFixture[str]) -> None:
    lines = text(capsys, *BRIEF[2][1:], extra=["--dtype", "bfloat16"])
    for want in [
        "moves          m1 moves; m0 keeps its sub-mode",
        "  m1           SS0:2 -> S1: all-to-all",
        "    why        m1's sub-mode moves from d0 to d1",
        "  step 1       all-to-all over m1 (4 ranks): all_to_all_single",
        "    local      (4,24,16) -> (16,6,16) on every rank",
        # 3/4 of its (16, 6, 16) target comes from its 3 peers: 1152 bfloat16s
        "    receives   2.25 KiB per rank, from 3 peers",
        "    transfers  rank 0 <- ranks 1-3: 768 B each",
        "received       2.25 KiB by the busiest rank (bfloat16)",
        "limit          2.25 KiB, the most of its target shard a rank lacks: received / limit = "
        "1.00x",
    ]:
        assert want in lines, (want, lines)


def test_uneven_shards_have_no_layout_and_per_rank_shapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = text(capsys, *MORE[0][1:])
    none = "  layout       none: no layout expresses this sharding (uneven shards); the planner"
    assert sum(line.startswith(none) for line in lines) == 2  # from and to
    assert "    local      at most (3,2) -> (2,7) (per dim, over ranks); rank 0 (3,2) -> (2,7)" in (
        lines
    )
    assert "    receives   up to 40 B per rank, from up to 3 peers" in lines
    assert "    transfers  rank 0 <- ranks 1,2: 16 B each, rank 3: 8 B" in lines
    assert lines[-1].endswith("received / limit = 1.00x")


def test_partial_source_reduces_before_it_gathers(capsys: pytest.CaptureFixture[str]) -> None:
    lines = text(capsys, *MORE[2][1:])
    for want in [
        "  partial      m0 P: a pending reduction, not part of the layout",
        "  m0           P -> S0: reduce-scatter",
        "  step 1       reduce-scatter (sum) over m0 (2 ranks): reduce_scatter_tensor",
        "    local      (8,2) -> (4,2) on every rank",
        "    reduces    64 B per rank, handed to the sum",
        "  step 2       all-gather over m1 (4 ranks): all_gather_into_tensor",
        "    receives   96 B per rank, from 3 peers",
        "received       96 B by the busiest rank (float32)",
        "reduced        64 B handed to reductions",
        "limit          96 B, the most of its target shard a rank lacks: received / limit = 1.00x",
    ]:
        assert want in lines, (want, lines)


def test_partial_target_and_no_op(capsys: pytest.CaptureFixture[str]) -> None:
    lines = text(capsys, *MORE[4][1:])
    assert "  step 2       partition (sum) on m0: local, nothing is sent" in lines
    limit = (
        "limit          0 B: every rank already holds its target shard (Partial counted as held)"
    )
    assert limit in lines
    lines = text(capsys, *MORE[5][1:])
    assert "moves          none: every mesh dim keeps its sub-mode, so nothing moves" in lines
    assert "plan           nothing to do: every rank already holds its target shard" in lines


def test_rank_grids(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, argv(*BRIEF[1][1:])).splitlines()
    start = out.index("  from [SS0:4, S0]: 64 rows (d0) x 32 cols (d1)")
    # rows 8-15 are rank 4's before (c0=1, c1=0) and rank 1's after
    assert out[start + 2 : start + 5] == ["           0-31", "      0-7     0", "     8-15     4"]
    end = out.index("  to [S0, S0]: 64 rows (d0) x 32 cols (d1)")
    assert out[end + 4] == "     8-15     1"
    assert not any(line.startswith("ranks") for line in text(capsys, *BRIEF[1][1:]))


# --------------------------------------------------------------------------------------------
# JSON


def _argv_from_json(d: dict) -> list[str]:  # type: ignore[type-arg]
    return argv(
        ",".join(map(str, d["shape"])),
        ",".join(map(str, d["mesh"])),
        ",".join(d["from"]),
        ",".join(d["to"]),
        "--dtype",
        d["dtype"],
    )


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_json_round_trip_and_bytes_at_the_limit(
    capsys: pytest.CaptureFixture[str], case: tuple[str, ...]
) -> None:
    d = as_json(capsys, *case[1:])
    again = json.loads(run_main(capsys, [*_argv_from_json(d), "--json"]))
    assert again == d
    assert d["received_bytes"] == d["limit_bytes"]
    assert d["ratio"] == (1.0 if d["limit_bytes"] else None)
    shape, mesh = tuple(d["shape"]), tuple(d["mesh"])
    src = [p.to_torch() for p in parse_placements(",".join(d["from"]), len(shape), mesh)]
    dst = [p.to_torch() for p in parse_placements(",".join(d["to"]), len(shape), mesh)]
    coords = list(oracle.mesh_coords(mesh))

    def shapes(step: dict, when: str) -> dict[int, tuple[int, ...]]:  # type: ignore[type-arg]
        return {r: tuple(g[when]) for g in step["local_shapes"] for r in g["ranks"]}

    if d["steps"]:
        # every rank starts with its source shard and ends with its target shard
        first, last = shapes(d["steps"][0], "before"), shapes(d["steps"][-1], "after")
        for r, c in enumerate(coords):
            assert first[r] == oracle.local_shape(shape, src, mesh, c)
            assert last[r] == oracle.local_shape(shape, dst, mesh, c)
    for step in d["steps"]:
        got: dict[int, int] = {}
        for t in step["transfers"]:
            got[t["to"]] = got.get(t["to"], 0) + t["bytes"]
        # the busiest receiver of the listed transfers is the step's received bytes
        assert max(got.values(), default=0) == step["received_bytes"]


# --------------------------------------------------------------------------------------------
# Bad arguments: one line, exit 2, no torch


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cute_shard.cli", *args], capture_output=True, text=True, timeout=120
    )


BAD = [
    ("unparseable", ["8", "2", "Q", "S0"], "--from: cannot parse 'Q'"),
    ("mesh mismatch", ["8", "2,2", "S0,S0", "S0"], "--to: got 1 placements for a mesh of 2"),
    ("dim out of range", ["8", "2", "S1", "S0"], "--from: S1 shards dim 1, out of range"),
    ("split factor 0", ["8", "2", "S0", "SS0:0"], "--to: SS0:0: split factor must be >= 1"),
    ("zero mesh size", ["8", "2,0", "S0,R", "S0,R"], "--mesh: sizes must be >= 1"),
    ("negative size", ["8,-1", "2", "S0", "S1"], "--shape: sizes must be >= 0"),
    ("empty mesh", ["8", "", "S0", "S0"], "--mesh: expected at least one mesh dim"),
    ("not a number", ["8,x", "2", "S0", "S0"], "--shape: expected comma-separated integers"),
]


@pytest.mark.parametrize(("args", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_are_one_line_and_torch_free(args: list[str], fragment: str) -> None:
    code = (
        "import sys; from cute_shard import cli; "
        f"rc = cli.main({argv(*args)!r}); print(rc, 'torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["2", "False"], r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith("cute-shard redistribute: error: ") and fragment in line, line


@pytest.mark.parametrize(
    ("shape", "src", "dst", "why"),
    [
        ("0,8", "S0,S0", "S1,R", "from"),  # the source shards the empty dim
        ("0", "P", "S0", "to"),  # a pending sum scattered over an empty dim
    ],
)
def test_an_empty_tensor_is_planned_and_says_why_it_has_no_layout(
    shape: str, src: str, dst: str, why: str
) -> None:
    """A DTensor may have a dim of size 0 (its shards hold nothing): the command plans it (no
    bytes move) and says why the sharding of the empty dim has no layout. It used to refuse
    size 0, and placements_to_layout raised ZeroDivisionError on such a dim."""
    r = run_cli(*argv(shape, "2,2" if "," in src else "4", src, dst, "--no-grid"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "no layout expresses this sharding (a sharded dim of size 0)" in out
    assert "received       0 B by the busiest rank" in out
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{why} "))
    assert lines[at + 1].strip().startswith("layout       none"), out


def test_an_uneven_shard_beside_an_empty_dim_is_called_uneven() -> None:
    """The reason names the dim the placements shard: (0, 7) with [S1] on 2 ranks has no
    layout because 7 does not split evenly, not because dim 0 is empty."""
    r = run_cli(*argv("0,7", "2", "S1", "R", "--no-grid"))
    assert r.returncode == 0, r.stderr
    assert "no layout expresses this sharding (uneven shards)" in r.stdout
    assert "size 0" not in r.stdout


def test_bad_arguments_exit_2_from_the_command() -> None:
    r = run_cli(*argv("8", "2", "S0", "S0", "--dtype", "float33"))
    assert (r.returncode, r.stdout) == (2, "")
    [line] = r.stderr.splitlines()
    assert line.startswith("cute-shard redistribute: error: --dtype: unknown dtype 'float33'")
    r = run_cli("redistribute", "--shape", "8", "--mesh", "2", "--from", "S0")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "cute-shard redistribute: error: the following arguments are required: --to"
    ]


# --------------------------------------------------------------------------------------------
# --compare-torch


def test_compare_torch_shows_the_wrong_result_of_the_strided_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = text(capsys, *BRIEF[0][1:], extra=["--compare-torch"])
    i = next(i for i, line in enumerate(lines) if line.startswith("torch 2."))
    assert lines[i].endswith("plan: m1 S0 -> SS0:2, m0 R -> S0 (its transform infos, as it "
                             "reads the specs)")  # fmt: skip
    assert lines[i + 1 :] == [
        "  collectives  all_gather_into_tensor over 2 ranks: receives 24 B",
        "  received     24 B by the busiest rank: 3.00x the limit",
        "  result       WRONG on ranks [0, 1, 2, 3, 4, 5]: their local tensors are not the "
        "target's shards,",
        "               and no error is raised",
    ]


def test_compare_torch_fsdp2_tp_is_seven_times_the_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = text(capsys, *BRIEF[1][1:], extra=["--compare-torch"])
    assert "  collectives  all_gather_into_tensor over 2 ranks: receives 1 KiB" in lines
    assert "               all_gather_into_tensor over 4 ranks: receives 6 KiB" in lines
    assert "  received     7 KiB by the busiest rank: 7.00x the limit" in lines
    assert "  result       right on all 8 ranks" in lines
    t = as_json(capsys, *BRIEF[1][1:], extra=["--compare-torch"])["torch"]
    assert [(s["mesh_dim"], s["from"], s["to"]) for s in t["steps"]] == [
        (0, "S0", "R"),
        (1, "S0", "R"),
        (0, "R", "S0"),
        (1, "R", "S0"),
    ]
    assert (t["received_bytes"], t["ratio"], t["right"], t["wrong_ranks"]) == (7168, 7.0, True, [])


@pytest.mark.parametrize(
    ("case", "received", "reduced"),
    [(BRIEF[2], 4608, 0), (MORE[0], 39, 0), (MORE[1], 50, 0), (MORE[2], 48, 64)],
    ids=["head-merge", "uneven", "uneven-swap", "partial"],
)
def test_torch_reference_api(case: tuple[str, ...], received: int, reduced: int) -> None:
    """What the benchmarks read: torch's elements received (padding included) and reduced on
    its busiest rank, and whether every rank's result is right."""
    _, shape_s, mesh_s, src_s, dst_s = case
    shape = tuple(int(n) for n in shape_s.split(","))
    mesh = tuple(int(n) for n in mesh_s.split(","))
    ref = torch_reference(
        shape,
        mesh,
        parse_placements(src_s, len(shape), mesh),
        parse_placements(dst_s, len(shape), mesh),
    )
    assert (ref.received, ref.reduced, ref.right, ref.error) == (received, reduced, True, None)
    assert ref.steps and ref.collectives and not ref.unmeasured


def test_compare_torch_reports_torch_errors_and_skips_large_cases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = text(capsys, "8", "2", "S0", "P", extra=["--compare-torch"])
    if TORCH_RELEASE < (2, 14):  # 2.13 refuses Shard -> Partial
        assert (
            "  result       raises RuntimeError: redistribute from S0 to P not supported yet"
            in lines
        )
    else:  # 2.14 and 2.15 plan it (one step, m0 S0 -> P) and return wrong local tensors
        assert (
            "  result       WRONG on ranks [0, 1]: their local tensors are not the target's"
            " shards, and no error" in lines
        )
    # a _StridedShard read as a shard order its split factor does not encode
    lines = text(capsys, "12", "2,4", "SS0:3,S0", "S0,R", extra=["--compare-torch"])
    assert any(
        line.startswith("  result       raises RuntimeError: Expected cond to be True")
        for line in lines
    ), lines
    big = as_json(capsys, "2048,1024", "2,4", "S0,S1", "R,R", extra=["--compare-torch"])
    t = big["torch"]
    assert t["skipped"].startswith("not run: 2097152 elements is too large to simulate")
    assert t["steps"] and t["received_bytes"] is None and t["right"] is None
    assert big["ratio"] == 1.0
    lines = text(capsys, "80", "5,16", "S0,R", "R,S0", extra=["--compare-torch"])
    assert lines[-1].startswith("torch 2.")
    assert lines[-1].endswith("not run: 80 ranks is too many to simulate (at most 64)")
    # past a dozen receivers, the first and last six are listed
    [step] = [s for s in as_json(capsys, "80", "5,16", "S0,R", "R,S0")["steps"] if s["transfers"]]
    receivers = sorted({t["to"] for t in step["transfers"]})
    at = lines.index(f"               ⋮ {len(receivers) - 12} more receivers")
    assert lines[at - 6].startswith(f"    transfers  rank {receivers[0]} <- ")
    assert lines[at + 6].startswith(f"               rank {receivers[-1]} <- ")


@pytest.mark.parametrize("op", ["sum", "avg", "max", "min", "product"])
def test_partial_pieces_reduce_to_the_value_in_any_order(op: str) -> None:
    """The Partial source data: pieces over two mesh dims reduce to the value whichever mesh
    dim is reduced first, so torch's order of reductions cannot make a right answer wrong."""
    x = torch.arange(6, dtype=torch.float64)
    reduce = {
        "sum": lambda ts: sum(ts),
        "avg": lambda ts: sum(ts) / len(ts),
        "max": lambda ts: torch.stack(ts).amax(0),
        "min": lambda ts: torch.stack(ts).amin(0),
        "product": lambda ts: torch.stack(ts).prod(0),
    }[op]
    pieces = {(a, b): _piece(_piece(x, op, 2, a), op, 3, b) for a in range(2) for b in range(3)}
    inner_first = reduce([reduce([pieces[a, b] for b in range(3)]) for a in range(2)])
    outer_first = reduce([reduce([pieces[a, b] for a in range(2)]) for b in range(3)])
    assert torch.equal(inner_first, x) and torch.equal(outer_first, x)
    for b in range(3):  # reducing one mesh dim leaves the other's pieces
        assert torch.equal(reduce([pieces[a, b] for a in range(2)]), _piece(x, op, 3, b))
    for a in range(2):
        assert torch.equal(reduce([pieces[a, b] for b in range(3)]), _piece(x, op, 2, a))


# --------------------------------------------------------------------------------------------
# The README's examples are real


def _readme_examples() -> list[tuple[list[str], list[str]]]:
    """Each ``$ .venv/bin/cute-shard redistribute ...`` block of the README's section: the
    arguments and the lines shown (a ``...`` line stands for lines left out above it)."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Redistributing a DTensor\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```\n(\$ \.venv/bin/cute-shard redistribute .*?)```", section, re.S):
        command, *shown = block.rstrip("\n").split("\n")
        out.append((shlex.split(command)[2:], shown))
    return out


README_EXAMPLES = _readme_examples()


def _release(line: str) -> str:
    """``line`` with the torch release it names (a ``torch X.Y.Z`` label) left out."""
    return re.sub(r"^torch \d+\.\d+\.\d+ +", "torch <release> ", line)


def test_the_readme_has_its_examples() -> None:
    assert len(README_EXAMPLES) == 4


@pytest.mark.parametrize(
    ("args", "shown"), README_EXAMPLES, ids=[" ".join(a[2:9:2]) for a, _ in README_EXAMPLES]
)
def test_readme_example_output(
    capsys: pytest.CaptureFixture[str], args: list[str], shown: list[str]
) -> None:
    code = cli.main(args)
    out, err = capsys.readouterr()
    # The README shows the default set-up's torch; the torch lines name the installed release
    printed = [_release(line) for line in (out if code == 0 else err).splitlines()]
    shown = [_release(line) for line in shown]
    if shown[0] == "...":
        assert printed[-len(shown) + 1 :] == shown[1:]
    else:
        assert printed == shown
    assert code == (2 if "error:" in shown[0] else 0)


# --------------------------------------------------------------------------------------------
# A live DTensor: cute_shard.explain(x, "redistribute", placements) (last: see the docstring)


S, R, P = Shard, Replicate, Partial


def SS(dim: int, sf: int) -> _StridedShard:
    return _StridedShard(dim, split_factor=sf)


LIVE = [
    ((64, 32), (2, 4), [SS(0, 4), S(0)], [S(0), S(0)], ("64,32", "2,4", "SS0:4,S0", "S0,S0")),
    ((32, 24, 16), (2, 4), [S(0), SS(0, 2)], [S(0), S(1)],
     ("32,24,16", "2,4", "S0,SS0:2", "S0,S1")),
    ((5, 7), (8,), [SS(1, 2)], [S(-2)], ("5,7", "8", "SS1:2", "S0")),
    ((8, 8), (2, 4), [P("avg"), S(1)], [S(0), R()], ("8,8", "2,4", "P:avg,S1", "S0,R")),
]  # fmt: skip


@pytest.mark.usefixtures("world8")
@pytest.mark.parametrize(
    ("shape", "mesh", "src", "dst", "cli_case"), LIVE, ids=[c[4][2] + "->" + c[4][3] for c in LIVE]
)
def test_explain_a_live_dtensor_prints_what_the_command_prints(
    capsys: pytest.CaptureFixture[str],
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    src: list[object],
    dst: list[object],
    cli_case: tuple[str, ...],
) -> None:
    x = make(shape, mesh, src, dtype=torch.bfloat16)  # type: ignore[arg-type]
    ex = cute_shard.explain(x, "redistribute", dst)
    assert isinstance(ex, RedistributionReport)
    extra = ("--dtype", "bfloat16")
    assert str(ex) + "\n" == run_main(capsys, argv(*cli_case, *extra))
    assert repr(ex) == str(ex)
    assert ex.text(grid=False) + "\n" == run_main(capsys, argv(*cli_case, *extra, "--no-grid"))
    assert json.dumps(ex.to_json(), indent=2) + "\n" == run_main(
        capsys, argv(*cli_case, *extra, "--json")
    )


@pytest.mark.usefixtures("world8")
def test_explain_a_live_dtensor_with_compare_torch(capsys: pytest.CaptureFixture[str]) -> None:
    # The process group is the fixture's fake 8 ranks, the mesh's size: simulated here.
    x = make((64, 32), (2, 4), [SS(0, 4), S(0)])
    ex = cute_shard.explain(x, "redistribute", (S(0), S(0)), compare_torch=True)
    assert str(ex) + "\n" == run_main(capsys, argv(*BRIEF[1][1:], "--compare-torch"))
    assert ex.torch is not None and ex.torch.received == 7 * ex.limit


@pytest.mark.usefixtures("world8")
def test_torch_reference_under_another_process_group_runs_apart() -> None:
    # A fake group of 8 ranks is up and the mesh has 6: the comparison runs in a fresh
    # process rather than touch this one's group.
    mesh = (3, 2)
    ref = torch_reference(
        (12,), mesh, parse_placements("R,S0", 1, mesh), parse_placements("S0,SS0:2", 1, mesh)
    )
    assert (ref.received, ref.wrong_ranks) == (6, (0, 1, 2, 3, 4, 5))
    assert [str(s) for s in ref.steps or ()] == ["m1 S0 -> SS0:2", "m0 R -> S0"]


BAD_LIVE = [
    ("two lists", ([S(0), S(0)], [S(0), S(0)]), {}, "expected one sequence of 2 placements"),
    ("varargs", (S(0), S(0)), {}, "expected one sequence of 2 placements"),
    ("a string", ("S0,S0",), {}, "expected one sequence of 2 placements"),
    ("not a placement", ([S(0), 3],), {}, "got 3 among them"),
    ("too few", ([S(0)],), {}, "--to: got 1 placements for a mesh of 2 dims"),
    ("dim out of range", ([S(0), S(2)],), {}, "--to: S2 shards dim 2, out of range"),
    ("strict", ([S(0), S(0)],), {"strict": True}, "strict applies to view ops"),
]


@pytest.mark.usefixtures("world8")
@pytest.mark.parametrize(
    ("args", "kwargs", "fragment"), [b[1:] for b in BAD_LIVE], ids=[b[0] for b in BAD_LIVE]
)
def test_explain_redistribute_bad_arguments(
    args: tuple[object, ...], kwargs: dict[str, bool], fragment: str
) -> None:
    x = make((64, 32), (2, 4), [SS(0, 4), S(0)])
    with pytest.raises(ValueError) as info:
        cute_shard.explain(x, "redistribute", *args, **kwargs)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)

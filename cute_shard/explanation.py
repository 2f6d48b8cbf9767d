"""``cute-shard explain`` and ``cute_shard.explain``: what a view op does to a DTensor
sharding, and why.

Given a global shape, a mesh, one placement per mesh dim and a view op, it runs the engine and
shows:

- the input sharded layout in CuTe notation, with each mesh dim's gpu sub-mode named;
- the op's rule in DimMap notation, the output layout, the input target and output placements;
- the communication: per mesh dim that moves, the collective, the bytes each rank receives for
  ``--dtype``, and the engine's reason; for a strict view (``view``, or ``--strict``), the
  error it raises instead;
- which rank holds which elements, before and after, as a folded grid (``--png`` draws it;
  ``cute_shard.ownership`` makes the pictures);
- with ``--compare-torch``, torch's reference answer and the oracle's verdict on it and on ours.

Placements are written in the notation of ``cute_shard.notation`` (``R``, ``S<dim>``,
``SS<dim>:<split_factor>``, ``P``, ``P:<op>``), and every placement shown is in it, the
engine's reasons included. The data flow is one way: ``parse_case`` (the command line's
strings to a ``Case``), ``explain`` (a ``Case`` to an ``Explanation``, the only step that
computes), then ``render_text`` / ``to_json`` / ``write_png``. ``explain_dtensor`` (the
package's ``cute_shard.explain``) writes a live DTensor and its op's arguments as those same
strings, so it takes the same path. Bad input anywhere raises ``ValueError`` with a one-line
message, which the CLI prints before exiting with status 2.

Worked example (the rank grids are left out)::

    $ cute-shard explain --shape 8,16,32 --mesh 2,4 --placements S0,S1 --view 128,32 --no-grid
    op             view 128,32: (8,16,32) -> (128,32), a strict view: raises if data must move
    mesh           (2,4), 8 ranks, float32
    rule           (flat(d0,d1), d2)
    input          [S0, S1]
      layout       ((4,2),(4,4),32):((512,2048),(32,128),1)
      gpu modes    m0 = 2:2048 in d0   m1 = 4:128 in d1
    input target   [S0, S1]  (unchanged)
    output         [S0, SS0:4]
      layout       (((4,4),(2,4)),32):(((32,512),(2048,128)),1)
      gpu modes    m0 = 2:2048 in d0   m1 = 4:128 in d0
    communication  none: every rank views its own local tensor
    strict view    allowed: no mesh dim has to move

The same from a live DTensor ``x`` of that shape, mesh and placements::

    >>> print(cute_shard.explain(x, "view", 128, 32).text(grid=False))

A sharded tensor dim's mode is ``(local, gpu)``. The gpu sub-modes keep their strides through
the view: mesh dim 1 still steps 128 elements (4 output rows) per coordinate, so in the
flattened dim 0 a rank holds 4 rows out of every 16, and the 4 blocks of 16 rows in each half
that mesh dim 0 keeps make it ``_StridedShard(0, split_factor=4)``.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

from . import ownership, rules
from .notation import (
    Placements,
    PlacementSpec,
    parse_placement,
    parse_placements,
    placements_str,
    to_notation,
)
from .ownership import Picture, picture, read_dtensor
from .render import (
    DTYPES,
    Printed,
    fmt_bytes,
    grid_rows,
    layout_json,
    layout_rows,
    parse_int,
    parse_int_list,
    parse_sizes,
    row,
    tuple_text,
)

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._ops._view_ops import DimMap
    from torch.distributed.tensor.placement_types import Placement

    from .engine import Blocked, ShardedLayout
    from .redistribute import Plan
    from .redistribute.report import RedistributionReport

# torch is imported only once a case is explained (``explain``): everything before that is
# torch-free, so a bad argument is reported in a tenth of a second rather than after torch's
# multi-second import.

__all__ = [
    "DTYPES",
    "OPS",
    "STRICT_OPS",
    "Case",
    "Explanation",
    "PlacementSpec",
    "Step",
    "communication",
    "explain",
    "explain_dtensor",
    "grid_rows",
    "parse_case",
    "parse_placement",
    "parse_placements",
    "render_text",
    "step_json",
    "to_json",
    "write_png",
]

# The rank simulator builds the whole global tensor once per rank; above these it is too slow
# for an interactive command, and the oracle verdicts are reported as not checked.
ORACLE_MAX_ELEMENTS = 1 << 20
ORACLE_MAX_RANKS = 1024


# --------------------------------------------------------------------------------------------
# The case: argv strings to a validated question and its rule


# Op name -> its CLI arguments and how many of them are required. SHAPE and SIZES are comma
# lists of sizes (-1 allowed); DIMS, SOURCE and DEST are an int or a comma list of ints; the
# others are one int.
OPS: dict[str, tuple[tuple[str, ...], int]] = {
    "view": (("SHAPE",), 1),
    "reshape": (("SHAPE",), 1),
    "flatten": (("START", "END"), 0),
    "unflatten": (("DIM", "SIZES"), 2),
    "permute": (("DIMS",), 1),
    "transpose": (("DIM0", "DIM1"), 2),
    "squeeze": (("DIMS",), 0),
    "unsqueeze": (("DIM",), 1),
    "expand": (("SHAPE",), 1),
    "movedim": (("SOURCE", "DEST"), 2),
    "repeat": (("SIZES",), 1),
}

# The ops whose DTensor strategy is a strict view with ``install()``: where data would have to
# move they raise instead of redistributing (a view shares its input's storage). The others
# may redistribute: reshape, flatten and unflatten (``install()`` lets them copy) and the ops
# that never need to move anything.
STRICT_OPS = frozenset({"view", "squeeze"})

# An op's argument: one int, or a list of them (SHAPE, SIZES, and DIMS, SOURCE, DEST with a
# comma).
OpArg = int | tuple[int, ...]

# The ops torch's Tensor methods accept as varargs (``x.view(128, 32)``) as well as one list.
_VARARG_OPS = frozenset({"view", "reshape", "expand", "repeat", "permute"})


@dataclass(frozen=True, slots=True)
class Case:
    """One question: ``Tensor.<op>(*args)`` on a tensor of ``shape`` sharded by ``placements``.

    ``op_args`` are ``args`` in CLI notation (``128,32``), so that ``--json`` output can be
    fed back. ``strict`` is view semantics: the op is in ``STRICT_OPS`` or ``--strict`` asked
    for it. ``rule`` is the rule DTensor propagates for the op and ``out_shape`` the global
    output shape.
    """

    shape: tuple[int, ...]
    mesh: tuple[int, ...]
    placements: Placements
    op: str
    op_args: tuple[str, ...]
    args: tuple[OpArg, ...]
    strict: bool
    dtype: str
    rule: rules.Rule
    out_shape: tuple[int, ...]


def parse_case(
    shape: str,
    mesh: str,
    placements: str,
    op: str,
    op_args: Sequence[str],
    *,
    strict: bool = False,
    dtype: str = "float32",
) -> Case:
    """A ``Case`` from the CLI strings; ValueError names the first bad argument.

    Building the rule checks the op's arguments against the shape (numel, dims in range).
    ``strict`` asks for view semantics on an op that is not strict anyway.
    """
    sizes = parse_sizes(shape, "--shape")
    mesh_sizes = parse_sizes(mesh, "--mesh", least=1)
    if not mesh_sizes:
        raise ValueError("--mesh: expected at least one mesh dim, e.g. 2,4")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    args = parse_op_args(op, op_args)
    rule = op_rule(op, sizes, args)
    return Case(
        shape=sizes,
        mesh=mesh_sizes,
        placements=parse_placements(placements, len(sizes), mesh_sizes),
        op=op,
        op_args=tuple(_arg_text(a) for a in args),
        args=args,
        strict=strict or op in STRICT_OPS,
        dtype=dtype,
        rule=rule,
        out_shape=rule_out_shape(rule, sizes),
    )


def _ints(arg: OpArg) -> tuple[int, ...]:
    return arg if isinstance(arg, tuple) else (arg,)


def _arg_text(arg: object) -> str:
    """An op argument in CLI notation: ``128,32`` for a list, ``0`` for an int."""
    if isinstance(arg, tuple):
        return ",".join(str(x) for x in arg)
    return str(arg)


def parse_op_args(op: str, raw: Sequence[str]) -> tuple[OpArg, ...]:
    """The torch call's positional arguments for ``op`` from its CLI strings."""
    if op not in OPS:
        raise ValueError(f"--op: unknown op {op!r}; expected one of {', '.join(OPS)}")
    names, required = OPS[op]
    if not required <= len(raw) <= len(names):
        usage = " ".join(n if i < required else f"[{n}]" for i, n in enumerate(names))
        raise ValueError(f"--op {op}: expected arguments {usage}, got {len(raw)}: {list(raw)}")
    return tuple(_op_arg(name, text, op) for name, text in zip(names, raw, strict=False))


def _op_arg(name: str, text: str, op: str) -> OpArg:
    what = f"--op {op} {name}"
    if name in ("SHAPE", "SIZES"):
        return parse_sizes(text, what, allow_minus_one=True)
    if name in ("DIMS", "SOURCE", "DEST") and "," in text:
        return parse_int_list(text, what)
    return parse_int(text, what)


# The OPS arguments that may be a list; ``op_rule`` hands the others to the builders as one int.
_LIST_ARGS = frozenset({"SHAPE", "SIZES", "DIMS", "SOURCE", "DEST"})


def op_rule(op: str, shape: tuple[int, ...], args: tuple[OpArg, ...]) -> rules.Rule:
    """The rule DTensor propagates for ``op``, from ``cute_shard.rules.OP_RULES``.

    flatten and unflatten are CompositeImplicit: DTensor sees the view they decompose to, so
    their rule is that view's. Bad arguments raise the builders' ValueError.
    """
    names = OPS[op][0]
    a = tuple(x if name in _LIST_ARGS else _one(x) for name, x in zip(names, args, strict=False))
    rule = rules.OP_RULES[op](shape, *a)
    if op == "flatten":
        return rules.view_groups(shape, rule_out_shape(rule, shape))
    return rule


def _one(arg: OpArg) -> int:
    """An argument ``parse_op_args`` reads as one int (``OPS`` names which)."""
    if isinstance(arg, tuple):
        raise ValueError(f"expected one integer, got the list {_arg_text(arg)}")
    return arg


def rule_out_shape(rule: rules.Rule, shape: Sequence[int]) -> tuple[int, ...]:
    """The output shape of ``rule`` applied to a tensor of ``shape``."""

    def size(spec: rules.DimSpec) -> int:
        if isinstance(spec, rules.InputDim):
            return shape[spec.input_dim]
        if isinstance(spec, rules.Flatten):
            return math.prod(size(d) for d in spec.input_dims)
        if isinstance(spec, rules.Split):
            return int(spec.group_shape[spec.split_id])
        if isinstance(spec, rules.Broadcast):
            return int(spec.dim_size)
        if isinstance(spec, rules.NewDim):
            return int(spec.size)
        if isinstance(spec, rules.Repeat):
            return size(spec.input_dim) * int(spec.times)
        return 1  # Singleton

    return tuple(size(spec) for spec in rule)


# --------------------------------------------------------------------------------------------
# The explanation


@dataclass(frozen=True, slots=True)
class Step:
    """One mesh dim's part of the redistribution plan (``cute_shard.redistribute``): the step
    that moves it and the bytes each rank receives in that step.

    ``collective`` is the step's kind (all-gather, all-to-all, permutation, chunk, ...) and
    ``op`` the functional collective that runs it (None for a local step, and for the other
    mesh dims of a step over several: the step is counted, and its bytes given, once, on its
    first mesh dim). ``bytes_per_rank`` is the most any rank receives (an all-reduce or a
    reduce-scatter: the bytes it hands to the reduction); ``uniform`` says every rank
    receives that much. ``reason`` says why the mesh dim must move (the engine's words, for a
    view) or, without one, how it moves.
    """

    mesh_dim: int
    before: PlacementSpec
    after: PlacementSpec
    collective: str
    group_size: int
    bytes_per_rank: int
    uniform: bool
    reason: str | None
    op: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The oracle's judgement of an answer: True/False, or None when it was not checked."""

    valid: bool | None
    detail: str


@dataclass(frozen=True, slots=True)
class TorchAnswer:
    """torch's reference answer for the case, or the exception it raised."""

    version: str
    target: Placements | None
    output: Placements | None
    error: str | None
    verdict: Verdict | None


@dataclass(frozen=True, slots=True, repr=False)
class Explanation(Printed):
    """Everything ``explain`` computed; rendering reads it and computes nothing new.

    ``target`` and ``output`` are the non-strict answer (what ``reshape`` does). For a strict
    case (``Case.strict``), ``strict_error`` holds the error the view raises instead, or None.
    ``str`` (and ``repr``) is the text ``cute-shard explain`` prints, ``to_json()`` the object
    ``--json`` prints, and ``write_png(path)`` draws what ``--png`` draws.
    """

    case: Case
    input_layout: ShardedLayout | None
    output_layout: ShardedLayout | None
    target: Placements
    output: Placements
    communication: tuple[Step, ...]
    strict_error: str | None
    pictures: tuple[Picture, ...]
    ours: Verdict | None
    torch: TorchAnswer | None

    def lines(self, *, grid: bool = True) -> list[str]:
        return render_text(self, grid=grid)

    def to_json(self) -> dict[str, object]:
        """The object ``--json`` prints (``json.dumps(..., indent=2)`` gives the same text)."""
        return to_json(self)

    def write_png(self, path: str) -> None:
        """Draw the rank pictures into a PNG at ``path``, as ``--png`` does."""
        write_png(self, path)


def explain(case: Case, *, compare_torch: bool = False) -> Explanation:
    """Run the engine on ``case`` (and torch's reference with ``compare_torch``)."""
    from .engine import decide_view, placements_to_layout

    given = _to_torch(case.placements)
    decision = decide_view(given, case.shape, case.rule, case.mesh, complex_view=False)
    target_t, output_t = decision.target, decision.output
    blocked = decision.blocked
    refusal = decision.refusal() if case.strict else None
    target = tuple(PlacementSpec.of(p) for p in target_t)
    output = tuple(PlacementSpec.of(p) for p in output_t)
    return Explanation(
        case=case,
        input_layout=placements_to_layout(case.shape, given, case.mesh),
        output_layout=_output_layout(case, output_t),
        target=target,
        output=output,
        communication=communication(
            case.shape, case.mesh, case.placements, target, DTYPES[case.dtype], blocked
        ),
        strict_error=None if refusal is None else to_notation(str(refusal)),
        pictures=_pictures(case, target, output),
        ours=_judge(case, target, output) if compare_torch else None,
        torch=_torch_answer(case) if compare_torch else None,
    )


def _pictures(case: Case, target: Placements, output: Placements) -> tuple[Picture, ...]:
    """Who holds what: the input, the input target if it differs, and the output."""
    pics = [
        picture(f"input {placements_str(case.placements)}", case.shape, case.placements, case.mesh)
    ]
    if target != case.placements:
        pics.append(
            picture(f"input target {placements_str(target)}", case.shape, target, case.mesh)
        )
    pics.append(picture(f"output {placements_str(output)}", case.out_shape, output, case.mesh))
    return tuple(pics)


@overload
def explain_dtensor(  # type: ignore[overload-overlap]  # the literal comes first, as meant
    dtensor: DTensor,
    op: Literal["redistribute"],
    *args: object,
    strict: bool = False,
    compare_torch: bool = False,
) -> RedistributionReport: ...


@overload
def explain_dtensor(
    dtensor: DTensor,
    op: str,
    *args: object,
    strict: bool = False,
    compare_torch: bool = False,
) -> Explanation: ...


def explain_dtensor(
    dtensor: DTensor,
    op: str,
    *args: object,
    strict: bool = False,
    compare_torch: bool = False,
) -> Explanation | RedistributionReport:
    """What ``dtensor.<op>(*args)`` does to the sharding, and why (``cute_shard.explain``).

    ``op`` is one of ``OPS`` (view, reshape, flatten, unflatten, permute, transpose, squeeze,
    unsqueeze, expand, movedim, repeat) and ``args`` its arguments as the Tensor method takes
    them: ``explain(x, "view", 128, 32)`` or ``explain(x, "view", (128, 32))``,
    ``explain(x, "unflatten", 1, (4, 4))``. ``strict`` asks for view semantics on an op that
    is not a strict view anyway; ``compare_torch`` adds torch's answer and the oracle's
    verdicts. ``print()`` the result for the text ``cute-shard explain`` prints for the same
    global shape, mesh, placements and dtype; ``.to_json()`` is its ``--json`` object.

    ``op == "redistribute"`` with one argument, the target placements as
    ``DTensor.redistribute`` takes them (``explain(x, "redistribute", [Shard(0), Shard(1)])``),
    explains the redistribution plan instead: the result prints what ``cute-shard
    redistribute`` prints for the DTensor's shape, mesh, placements and dtype and that
    target (``cute_shard.redistribute.report``); ``compare_torch`` adds torch's plan, bytes
    and result.

    The DTensor and the arguments are written as the command line's strings and go through
    ``parse_case`` and ``explain`` (``parse_request`` and ``explain_redistribution``), so
    both answer from one path. Bad arguments raise ValueError naming them.
    """
    facts = read_dtensor(dtensor, "explain")
    shape = ",".join(str(n) for n in facts.shape)
    mesh = ",".join(str(n) for n in facts.mesh)
    placements = ",".join(str(p) for p in facts.placements)
    if op == "redistribute":
        from .redistribute.report import explain_redistribution, parse_request

        if strict:
            raise ValueError(
                "explain: redistribute: strict applies to view ops; a redistribution moves "
                "what it must"
            )
        target = _python_placements(args, len(facts.mesh))
        request = parse_request(shape, mesh, placements, target, dtype=facts.dtype)
        return explain_redistribution(request, compare_torch=compare_torch)
    case = parse_case(
        shape,
        mesh,
        placements,
        _op_name(op),
        _python_op_args(op, args),
        strict=strict,
        dtype=facts.dtype,
    )
    return explain(case, compare_torch=compare_torch)


def _python_placements(args: tuple[object, ...], mesh_ndim: int) -> str:
    """``redistribute``'s one argument, a sequence of torch placements (or of
    ``PlacementSpec``), as the command line's ``--to`` string."""
    usage = (
        f"explain: redistribute: expected one sequence of {mesh_ndim} placements, one per mesh "
        "dim, as DTensor.redistribute takes them, e.g. [Shard(0), Replicate()]"
    )
    if len(args) != 1 or not isinstance(args[0], Sequence) or isinstance(args[0], str):
        raise ValueError(f"{usage}; got {args!r}")
    specs = []
    for p in args[0]:
        if isinstance(p, PlacementSpec):
            specs.append(p)
            continue
        try:
            specs.append(PlacementSpec.of(p))
        except ValueError:
            raise ValueError(f"{usage}; got {p!r} among them") from None
    return ",".join(str(p) for p in specs)


def _op_name(op: object) -> str:
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"explain: op: expected one of {', '.join(OPS)}, got {op!r}")
    return op


def _python_op_args(op: str, args: tuple[object, ...]) -> list[str]:
    """Python arguments of ``Tensor.<op>`` as CLI strings (``(128, 32)`` -> ``"128,32"``)."""
    if op in _VARARG_OPS and len(args) > 1:  # x.view(128, 32) is x.view((128, 32))
        args = (args,)
    names = OPS[op][0]
    return [_python_arg(op, name, a) for name, a in zip(names, args, strict=False)] + [
        _python_arg(op, "argument", a) for a in args[len(names) :]
    ]  # extra arguments are reported by parse_case, as the command line reports them


def _python_arg(op: str, name: str, arg: object) -> str:
    try:
        if isinstance(arg, Sequence) and not isinstance(arg, str):
            return ",".join(str(_index(x)) for x in arg)
        return str(_index(arg))
    except TypeError:
        raise ValueError(
            f"explain: {op} {name}: expected an int or a sequence of ints, got {arg!r}"
        ) from None


def _index(x: object) -> int:
    if isinstance(x, bool):  # an int to Python, never a size or a dim to torch
        raise TypeError(x)
    return operator.index(x)  # type: ignore[arg-type]


def _to_torch(ps: Sequence[PlacementSpec]) -> list[Placement]:
    return [p.to_torch() for p in ps]


def _output_layout(case: Case, output: Sequence[Placement]) -> ShardedLayout | None:
    """The output's sharded layout (the input target's, composed with the view), or None
    where no layout exists (uneven shards)."""
    from .engine import placements_to_layout

    return placements_to_layout(case.out_shape, output, case.mesh)


def communication(
    shape: tuple[int, ...],
    mesh: tuple[int, ...],
    placements: Placements,
    target: Placements,
    itemsize: int,
    blocked: Sequence[Blocked] = (),
    *,
    joint: bool = True,
) -> tuple[Step, ...]:
    """The redistribution from ``placements`` to ``target`` of a tensor of global ``shape``
    with elements of ``itemsize`` bytes, as the planner makes it (``joint``: steps over
    several mesh dims are one collective), one entry per mesh dim and step; ``blocked`` says
    why a mesh dim must move."""
    from .redistribute import plan_redistribution

    plan = plan_redistribution(shape, mesh, placements, target, joint=joint)
    return plan_moves(plan, itemsize, blocked)


def plan_moves(plan: Plan, itemsize: int, blocked: Sequence[Blocked] = ()) -> tuple[Step, ...]:
    """A plan's steps, one entry per mesh dim each moves, in the plan's order."""
    why = {b.mesh_dim: _reason(b) for b in blocked}
    how = {m.mesh_dim: m for m in plan.moves}
    steps: list[Step] = []
    for step in plan.steps:
        volume = (step.reduced if step.kind.reduces else step.received) * itemsize
        group = math.prod(plan.mesh[m] for m in step.mesh_dims)
        for i, m in enumerate(step.mesh_dims):
            move = how[m]
            reason = why.get(m, move.reason)
            if i:
                reason += f" (in m{step.mesh_dims[0]}'s {step.kind.value}, counted there)"
            steps.append(
                Step(
                    m,
                    move.src,
                    move.dst,
                    step.kind.value,
                    group,
                    0 if i else volume,
                    step.uniform,
                    reason,
                    None if i else step.collective,
                )
            )
    return tuple(steps)


def _reason(b: Blocked) -> str:
    reason = to_notation(b.reason)  # the engine may quote torch's spelling of a placement
    return f"tensor dim {b.tensor_dim}: {reason}" if b.tensor_dim >= 0 else reason


def _judge(case: Case, target: Placements, output: Placements) -> Verdict:
    """The rank simulator's verdict on an answer (not run for large cases)."""
    from . import oracle

    n, ranks = math.prod(case.shape), math.prod(case.mesh)
    if n > ORACLE_MAX_ELEMENTS or ranks > ORACLE_MAX_RANKS:
        return Verdict(None, f"not checked: {n} elements on {ranks} ranks is too large to simulate")
    try:
        v = oracle.check_op(
            case.shape,
            case.op,
            case.args,
            _to_torch(target),
            _to_torch(output),
            case.mesh,
            strict_view=case.strict,
        )
    except ValueError as e:  # e.g. torch's output names a dim the output does not have
        return Verdict(False, str(e))
    return Verdict(v.ok, v.reason)


def _torch_answer(case: Case) -> TorchAnswer:
    """torch's ``propagate_shape_and_sharding`` on the same case, judged by the oracle."""
    import torch
    from torch.distributed.tensor._ops._view_ops import propagate_shape_and_sharding as ref

    version = torch.__version__.split("+")[0]
    try:
        target_t, output_t = ref(
            _to_torch(case.placements), case.shape, _torch_rule(case), case.mesh, case.strict
        )
        target = tuple(PlacementSpec.of(p) for p in target_t)
        output = tuple(PlacementSpec.of(p) for p in output_t)
    except _NotAsked as e:
        return TorchAnswer(version, None, None, f"not asked: {e}", None)
    except Exception as e:  # torch's reference may raise anything: report it, do not die
        lines = str(e).strip().splitlines()
        error = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
        return TorchAnswer(version, None, None, error, None)
    return TorchAnswer(version, target, output, None, _judge(case, target, output))


class _NotAsked(Exception):
    """torch's reference is not run on the case (it would not return)."""


def _torch_rule(case: Case) -> DimMap:
    """torch's own rule for the op, from ``_view_ops`` (as DTensor would compute it)."""
    import torch
    from torch.distributed.tensor._ops import _view_ops as tv

    if case.op in ("view", "reshape", "flatten", "unflatten"):
        if 0 in case.shape:
            raise _NotAsked(
                "torch's view_groups never returns on some empty shapes ((0,8) -> (0,) loops)"
            )
        return tv.view_groups(case.shape, case.out_shape)
    meta = torch.empty(case.shape, device="meta")
    if case.op in ("expand", "repeat"):
        sizes = case.args[0]
        return tv.dim_maps[getattr(torch.Tensor, case.op)](meta, *_ints(sizes))
    return tv.dim_maps[getattr(torch, case.op)](meta, *case.args)


# --------------------------------------------------------------------------------------------
# Text


def render_text(ex: Explanation, *, grid: bool = True) -> list[str]:
    """The human-readable explanation, one list entry per line."""
    c = ex.case
    mode = "a strict view: raises if data must move" if c.strict else "redistributes what must move"
    lines = [
        *row("op", f"{_op_text(c)}: {tuple_text(c.shape)} -> {tuple_text(c.out_shape)}, {mode}"),
        *row("mesh", f"{tuple_text(c.mesh)}, {math.prod(c.mesh)} ranks, {c.dtype}"),
        *row("rule", rules.format_rule(c.rule)),
        *_layout_rows("input", c.placements, ex.input_layout),
        *row("input target", _target_text(ex)),
        *_layout_rows("output", ex.output, ex.output_layout),
        *_communication_rows(ex),
    ]
    if ex.strict_error is not None:
        lines += row("strict view", f"raises RedistributionRequired: {ex.strict_error}")
    elif c.strict:
        lines += row("strict view", "allowed: no mesh dim has to move")
    if ex.torch is not None:
        lines += _torch_rows(ex)
    if grid:
        lines += grid_rows(ex.pictures)
    return lines


def _op_text(c: Case) -> str:
    return " ".join([c.op, *c.op_args])


def _target_text(ex: Explanation) -> str:
    if ex.strict_error is not None:  # the rows below say what a reshape would do instead
        return placements_str(ex.target) + "  (as a reshape would; this view raises, below)"
    same = ex.target == ex.case.placements
    return placements_str(ex.target) + ("  (unchanged)" if same else "")


def _layout_rows(label: str, placements: Placements, sl: ShardedLayout | None) -> list[str]:
    return layout_rows(label, placements, sl, "(e.g. uneven shards); the fallback decides")


def _communication_rows(ex: Explanation) -> list[str]:
    if not ex.communication:
        return row("communication", "none: every rank views its own local tensor")
    total = sum(s.bytes_per_rank for s in ex.communication)
    upto = "" if all(s.uniform for s in ex.communication) else "up to "
    n = sum(1 for s in ex.communication if s.op is not None)
    lines = row(
        "communication",
        f"{n} collective{'s' if n != 1 else ''}, {upto}{fmt_bytes(total)} received per rank "
        f"({ex.case.dtype}){', in this order' if len(ex.communication) > 1 else ''}",
    )
    for s in ex.communication:
        upto = "" if s.uniform else "up to "
        lines += row(
            f"m{s.mesh_dim}",
            f"{s.before} -> {s.after}: {s.collective} "
            f"over {s.group_size} ranks, {upto}{fmt_bytes(s.bytes_per_rank)} per rank",
            2,
        )
        if s.reason:
            lines += row("why", s.reason, 4)
    return lines


def _torch_rows(ex: Explanation) -> list[str]:
    t = ex.torch
    if t is None:
        return []
    label = f"torch {t.version}"
    if t.target is None or t.output is None:
        error = str(t.error)
        if error.startswith("not asked"):
            lines = row(label, error)
        else:
            kind = "refuses" if error.startswith("RuntimeError") else "crashes"
            lines = row(label, f"{kind}: {error}")
    else:
        pairs = zip(ex.case.placements, t.target, strict=True)
        moved = [m for m, (a, b) in enumerate(pairs) if a != b]
        comm = f"moves mesh dims {moved}" if moved else "no communication"
        lines = row(
            label,
            f"input target {placements_str(t.target)}, output {placements_str(t.output)} ({comm})",
        )
    if t.verdict is not None:
        lines += row("oracle", _verdict_text(t.verdict), 2)
    if ex.ours is not None:
        lines += row("ours, oracle", _verdict_text(ex.ours))
    return lines


def _verdict_text(v: Verdict) -> str:
    if v.valid is None:
        return v.detail
    return f"{'valid' if v.valid else 'INVALID'}: {v.detail}"


# --------------------------------------------------------------------------------------------
# JSON and PNG


def to_json(ex: Explanation) -> dict[str, object]:
    """A machine-readable explanation. ``shape``, ``mesh``, ``placements``, ``op``,
    ``op_args``, ``strict`` and ``dtype`` are the inputs in CLI notation, so re-running with
    them gives the same object. Placements are strings in the same notation."""
    c = ex.case
    return {
        "shape": list(c.shape),
        "mesh": list(c.mesh),
        "placements": _strs(c.placements),
        "op": c.op,
        "op_args": list(c.op_args),
        "strict": c.strict,
        "dtype": c.dtype,
        "output_shape": list(c.out_shape),
        "rule": rules.format_rule(c.rule),
        "input_layout": layout_json(ex.input_layout),
        "input_target": _strs(ex.target),
        "output": _strs(ex.output),
        "output_layout": layout_json(ex.output_layout),
        "communication": [step_json(s) for s in ex.communication],
        "bytes_per_rank": sum(s.bytes_per_rank for s in ex.communication),
        "strict_error": ex.strict_error,
        "oracle": _verdict_json(ex.ours),
        "torch": None if ex.torch is None else _torch_json(ex.torch),
    }


def _strs(ps: Sequence[PlacementSpec] | None) -> list[str] | None:
    return None if ps is None else [str(p) for p in ps]


def step_json(s: Step) -> dict[str, object]:
    """One ``Step`` as the JSON of ``--json`` (and of a trace) writes it."""
    return {
        "mesh_dim": s.mesh_dim,
        "from": str(s.before),
        "to": str(s.after),
        "collective": s.collective,
        "group_size": s.group_size,
        "bytes_per_rank": s.bytes_per_rank,
        "uniform": s.uniform,
        "reason": s.reason,
        "op": s.op,
    }


def _verdict_json(v: Verdict | None) -> dict[str, object] | None:
    return None if v is None else {"valid": v.valid, "detail": v.detail}


def _torch_json(t: TorchAnswer) -> dict[str, object]:
    return {
        "version": t.version,
        "input_target": _strs(t.target),
        "output": _strs(t.output),
        "error": t.error,
        "oracle": _verdict_json(t.verdict),
    }


def png_available() -> bool:
    """Whether matplotlib (the optional ``plot`` extra) is importable."""
    return ownership.png_available()


def check_png_path(path: str) -> None:
    """ValueError unless a PNG can be written at ``path``: checked before the case is
    explained, so a typo in the path costs nothing."""
    if not png_available():
        raise ValueError("--png needs matplotlib: pip install 'cute_shard[plot]'")
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        raise ValueError(f"--png: {path!r} is a directory; give a file name such as ranks.png")
    if not os.path.isdir(folder):
        raise ValueError(f"--png: cannot write {path!r}: no directory {folder!r}")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--png: cannot write {path!r}: directory {folder!r} is not writable")


def write_png(ex: Explanation, path: str) -> None:
    """Draw the rank pictures side by side into a PNG (needs matplotlib); ValueError if
    ``path`` cannot be written."""
    c = ex.case
    shapes = f"{tuple_text(c.shape)} -> {tuple_text(c.out_shape)}"
    title = f"{_op_text(c)}: {shapes} on mesh {tuple_text(c.mesh)}"
    try:
        ownership.write_png(ex.pictures, path, title)
    except OSError as e:
        raise ValueError(f"--png: cannot write {path!r}: {e.strerror or e}") from None

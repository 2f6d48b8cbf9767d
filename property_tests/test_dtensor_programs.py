"""Whole DTensor programs with install(): right wherever torch alone runs them.

Each of 120 seeded random programs (``dtensor_programs``: views, reshapes, transposes, sums,
matmuls, redistributions, then backward, on 1-3-D meshes up to 8 simulated ranks) runs with
``cute_shard.install(reshape_may_copy="dispatcher")``. Its output and its input's gradient
must equal the one-process program's on every rank; where it raises, torch alone must raise
on the same program too (DTensor's own limits, e.g. matmul's fold of an uneven batch). Where
torch alone runs it wrong and cute_shard right, the program passes.

The dispatcher mode, because the default methods mode does not reach reshapes inside other
ops (a view's backward, matmul's fold), and with cute_shard's prices DTensor picks strategies
whose shards such a strict view cannot keep where torch's choices could: about 3 programs in
560 raise there, saying where and naming the dispatcher mode (``test_install.py``, design.md
section 4).

Its first runs (a wider draw, with 1-D ``@``) found the strict ``_unsafe_view`` that made
``x @ w`` raise under install() (seed 279 here meets it: with ``_unsafe_view`` strict again it
raises where torch alone runs the program) and a squeezed local tensor that a target sharding
its size-1 dim could not re-squeeze (``tests/redistribute/test_dtensor.py``).
"""

from __future__ import annotations

import pytest

import cute_shard

from .dtensor_programs import random_program, run_program

# 120 seeds in blocks of 20, then the seeds that met a bug once
BLOCKS = [range(b, b + 20) for b in range(0, 120, 20)] + [(279,)]


@pytest.mark.parametrize("seeds", BLOCKS, ids=lambda s: f"seeds {s[0]}-{s[-1]}")
def test_programs_are_right_wherever_torch_runs_them(seeds: range | tuple[int, ...]) -> None:
    problems = []
    for seed in seeds:
        program = random_program(seed)
        cute_shard.install(reshape_may_copy="dispatcher")
        try:
            ours = run_program(program)
        finally:
            cute_shard.uninstall()
        if ours.right:
            continue
        if ours.error is None:
            problems.append(f"{program}: forward {ours.forward}, backward {ours.backward}")
            continue
        theirs = run_program(program)  # torch alone
        if theirs.error is None:
            problems.append(f"{program}: raised where torch alone runs it: {ours.error}")
    assert not problems, "\n".join(problems)

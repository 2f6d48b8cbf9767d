"""Run a function on every rank of a real gloo process group (CPU), once per world size.

``run_world(world_size, "module:function", workdir)`` spawns ``world_size`` processes with
``torch.multiprocessing`` (start method spawn). Each initialises gloo from a FileStore in
``workdir``, installs cute_shard, calls the function with no arguments and returns. Rank 0's
return value (JSON-serialisable) is written to ``workdir/result.json`` and returned to the
caller. An exception on any rank propagates to the caller as
``torch.multiprocessing.ProcessRaisedException`` carrying that rank's traceback, so pytest shows
it as the test failure (a spawn that crashes is first run once more: ``attempts``). A rank
stuck in a collective gives up after ``TIMEOUT`` (gloo's timeout).

Spawning is the slow part (every process imports torch), so tests share one world per world
size and run many cases in it.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT = timedelta(seconds=120)


def run_world(world_size: int, target: str, workdir: Path, attempts: int = 2) -> Any:
    """Run ``target`` ("package.module:function") on ``world_size`` gloo ranks; rank 0's result.

    A spawn that crashes is run again, up to ``attempts`` times in all: on the shared 2-core
    machine a rank has been seen to abort after every rank's work was done and written
    ("terminate called without an active exception" at exit). The first crash stays visible
    as a warning; the last one is raised."""
    for attempt in range(1, attempts + 1):
        try:
            return _run_once(world_size, target, workdir)
        except Exception as e:
            if attempt == attempts:
                raise
            warnings.warn(
                f"world {world_size}: spawn {attempt} crashed, running again: {e!r}", stacklevel=2
            )
    raise ValueError(f"attempts: expected at least 1, got {attempts}")


def _run_once(world_size: int, target: str, workdir: Path) -> Any:
    workdir.mkdir(parents=True, exist_ok=True)
    store = workdir / "filestore"
    result = workdir / "result.json"
    for stale in (store, result):
        stale.unlink(missing_ok=True)
    mp.start_processes(
        _rank_main,
        args=(world_size, target, str(store), str(result)),
        nprocs=world_size,
        join=True,
        start_method="spawn",
    )
    return json.loads(result.read_text())


def _rank_main(rank: int, world_size: int, target: str, store: str, result: str) -> None:
    # Two cores serve every rank: one thread each keeps them from fighting over the cores.
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world_size,
        timeout=TIMEOUT,
    )
    try:
        import cute_shard

        cute_shard.install()
        module, name = target.split(":")
        value = getattr(importlib.import_module(module), name)()
        if rank == 0:
            Path(result).write_text(json.dumps(value))
    finally:
        dist.destroy_process_group()

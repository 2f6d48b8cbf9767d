"""Which of the engine's modules run compiled, and the guard against a stale build.

``python -m cute_shard.accel build`` (``accel.py``) compiles MODULES with Cython, unchanged,
into extension modules beside their sources (``fast.cpython-311-*.so`` beside ``fast.py``);
CPython then loads those instead of the ``.py`` files. Nothing in the project is written for
Cython: without a build, or with ``CUTE_SHARD_PURE=1`` in the environment, every module runs
as plain Python, with the same answers.

So that an edit to a ``.py`` file can never run stale compiled code, the build records each
source's SHA-256 in ``STAMP``, and :func:`activate`, run by ``import cute_shard`` before any
of these modules loads, makes every module whose source no longer matches its stamp load
from its ``.py`` file, with a warning that says to rebuild. This half lives apart from
``accel.py`` so that ``import cute_shard`` does not import the module that ``python -m
cute_shard.accel`` runs.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["MODULES", "PURE_ENV", "STAMP", "accelerated", "activate", "status"]

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent

# The modules a cold call runs through (the rules, the hot paths, the general engine and the
# layout algebra under it). Package ``__init__``s, the integration, the oracle, the command
# line and the explainer stay Python: they are not on the per-call path.
MODULES: tuple[str, ...] = (
    "cute_shard.layout.inttuple",
    "cute_shard.layout.layout",
    "cute_shard.layout.algebra",
    "cute_shard.rules._sym",
    "cute_shard.rules.specs",
    "cute_shard.rules.builders",
    "cute_shard.engine.sizes",
    "cute_shard.engine.sharded",
    "cute_shard.engine.compose",
    "cute_shard.engine.fast",
    "cute_shard.engine.fast_uneven",
    "cute_shard.engine.uneven",
    "cute_shard.engine.symbolic",
    "cute_shard.engine.propagate",
)

#: Source hashes of the last build: ``{module: sha256 of its .py}``.
STAMP = PACKAGE / "_compiled.json"

#: Set to 1 to run every module as Python even where a current build exists.
PURE_ENV = "CUTE_SHARD_PURE"


def _source(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def _built(module: str) -> list[Path]:
    """The module's compiled files beside its source (normally none or one)."""
    src = _source(module)
    return [
        src.with_name(src.stem + suffix)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if src.with_name(src.stem + suffix).exists()
    ]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stamps() -> dict[str, str]:
    try:
        data = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _stale(modules: Sequence[str] | None = None) -> list[str]:
    """The modules (of MODULES) with a compiled file that must not be used: built from other
    source (or with no stamp), or all of them under ``CUTE_SHARD_PURE=1``."""
    built = [m for m in (MODULES if modules is None else modules) if _built(m)]
    if not built:
        return []
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return built
    stamps = _stamps()
    return [m for m in built if stamps.get(m) != _digest(_source(m))]


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the listed modules' ``.py`` files, ahead of their compiled builds."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, _source(fullname))


_finder: _SourceFirst | None = None


def activate() -> None:
    """Make the modules whose build is stale (or all, under ``CUTE_SHARD_PURE=1``) load from
    their ``.py`` files. Runs once, from ``cute_shard/__init__.py``, before any of them is
    imported; warns when a build is stale."""
    global _finder
    if _finder is not None:
        return
    stale = _stale()
    _finder = _SourceFirst(stale)
    if not stale:
        return
    sys.meta_path.insert(0, _finder)
    if os.environ.get(PURE_ENV, "") in ("", "0"):
        warnings.warn(
            f"cute_shard: the compiled build of {', '.join(stale)} does not match the source; "
            "running those modules as Python. Rebuild with: python -m cute_shard.accel build",
            RuntimeWarning,
            stacklevel=3,
        )


def accelerated() -> tuple[str, ...]:
    """The modules of MODULES that are loaded and running compiled."""
    out = []
    for name in MODULES:
        module = sys.modules.get(name)
        origin = getattr(getattr(module, "__spec__", None), "origin", None) or ""
        if origin and not origin.endswith(".py"):
            out.append(name)
    return tuple(out)


def status() -> dict[str, str]:
    """Per module: ``compiled`` (a current build), ``stale`` (a build of other source, or
    disabled by ``CUTE_SHARD_PURE``) or ``python`` (no build)."""
    stale = set(_stale())
    return {
        m: "stale" if m in stale else "compiled" if _built(m) else "python" for m in MODULES
    }

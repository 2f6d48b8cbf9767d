"""The package's shape, read from its source: imports point one way, with no cycles (lazy
imports inside functions included) and no private names taken across modules.

Each module's ``from ... import ...`` statements, wherever they stand, are its edges; a name
or a module starting with ``_`` belongs to its own module (or, for a private module such as
``rules/_sym.py``, its own package) and is not imported from outside it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cute_shard"

# The layers, lowest first: a module may import from its own layer and the ones below.
LAYERS = (
    ("cute_shard.layout", "cute_shard.chunks", "cute_shard._compat"),
    ("cute_shard.rules",),
    ("cute_shard.engine",),
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rsplit(".", 1)[0]


def _imports(name: str) -> list[tuple[str, str]]:
    """``(module, imported name)`` for every ``from`` import of a cute_shard module in
    ``name`` (the name is ``""`` for ``import x``)."""
    tree = ast.parse(MODULES[name].read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(name).split(".")[: len(_package(name).split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] == "cute_shard":
                out.extend((source, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            out.extend((a.name, "") for a in node.names if a.name.split(".")[0] == "cute_shard")
    return out


def _target(source: str, name: str) -> str:
    """The module an import reads: ``from pkg import mod`` reads ``pkg.mod``."""
    full = f"{source}.{name}"
    return full if full in MODULES else source


def _edges() -> dict[str, set[str]]:
    return {
        name: {_target(s, n) for s, n in _imports(name)} - {name, "cute_shard"} for name in MODULES
    }


def test_no_import_cycles() -> None:
    edges = _edges()
    cycles = []
    for start in MODULES:
        seen: set[str] = set()
        stack = list(edges[start])
        while stack:
            node = stack.pop()
            if node == start:
                cycles.append(start)
                break
            if node in seen or node not in edges:
                continue
            seen.add(node)
            stack.extend(edges[node])
    assert not cycles, f"modules on an import cycle: {sorted(cycles)}"


def _private(source: str, name: str, importer: str) -> str | None:
    """What ``importer`` takes that is private to another module, or None."""
    target = _target(source, name)
    if name.startswith("_") and not name.startswith("__") and target == source:
        return f"{source}.{name}"
    for i, part in enumerate(target.split(".")):
        owner = ".".join(target.split(".")[:i])  # a private module's package
        if part.startswith("_") and not part.startswith("__") and not importer.startswith(owner):
            return target
    return None


def test_no_private_names_imported_across_modules() -> None:
    taken = [
        f"{importer} imports {what}"
        for importer in MODULES
        for source, name in _imports(importer)
        if (what := _private(source, name, importer)) is not None
    ]
    assert not taken, "\n".join(taken)


@pytest.mark.parametrize("level", range(len(LAYERS)))
def test_layers_point_one_way(level: int) -> None:
    above = [m for layer in LAYERS[level + 1 :] for m in layer] + [
        m for m in MODULES if not any(m.startswith(p) for layer in LAYERS for p in layer)
    ]
    wrong = [
        f"{name} imports {target}"
        for prefix in LAYERS[level]
        for name in MODULES
        if name.startswith(prefix)
        for target in _edges()[name]
        if any(target.startswith(a) for a in above if a != "cute_shard")
    ]
    assert not wrong, "\n".join(wrong)

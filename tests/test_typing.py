"""The type check: mypy, strict, clean on the modules listed in pyproject.toml.

The list of checked paths is ``[tool.mypy] files`` in pyproject.toml, and only there: add a
module or package to it once it is clean. Modules outside the list are read for the types
they export but their own errors are not reported, so the list can grow one module at a time.

mypy keeps its cache in ``.mypy_cache`` (which ignores itself in git): about 10 s the first
time on this project's machines, well under a second after that.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_is_clean_on_the_checked_modules() -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    r = subprocess.run(
        [sys.executable, "-m", "mypy"],  # the paths and options come from pyproject.toml
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("Success: no issues found"), r.stdout


def test_checked_paths_exist_and_ship_py_typed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    paths = config["tool"]["mypy"]["files"]
    assert paths, "[tool.mypy] files lists what the type check covers"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"[tool.mypy] files names paths that do not exist: {missing}"
    assert config["tool"]["setuptools"]["package-data"]["cute_shard"] == ["py.typed"]
    assert (ROOT / "cute_shard" / "py.typed").is_file()

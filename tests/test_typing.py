"""The type check: mypy, strict, over the whole package (``[tool.mypy] files`` in
pyproject.toml), run once for this module.

The whole package must be clean, the engine included: nothing is left out of the check and
every error mypy reports is printed by the failing test.

mypy keeps its cache in ``.mypy_cache`` (which ignores itself in git): about 15 s the first
time on this project's machines, a second or two after that.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: ")


@pytest.fixture(scope="module")
def mypy_errors() -> list[str]:
    """Each error line mypy reports (with its notes folded in) for the configured files."""
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    r = subprocess.run(
        [sys.executable, "-m", "mypy"],  # the paths and options come from pyproject.toml
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in r.stdout.splitlines() if _ERROR.match(line)]
    if r.returncode != 0 and not errors:  # mypy itself failed (a config or crash)
        pytest.fail(r.stdout + r.stderr)
    return errors


def test_the_package_is_clean(mypy_errors: list[str]) -> None:
    assert not mypy_errors, f"{len(mypy_errors)} errors:\n" + "\n".join(mypy_errors)


def test_the_whole_package_is_checked_and_ships_py_typed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["mypy"]["files"] == ["cute_shard"]
    assert config["tool"]["mypy"]["strict"] is True
    assert config["tool"]["setuptools"]["package-data"]["cute_shard"] == ["py.typed"]
    assert (ROOT / "cute_shard" / "py.typed").is_file()

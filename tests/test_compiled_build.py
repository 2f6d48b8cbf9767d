"""The optional compiled build (cute_shard.accel): a stale build never runs, the build and pure
Python give the same answers, and the status the tools print is what is loaded."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cute_shard import _compiled, accel

REPO = Path(__file__).resolve().parent.parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


@pytest.fixture
def fake_tree(tmp_path, monkeypatch):
    """A package ``fakepkg`` with a module ``mod`` and a "compiled" file beside it that is not
    a loadable extension at all: importing it would fail, so only the source can load."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text('WHERE = "source"\n')
    (pkg / f"mod{SUFFIX}").write_bytes(b"not an extension module")
    monkeypatch.setattr(_compiled, "ROOT", tmp_path)
    monkeypatch.setattr(_compiled, "STAMP", pkg / "_compiled.json")
    monkeypatch.setattr(_compiled, "MODULES", ("fakepkg.mod",))
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    return pkg


def _stamp(pkg: Path, digest: str) -> None:
    (pkg / "_compiled.json").write_text(json.dumps({"fakepkg.mod": digest}))


def test_a_build_is_used_only_with_the_stamp_of_its_source(fake_tree, monkeypatch):
    assert _compiled._stale() == ["fakepkg.mod"]  # no stamp: stale
    _stamp(fake_tree, _compiled._digest(fake_tree / "mod.py"))
    assert _compiled._stale() == []
    assert _compiled.status() == {"fakepkg.mod": "compiled"}
    (fake_tree / "mod.py").write_text('WHERE = "edited"\n')  # an edit after the build
    assert _compiled._stale() == ["fakepkg.mod"]
    assert _compiled.status() == {"fakepkg.mod": "stale"}
    _stamp(fake_tree, "0" * 64)
    assert _compiled._stale() == ["fakepkg.mod"]


def test_pure_env_disables_a_current_build(fake_tree, monkeypatch):
    _stamp(fake_tree, _compiled._digest(fake_tree / "mod.py"))
    monkeypatch.setenv(_compiled.PURE_ENV, "1")
    assert _compiled._stale() == ["fakepkg.mod"]
    monkeypatch.setenv(_compiled.PURE_ENV, "0")
    assert _compiled._stale() == []


def test_no_build_is_never_stale(fake_tree):
    (fake_tree / f"mod{SUFFIX}").unlink()
    assert _compiled._stale() == []
    assert _compiled.status() == {"fakepkg.mod": "python"}


def test_activate_loads_a_stale_module_from_its_source(fake_tree, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(fake_tree.parent), *sys.path])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(_compiled, "_finder", None)
    for name in ("fakepkg", "fakepkg.mod"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()
    with pytest.warns(RuntimeWarning, match=r"fakepkg\.mod .*python -m cute_shard\.accel build"):
        _compiled.activate()
    module = importlib.import_module("fakepkg.mod")  # the bogus extension would fail to load
    assert module.WHERE == "source"
    assert module.__spec__.origin == str(fake_tree / "mod.py")
    assert _compiled.accelerated() == ()
    assert _compiled._finder.find_spec("fakepkg.other") is None


def test_activate_is_silent_when_nothing_is_stale(fake_tree, monkeypatch, recwarn):
    _stamp(fake_tree, _compiled._digest(fake_tree / "mod.py"))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(_compiled, "_finder", None)
    n = len(sys.meta_path)
    _compiled.activate()
    assert len(sys.meta_path) == n and not recwarn.list


def test_build_rejects_unknown_modules():
    with pytest.raises(ValueError, match="not a module of"):
        accel.build(["cute_shard.cli"])


def test_status_and_the_loaded_modules_agree():
    for name in accel.MODULES:
        importlib.import_module(name)
    state = accel.status()
    assert set(state) == set(accel.MODULES)
    assert set(accel.accelerated()) == {m for m, s in state.items() if s == "compiled"}


def test_command_line(capsys):
    assert accel.main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(accel.MODULES)
    assert all(line.split()[0] in ("compiled", "stale", "python") for line in lines)
    assert accel.main(["bogus"]) == 2


# The answers of every family's bench pool, as text: the same in this process (compiled if a
# current build exists) and in a pure-Python one.
_ANSWERS = """
import sys
from bench.propagate_cases import BUILDERS, FAMILIES, make_pool, materialize
from bench.propagate_bench import screen
import cute_shard
from cute_shard import accel

def answers():
    out = []
    for family in FAMILIES:
        if family == "symbolic":
            continue
        for rank in (1, 2, 3):
            for c in materialize(screen(make_pool(family, rank, 64, seed=7))[0]):
                rule = BUILDERS[c.op][0](*c.args)
                for strict in (False, True):
                    cute_shard.cache_clear()
                    try:
                        got = cute_shard.propagate_shape_and_sharding(
                            c.placements, c.shape, rule, c.mesh, strict
                        )
                        out.append(repr(got))
                    except Exception as e:
                        out.append(f"{type(e).__name__}: {e}")
    return out
"""


def test_pure_python_and_the_build_give_the_same_answers():
    code = _ANSWERS + "\nprint(len(accel.accelerated()))\nprint('\\n'.join(answers()))\n"
    env = {**os.environ, _compiled.PURE_ENV: "1"}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    n_compiled, *pure = run.stdout.splitlines()
    assert n_compiled == "0"
    scope: dict[str, object] = {}
    sys.path.insert(0, str(REPO))
    try:
        exec(compile(_ANSWERS, "answers", "exec"), scope)
        here = scope["answers"]()  # type: ignore[operator]
    finally:
        sys.path.remove(str(REPO))
    assert len(here) == len(pure) > 1000
    assert here == pure

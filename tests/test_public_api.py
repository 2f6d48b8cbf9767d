"""The package's front door: what ``import cute_shard`` gives, what it costs, what it lists.

Each check runs in a fresh interpreter, since what a first import loads is the point.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import cute_shard

# Everything a user may reach as ``cute_shard.<name>`` after ``import cute_shard`` alone.
API = [
    "Blocked",
    "RedistributionRequired",
    "ViewDecision",
    "cache_clear",
    "compose_view",
    "decide_view",
    "enabled",
    "explain",
    "install",
    "placements_to_layout",
    "propagate_shape_and_sharding",
    "trace",
    "uninstall",
    "visualize",
]
SUBMODULES = ["engine", "integration", "layout", "notation", "oracle", "rules"]


def run(code: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_import_is_torch_free_and_subpackages_need_no_import() -> None:
    out = run(
        "import sys, cute_shard; "
        "print('torch' in sys.modules, 'numpy' in sys.modules); "
        "print(cute_shard.layout.Layout((4, 2), (2, 1))); "
        "print(cute_shard.rules.format_rule(cute_shard.rules.view_groups((8, 16), (128,)))); "
        "print('torch' in sys.modules)"
    )
    assert out == ["False", "False", "(4,2):(2,1)", "(flat(d0,d1),)", "False"]


def test_names_resolve_on_first_use() -> None:
    out = run(
        "import cute_shard; from cute_shard import explain, visualize, install; "
        "import cute_shard.explanation as ex; "
        "print(explain is ex.explain_dtensor, cute_shard.explain is explain, callable(visualize))"
    )
    assert out == ["True", "True", "True"]


def test_trace_is_the_function_whatever_is_imported_first() -> None:
    """The module is ``tracing``: a submodule named ``trace`` would replace the function
    attribute when imported."""
    out = run(
        "import cute_shard.tracing, cute_shard; "
        "print(cute_shard.trace is cute_shard.tracing.trace, 'torch' in __import__('sys').modules)"
    )
    assert out == ["True", "True"]


def test_all_lists_the_api() -> None:
    assert sorted(cute_shard.__all__) == API
    for name in API:
        assert getattr(cute_shard, name) is not None


def test_dir_lists_the_api_and_the_subpackages() -> None:
    out = run("import cute_shard; print(*dir(cute_shard))")
    assert set(API) | set(SUBMODULES) <= set(out)


def test_help_lists_the_api() -> None:
    out = run(
        "import cute_shard, pydoc; print(pydoc.render_doc(cute_shard, renderer=pydoc.plaintext))"
    )
    text = " ".join(out)
    for name in API:
        assert name in text, name
    for name in SUBMODULES:
        assert name in text, name


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'frobnicate'"):
        cute_shard.frobnicate  # noqa: B018


def test_py_typed_is_shipped() -> None:
    from importlib.resources import files

    assert files("cute_shard").joinpath("py.typed").is_file()


@pytest.mark.parametrize(
    "module", ["cute_shard.notation", "cute_shard.ownership", "cute_shard.redistribute.labels"]
)
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted and not result.failed

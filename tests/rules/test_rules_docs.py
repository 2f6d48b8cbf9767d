"""The worked examples in the module docstrings are doctests; keep them true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "cute_shard.rules",
    "cute_shard.rules.specs",
    "cute_shard.rules.builders",
    "cute_shard.rules.torch_compat",
    "cute_shard.rules._sym",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0

"""Static (guard-free) decisions about sizes that may be ``torch.SymInt``.

Rule builders compare sizes (``s == 1``, ``f == t``, ``t > f`` ...).  For plain
ints that is ordinary Python.  For ``torch.SymInt`` sizes, converting a
comparison to ``bool`` would make the ``ShapeEnv`` install a guard (and, for
unbacked symbols, raise a data-dependent error).  Instead every comparison here
is asked of ``statically_known_true`` in both polarities, which never installs
a guard:

* provably true   -> ``True``
* provably false  -> ``False``
* neither         -> :class:`UndecidableRule` is raised.

A builder that returns normally has therefore made only decisions that hold for
*every* value of the symbols the ``ShapeEnv`` admits, so the rule equals the
concrete rule at the hints (and at any other admissible values).  The engine
catches :class:`UndecidableRule` and hands the op to its fallback path.

torch is never imported by this module: a value can only be a ``SymInt`` if
torch is already in ``sys.modules``, so the check is free for plain ints and
``statically_known_true`` is imported lazily on the first symbolic question.

Example (inside a ShapeEnv where ``s0`` has hint 4, range ``[2, inf)``)::

    decide_eq(s0, 1, "squeeze")       # False: s0 >= 2 is known statically
    decide_eq(s0 * s1, s1 * s0, "x")  # True: the expressions are identical
    decide_eq(s0, s1, "view_groups")  # raises UndecidableRule
"""

from __future__ import annotations

import operator
import sys
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import torch

    Size: TypeAlias = int | torch.SymInt
else:
    Size: TypeAlias = Any

__all__ = [
    "Size",
    "UndecidableRule",
    "as_dim",
    "as_size",
    "decide_eq",
    "decide_gt",
    "is_symint",
]


class UndecidableRule(Exception):
    """A rule depends on a size comparison that cannot be decided statically.

    Raised by rule builders when some input size is a ``torch.SymInt`` and the
    rule's structure depends on a comparison (for example ``s0 == s1``) that
    the ``ShapeEnv`` can neither prove nor refute without installing a guard.
    It is deliberately *not* a ``ValueError``: the arguments may be perfectly
    legal, the rule is just not statically known.  Callers should fall back
    (for example, trace the op on concrete hints or replicate).

    Attributes:
        op: name of the builder that gave up.
        question: the comparison that could not be decided, e.g. ``"s0 == s1"``.
    """

    def __init__(self, op: str, question: str) -> None:
        self.op = op
        self.question = question
        super().__init__(
            f"{op}: cannot decide `{question}` statically (symbolic sizes); "
            "the rule depends on it. Hand this op to the fallback path, or "
            "specialize the sizes involved."
        )


def is_symint(x: object) -> bool:
    """True if ``x`` is a ``torch.SymInt`` (never imports torch)."""
    torch_mod = sys.modules.get("torch")
    return torch_mod is not None and isinstance(x, torch_mod.SymInt)


def _statically_known_true(cond: object) -> bool:
    # Lazy import keeps ``cute_shard.rules`` importable without torch; this is
    # only reached when a SymInt is involved, hence torch is already loaded.
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(cond))  # type: ignore[arg-type]


def decide_eq(a: Size, b: Size, op: str) -> bool:
    """Decide ``a == b`` without guards; raise :class:`UndecidableRule` if unknown."""
    if type(a) is int and type(b) is int:
        return a == b
    if _statically_known_true(a == b):
        return True
    if _statically_known_true(a != b):
        return False
    raise UndecidableRule(op, f"{a} == {b}")


def decide_gt(a: Size, b: Size, op: str) -> bool:
    """Decide ``a > b`` without guards; raise :class:`UndecidableRule` if unknown."""
    if type(a) is int and type(b) is int:
        return a > b
    if _statically_known_true(a > b):
        return True
    if _statically_known_true(a <= b):
        return False
    raise UndecidableRule(op, f"{a} > {b}")


def as_size(x: object, op: str, arg: str, *, allow_minus_one: bool = False) -> Size:
    """Validate one size: an int >= 0 (or -1 when allowed) or a SymInt.

    numpy integers and other ``__index__`` types are converted to int; bools
    are rejected because ``True`` silently meaning ``1`` hides caller bugs.
    SymInts are accepted unchanged (their value is not inspected, which would
    guard).
    """
    if type(x) is int:
        v = x
    elif is_symint(x):
        return x
    elif isinstance(x, bool) or not hasattr(type(x), "__index__"):
        raise ValueError(
            f"{op}: {arg} must contain ints or SymInts, got {x!r} of type "
            f"{type(x).__name__}; fix: pass integer sizes"
        )
    else:
        v = operator.index(x)  # type: ignore[call-overload]
    if v < 0 and not (allow_minus_one and v == -1):
        allowed = "-1 (inferred) or a size >= 0" if allow_minus_one else "a size >= 0"
        raise ValueError(
            f"{op}: {arg} entries must be {allowed}, got {v}; fix: use non-negative sizes"
        )
    return v


def as_dim(x: object, ndim: int, op: str, arg: str, *, wrap_scalar: bool = True) -> int:
    """Normalise a dim index the way torch's ``maybe_wrap_dim`` does.

    With ``wrap_scalar`` a 0-d tensor accepts dims ``-1`` and ``0`` (torch
    treats it as 1-d for range checking); the result is then 0.
    """
    if type(x) is not int:
        if isinstance(x, bool) or not hasattr(type(x), "__index__") or is_symint(x):
            raise ValueError(
                f"{op}: {arg} must be an int dim index, got {x!r} of type "
                f"{type(x).__name__}; fix: pass a plain int"
            )
        x = operator.index(x)  # type: ignore[call-overload]
    n = ndim if ndim > 0 or not wrap_scalar else 1
    if not -n <= x < n:  # type: ignore[operator]
        expected = f"a dim in [{-n}, {n - 1}]" if n > 0 else "no dim (a 0-d tensor has none)"
        raise ValueError(
            f"{op}: {arg}={x} is out of range for a {ndim}-d tensor; expected "
            f"{expected}; fix: pass a dim within the tensor's rank"
        )
    return x % n  # type: ignore[operator]

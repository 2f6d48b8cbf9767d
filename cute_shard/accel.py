"""The optional compiled build of cute_shard's engine: build it, clean it, say what runs.

    python -m cute_shard.accel build    # compile the modules in place (needs Cython and gcc)
    python -m cute_shard.accel status   # which modules run compiled, which run as Python
    python -m cute_shard.accel clean    # remove the build

Cython compiles the engine's own ``.py`` files, unchanged, into extension modules that
CPython loads in their place: the same code and answers, faster (design.md section 6).
``_compiled.py`` has the list of modules and the guard that keeps a stale build from running.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ._compiled import (
    MODULES,
    PURE_ENV,
    ROOT,
    STAMP,
    _built,
    _digest,
    _source,
    _stamps,
    accelerated,
    status,
)

__all__ = ["MODULES", "PURE_ENV", "STAMP", "accelerated", "build", "clean", "main", "status"]

# Cython directives. ``annotation_typing`` off: the annotations are documentation, and
# Cython would otherwise reject a subclass where one names a builtin type (a GroupedRule
# where ``tuple`` is annotated).
_DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}


def build(modules: Sequence[str] = MODULES) -> None:
    """Compile ``modules`` in place and stamp their sources. Needs Cython (``pip install
    cython``) and a C compiler with the Python headers."""
    try:
        from Cython.Build import cythonize
        from setuptools import Extension, setup
    except ImportError as e:
        raise RuntimeError(
            f"building the compiled modules needs Cython and setuptools ({e}); "
            "fix: pip install cython setuptools"
        ) from None
    unknown = sorted(set(modules) - set(MODULES))
    if unknown:
        raise ValueError(f"not a module of cute_shard.accel.MODULES: {', '.join(unknown)}")
    digests = {m: _digest(_source(m)) for m in modules}
    stamps = _stamps()
    generated = ROOT / "build" / "cython"
    for m in modules:
        if stamps.get(m) != digests[m]:
            # Cython and setuptools rebuild by file times; a source whose content changed must
            # be rebuilt whatever its time says, or the new stamp would vouch for old code.
            generated.joinpath(*m.split(".")).with_suffix(".c").unlink(missing_ok=True)
    # (-w: the warnings are about the generated C, not about anything in these sources)
    extensions = [
        Extension(m, [str(_source(m).relative_to(ROOT))], extra_compile_args=["-w"])
        for m in modules
    ]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        setup(
            name="cute_shard_compiled",
            ext_modules=cythonize(
                extensions,
                compiler_directives=_DIRECTIVES,
                build_dir=str(Path("build") / "cython"),
                quiet=True,
                nthreads=os.cpu_count() or 1,
            ),
            script_args=[
                "--quiet", "build_ext", "--inplace", "--build-temp", str(Path("build") / "temp")
            ],
        )
    finally:
        os.chdir(cwd)
    stamps.update(digests)
    STAMP.write_text(json.dumps(stamps, indent=1, sort_keys=True) + "\n")


def clean() -> None:
    """Remove every compiled module and the stamp."""
    for m in MODULES:
        for path in _built(m):
            path.unlink()
    STAMP.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "status"
    if command == "build":
        build()
    elif command == "clean":
        clean()
    elif command != "status":
        print("usage: python -m cute_shard.accel [build|status|clean]", file=sys.stderr)
        return 2
    for module, state in status().items():
        print(f"{state:8}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The README's trace example is real: its program, run as ``model.py``, prints its table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _blocks_after(text: str, heading: str) -> tuple[str, str]:
    """The first ```python block after ``heading`` and the plain ``` block that follows it."""
    section = text[text.index(heading) :]
    program = re.search(r"```python\n(.*?)```", section, re.S)
    assert program is not None, f"no python block after {heading!r}"
    printed = re.search(r"```\n(.*?)```", section[program.end() :], re.S)
    assert printed is not None, f"no output block after the program under {heading!r}"
    return program.group(1), printed.group(1)


def test_the_readme_trace_is_what_its_program_prints(tmp_path: Path) -> None:
    program, printed = _blocks_after(
        (ROOT / "README.md").read_text(), "### Tracing a program: `cute_shard.trace`"
    )
    (tmp_path / "model.py").write_text(program)
    r = subprocess.run(
        [sys.executable, "model.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == printed

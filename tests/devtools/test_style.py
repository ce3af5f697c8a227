"""The Python sources follow the project's lint rules ([tool.ruff] in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("pymtp", "pymtp_devtools", "tests", "bench", "scripts")


def test_python_sources_pass_ruff():
    # ruff comes with the test extra: a missing ruff fails here rather than skipping the check
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *CHECKED],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, f"ruff check failed (fix with `python -m ruff check --fix`):\n{r.stdout}{r.stderr}"


def clang_format() -> str:
    """The clang-format of the test extra (the PyPI wheel's script next to this Python), else PATH's."""
    here = Path(sys.executable).parent / "clang-format"
    found = str(here) if here.is_file() else shutil.which("clang-format")
    assert found, "clang-format is missing: pip install '.[test]' installs it"
    return found


def test_native_sources_pass_clang_format():
    """pymtp's own C/C++ and CUDA (native/) follow native/.clang-format (a pinned clang-format: styles
    change between releases)."""
    suffixes = (".h", ".cpp", ".cuh", ".cu")
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "native").rglob("*") if p.suffix in suffixes)
    assert sources, "no native sources found"
    assert any(s.endswith(".cu") for s in sources), "the CUDA sources (native/ggml-cuda/) are not checked"
    r = subprocess.run([clang_format(), "--dry-run", "--Werror", *sources], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, f"clang-format found unformatted code (fix with clang-format -i):\n{r.stderr[-4000:]}"

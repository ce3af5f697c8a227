"""The Python sources follow the project's lint rules ([tool.ruff] in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("pymtp", "pymtp_devtools", "tests", "bench", "scripts")


def test_python_sources_pass_ruff():
    # ruff comes with the test extra: a missing ruff fails here rather than skipping the check
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *CHECKED],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, f"ruff check failed (fix with `python -m ruff check --fix`):\n{r.stdout}{r.stderr}"

"""The import contracts of pyproject's ``[tool.importlinter]`` hold: ``workers`` imports ``service``,
``service`` imports ``unlearning``, never the other way; the core library imports no web, database or queue
package; the modules of ``unlearning.data`` and of ``unlearning.models`` import each other without cycles."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    """The ``lint-imports`` of the interpreter running the tests (the virtualenv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "lint-imports"
    found = str(beside) if beside.is_file() else shutil.which("lint-imports")
    assert found, "lint-imports is not installed: install the dev extras (pip install -e '.[dev]')"
    return found


def test_import_contracts_are_kept() -> None:
    result = subprocess.run(
        [_lint_imports(), "--no-cache"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"lint-imports failed:\n{result.stdout}\n{result.stderr}"

"""Run a benchmark module as the README says to, and read the JSON object of its last line."""

from __future__ import annotations

import json
from typing import Any

from tests.processes import run_python


def run_bench(module: str, *args: str) -> dict[str, Any]:
    """``python -m module args``, which must succeed; its last line of output, as JSON."""
    result = run_python("-m", module, *args, timeout=540)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))

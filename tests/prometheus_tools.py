"""Finding Debian's ``prometheus`` and ``promtool`` for the tests that run them.

A tool is the one from PATH, else the one ``make install`` unpacks into the virtualenv's ``bin``. Without
it a test skips, saying why, unless ``CI`` is set on a machine whose apt knows the ``prometheus`` package:
there ``make install`` could have installed it, so the test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _apt_knows_prometheus() -> bool:
    """True when this machine's apt has a ``prometheus`` package to take the tools from."""
    if shutil.which("apt-cache") is None:
        return False
    shown = subprocess.run(
        ["apt-cache", "show", "prometheus"], check=False, capture_output=True, text=True, timeout=60
    )
    return shown.returncode == 0 and "Package: prometheus" in shown.stdout


def prometheus_tool(name: str) -> str:
    """The path of ``name`` (``prometheus`` or ``promtool``); skips or fails the test when it is missing."""
    beside = Path(sys.executable).parent / name
    found = shutil.which(name) or (str(beside) if beside.is_file() else None)
    if found:
        return found
    if os.environ.get("CI") and _apt_knows_prometheus():
        pytest.fail(f"{name} is missing though apt has the prometheus package: run `make install`")
    pytest.skip(f"{name} not found (make install unpacks it from Debian's prometheus package; needs apt)")

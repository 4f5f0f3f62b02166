"""The method registry discovers the method modules once, safely under concurrent first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A fresh interpreter, so that discovery has not run yet; 8 threads ask for a method at the same moment,
# as a worker's threads do when its first jobs arrive together.
RACE = """
import threading
from unlearning.methods.registry import get_method
start, errors = threading.Barrier(8), []
def job():
    start.wait()
    try:
        get_method("hessian_free")
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=job) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(errors)
"""


def test_concurrent_first_lookups_all_find_the_method() -> None:
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", RACE], cwd=ROOT, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "[]", out.stdout + out.stderr

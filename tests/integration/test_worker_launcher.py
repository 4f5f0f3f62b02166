"""``python -m workers`` for real: the launcher starts one pinned worker per GPU and a CPU worker, each on its
lanes of the real Redis broker; a stop signal stops them all, and a worker that dies takes the others down
with it (so the service manager restarts the whole set). This machine has no GPU: ``LETHE_GPUS=0`` makes
the launcher pin one worker to a device id all the same (CUDA is never initialised before a job runs)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.stack import ROOT, new_token
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def launcher(
    service_env: dict[str, str], tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path, str]]:
    """The launcher with one (pretend) GPU, on queues of its own; its log holds its workers' output."""
    prefix = f"lethe-launch-{new_token()}"
    log = tmp_path / "workers.log"
    env = {
        **os.environ,
        **service_env,
        "LETHE_GPUS": "0",
        "LETHE_CELERY_QUEUE": prefix,
        "PYTHONUNBUFFERED": "1",
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_for(lambda: log.read_text().count(" ready.") == 2, 90, 0.2, "both workers to be ready")
        yield proc, log, prefix
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in children(proc.pid):
            os.kill(pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in found.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def consumed_queues(log: str, node: str) -> set[str]:
    """The queues a worker's start-up banner lists (``.> <queue> exchange=...`` after its node name)."""
    banner = log[log.index(f"{node}@") :]
    banner = banner[: banner.index("[tasks]")]
    return set(re.findall(r"\.> (\S+)\s+exchange=", banner))


def test_one_worker_per_gpu_and_one_for_the_cpu_lanes_stop_on_a_signal(
    launcher: tuple[subprocess.Popen[bytes], Path, str],
) -> None:
    proc, log, prefix = launcher
    workers = children(proc.pid)
    text = log.read_text()

    assert len(workers) == 2
    assert consumed_queues(text, "gpu0") == {f"{prefix}.train"}
    assert consumed_queues(text, "cpu") == {f"{prefix}.updates", f"{prefix}.io"}

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert not any(alive(pid) for pid in workers)


def test_a_worker_that_dies_stops_the_others_and_the_launcher_fails(
    launcher: tuple[subprocess.Popen[bytes], Path, str],
) -> None:
    proc, log, _ = launcher
    first, second = children(proc.pid)

    os.kill(first, signal.SIGKILL)

    assert proc.wait(timeout=60) != 0
    deadline = time.monotonic() + 10
    while alive(second) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(second)
    assert "exited with status" in log.read_text()

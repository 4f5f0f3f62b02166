"""``python -m workers`` for real: the launcher starts one pinned worker per GPU and a CPU worker, each on its
lanes of the real Redis broker; a stop signal stops them all, and a worker that dies is started again
while the others keep running. This machine has no GPU: ``LETHE_GPUS=0`` makes
the launcher pin one worker to a device id all the same (CUDA is never initialised before a job runs)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.stack import ROOT, children, new_token
from tests.integration.conftest import deployment_of_its_own, wait_for

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
        wait_for(lambda: log.read_text().count(" ready.") == 3, 90, 0.2, "the three workers to be ready")
        yield proc, log, prefix
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in children(proc.pid):
            os.kill(pid, signal.SIGKILL)


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

    assert len(workers) == 3
    assert consumed_queues(text, "gpu0") == {f"{prefix}.train"}
    assert consumed_queues(text, "retrain") == {f"{prefix}.retrain"}
    assert consumed_queues(text, "cpu") == {f"{prefix}.updates", f"{prefix}.io"}

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert not any(alive(pid) for pid in workers)


def test_a_worker_that_dies_is_restarted_while_the_others_keep_running(
    launcher: tuple[subprocess.Popen[bytes], Path, str],
) -> None:
    proc, log, _ = launcher
    first, *others = children(proc.pid)

    os.kill(first, signal.SIGKILL)

    wait_for(lambda: log.read_text().count(" ready.") == 4, 90, 0.2, "the killed worker to be back")
    assert proc.poll() is None  # the launcher supervises on
    assert "exited with status -9; restarting it" in log.read_text()
    now = children(proc.pid)
    assert len(now) == 3 and first not in now and all(pid in now for pid in others)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def _redis_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: _answers(port), 20, 0.1, "redis-server to answer")
    return proc


def _answers(port: int) -> bool:
    import redis

    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_deletions_complete_across_restarts_of_the_broker(tmp_path: Path) -> None:
    """The broker on a Redis server of the test's own, restarted twice under updates: the workers reconnect
    or are restarted by the launcher, and every deletion completes."""
    port = _free_port()
    redis_proc = _redis_server(port)
    launcher: subprocess.Popen[bytes] | None = None
    try:
        with deployment_of_its_own(tmp_path, broker_url=f"redis://127.0.0.1:{port}/0") as d:
            model_id = d.trained_model()
            log = tmp_path / "workers.log"
            with log.open("wb") as out:
                launcher = subprocess.Popen(
                    [sys.executable, "-m", "workers"],
                    cwd=ROOT,
                    env={**os.environ, **d.env, "LETHE_GPUS": "none", "PYTHONUNBUFFERED": "1"},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            wait_for(lambda: log.read_text().count(" ready.") >= 3, 90, 0.2, "the workers to be ready")
            ids: list[int] = []
            for round_ in range(2):
                ids += [
                    int(d.client.delete(model_id, owner_ids=[f"owner-{round_ * 4 + i:05d}"])["id"])
                    for i in range(4)
                ]
                redis_proc.terminate()
                redis_proc.wait(10)
                time.sleep(1)
                redis_proc = _redis_server(port)
            ids.append(int(d.client.delete(model_id, owner_ids=["owner-00009"])["id"]))
            for request_id in ids:
                d.client.done(request_id, timeout=120)
            assert launcher.poll() is None, log.read_text()[-3000:]
    finally:
        if launcher is not None and launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            try:
                launcher.wait(60)
            except subprocess.TimeoutExpired:
                launcher.kill()
        redis_proc.terminate()
        redis_proc.wait(10)

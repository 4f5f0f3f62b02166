"""Embedded mode's Postgres belongs to the API process that started it: when the API stops (SIGTERM, as
Ctrl-C or a process manager would), so does the database server, leaving nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.stack import ROOT, answers, free_port
from service.db.embedded import stop_embedded


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_embedded_database_stops_with_the_api(tmp_path: Path) -> None:
    var, port = tmp_path / "var", free_port()
    env = {
        **os.environ,
        "LETHE_MODE": "embedded",
        "LETHE_VAR_DIR": str(var),
        "LETHE_PORT": str(port),
        "LETHE_DEMO_MODEL": "false",
    }
    env.pop("LETHE_DATABASE_URL", None)
    log = (tmp_path / "api.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not answers(f"http://127.0.0.1:{port}/healthz")():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "api.log").read_text()[
                -2000:
            ]
            time.sleep(0.2)
        postmaster = int((var / "postgres" / "postmaster.pid").read_text().split("\n", 1)[0])
        assert _alive(postmaster)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM  # after a graceful shutdown
        deadline = time.monotonic() + 30
        while _alive(postmaster) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(postmaster), "the embedded Postgres outlived the API"
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_embedded(var)

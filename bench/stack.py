"""The service stack on this machine's real servers, for the benchmark and the integration tests.

- :func:`postgres_database`: a fresh, uniquely named database on the local Postgres, dropped at the end;
- :func:`redis_database`: an empty Redis database number, claimed for the caller, flushed at the end;
- :func:`service_env`: the LETHE_ variables of a production-mode service on those two;
- :func:`fresh_deployment`: all three at once, with a temporary directory, for one run
  (:func:`enter_fresh_deployment`: the same on an ExitStack, None when the servers are unreachable);
- :func:`celery_worker` and :func:`api_process`: the worker and the API as real subprocesses;
- :func:`children` and :func:`stop_children`: a launcher's worker processes, and stopping them;
- :func:`cpu_seconds`: the CPU time each of them, Postgres and Redis have used so far.

Every other helper raises :class:`ServersUnavailable` when Postgres or Redis cannot be reached.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import redis

from service.db.embedded import stop_embedded
from service.signing import new_seed
from workers.launcher import celery_program, worker_argv

ROOT = Path(__file__).resolve().parents[1]
PG = {"host": os.environ.get("LETHE_PG_HOST", "127.0.0.1"), "port": 5432, "user": "postgres"}
REDIS_HOST, REDIS_PORT = os.environ.get("LETHE_REDIS_HOST", "127.0.0.1"), 6379


class ServersUnavailable(RuntimeError):
    """Postgres or Redis is not reachable."""


def new_token() -> str:
    return f"{os.getpid()}_{secrets.token_hex(3)}"


@contextmanager
def postgres_database(name: str) -> Iterator[str]:
    """CREATE DATABASE ``name`` (connecting through the ``test`` database); DROP it at the end."""
    try:
        admin = psycopg.connect(dbname="test", autocommit=True, connect_timeout=3, **PG)  # type: ignore[arg-type]
    except psycopg.Error as exc:
        raise ServersUnavailable(
            f"Postgres at {PG['host']}:5432 (database 'test', user postgres): {exc}"
        ) from exc
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://{PG['user']}@{PG['host']}:{PG['port']}/{name}"
    finally:
        with psycopg.connect(dbname="test", autocommit=True, **PG) as admin:  # type: ignore[arg-type]
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def redis_database(token: str) -> Iterator[str]:
    """An empty database number, claimed with a marker key so that concurrent users do not share it."""
    try:
        probe = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_connect_timeout=3)
        probe.ping()
        found = probe.config_get("databases").get("databases")  # absent: Redis's default of 16
        databases = 16 if found is None else int(found)
    except redis.RedisError as exc:
        raise ServersUnavailable(f"Redis at {REDIS_HOST}:{REDIS_PORT}: {exc}") from exc
    for db in range(databases - 1, 0, -1):
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db)
        if client.dbsize() == 0 and client.set("lethe:claim", token, nx=True, ex=6 * 3600):
            break
    else:
        raise ServersUnavailable("every Redis database number is in use")
    try:
        yield f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"
    finally:
        client.flushdb()


def service_env(pg_url: str, redis_url: str, var_dir: Path, token: str, **overrides: str) -> dict[str, str]:
    """Production-mode settings on the given servers, as environment variables."""
    env = {
        "LETHE_MODE": "production",
        "LETHE_DATABASE_URL": pg_url,
        "LETHE_REDIS_URL": redis_url,
        "LETHE_SUBJECT_HASH_KEY": secrets.token_hex(32),
        "LETHE_RECEIPT_SIGNING_KEY": new_seed(),
        "LETHE_VAR_DIR": str(var_dir),
        "LETHE_ARTIFACT_DIR": str(var_dir / "artifacts"),
        "LETHE_CELERY_QUEUE": f"lethe-{token}",
        "LETHE_REDIS_PREFIX": f"lethe-{token}",
        "LETHE_DEMO_MODEL": "false",
        "LETHE_DEVICE": os.environ.get("LETHE_DEVICE", "cpu"),
    }
    env.update({f"LETHE_{k.upper()}": v for k, v in overrides.items()})
    return env


@dataclass(frozen=True)
class Deployment:
    """A fresh deployment's servers and files: the service's environment on them, its directory and the
    token that names its database, Redis keys and queues."""

    env: dict[str, str]
    var: Path
    token: str


@contextmanager
def fresh_deployment(kind: str) -> Iterator[Deployment]:
    """A fresh Postgres database, an empty Redis database and a temporary directory, with production-mode
    settings on them; everything goes at the end. Raises :class:`ServersUnavailable`."""
    token = new_token()
    with (
        tempfile.TemporaryDirectory(prefix=f"lethe-{kind}-") as tmp,
        postgres_database(f"lethe_{kind}_{token}") as pg,
        redis_database(token) as rd,
    ):
        var = Path(tmp)
        yield Deployment(service_env(pg, rd, var, token, log_level="warning"), var, token)


def enter_fresh_deployment(exit_stack: ExitStack, kind: str) -> Deployment | None:
    """:func:`fresh_deployment`, entered on ``exit_stack`` (it goes when the stack closes); None, after
    saying why on stderr, when Postgres or Redis cannot be reached: a bench then exits with status 2."""
    try:
        return exit_stack.enter_context(fresh_deployment(kind))
    except ServersUnavailable as exc:
        print(f"[bench] cannot run: {exc}", file=sys.stderr, flush=True)
        return None


def stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def started(
    what: str, argv: list[str], env: dict[str, str], log: Path, ready: Callable[[], bool]
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` from the repository root with ``env`` over this environment, its output to ``log``;
    yielded once ``ready()`` (RuntimeError with the log's tail if it exits or is not ready within 90 s,
    saying ``what`` did not start); stopped at the end."""
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 90
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        stop(proc)


def celery_ready(log: Path) -> Callable[[], bool]:
    """Whether the Celery worker writing ``log`` has said it is ready."""
    return lambda: b" ready." in log.read_bytes()


def answers(url: str) -> Callable[[], bool]:
    """Whether ``url`` answers 200 now."""

    def check() -> bool:
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    return check


@contextmanager
def celery_worker(
    env: dict[str, str], log: Path, *, pool: str = "threads", concurrency: int = 4, name: str = "lethe"
) -> Iterator[subprocess.Popen[bytes]]:
    """``celery -A workers.celery_app worker`` with ``env``; waits until it is ready."""
    argv = worker_argv(
        name,
        pool=pool,
        concurrency=concurrency,
        celery=celery_program(),
        extra=("--without-gossip", "--without-mingle", "--without-heartbeat"),
    )
    with started("the Celery worker", argv, env, log, celery_ready(log)) as proc:
        yield proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def api_process(env: dict[str, str], log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -m service`` with ``env`` on a free port; yields its base URL and the process (to account
    for its CPU time) once /healthz answers 200 (/readyz also needs live workers)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**env, "LETHE_PORT": str(port), "LETHE_LOG_LEVEL": "warning"}
    try:
        with started(
            "the API", [sys.executable, "-m", "service"], env, log, answers(f"{base}/healthz")
        ) as proc:
            yield base, proc
    finally:
        if not env.get("LETHE_DATABASE_URL") and env.get("LETHE_VAR_DIR"):
            stop_embedded(Path(env["LETHE_VAR_DIR"]))  # in case the API was killed before it stopped it


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            raw = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        if raw and int(raw[raw.rindex(")") + 2 :].split()[1]) == pid:
            out.append(int(entry))
    return out


def stop_children(pid: int, timeout: float = 10) -> None:
    """SIGTERM to each child of ``pid``, SIGKILL to any left after ``timeout``."""
    kids = children(pid)
    for kid in kids:
        os.kill(kid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{k}").exists() for k in kids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for kid in kids:
        if Path(f"/proc/{kid}").exists():
            os.kill(kid, signal.SIGKILL)


# -- CPU accounting ------------------------------------------------------------------------------

_SERVERS = {"postgres": "postgres", "redis-server": "redis"}


def _proc_stats() -> dict[int, tuple[str, int, float]]:
    """pid -> (command name, parent pid, CPU seconds: user + system) of every process, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited meanwhile
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        out[int(entry)] = (name, int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def cpu_seconds(processes: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each named process with its descendants, by every Postgres and Redis
    server process of the machine (``postgres``, ``redis``) and by this process alone (``load_generator``).

    Read from /proc, so Linux only (an empty dict elsewhere). Processes that already exited are not
    counted: take differences over a phase in which the counted ones stay up.
    """
    if not Path("/proc/self/stat").exists():
        return {}
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (_, parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)

    def tree(pid: int) -> float:
        return stats.get(pid, ("", 0, 0.0))[2] + sum(tree(c) for c in children.get(pid, []))

    out = {label: tree(pid) for label, pid in processes.items()}
    for name, label in _SERVERS.items():
        out[label] = sum(cpu for n, _, cpu in stats.values() if n == name)
    out["load_generator"] = stats.get(os.getpid(), ("", 0, 0.0))[2]  # the services are its children
    return out

"""``python -m workers``: start the Celery worker processes this host should run, and supervise them.

What runs (:func:`plan`), one process per lane group so that no job waits behind a job of another lane:
- one CPU process (a thread pool) on the ``updates`` and ``io`` lanes (deletion updates, callbacks), kept
  off the GPUs on a GPU host (Hessian-free updates are vector additions);
- one process on the ``retrain`` lane (a retrain restores a live model's deletion guarantee, so it never
  waits behind a first training): a thread pool, or on a GPU host a solo pool on the first GPU;
- the ``train`` lane (first trainings): one thread-pool process, or on a GPU host one solo process per
  GPU, pinned to it (``CUDA_VISIBLE_DEVICES=<id>``).

Cores (:func:`divide_cores`): the cores the launcher may use (:func:`service.cpus.available_cores`: its
CPU affinity, capped by a cgroup quota) are divided among the workers, because torch threads beyond the
cores a process really gets make it slower, not faster (two threads on two cores ran a precompute 3.5
times slower once another process kept one core busy). The retrain and train workers run the heavy maths:
they share most of the cores equally, each at least one (a leftover core goes to the retrain worker). The
updates/io worker gets a quarter of the cores, at least one, and only what leaves the others a core each
(its deletion updates are vector additions or one Newton solve; its callbacks wait on the network). On two
cores every worker gets one; the retrain and train workers together run more threads than the host has
cores only where they outnumber its cores (more GPUs than cores). Each worker's environment names its
share, ``LETHE_WORKER_CORES``, from which its runtime sets its torch threads (``LETHE_TORCH_THREADS``
overrides it), and sets ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` to that thread count unless the
launcher's own environment sets them.

The GPUs are found without initialising, or even probing, CUDA (:func:`visible_gpus`): ``LETHE_GPUS``
(ids, or ``none``), else ``CUDA_VISIBLE_DEVICES``, else the ``/dev/nvidia<N>`` device files. This
process never imports torch; each worker imports the core library only when its first job runs.

Supervision (:func:`supervise`): SIGTERM or SIGINT is passed on to every worker (Celery's warm shutdown:
running jobs finish). A worker that exits on its own (a crash, a broker connection it could not get back)
is started again after a backoff (:class:`RestartPolicy`) while the others keep running; its jobs come back
through the reconciler and the broker. One that exits more often than the policy allows in a minute stops
the others and the launcher exits with its status, so the container or service manager takes over.
``python -m workers --dry-run`` prints the plan as JSON (each process's command, environment, cores and
threads) and starts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import ValidationError

from service import preflight
from service.cpus import available_cores, torch_threads_for
from service.queue import celery_queue_name
from service.settings import Settings, settings_errors

_PROGRAM = "lethe workers"  # how its messages begin
_EMBEDDED = (
    "Celery workers serve production mode (LETHE_MODE=production with the database, Redis and subject hash "
    "key settings); in embedded mode the API runs its jobs itself"
)
_NO_GPU = {"", "-1", "none", "nodevfiles", "void"}
_DEVICE_FILE = re.compile(r"nvidia(\d+)")
_POLL_SECONDS = 0.5
_STOP_SECONDS = 60.0  # a worker's warm shutdown waits for its running job; then it is killed
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # read by the maths libraries when they load


@dataclass(frozen=True)
class WorkerProcess:
    """One worker process: its name, its command line and the environment it adds to the launcher's;
    with a division of the host's cores, its share of them and its torch thread count."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cores: int | None = None
    threads: int | None = None


def visible_gpus(setting: str | None, environ: Mapping[str, str], dev: Path = Path("/dev")) -> list[str]:
    """The GPU ids of this host, as ``CUDA_VISIBLE_DEVICES`` would name them, one per worker to pin.

    ``setting`` (``LETHE_GPUS``: comma-separated ids, or ``none``) wins; then ``CUDA_VISIBLE_DEVICES``
    (ids or ``GPU-<uuid>`` names; empty or ``-1`` means none); then the ``/dev/nvidia<N>`` files the
    driver creates. None of these initialises CUDA.
    """
    for value in (setting, environ.get("CUDA_VISIBLE_DEVICES")):
        if value is not None:
            ids = [part.strip() for part in value.split(",") if part.strip()]
            return [] if not ids or ids[0].lower() in _NO_GPU else ids
    try:
        found = [m.group(1) for p in dev.iterdir() if (m := _DEVICE_FILE.fullmatch(p.name))]
    except OSError:
        return []
    return sorted(found, key=int)


def divide_cores(cores: float, heavy: int) -> tuple[int, list[int]]:
    """The whole cores of the updates/io worker and of each of the ``heavy`` (retrain and train) workers
    on a host with ``cores`` cores: for the first a quarter of the whole cores, no more than the others
    leave it at one core each, and at least one; the rest shared equally among the others, each at least
    one, leftover cores going to the first of them."""
    whole = max(math.floor(cores), 1)
    light = max(min(whole // 4, whole - heavy), 1)
    rest = max(whole - light, heavy)
    each, left = divmod(rest, heavy) if heavy else (0, 0)
    return light, [each + (i < left) for i in range(heavy)]


def plan(
    gpus: Sequence[str],
    *,
    queue_prefix: str,
    concurrency: int,
    metrics_port: int | None = None,
    celery: str = "celery",
    cores: float | None = None,
    torch_threads: int | None = None,
    environ: Mapping[str, str] = {},
) -> list[WorkerProcess]:
    """The worker processes for a host with ``gpus`` (see the module docstring). With ``metrics_port``,
    the i-th process serves its Prometheus metrics on ``metrics_port + i`` (one port each; the CPU
    worker is the first). With ``cores``, the host's cores are divided among them (:func:`divide_cores`):
    each gets ``LETHE_WORKER_CORES`` and, unless ``environ`` (the launcher's environment) sets them, the
    OpenMP and MKL thread counts of its torch threads (``torch_threads``, ``LETHE_TORCH_THREADS``, if set,
    else its share)."""
    off_gpus = {"CUDA_VISIBLE_DEVICES": "", "LETHE_DEVICE": "cpu"}
    # The CPU worker comes first: every host has one, so it always serves on ``metrics_port`` itself.
    cpu = ("cpu", "threads", ["updates", "io"], off_gpus if gpus else {})
    shapes: list[tuple[str, str, Sequence[str], dict[str, str]]] = (
        [
            cpu,
            ("retrain", "solo", ["retrain"], {"CUDA_VISIBLE_DEVICES": gpus[0]}),
            *((f"gpu{gpu}", "solo", ["train"], {"CUDA_VISIBLE_DEVICES": gpu}) for gpu in gpus),
        ]
        if gpus
        else [cpu, ("retrain", "threads", ["retrain"], {}), ("train", "threads", ["train"], {})]
    )
    if metrics_port is not None and metrics_port + len(shapes) - 1 > 65535:
        raise ValueError(
            f"LETHE_WORKER_METRICS_PORT {metrics_port}: its {len(shapes)} workers take ports {metrics_port} to "
            f"{metrics_port + len(shapes) - 1}, past 65535; choose a lower port"
        )
    shares: list[int | None] = [None] * len(shapes)
    if cores is not None:
        light, heavy = divide_cores(cores, len(shapes) - 1)
        shares = [light, *heavy]
    processes = []
    for i, ((name, pool, lanes, env), share) in enumerate(zip(shapes, shares, strict=True)):
        queues = [celery_queue_name(queue_prefix, lane) for lane in lanes]
        argv = worker_argv(name, pool=pool, concurrency=concurrency, queues=queues, celery=celery)
        port = {"LETHE_WORKER_METRICS_PORT": str(metrics_port + i)} if metrics_port is not None else {}
        if share is None:
            processes.append(WorkerProcess(name, argv, {**env, **port}))
            continue
        threads = torch_threads or torch_threads_for(share)
        threading_env = {"LETHE_WORKER_CORES": str(share)} | {
            variable: str(threads) for variable in _THREAD_VARIABLES if variable not in environ
        }
        processes.append(WorkerProcess(name, argv, {**env, **port, **threading_env}, share, threads))
    return processes


def celery_program() -> str:
    """The ``celery`` script beside this interpreter (its virtual environment's), else the one on PATH."""
    beside = Path(sys.executable).with_name("celery")
    return str(beside) if beside.exists() else "celery"


def worker_argv(
    name: str,
    *,
    pool: str,
    concurrency: int,
    queues: Sequence[str] | None = None,
    celery: str = "celery",
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line of one worker process named ``name@<host>`` (``queues``: None for every lane's
    queue of the configured prefix; ``concurrency`` applies to a thread pool)."""
    argv = [celery, "-A", "workers.celery_app", "worker", f"--pool={pool}"]
    argv += [f"--concurrency={concurrency}"] if pool == "threads" else []
    argv += ["-Q", ",".join(queues)] if queues is not None else []
    return [*argv, "-n", f"{name}@%h", "--loglevel=INFO", *extra]


@dataclass(frozen=True)
class RestartPolicy:
    """When a worker that exited on its own is started again: after ``first_delay`` seconds, doubling with
    each exit within the last minute up to ``max_delay``; more than ``max_per_minute`` exits in a minute
    and the launcher gives up (a worker that cannot start: a bad setting, a broker gone for good)."""

    first_delay: float = 1.0
    max_delay: float = 30.0
    max_per_minute: int = 5

    def delay(self, recent_exits: int) -> float | None:
        """Seconds before the restart after ``recent_exits`` exits in the last minute (this one included),
        or None: give up."""
        if recent_exits > self.max_per_minute:
            return None
        return float(min(self.first_delay * 2 ** max(recent_exits - 1, 0), self.max_delay))


@dataclass
class _Supervised:
    """One worker process under supervision: its current process, its recent exits, its pending restart."""

    process: WorkerProcess
    proc: subprocess.Popen[bytes] | None = None
    exits: list[float] = field(default_factory=list)  # time.monotonic() of each exit in the last minute
    restart_at: float | None = None


def exit_status(code: int) -> int:
    """A worker's exit as the launcher reports it: its exit code, 1 if that was 0, or 128 + the signal that
    killed it, as a shell reports it."""
    return 128 - code if code < 0 else code or 1


def supervise(
    processes: Sequence[WorkerProcess], environ: Mapping[str, str], policy: RestartPolicy = RestartPolicy()
) -> int:
    """Run ``processes`` until a stop signal (then 0, once all have stopped), restarting one that exits on
    its own as ``policy`` says; if one exits too often, the others are stopped and its
    :func:`exit_status` is returned."""
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    workers = [_Supervised(p) for p in processes]

    def start(worker: _Supervised) -> None:
        worker.proc = subprocess.Popen(worker.process.argv, env={**environ, **worker.process.env})
        worker.restart_at = None

    for worker in workers:
        start(worker)
    status = 0
    try:
        while not stop.wait(_POLL_SECONDS) and status == 0:
            now = time.monotonic()
            for worker in workers:
                if worker.restart_at is not None:
                    if now >= worker.restart_at:
                        start(worker)
                    continue
                assert worker.proc is not None
                code = worker.proc.poll()
                if code is None:
                    continue
                worker.exits = [t for t in worker.exits if now - t < 60.0] + [now]
                delay = policy.delay(len(worker.exits))
                name = worker.process.name
                if delay is None:
                    print(
                        f"{_PROGRAM}: {name} exited with status {code}, {len(worker.exits)} times within a "
                        "minute; stopping the others",
                        file=sys.stderr,
                    )
                    status = exit_status(code)
                    break
                print(
                    f"{_PROGRAM}: {name} exited with status {code}; restarting it in {delay:g} s",
                    file=sys.stderr,
                )
                worker.restart_at = now + delay
    finally:
        _stop_all([w.proc for w in workers if w.proc is not None])
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return status


def _stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _STOP_SECONDS
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the processes (command, environment, cores, threads) as JSON, start none",
    )
    args = parser.parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as exc:
        return preflight.refuse(_PROGRAM, settings_errors(exc))
    if settings.effective_worker != "celery" and not args.dry_run:
        return preflight.refuse(_PROGRAM, [_EMBEDDED])
    try:
        processes = plan(
            visible_gpus(settings.gpus, os.environ),
            queue_prefix=settings.celery_queue,
            concurrency=settings.worker_concurrency,
            metrics_port=settings.worker_metrics_port,
            celery=celery_program(),
            cores=available_cores(),
            torch_threads=settings.torch_threads,
            environ=os.environ,
        )
    except ValueError as exc:
        return preflight.refuse(_PROGRAM, [str(exc)])
    if not args.dry_run and (found := preflight.problems(settings)):
        return preflight.refuse(_PROGRAM, found)
    if args.dry_run:
        print(json.dumps([asdict(p) for p in processes], indent=2))
        return 0
    return supervise(processes, os.environ)

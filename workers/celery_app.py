"""The Celery application: ``celery -A workers.celery_app worker``.

Each task is a thin adapter: it looks the job up in :mod:`service.jobs.registry` and runs it with this
process's :class:`service.runtime.Runtime`. Nothing here imports torch: the job modules import the core
library when a task first runs, after the pool has forked, so no worker process initialises CUDA before
forking. Run one worker process per GPU (``CUDA_VISIBLE_DEVICES=i``, ``--pool=solo``); see
docs/service.md.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from celery import Celery, signals
from kombu import Queue

from service import logs
from service.jobs.registry import TASKS
from service.monitoring.liveness import Beat
from service.queue import LANES, celery_queue_name
from service.settings import Settings

if TYPE_CHECKING:
    from service.runtime import Runtime

log = logging.getLogger(__name__)

settings = Settings()
app = Celery("lethe", broker=settings.effective_broker_url or "memory://")
app.conf.update(
    # A task is acknowledged after it ran, so a message a dead worker held comes back (after the
    # visibility timeout). Recovery does not wait for it: the reconciler re-queues a drain within seconds
    # and a training or retrain whose heartbeat stopped within LETHE_JOB_HEARTBEAT_TIMEOUT_SECONDS; the
    # broker's redelivery is the backstop for messages with no other record (a callback, a queued
    # training taken just before the crash). Every job is idempotent (each checks the state it starts
    # from under the model lock), so a message redelivered while its job still runs changes nothing.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,  # a worker holds no message it is not running
    task_queues=[Queue(celery_queue_name(settings.celery_queue, lane)) for lane in LANES],
    task_default_queue=celery_queue_name(settings.celery_queue, "updates"),
    # Broker or Redis restarts: reconnect, forever, with backoff; a worker that exits anyway is started
    # again by its supervisor (workers.launcher, docker-compose.yml's restart policy).
    broker_connection_retry=True,
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,
    # A running job finishes after a connection loss (its redelivered message finds the work done).
    worker_cancel_long_running_tasks_on_connection_loss=False,
    broker_transport_options={
        "visibility_timeout": settings.broker_visibility_timeout_seconds,
        "health_check_interval": 10,
        "retry_on_timeout": True,
        "socket_keepalive": True,
    },
    worker_hijack_root_logger=False,
    task_ignore_result=True,
)

_runtime: Runtime | None = None
_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime, built on first use (after the fork in a prefork pool)."""
    global _runtime
    with _lock:
        if _runtime is None:
            from service.runtime import Runtime  # after the fork: the runtime's modules import torch

            _runtime = Runtime(settings, role="worker")
            _runtime.start()
        return _runtime


@signals.worker_process_init.connect
def _after_fork(**_: Any) -> None:
    # A forked child must not reuse the parent's database connections or Redis sockets.
    global _runtime
    _runtime = None


_beat: Beat | None = None


@signals.worker_init.connect
def _refuse_prefork(sender: Any = None, **_: Any) -> None:
    """The job state (caches, drains) and the metrics are per process: a prefork pool's children would
    each keep their own and serve no metrics. The launcher starts thread pools (or solo on a GPU)."""
    pool = str(getattr(sender, "pool_cls", "") or "")
    if "prefork" in pool.lower() or pool.endswith("processes.TaskPool"):
        raise SystemExit(
            "lethe workers run with --pool=threads (or --pool=solo for one GPU), not the prefork pool: "
            "start them with `python -m workers`, or add --pool=threads"
        )


def lanes_consumed(queue_names: list[str], prefix: str) -> list[str]:
    """The lanes of :data:`service.queue.LANES` whose queue (``{prefix}.{lane}``) is among ``queue_names``."""
    return [lane for lane in LANES if celery_queue_name(prefix, lane) in queue_names]


@signals.worker_ready.connect
def _ready(sender: Any = None, **_: Any) -> None:
    global _beat
    if settings.worker_metrics_port:
        serve_metrics(settings.worker_metrics_port)
    queues = list(app.amqp.queues.consume_from or app.amqp.queues)
    lanes = lanes_consumed(queues, settings.celery_queue)
    if settings.redis_url:
        import redis

        name = str(getattr(sender, "hostname", None) or f"worker-{os.getpid()}")
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)
        _beat = Beat(client, settings.redis_prefix, name, lanes, settings.worker_liveness_seconds)
        _beat.start()
    log.info("lethe worker ready on lanes %s (queues %s)", lanes, queues)


def serve_metrics(port: int) -> None:
    """Serve this process's metrics on ``port``; a port already taken stops the worker with a clear
    message (a worker whose metrics nobody can scrape is an outage nobody sees)."""
    from prometheus_client import start_http_server

    try:
        start_http_server(port)
    except OSError as exc:
        log.critical("the metrics port %s cannot be bound (%s): stopping this worker", port, exc)
        os._exit(3)  # from a signal handler: SystemExit would be swallowed by Celery's consumer


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _log_format(logger: logging.Logger, **_: Any) -> None:
    """The request id and model of the job being run on each line; ``LETHE_LOG_FORMAT=json``: JSON lines."""
    for handler in logger.handlers:
        logs.install_beside(handler, settings.log_format)


@signals.worker_shutdown.connect
def _shutdown(**_: Any) -> None:
    if _beat is not None:
        _beat.stop()
    if _runtime is not None:
        _runtime.stop()


def _adapter(name: str) -> Any:
    def task(**payload: Any) -> None:
        runtime().run_job(name, payload)

    task.__name__ = name
    task.__doc__ = f"Run the {name!r} job (service.jobs.registry)."
    return app.task(name=f"lethe.{name}")(task)


tasks = {name: _adapter(name) for name in TASKS}

"""Liveness (/healthz), readiness (/readyz) and Prometheus metrics (/metrics)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel

from service import metrics
from service.api.deps import RuntimeDep
from service.db.base import utcnow
from service.db.migrate import head_revision, is_current
from service.monitoring.collector import DatabaseCollector
from service.runtime import Runtime

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, Any]


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
def healthz() -> Health:
    return Health(status="ok")


def _workers_check(rt: Runtime) -> str:
    """ "ok" when every lane has a live worker, else the lanes none serves."""
    try:
        idle = [lane for lane, n in rt.live_workers().items() if n == 0]
    except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
        return f"unknown: {type(exc).__name__}"
    return "ok" if not idle else f"no live worker for the lanes: {', '.join(idle)}"


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: database at the current schema, Redis, artifact store and task queue reachable, a live "
    "worker on every lane",
    responses={503: {"model": Readiness, "description": "Not ready"}},
)
def readyz(rt: RuntimeDep) -> JSONResponse:
    checks: dict[str, Any] = {}
    try:
        current, revision = is_current(rt.engine)
        checks["database"] = "ok" if current else f"schema at {revision}, code expects {head_revision()}"
    except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
        checks["database"] = f"unreachable: {type(exc).__name__}"
    checks["redis"] = "ok" if rt.hot.ping() else "unreachable"
    checks["artifacts"] = "ok" if rt.artifacts.writable() else "not writable"
    checks["queue"] = "ok" if rt.queue.ping() else "unreachable"
    checks["workers"] = _workers_check(rt)
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(Readiness(ready=ready, checks=checks).model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def prometheus(rt: RuntimeDep) -> Response:
    try:
        with rt.uow() as uow:
            metrics.OUTBOX_PENDING.set(uow.outbox.pending_count())
    except Exception:
        log.warning("could not count pending outbox messages", exc_info=True)
    # the database gauges in a registry of this scrape's own (two apps in one process never mix)
    own = CollectorRegistry(auto_describe=False)
    own.register(DatabaseCollector(rt.snapshot, rt.live_workers, utcnow))
    return Response(generate_latest() + generate_latest(own), media_type=CONTENT_TYPE_LATEST)

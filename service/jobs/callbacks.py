"""Callback delivery: a deletion's outcome POSTed, signed, to its client's URL, retried with backoff."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from datetime import timedelta
from typing import Any

import httpx

from service import metrics
from service.audit.service import requests_chain
from service.callback_targets import CallbackRefused, resolve
from service.db.base import utcnow
from service.db.tables import DeletionRequest
from service.jobs.heartbeat import JobContext
from service.states import CallbackState
from service.uow import UnitOfWork

log = logging.getLogger(__name__)


SIGNATURE_HEADER = "Lethe-Signature"


def sign(key: bytes, timestamp: int, body: bytes) -> str:
    """The ``Lethe-Signature`` value: ``t=<unix seconds>,v1=<hex HMAC-SHA256(key, b"<t>." + body)>``."""
    mac = hmac.new(key, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def deliver_callback(rt: JobContext, request_id: int, attempt: int = 1) -> None:
    """Make attempt number ``attempt`` (a duplicate of an attempt already made does nothing)."""
    with rt.uow() as uow:
        request = uow.deletions.lock(request_id)
        if (
            request is None
            or not request.callback_url
            or request.callback_state != CallbackState.PENDING
            or request.callback_attempts >= attempt
        ):
            return
        request.callback_attempts = attempt  # claimed: a duplicate job now stops above
        version = uow.models.version(request.version_id) if request.version_id else None
        url = request.callback_url
        body = {
            "event": f"deletion.{request.state}",
            "request_id": request.id,
            "model_id": request.model_id,
            "state": request.state,
            "version_seq": version.seq if version else None,
            "completed_at": request.completed_at.isoformat() if request.completed_at else None,
            "failure_reason": request.failure_reason,
        }
        uow.commit()
    error, retry = _post(rt, url, body, attempt)
    metrics.CALLBACKS.labels("ok" if error is None else "error" if retry else "refused").inc()
    with rt.uow() as uow:
        request = uow.deletions.lock(request_id)
        if request is None or request.callback_state != CallbackState.PENDING:
            return
        if error is None:
            request.callback_state = CallbackState.DELIVERED
            _audit(uow, request, "callback.delivered", {"attempt": attempt})
        elif attempt >= rt.settings.callback_max_attempts or not retry:
            request.callback_state = CallbackState.FAILED
            cause = error.splitlines()[0][:200] if error else ""
            log.warning("callback for request %s gave up after %d attempt(s): %s", request_id, attempt, cause)
            uow.after_commit(metrics.CALLBACKS.labels("gave_up").inc)
            _audit(uow, request, "callback.failed", {"attempts": attempt, "error": error})
        else:
            delay, again = rt.settings.callback_backoff_seconds * 2 ** (attempt - 1), attempt + 1
            due = utcnow() + timedelta(seconds=delay)
            uow.outbox.add("deliver_callback", {"request_id": request_id, "attempt": again}, available_at=due)
            log.info(
                "callback for request %s failed (%s); retry %d in %.1fs", request_id, error, again, delay
            )
        uow.commit()


def _audit(uow: UnitOfWork, request: DeletionRequest, event: str, payload: dict[str, Any]) -> None:
    chain = requests_chain(request.model_id)
    uow.audit.append(chain, event, model_id=request.model_id, request_id=request.id, payload=payload)


def _post(rt: JobContext, url: str, body: dict[str, Any], attempt: int) -> tuple[str | None, bool]:
    """POST ``body`` to the checked address of ``url``, not following redirects; (error or None, retry?)."""
    try:
        target = resolve(url, rt.settings.callback_networks)
    except CallbackRefused as exc:
        return f"refused: {exc}", False
    except (OSError, UnicodeError) as exc:  # the name does not resolve (perhaps only for now)
        return f"could not resolve the callback host: {type(exc).__name__}: {exc}", True
    content = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    headers = {
        "User-Agent": "lethe-callback/1",
        "Content-Type": "application/json",
        "X-Lethe-Attempt": str(attempt),
        **target.headers,
    }
    if rt.settings.callback_signing_key:
        headers[SIGNATURE_HEADER] = sign(rt.settings.callback_signing_key.encode(), int(time.time()), content)
    try:
        with httpx.Client(timeout=rt.settings.callback_timeout_seconds, follow_redirects=False) as client:
            response = client.post(target.url, content=content, headers=headers, extensions=target.extensions)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}", True
    return (None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"), True

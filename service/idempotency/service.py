"""Idempotency-Key (draft-ietf-httpapi-idempotency-key-header), claimed in the transaction it guards."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from service.db.base import utcnow
from service.db.tables import IdempotencyKey
from service.errors import ApiError, BadRequest, Conflict, Unprocessable
from service.subjects import Redactor, SubjectHasher, request_positions
from service.uow import UnitOfWork

# printable ASCII without surrounding spaces, bare or as an RFC 8941 string ("abc")
_BARE_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?")
_SF_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')
_SF_ESCAPE = re.compile(r'\\(["\\])')

IN_FLIGHT_TAKEOVER_SECONDS = 30.0
"""A key committed ``in_flight`` this long ago is abandoned: taken over."""
_CLAIM_ATTEMPTS = 3  # the row can vanish between claim, take-over and read


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict[str, Any]
    replayed: bool


def fingerprint(hasher: SubjectHasher, body: Any) -> str:
    """Keyed digest of the canonical JSON body: key order and whitespace do not matter."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hasher.fingerprint(canonical.encode())


def check_key(key: str | None) -> str:
    """The key, or the 400 of the draft when it is missing or malformed."""
    if key is None:
        raise BadRequest(
            "the Idempotency-Key header is required: send a unique value (for example a UUID) with each new "
            "deletion, and the same value when you retry it",
            code="idempotency_key_missing",
        )
    quoted = _SF_STRING.fullmatch(key)
    value = _SF_ESCAPE.sub(r"\1", quoted.group(1)) if quoted else key
    # a leading quote is refused in the unquoted value too: check_key is idempotent
    if not _BARE_KEY.fullmatch(value) or value.startswith('"'):
        raise BadRequest(
            "the Idempotency-Key must be 1 to 255 printable ASCII characters without leading or trailing "
            "spaces and not beginning with a double quote, sent bare (a UUID, for example) or as a quoted "
            'string ("..."), which names the same key',
            code="idempotency_key_invalid",
        )
    return value


def at_rest(payload: Any) -> Redactor:
    """How answers to the request ``payload`` (JSON) are stored: each id it names by its position."""
    return Redactor(lambda: request_positions(payload) if isinstance(payload, Mapping) else {})


def run(
    new_uow: Callable[[], UnitOfWork],
    hasher: SubjectHasher,
    *,
    scope: str,
    key: str | None,
    body: Any,
    ttl_hours: float,
    handler: Callable[[UnitOfWork], tuple[int, dict[str, Any]]],
) -> Outcome:
    """``handler(uow)`` -> (status, body) at most once per (scope, key), its answer stored :func:`at_rest`."""
    key = check_key(key)
    digest = fingerprint(hasher, body)
    stored = at_rest(body)
    expires = utcnow() + timedelta(hours=ttl_hours)
    with new_uow() as uow:
        replay = _claim(uow, scope, key, digest, expires)
        if replay is not None:
            return replay
        try:
            status, response = handler(uow)
        except ApiError as exc:
            refused = exc
        else:
            uow.idempotency.complete_many([(scope, key, status, stored.json(response))])
            uow.commit()
            return Outcome(status, response, replayed=False)
    # The work rolled back with the claim; unless a duplicate claimed the key meanwhile, the error is stored.
    with new_uow() as uow:
        if uow.idempotency.claim(scope, key, digest, expires):
            uow.idempotency.complete_many([(scope, key, refused.status, stored.json(refused.body()))])
            uow.commit()
    raise refused


def _claim(uow: UnitOfWork, scope: str, key: str, digest: str, expires: datetime) -> Outcome | None:
    """Claim the key in ``uow``; None when claimed, else the replayed outcome (or the 409/422)."""
    for _ in range(_CLAIM_ATTEMPTS):
        if uow.idempotency.claim(scope, key, digest, expires):
            return None
        now = utcnow()
        abandoned = now - timedelta(seconds=IN_FLIGHT_TAKEOVER_SECONDS)
        if uow.idempotency.release_abandoned(scope, key, now, abandoned):
            continue  # expired, or abandoned: a new key
        existing = uow.idempotency.get(scope, key)
        if existing is not None:
            return _answer(existing, digest)
    raise Conflict(
        "a request with this Idempotency-Key is being processed; retry shortly",
        code="idempotency_key_in_flight",
    )


def _answer(existing: IdempotencyKey, digest: str) -> Outcome:
    """The replay of a key already answered, or the 409/422 of the draft."""
    if existing.fingerprint != digest:
        raise Unprocessable(
            "this Idempotency-Key was already used with a different request body: use a new key for a new request",
            code="idempotency_key_reused",
        )
    if existing.status != "done" or existing.response_status is None:
        raise Conflict(
            "the first request with this Idempotency-Key is still being processed; retry shortly",
            code="idempotency_key_in_flight",
        )
    body = existing.response_body or {}
    if existing.response_status >= 400:
        raise _Replayed(existing.response_status, body)
    return Outcome(existing.response_status, body, replayed=True)


class _Replayed(ApiError):
    """The stored error response of a key, replayed as stored."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        error = body.get("error", {})
        super().__init__(error.get("message", ""), code=error.get("code"), details=error.get("details"))
        self.status = status

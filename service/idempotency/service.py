"""Idempotency-Key, following the IETF draft (draft-ietf-httpapi-idempotency-key-header):

- no key on a POST that requires one: 400;
- a key seen before with the same body: the original response (status and body), replayed; an answer is
  stored with every id the request names replaced, where a message quotes it, by its position in the
  request (``owner_ids[3]``: :func:`at_rest`), so no subject is kept in plain beside the data;
- a key seen before with a different body: 422;
- a key whose first request is still being processed: 409.

The key is claimed in its own committed transaction; the response is stored in the transaction of the
work it describes. An unexpected error releases the key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from service.db.base import utcnow
from service.errors import ApiError, BadRequest, Conflict, Unprocessable
from service.subjects import Redactor, SubjectHasher, request_positions
from service.uow import UnitOfWork

# printable ASCII without surrounding spaces, bare or as an RFC 8941 string ("abc"), naming the same key
_BARE_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?")
_SF_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')
_SF_ESCAPE = re.compile(r'\\(["\\])')


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
    # a leading quote is refused in the unquoted value too, so check_key(check_key(k)) == check_key(k)
    if not _BARE_KEY.fullmatch(value) or value.startswith('"'):
        raise BadRequest(
            "the Idempotency-Key must be 1 to 255 printable ASCII characters without leading or trailing "
            "spaces and not beginning with a double quote, sent bare (a UUID, for example) or as a quoted "
            'string ("..."), which names the same key',
            code="idempotency_key_invalid",
        )
    return value


def at_rest(payload: Any) -> Redactor:
    """How answers to the request ``payload`` (its JSON form) are stored: each id it names, where a message
    quotes it, by its position in the request (a replay answers the same body, so the position resolves
    against what the client sent)."""
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
    """Run ``handler`` at most once per (scope, key); ``handler`` does the work in the given unit of work
    and returns (status, body); this function commits. The answer is returned as the handler gave it and
    stored :func:`at_rest` (what a replay returns)."""
    key = check_key(key)
    digest = fingerprint(hasher, body)
    replay = _claim(new_uow, scope, key, digest, ttl_hours)
    if replay is not None:
        return replay
    stored = at_rest(body)
    try:
        with new_uow() as uow:
            status, response = handler(uow)
            uow.idempotency.complete(scope, key, status, stored.json(response))
            uow.commit()
        return Outcome(status, response, replayed=False)
    except ApiError as exc:
        # A client error is the answer to this key too: a retry with the same body gets it again.
        with new_uow() as uow:
            uow.idempotency.complete(scope, key, exc.status, stored.json(exc.body()))
            uow.commit()
        raise
    except BaseException:
        with new_uow() as uow:
            uow.idempotency.release(scope, key)
            uow.commit()
        raise


def _claim(
    new_uow: Callable[[], UnitOfWork], scope: str, key: str, digest: str, ttl_hours: float
) -> Outcome | None:
    """Claim the key; None when claimed, else the replayed outcome (or the 409/422 of the draft)."""
    now = utcnow()
    expires = now + timedelta(hours=ttl_hours)
    with new_uow() as uow:
        uow.bookkeeping()
        if uow.idempotency.claim(scope, key, digest, expires):  # the common case: one statement
            uow.commit()
            return None
        existing = uow.idempotency.get(scope, key)
        if existing is not None and existing.expires_at < now:
            uow.idempotency.release(scope, key)  # an expired key is a new key
            if uow.idempotency.claim(scope, key, digest, expires):
                uow.commit()
                return None
            existing = uow.idempotency.get(scope, key)
        if existing is None:  # claimed and released meanwhile: let the client retry
            raise Conflict(
                "a request with this Idempotency-Key is being processed; retry shortly",
                code="idempotency_key_in_flight",
            )
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
        status = existing.response_status
    if status >= 400:
        raise _Replayed(status, body)
    return Outcome(status, body, replayed=True)


class _Replayed(ApiError):
    """The stored error response of a key, replayed as stored."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        error = body.get("error", {})
        super().__init__(error.get("message", ""), code=error.get("code"), details=error.get("details"))
        self.status = status

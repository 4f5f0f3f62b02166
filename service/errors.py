"""Errors the API answers with, and how core-library errors map onto them.

Every error response has the body ``{"error": {"code": ..., "message": ...}}``; the message says what
to change so that the request succeeds.
"""

from __future__ import annotations

from typing import Any, ClassVar

from unlearning.errors import AlreadyDeletedError, UnknownSampleError, UnlearningError


class ApiError(Exception):
    status = 400
    code = "bad_request"
    headers: ClassVar[dict[str, str] | None] = None

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"
    headers: ClassVar[dict[str, str] | None] = {"WWW-Authenticate": "Bearer"}


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "conflict"


class Gone(ApiError):
    status, code = 410, "gone"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ApiError):
    status, code = 415, "unsupported_media_type"


class Unprocessable(ApiError):
    status, code = 422, "unprocessable"


class StorageFull(ApiError):
    """The artifact store cannot write (ENOSPC, EDQUOT): nothing was recorded; the client retries later."""

    status, code = 503, "storage_full"
    RETRY_AFTER_SECONDS = 30
    headers: ClassVar[dict[str, str] | None] = {"Retry-After": str(RETRY_AFTER_SECONDS)}

    @classmethod
    def of(cls, errno_name: str) -> StorageFull:
        return cls(
            f"the artifact store is out of space ({errno_name}): nothing was recorded; retry later "
            f"(in {cls.RETRY_AFTER_SECONDS} s or more)"
        )


class BackendUnavailable(ApiError):
    """The database, Redis or the broker dropped or refused the request's connection: the transaction
    rolled back (or its commit is unknown); the client sends it again, with the same Idempotency-Key."""

    status, code = 503, "backend_unavailable"
    RETRY_AFTER_SECONDS = 1
    headers: ClassVar[dict[str, str] | None] = {"Retry-After": str(RETRY_AFTER_SECONDS)}

    def __init__(self) -> None:
        super().__init__(
            "the database, Redis or the broker did not answer: send the request again shortly, with the "
            "same Idempotency-Key (which makes the retry safe)"
        )


def from_unlearning_error(exc: UnlearningError) -> ApiError:
    """Map a core-library error (always the caller's input) to a 4xx: an id already forgotten conflicts
    with the resource's state (409); anything else is input the service cannot process as given (422)."""
    if isinstance(exc, AlreadyDeletedError):
        return Conflict(str(exc), code="already_forgotten")
    if isinstance(exc, UnknownSampleError):
        return Unprocessable(str(exc), code="unknown_subject")
    return Unprocessable(str(exc), code=_snake(type(exc).__name__.removesuffix("Error")))


def _snake(name: str) -> str:
    return "".join(f"_{ch}" if ch.isupper() and i else ch for i, ch in enumerate(name)).lower()

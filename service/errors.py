"""Errors the API answers with (``{"error": {"code", "message"}}``), core-library errors mapped to them."""

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
    """The database, Redis or the broker dropped the connection: the client retries with the same key."""

    status, code = 503, "backend_unavailable"
    RETRY_AFTER_SECONDS = 1
    headers: ClassVar[dict[str, str] | None] = {"Retry-After": str(RETRY_AFTER_SECONDS)}

    def __init__(self) -> None:
        super().__init__(
            "the database, Redis or the broker did not answer: send the request again shortly, with the "
            "same Idempotency-Key (which makes the retry safe)"
        )


def from_unlearning_error(exc: UnlearningError) -> ApiError:
    """A core-library error (the caller's input) as a 4xx: 409 for an id already forgotten, else 422."""
    if isinstance(exc, AlreadyDeletedError):
        return Conflict(str(exc), code="already_forgotten")
    if isinstance(exc, UnknownSampleError):
        return Unprocessable(str(exc), code="unknown_subject")
    name = type(exc).__name__.removesuffix("Error")
    code = "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).lower()  # snake_case
    return Unprocessable(str(exc), code=code)

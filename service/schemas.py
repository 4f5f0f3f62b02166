"""Pydantic types shared by several routers."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from service.db.tables import ID_LENGTH
from unlearning.data.ids import InvalidIdError, normalize_id

MAX_DB_INT = 2**31 - 1  # ids are 32-bit integers in the database: larger path values are simply unknown

# Printable text without control characters (Postgres refuses NUL in text; ids are user-visible keys).
PRINTABLE = r"^[^\x00-\x1f\x7f]+$"


def _normalized_id(value: object) -> object:
    """A subject id in NFC under the uploads' rule; the message leaves the id out (replays keep it)."""
    if not isinstance(value, str):
        return value  # the str schema refuses it
    try:
        return normalize_id(value)
    except InvalidIdError as exc:
        raise ValueError(exc.problem) from None


# Normalised before the length and pattern checks: the length is the stored (NFC) form's.
SubjectId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=ID_LENGTH, pattern=PRINTABLE),
    BeforeValidator(_normalized_id),
]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=PRINTABLE)]


class Strict(BaseModel):
    """Request bodies: unknown fields are an error (a typo must not be silently ignored), and JSON types
    are taken as they are (no "5" for 5: a client sending a string where a number belongs has a bug)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class ErrorDetail(BaseModel):
    code: str = Field(description="Machine-readable error code, e.g. 'not_found', 'validation_error'")
    message: str = Field(description="What went wrong and what to change")
    details: Any | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


ERROR_TEXT: dict[int, str] = {
    400: "Malformed request",
    401: "Missing or unknown bearer token (only when LETHE_API_TOKENS is set)",
    403: "A read-only token (LETHE_READ_TOKENS) on a call that changes something",
    404: "Not found",
    409: "Conflicts with the current state",
    410: "Gone: the model was deleted",
    413: "Too large",
    415: "Unsupported media type",
    422: "Invalid input",
    503: "Not ready",
}
"""What each error status means, as the OpenAPI document describes it."""


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the error statuses a route can answer."""
    return {code: {"model": ErrorBody, "description": ERROR_TEXT.get(code, "Error")} for code in codes}

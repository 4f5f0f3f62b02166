"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.errors import Forbidden, Unauthorized
from service.runtime import Runtime
from service.schemas import MAX_DB_INT

_bearer = HTTPBearer(
    auto_error=False,
    description=(
        "One of the tokens in LETHE_API_TOKENS (any call), or in LETHE_READ_TOKENS (calls whose "
        "x-lethe-access is read); not checked when LETHE_API_TOKENS is unset"
    ),
)

Access = Literal["read", "write"]
ACCESS_EXTENSION = "x-lethe-access"
READS_ONLY: dict[str, Any] = {ACCESS_EXTENSION: "read"}
"""``openapi_extra`` of a route that is not a GET yet changes nothing: a read token may call it."""


def access_of(methods: Iterable[str], extra: Mapping[str, Any] | None) -> Access:
    """``read`` for GET, HEAD and :data:`READS_ONLY` (``extra``: a route's openapi_extra), else ``write``."""
    if (extra or {}).get(ACCESS_EXTENSION) == "read":
        return "read"
    return "read" if {m.upper() for m in methods} <= {"GET", "HEAD"} else "write"


async def runtime(request: Request) -> Runtime:
    """The app's runtime (a coroutine: FastAPI runs a plain function dependency on its thread pool)."""
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(runtime)]
ModelId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Model id")]
DatasetId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Dataset id")]
RequestId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Deletion request id")]


async def authorized(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """With ``LETHE_API_TOKENS`` set: 401 without a known bearer token, 403 for a read token on a write."""
    settings = request.app.state.runtime.settings
    if not settings.api_token_list:
        return
    if credentials is None:
        raise Unauthorized(
            "send the header `Authorization: Bearer <token>` with one of the service's API tokens"
        )
    given = credentials.credentials.encode()
    if _known(given, settings.api_token_list):
        return
    if not _known(given, settings.read_token_list):
        raise Unauthorized(
            "this bearer token is not one of the service's tokens (LETHE_API_TOKENS, LETHE_READ_TOKENS)"
        )
    route = request.scope.get("route")
    methods = getattr(route, "methods", None) or {request.method}
    if access_of(methods, getattr(route, "openapi_extra", None)) == "write":
        raise Forbidden(
            f"this is a read-only token (LETHE_READ_TOKENS): it can read and predict, not {request.method} "
            f"{request.url.path}; use one of LETHE_API_TOKENS for calls that change something",
            code="read_only_token",
        )


def _known(given: bytes, tokens: tuple[bytes, ...]) -> bool:
    return any(hmac.compare_digest(given, token) for token in tokens)

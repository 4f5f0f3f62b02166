"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.errors import Unauthorized
from service.runtime import Runtime
from service.schemas import MAX_DB_INT

_bearer = HTTPBearer(
    auto_error=False,
    description="One of the tokens in LETHE_API_TOKENS; not checked when that setting is unset",
)


async def runtime(request: Request) -> Runtime:
    """The app's runtime. A coroutine on purpose: FastAPI runs a plain function dependency on its thread
    pool, one thread hand-off per request for a dictionary lookup."""
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(runtime)]
ModelId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Model id")]
DatasetId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Dataset id")]
RequestId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Deletion request id")]


async def authorized(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """With ``LETHE_API_TOKENS`` set, a /v1 request must carry ``Authorization: Bearer <one of them>``
    (compared in constant time); otherwise 401. Unset: every request passes (embedded mode, tests)."""
    tokens = request.app.state.runtime.settings.api_token_list
    if not tokens:
        return
    if credentials is None:
        raise Unauthorized("send the header `Authorization: Bearer <token>` with one of the service's API tokens")
    given = credentials.credentials.encode()
    if not any(hmac.compare_digest(given, token) for token in tokens):
        raise Unauthorized("this bearer token is not one of the service's API tokens (LETHE_API_TOKENS)")

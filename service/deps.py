"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from service.runtime import Runtime
from service.schemas import MAX_DB_INT


async def runtime(request: Request) -> Runtime:
    """The app's runtime. A coroutine on purpose: FastAPI runs a plain function dependency on its thread
    pool, one thread hand-off per request for a dictionary lookup."""
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(runtime)]
ModelId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Model id")]
DatasetId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Dataset id")]
RequestId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="Deletion request id")]

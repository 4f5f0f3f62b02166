"""The FastAPI application: routers, error handlers, metrics middleware, lifecycle."""

from __future__ import annotations

import errno
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import redis.exceptions
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import logs, metrics
from service.api import access_log
from service.api.audit import router as audit_router
from service.api.datasets import router as datasets_router
from service.api.deletions import router as deletions_router
from service.api.deps import ACCESS_EXTENSION, access_of, authorized
from service.api.health import router as health_router
from service.api.models import router as models_router
from service.api.receipts import router as receipts_router
from service.errors import ApiError, BackendUnavailable, StorageFull, from_unlearning_error
from service.faults import disk_full, is_transient, short_cause
from service.limits import RequestSizeLimit
from service.runtime import Runtime
from service.schemas import ERROR_TEXT, ErrorBody, error_responses
from service.settings import Settings
from unlearning.errors import UnlearningError

log = logging.getLogger(__name__)

_PLATFORM_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    sa_exc.SQLAlchemyError,
    psycopg.Error,
    redis.exceptions.RedisError,
    KombuOperationalError,
)

DESCRIPTION = """\
Lethe turns each deletion request into a certified (or audited) model update, keeps a privacy ledger of
what every released version guarantees, retrains when the budget would be exceeded, and records all of it
in a hash-chained audit log. Errors answer `{"error": {"code", "message"}}`; the message says what to fix.
"""

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> list[str]:
    """The methods some route takes on the request's path (a 405's ``Allow``), matched per route."""
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.routes
        )
    ]


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    """The app; the runtime starts with its lifespan, so building it has no side effects."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rt = runtime or Runtime(settings or Settings())
        app.state.runtime = rt
        access_log.install(rt.hasher)  # the access log names subjects by keyed hash
        rt.start()
        if rt.settings.mode == "production" and not rt.settings.api_token_list:
            log.warning("LETHE_API_TOKENS is not set: the /v1 API answers anyone who can reach it")
        if rt.settings.effective_demo_model:
            from service.demo import ensure_demo

            ensure_demo(rt)
        try:
            yield
        finally:
            rt.stop()

    app = FastAPI(title="Lethe", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    app.include_router(health_router)  # probes and metrics answer without a token
    for router in (datasets_router, models_router, deletions_router, receipts_router, audit_router):
        app.include_router(router, dependencies=[Depends(authorized)], responses=error_responses(401))
    _install_error_handlers(app)
    app.add_middleware(RequestSizeLimit)
    app.add_middleware(MetricsMiddleware)  # it counts the 413s of the size limit too
    app.add_middleware(RequestIdMiddleware)  # outermost: every line logged for the request names it
    _document_errors(app)
    return app


def _document_errors(app: FastAPI) -> None:
    """Document every 4xx body as ``ErrorBody`` (replacing FastAPI's validation-error shape)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            error_ref = {"$ref": "#/components/schemas/ErrorBody"}
            if "ErrorBody" not in components:
                components["ErrorBody"] = ErrorBody.model_json_schema(
                    ref_template="#/components/schemas/{model}"
                )
                components.update(components["ErrorBody"].pop("$defs", {}))
            for operation in (op for item in schema["paths"].values() for op in item.values()):
                responses = operation.get("responses", {})
                if "422" in responses:
                    responses["422"] = _error_response("Invalid input", error_ref)
                if "requestBody" in operation and "400" not in responses:
                    responses["400"] = _error_response("Malformed request", error_ref)
                if "requestBody" in operation and "413" not in responses:  # service.limits
                    responses["413"] = _error_response("Request body over LETHE_MAX_REQUEST_BYTES", error_ref)
            for name in ("HTTPValidationError", "ValidationError"):
                components.pop(name, None)
            _document_access(schema["paths"], error_ref)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_access(paths: dict[str, Any], error_ref: dict[str, str]) -> None:
    """Mark each /v1 operation ``x-lethe-access`` ``read`` or ``write``; a write documents its 403."""
    for path, item in paths.items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in item.items():
            access = access_of([method], operation)
            operation[ACCESS_EXTENSION] = access
            if access == "write":
                operation.setdefault("responses", {})["403"] = _error_response(ERROR_TEXT[403], error_ref)


def _error_response(description: str, error_ref: dict[str, str]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": error_ref}}}


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    """The body every error answers with: ``{"error": {"code", "message", ...extra}}``."""
    return JSONResponse(
        {"error": {"code": code, "message": message, **extra}}, status_code=status, headers=headers
    )


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(UnlearningError)
    async def unlearning_error(_: Request, exc: UnlearningError) -> JSONResponse:
        mapped = from_unlearning_error(exc)
        return JSONResponse(mapped.body(), status_code=mapped.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        sent = request.headers.get("content-type", "").split(";")[0].strip().lower()
        json = sent == "application/json" or sent.endswith("+json")
        if sent and not json and any(tuple(e.get("loc", ()))[:1] == ("body",) for e in errors):
            # a body not declared JSON is left unparsed, then "not a valid dictionary": say what to send
            message = f"the body was sent as {sent}: send JSON with Content-Type: application/json"
            return _error(415, "unsupported_media_type", message)
        if any(e.get("type") == "json_invalid" for e in errors):
            return _error(400, "malformed_json", "the request body is not valid JSON")
        details = [
            {"location": list(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")}
            for e in errors
        ]
        message = "; ".join(
            f"{'.'.join(str(p) for p in d['location'])}: {d['message']}" for d in details[:10]
        )
        return _error(422, "validation_error", message, details=details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 404 and message == "Not Found":
            message = "no such endpoint: see /docs for the API"
        if exc.status_code == 405:
            allowed = _allowed_methods(request)
            headers["Allow"] = ", ".join(allowed)
            message = f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}"
        return _error(exc.status_code, code, message, headers or None)

    async def platform_error(request: Request, exc: Exception) -> JSONResponse:
        if (fault := _platform_fault(request, exc)) is not None:
            return fault
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, "internal", "an unexpected error occurred; it has been logged")

    # Registered by class, so that the answer is final (the catch-all below answers, then re-raises).
    for kind in _PLATFORM_ERRORS:
        app.add_exception_handler(kind, platform_error)
    app.add_exception_handler(Exception, platform_error)


def _platform_fault(request: Request, exc: BaseException) -> JSONResponse | None:
    """503 ``storage_full`` or ``backend_unavailable`` for a fault of the platform, not of the request."""
    full = _storage_full(request, exc)
    if full is not None or not is_transient(exc):
        return full
    log.warning("%s %s: %s; answered 503", request.method, request.url.path, short_cause(exc))
    error = BackendUnavailable()
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def _storage_full(request: Request, exc: BaseException) -> JSONResponse | None:
    """503 ``storage_full`` (``Retry-After``) for a write the disk refused (nothing recorded), else None."""
    full = disk_full(exc)
    if full is None:
        return None
    name = errno.errorcode.get(full.errno or 0, "ENOSPC")
    log.warning(
        "%s %s: the artifact store is out of space (%s); answered 503", request.method, request.url.path, name
    )
    error = StorageFull.of(name)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class _HttpMiddleware(ABC):
    """An ASGI middleware that handles HTTP requests (:meth:`http`) and passes anything else through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    @abstractmethod
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (its ``scope``), calling ``self.app`` as it sees fit."""


class RequestIdMiddleware(_HttpMiddleware):
    """``X-Request-ID`` (the client's plain token, or a new one): echoed, and the context of its log lines."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        sent = dict(scope["headers"]).get(logs.REQUEST_ID_HEADER.lower().encode())
        request_id = logs.request_id_from(sent.decode("latin-1") if sent is not None else None)

        async def echo(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        with logs.log_context(x_request_id=request_id):
            await self.app(scope, receive, echo)


class MetricsMiddleware(_HttpMiddleware):
    """Counts requests and observes latency per route template (not per URL: bounded label values)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        status = {"code": 500}

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", "unmatched")
            metrics.HTTP_REQUESTS.labels(scope["method"], template, str(status["code"])).inc()
            metrics.HTTP_LATENCY.labels(scope["method"], template).observe(time.perf_counter() - start)

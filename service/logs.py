"""Log lines that follow a request from the API to the worker (``X-Request-ID``), as text or JSON."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

REQUEST_ID_HEADER = "X-Request-ID"
X_REQUEST_ID = "x_request_id"  # its name in a log line's context and in a job's payload
_VALID_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
_CONTEXT: ContextVar[dict[str, Any] | None] = ContextVar("lethe_log_context", default=None)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(context)s"


def request_id_from(header: str | None) -> str:
    """The client's ``X-Request-ID`` when a plain token (it is echoed and logged), else a new random one."""
    return header if header is not None and _VALID_ID.match(header) else uuid.uuid4().hex


def current_request_id() -> str | None:
    context = _CONTEXT.get()
    return None if context is None else context.get(X_REQUEST_ID)


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (x_request_id, job, model_id; None values left out) to every line logged inside."""
    merged = {**(_CONTEXT.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    token = _CONTEXT.set(merged)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class ContextFilter(logging.Filter):
    """Puts the context on each record: ``record.context`` (text format), ``record.lethe`` (JSON format)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _CONTEXT.get() or {}
        record.lethe = context
        record.context = (" [" + " ".join(f"{k}={v}" for k, v in context.items()) + "]") if context else ""
        return True


class JsonFormatter(logging.Formatter):
    """``{"at", "level", "logger", "message", ...context, "exception"?}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "lethe", {}),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class ContextSuffix(logging.Formatter):
    """Another formatter's line with the context appended (a Celery worker's own text format kept)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return self.inner.format(record) + str(getattr(record, "context", ""))


def install_beside(handler: logging.Handler, fmt: str) -> None:
    """:func:`install` on another library's handler: the context appended to its text format (or json)."""
    if any(isinstance(f, ContextFilter) for f in handler.filters):
        return  # the root's handler, met again through another logger
    handler.addFilter(ContextFilter())
    inner = handler.formatter or logging.Formatter()
    handler.setFormatter(JsonFormatter() if fmt == "json" else ContextSuffix(inner))


def formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def install(handler: logging.Handler, fmt: str) -> None:
    """Give ``handler`` the context filter and the ``fmt`` (``text`` or ``json``) formatter."""
    handler.addFilter(ContextFilter())
    handler.setFormatter(formatter(fmt))


def configure(level: str, fmt: str) -> None:
    """The root logger of a process this module starts (the API): one stream handler."""
    logging.basicConfig(level=level.upper())
    for handler in logging.getLogger().handlers:
        install(handler, fmt)

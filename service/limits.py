"""ASGI middleware: 413 for a body over ``LETHE_MAX_REQUEST_BYTES`` (``POST /v1/datasets`` exempt)."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

UPLOAD_ROUTE = ("POST", "/v1/datasets")


class RequestSizeLimit:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"].rstrip("/")) == UPLOAD_ROUTE:
            await self.app(scope, receive, send)
            return
        limit: int = scope["app"].state.runtime.settings.max_request_bytes
        declared = _content_length(scope)
        if declared is not None:
            if declared > limit:
                await _too_large(send, limit, f"{declared:,}-byte")
                return
            await self.app(scope, receive, send)  # the server delivers no more than it declared
            return
        body, more = await _read_up_to(receive, limit)
        if more:
            await _too_large(send, limit, "chunked")
            return
        await self.app(scope, _replay(body, receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length before we are called
    return None


async def _read_up_to(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The body, and whether it went on past ``limit`` bytes (reading stops there)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then defers to the server's."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _too_large(send: Send, limit: int, what: str) -> None:
    message = (
        f"the {what} request body is over this service's limit of {limit:,} bytes (LETHE_MAX_REQUEST_BYTES): "
        "split it into smaller requests (fewer bulk items, ids or instances per request)"
    )
    payload = json.dumps({"error": {"code": "payload_too_large", "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": payload})

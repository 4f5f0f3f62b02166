"""A lean HTTP/1.1 client for the open-loop load generator of ``bench.service``.

The generator shares the machine's two cores with the service it measures, so every millisecond of CPU
it spends per request is taken from the API, the worker and Postgres. httpx's AsyncClient spends about
2.3 ms of CPU per POST here (measured with ``cpu_ms_per_request``); this client writes the request bytes
and parses the status line, headers and body of the answer over kept-alive asyncio streams, and
nothing else. It speaks just enough HTTP/1.1 for the service's JSON answers (``Content-Length`` bodies;
a chunked answer is refused with an error rather than misread).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class HttpError(RuntimeError):
    """An answer this client does not accept: a status of 400 or more, or a body it cannot frame."""


class StaleConnection(HttpError):
    """The server closed the connection before answering. On a kept-alive connection that means it was
    closed while idle and the request went nowhere; it is sent again once on a new connection (the
    benchmark's deletions carry Idempotency-Keys, so even a request that did arrive would be replayed)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class KeepAliveClient:
    """Up to ``connections`` kept-alive connections to one ``http://host:port`` base URL."""

    def __init__(self, base_url: str, connections: int = 64, timeout: float = 60.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"an http://host:port base URL is needed, got {base_url!r}")
        self._host, self._port = parts.hostname, parts.port or 80
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(connections)
        self._timeout = timeout

    async def post_json(self, path: str, payload: Any, headers: dict[str, str] | None = None) -> Answer:
        """POST ``payload`` as JSON; raises :class:`HttpError` for a status of 400 or more."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
            + "\r\n"
        )
        request = head.encode("latin-1") + body
        async with self._slots:
            reused = bool(self._idle)
            reader, writer = self._idle.pop() if reused else await self._connect()
            try:
                answer, keep = await self._exchange(reader, writer, request)
            except StaleConnection:
                if not reused:
                    raise HttpError("the server closed a new connection before answering") from None
                # A kept-alive connection the server closed while it sat idle (uvicorn closes them after
                # 5 s): the request never reached it, so it goes again on a new connection.
                reader, writer = await self._connect()
                answer, keep = await self._exchange(reader, writer, request)
            if keep:
                self._idle.append((reader, writer))
            else:
                writer.close()
        if answer.status >= 400:
            raise HttpError(f"POST {path} answered {answer.status}: {answer.body[:500]!r}")
        return answer

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
    ) -> tuple[Answer, bool]:
        """Send ``request`` and read its answer; the connection is closed if that fails."""
        try:
            try:
                writer.write(request)
                await writer.drain()
            except ConnectionError as exc:  # reset while idle: nothing was sent
                raise StaleConnection(str(exc)) from exc
            return await asyncio.wait_for(_read_answer(reader), self._timeout)
        except BaseException:
            writer.close()
            raise

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(self._host, self._port)

    async def aclose(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    """One answer: (status and body, whether the connection may be reused)."""
    try:
        status_line = await reader.readline()
    except ConnectionError as exc:
        raise StaleConnection(str(exc)) from exc
    if not status_line:
        raise StaleConnection("the server closed the connection before answering")
    try:
        version, code = status_line.split(b" ", 2)[:2]
        status = int(code)
    except ValueError as exc:
        raise HttpError(f"not an HTTP status line: {status_line!r}") from exc
    length: int | None = None
    keep = version == b"HTTP/1.1"
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and value != b"identity":
            raise HttpError(f"a {value.decode()} answer: this client reads Content-Length bodies only")
        elif name == b"connection":
            keep = value == b"keep-alive" or (keep and value != b"close")
    if length is None:
        raise HttpError("an answer without Content-Length")
    return Answer(status, await reader.readexactly(length)), keep

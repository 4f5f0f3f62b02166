"""The load generator's lean HTTP/1.1 client against a scripted local server."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench.loadgen import HttpError, KeepAliveClient


async def _serve(answers: list[bytes], seen: list[bytes]) -> tuple[asyncio.Server, str]:
    """A server that records each request (head and body) and sends the next scripted answer."""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        seen.append(f"connection {connections}".encode())
        while answers:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(
                    line.split(b":")[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
            )
            seen.append(head + await reader.readexactly(length))
            writer.write(answers.pop(0))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def _answer(status: int, body: dict[str, object], extra: str = "") -> bytes:
    raw = json.dumps(body).encode()
    return (
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(raw)}\r\n{extra}\r\n".encode()
        + raw
    )


def test_posts_json_and_reuses_the_connection() -> None:
    async def run() -> list[bytes]:
        seen: list[bytes] = []
        server, base = await _serve([_answer(202, {"id": 1}), _answer(202, {"id": 2})], seen)
        client = KeepAliveClient(base, connections=1)
        first = await client.post_json("/v1/x", {"owner_ids": ["a"]}, {"Idempotency-Key": "k1"})
        second = await client.post_json("/v1/x", {"owner_ids": ["b"]}, {"Idempotency-Key": "k2"})
        assert (first.status, first.json(), second.json()) == (202, {"id": 1}, {"id": 2})
        await client.aclose()
        server.close()
        return seen

    seen = asyncio.run(run())
    assert [s for s in seen if s.startswith(b"connection")] == [b"connection 1"]  # one connection, kept alive
    request = seen[1]
    assert request.startswith(b"POST /v1/x HTTP/1.1\r\n") and b"Idempotency-Key: k1\r\n" in request
    assert request.endswith(b'{"owner_ids":["a"]}')


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (_answer(422, {"detail": "bad"}), "answered 422"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", "Content-Length bodies only"),
        (b"HTTP/1.1 200 OK\r\n\r\n", "without Content-Length"),
    ],
)
def test_refuses_errors_and_bodies_it_cannot_frame(answer: bytes, message: str) -> None:
    async def run() -> None:
        server, base = await _serve([answer], [])
        client = KeepAliveClient(base)
        try:
            with pytest.raises(HttpError, match=message):
                await client.post_json("/v1/x", {})
        finally:
            await client.aclose()
            server.close()

    asyncio.run(run())


def test_a_kept_alive_connection_the_server_closed_while_idle_is_replaced() -> None:
    """uvicorn closes a connection idle for 5 s: the next request on it must go on a new connection."""

    async def run() -> list[bytes]:
        seen: list[bytes] = []
        answers = [_answer(202, {"id": 1})]
        server, base = await _serve(answers, seen)  # answers one request, then closes the connection
        client = KeepAliveClient(base, connections=1)
        assert (await client.post_json("/v1/x", {"n": 1})).json() == {"id": 1}
        await asyncio.sleep(0.05)  # the server has closed it by now
        answers.append(_answer(202, {"id": 2}))
        assert (await client.post_json("/v1/x", {"n": 2})).json() == {"id": 2}
        await client.aclose()
        server.close()
        return seen

    seen = asyncio.run(run())
    assert [s for s in seen if s.startswith(b"connection")] == [b"connection 1", b"connection 2"]
    assert seen[-1].endswith(b'{"n":2}')


def test_a_new_connection_closed_before_answering_is_an_error() -> None:
    async def run() -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        client = KeepAliveClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        try:
            with pytest.raises(HttpError, match="closed a new connection"):
                await client.post_json("/v1/x", {"n": 1})
        finally:
            await client.aclose()
            server.close()

    asyncio.run(run())

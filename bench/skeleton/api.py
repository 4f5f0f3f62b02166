"""The skeleton's API: ``POST /v1/models/{id}/deletions`` as a bare ASGI app on uvicorn (uvloop,
httptools), with async psycopg connections and the intake in three statements and a commit. The variants
``split`` and ``fastapi`` (:data:`bench.skeleton.VARIANTS`) change how."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
import redis.asyncio as aioredis
import uvicorn
from celery import Celery
from fastapi import FastAPI, Header, HTTPException, Request
from pydantic import BaseModel, Field

from bench.skeleton import (
    ENV_DSN,
    ENV_PREFIX,
    ENV_REDIS,
    REQUESTS_CHAIN,
    chain_events,
    fused,
    owner_hashes,
    setting,
    variants,
)

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

DELETIONS = re.compile(r"^/v1/models/(\d+)/deletions$")
CONNECTIONS = 4

OWNER_SAMPLES = "SELECT count(*) FROM samples WHERE model_id = %s AND owner_id = ANY(%s)"
HEAD = "SELECT seq, hash, nextval('requests_id_seq') FROM chain_heads WHERE chain = %s FOR UPDATE"
REQUEST = """
INSERT INTO requests (id, model_id, idempotency_key, body_hash, owner_ids, state, created_at)
VALUES (%(id)s, %(model)s, %(key)s, %(body_hash)s, %(owners)s, 'queued', %(at)s)
ON CONFLICT (idempotency_key) DO NOTHING RETURNING id
"""
# What a new request's row brings with it; the fused form runs only if the request row was inserted.
RECORD = [
    """INSERT INTO history (request_id, state, at)
       SELECT %(id)s, s, %(at)s FROM unnest(ARRAY['received', 'queued']) AS s {only_new}""",
    "INSERT INTO audit (chain, seq, body, hash) SELECT %(chain)s, %(seq)s, %(body)s, %(hash)s {only_new}",
    "UPDATE chain_heads SET seq = %(seq)s, hash = %(hash)s WHERE chain = %(chain)s {and_new}",
]
REPLAY = "SELECT id, body_hash FROM requests WHERE idempotency_key = %s"


class Intake:
    """A few async connections, each taken by one request's transaction at a time."""

    def __init__(self) -> None:
        self.pool: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
        prefix = setting(ENV_PREFIX)
        self.pending_key = f"{prefix}:pending"
        self.queue = prefix
        self.hot = aioredis.Redis.from_url(setting(ENV_REDIS))
        self.celery = Celery(broker=setting(ENV_REDIS))
        self.variants = variants()

    async def start(self) -> None:
        for _ in range(CONNECTIONS):
            self.pool.put_nowait(await psycopg.AsyncConnection.connect(setting(ENV_DSN)))

    async def insert(self, conn: psycopg.AsyncConnection[Any], params: dict[str, Any]) -> Any:
        """The request row and what it brings (:data:`RECORD`); None if its key was already taken."""
        if "split" not in self.variants:
            new = "WHERE EXISTS (SELECT 1 FROM new)"
            parts = [p.format(only_new=new, and_new="AND EXISTS (SELECT 1 FROM new)") for p in RECORD]
            sql = fused(parts, "SELECT id FROM new").replace("WITH ", f"WITH new AS ({REQUEST}), ", 1)
            return await (await conn.execute(sql, params)).fetchone()
        row = await (await conn.execute(REQUEST, params)).fetchone()
        if row is not None:
            for part in RECORD:
                await conn.execute(part.format(only_new="", and_new=""), params)
        return row

    async def submit(
        self, model_id: int, key: str, body: bytes, owners: list[str]
    ) -> tuple[int, dict[str, Any]]:
        body_hash = hashlib.sha256(body).digest()
        conn = await self.pool.get()
        try:
            async with conn.transaction():
                found = await (await conn.execute(OWNER_SAMPLES, (model_id, owners))).fetchone()
                if not found or not found[0]:
                    return 404, {"detail": "no samples of these owners"}
                head = await (await conn.execute(HEAD, (REQUESTS_CHAIN,))).fetchone()
                assert head is not None
                request_id = int(head[2])
                event = {
                    "type": "deletion.received",
                    "request_id": request_id,
                    "payload": {"subjects": owner_hashes(owners)},
                }
                seqs, bodies, hashes = chain_events(REQUESTS_CHAIN, int(head[0]), head[1], [event])
                params = {
                    "id": request_id,
                    "model": model_id,
                    "key": key,
                    "body_hash": body_hash,
                    "owners": owners,
                    "chain": REQUESTS_CHAIN,
                    "seq": seqs[0],
                    "body": bodies[0],
                    "hash": hashes[0],
                    "at": datetime.now(UTC),
                }
                row = await self.insert(conn, params)
                if row is None:
                    replay = await (await conn.execute(REPLAY, (key,))).fetchone()
                    assert replay is not None
                    if bytes(replay[1]) != body_hash:
                        return 422, {"detail": "Idempotency-Key reused with another body"}
                    return 202, {"id": int(replay[0]), "state": "queued"}
        finally:
            self.pool.put_nowait(conn)
        if await self.hot.set(self.pending_key, b"1", nx=True):
            self.celery.send_task("skeleton.round", args=[model_id], queue=self.queue)
        return 202, {"id": int(row[0]), "state": "queued"}


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def answer(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = orjson.dumps(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class DeletionIn(BaseModel):
    owner_ids: list[str] = Field(min_length=1)


class DeletionOut(BaseModel):
    id: int
    state: str


def fastapi_app(intake: Intake) -> FastAPI:
    """The same route through FastAPI: path and header parameters, a pydantic body and answer."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await intake.start()
        yield

    api = FastAPI(lifespan=lifespan)

    @api.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @api.post("/v1/models/{model_id}/deletions", status_code=202, response_model=DeletionOut)
    async def delete(
        model_id: int, body: DeletionIn, request: Request, idempotency_key: str = Header()
    ) -> DeletionOut:
        status, payload = await intake.submit(model_id, idempotency_key, await request.body(), body.owner_ids)
        if status != 202:
            raise HTTPException(status, payload["detail"])
        return DeletionOut(**payload)

    return api


def make_app() -> Any:
    intake = Intake()
    if "fastapi" in intake.variants:
        return fastapi_app(intake)

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                if message["type"] == "lifespan.startup":
                    await intake.start()
                    await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        match = DELETIONS.match(scope["path"])
        if scope["method"] == "GET" and scope["path"] == "/healthz":
            await answer(send, 200, {"ok": True})
            return
        if scope["method"] != "POST" or match is None:
            await answer(send, 404, {"detail": "not found"})
            return
        body = await read_body(receive)
        key = dict(scope["headers"]).get(b"idempotency-key")
        if not key:
            await answer(send, 400, {"detail": "Idempotency-Key header missing"})
            return
        try:
            owners = orjson.loads(body)["owner_ids"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            await answer(send, 422, {"detail": "a JSON object with owner_ids is needed"})
            return
        status, payload = await intake.submit(int(match.group(1)), key.decode(), body, owners)
        await answer(send, status, payload)

    return app


if __name__ == "__main__":
    uvicorn.run(
        make_app(),
        host="127.0.0.1",
        port=int(os.environ["SKELETON_PORT"]),
        log_level="warning",
        loop="uvloop",
        http="httptools",
    )

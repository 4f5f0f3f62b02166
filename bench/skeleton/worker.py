"""The skeleton's Celery worker: ``celery -A bench.skeleton.worker worker --pool=threads``.

One task, ``skeleton.round``: drain the model's queued requests into one version (four statements and a
commit under the model's row lock), then complete them (Redis, unlinks, two statements and a commit).
The variants ``split``, ``sqlalchemy`` and ``manifest`` (:data:`bench.skeleton.VARIANTS`) change how."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson
import psycopg
import redis
from celery import Celery
from safetensors.numpy import load, save
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.skeleton import (
    CHAIN,
    COLLECTION_LOCK,
    ENV_BLOBS,
    ENV_DSN,
    ENV_PREFIX,
    ENV_REDIS,
    chain_events,
    drop_from_manifest,
    fused,
    owner_hashes,
    setting,
    variants,
)
from bench.skeleton.schema import CLASSES, FEATURES, vector_key
from service.storage.artifacts import LocalArtifactStore

app = Celery("skeleton", broker=setting(ENV_REDIS))
app.conf.update(task_default_queue=setting(ENV_PREFIX), worker_prefetch_multiplier=1)

PREFIX = setting(ENV_PREFIX)
BLOBS = LocalArtifactStore(Path(setting(ENV_BLOBS)))
VARIANT = variants()
EPSILON_PER_DELETION = 0.01

LOCK = """
SELECT seq, version_id, weights, nextval('versions_id_seq'), {manifest} FROM models WHERE id = %(model)s FOR UPDATE
"""
# Taken last, just before the writes, as the service does: the completion of the previous version
# appends to the same chain, and a round that held it throughout would hold that completion up.
HEAD = "SELECT seq, hash FROM chain_heads WHERE chain = %(chain)s FOR UPDATE"
QUEUED = """
SELECT r.id, r.owner_ids,
       ARRAY(SELECT b.blob FROM buckets b WHERE b.model_id = r.model_id AND b.owner_id = ANY(r.owner_ids))
FROM requests r WHERE r.model_id = %(model)s AND r.state = 'queued' ORDER BY r.id FOR UPDATE OF r
"""
# The buckets' erasure: their rows go, or the model row's UPDATE (RECORD) carries the new manifest. Not
# a second UPDATE of that row: two parts of one WITH statement that update the same row leave only one
# of the changes, unpredictably (the Postgres manual, "Data-Modifying Statements in WITH").
BUCKET_ROWS = "DELETE FROM buckets WHERE model_id = %(model)s AND owner_id = ANY(%(owners)s)"
MODEL = "UPDATE models SET seq = %(seq)s, version_id = %(vid)s, weights = %(weights)s{manifest} WHERE id = %(model)s"
RECORD = [
    """INSERT INTO versions (id, model_id, seq, parent, weights, certificate, garbage, created_at)
       VALUES (%(vid)s, %(model)s, %(seq)s, %(parent)s, %(weights)s, %(certificate)s, %(garbage)s, now())""",
    """INSERT INTO tombstones SELECT model_id, sample_id, %(vid)s FROM samples
       WHERE model_id = %(model)s AND owner_id = ANY(%(owners)s)""",
    "DELETE FROM samples WHERE model_id = %(model)s AND owner_id = ANY(%(owners)s)",
    """INSERT INTO ledger (model_id, version_id, epsilon, deletions)
       VALUES (%(model)s, %(vid)s, %(epsilon)s, %(n)s)""",
    "UPDATE requests SET state = 'applied', version_id = %(vid)s WHERE id = ANY(%(ids)s)",
    """INSERT INTO history (request_id, state, at)
       SELECT i, s, t FROM unnest(CAST(%(ids)s AS bigint[])) AS i,
       unnest(ARRAY['applying', 'applied'], ARRAY[CAST(%(applying)s AS timestamptz), clock_timestamp()]) AS x(s, t)""",
]
AUDIT = [
    """INSERT INTO audit (chain, seq, body, hash)
       SELECT %(chain)s, q, b, x FROM unnest(CAST(%(aseq)s AS bigint[]), CAST(%(abody)s AS jsonb[]), CAST(%(ahash)s AS text[])) AS e(q, b, x)""",
    "UPDATE chain_heads SET seq = %(head_seq)s, hash = %(head_hash)s WHERE chain = %(chain)s",
]
COMPLETION_LOCK = """
SELECT seq, hash, pg_advisory_xact_lock(%(lock)s) IS NULL FROM chain_heads WHERE chain = %(chain)s FOR UPDATE
"""
COMPLETE = [
    """UPDATE requests SET state = 'completed', completed_at = %(now)s, owner_ids = NULL
       WHERE id = ANY(%(ids)s) AND state = 'applied'""",
    "INSERT INTO history (request_id, state, at) SELECT i, 'completed', %(now)s FROM unnest(CAST(%(ids)s AS bigint[])) AS i",
]


class Executor(Protocol):
    def transaction(self) -> Any: ...

    def one(self, sql: str, params: dict[str, Any]) -> Any: ...

    def all(self, sql: str, params: dict[str, Any]) -> list[Any]: ...

    def run(self, sql: str, params: dict[str, Any]) -> None: ...


class Psycopg:
    """Statements on a psycopg connection (server-side prepared after a few uses, as the service's are)."""

    def __init__(self) -> None:
        self.conn = psycopg.connect(setting(ENV_DSN))

    def transaction(self) -> Any:
        return self.conn.transaction()

    def one(self, sql: str, params: dict[str, Any]) -> Any:
        return self.conn.execute(sql, params).fetchone()

    def all(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    def run(self, sql: str, params: dict[str, Any]) -> None:
        self.conn.execute(sql, params)


_NAMED = re.compile(r"%\((\w+)\)s")


class Sqlalchemy:
    """The same statements as ``text()`` on a SQLAlchemy Session, as the service executes its own."""

    def __init__(self) -> None:
        dsn = setting(ENV_DSN).replace("postgresql://", "postgresql+psycopg://")
        self.session = Session(create_engine(dsn, pool_size=2))
        self._texts: dict[str, Any] = {}

    def _text(self, sql: str) -> Any:
        if sql not in self._texts:  # built once, as the service's statements are (bench/README.md, item 24)
            self._texts[sql] = text(_NAMED.sub(r":\1", sql))
        return self._texts[sql]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        try:
            yield
            self.session.commit()
        except BaseException:
            self.session.rollback()
            raise

    def one(self, sql: str, params: dict[str, Any]) -> Any:
        return self.session.execute(self._text(sql), params).fetchone()

    def all(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return list(self.session.execute(self._text(sql), params).fetchall())

    def run(self, sql: str, params: dict[str, Any]) -> None:
        self.session.execute(self._text(sql), params)


def run_parts(db: Executor, parts: list[str], params: dict[str, Any]) -> None:
    """``parts`` as one WITH statement, or one round trip each with the ``split`` variant."""
    if "split" in VARIANT:
        for part in parts:
            db.run(part, params)
    else:
        db.run(fused(parts), params)


_local = threading.local()
_weights: dict[str, np.ndarray] = {}  # blob digest -> weights: the service's blob cache, in small
_hot = redis.Redis.from_url(setting(ENV_REDIS))


def executor() -> Executor:
    db: Executor | None = getattr(_local, "db", None)
    if db is None:
        db = _local.db = Sqlalchemy() if "sqlalchemy" in VARIANT else Psycopg()
    return db


def weights_of(digest: str) -> np.ndarray:
    if digest not in _weights:
        _weights[digest] = load(BLOBS.get(digest))["w"]
    return _weights[digest]


def audit_params(
    head: Any, kind: str, version_id: int, version_seq: int, ids: list[int], owners: list[list[str]]
) -> dict[str, Any]:
    """The audit events of ``ids`` chained after ``head`` (its seq and hash), as statement parameters."""
    events = [
        {
            "type": kind,
            "request_id": i,
            "version_id": version_id,
            "payload": {"version_seq": version_seq, "subjects": owner_hashes(named)},
        }
        for i, named in zip(ids, owners, strict=True)
    ]
    seqs, bodies, hashes = chain_events(CHAIN, int(head[0]), head[1], events)
    return {
        "chain": CHAIN,
        "aseq": seqs,
        "abody": bodies,
        "ahash": hashes,
        "head_seq": seqs[-1],
        "head_hash": hashes[-1],
    }


@app.task(name="skeleton.round")
def round_(model_id: int) -> int:
    """One version for every queued request of the model, then its completion; returns the requests."""
    _hot.delete(f"{PREFIX}:pending")
    db = executor()
    with db.transaction():
        lock = db.one(
            LOCK.format(manifest="manifest" if "manifest" in VARIANT else "NULL"), {"model": model_id}
        )
        seq, parent, digest, vid = int(lock[0]), lock[1], lock[2], int(lock[3])
        queued = db.all(QUEUED, {"model": model_id})
        if not queued:
            return 0
        applying = datetime.now(UTC)
        ids = [int(r[0]) for r in queued]
        per_request = [list(r[1]) for r in queued]
        owners = [o for named in per_request for o in named]
        vectors: list[bytes | None] = _hot.mget([vector_key(PREFIX, o) for o in owners])  # type: ignore[assignment]
        update = np.sum([np.frombuffer(v, dtype=np.float32) for v in vectors if v is not None], axis=0)
        new = weights_of(digest) + update.reshape(CLASSES, FEATURES + 1)
        weights = BLOBS.put(save({"w": new}))
        _weights[weights] = new
        params: dict[str, Any] = {
            "model": model_id,
            "vid": vid,
            "seq": seq + 1,
            "parent": parent,
            "weights": weights,
            "certificate": orjson.dumps({"epsilon": EPSILON_PER_DELETION * len(owners)}).decode(),
            "epsilon": EPSILON_PER_DELETION * len(owners),
            "n": len(owners),
            "owners": owners,
            "ids": ids,
            "applying": applying,
        }
        if "manifest" in VARIANT:
            params["manifest"], params["garbage"] = drop_from_manifest(lock[4], owners)
            writes = [MODEL.format(manifest=", manifest = %(manifest)s"), *RECORD]
        else:
            params["garbage"] = [blob for r in queued for blob in r[2]]
            writes = [BUCKET_ROWS, MODEL.format(manifest=""), *RECORD]
        head = db.one(HEAD, {"chain": CHAIN})
        params |= audit_params(head, "deletion.applied", vid, seq + 1, ids, per_request)
        run_parts(db, [*writes, *AUDIT], params)
    complete(db, model_id, vid, seq + 1, new, ids, per_request, params["garbage"])
    return len(ids)


def complete(
    db: Executor,
    model_id: int,
    version_id: int,
    seq: int,
    weights: np.ndarray,
    ids: list[int],
    per_request: list[list[str]],
    garbage: list[str],
) -> None:
    """Serve the version and drop the owners' vectors (Redis), unlink the garbage under the collection
    lock, mark the requests completed."""
    with _hot.pipeline(transaction=True) as pipe:
        pipe.set(f"{PREFIX}:serving:{model_id}", orjson.dumps({"version": version_id, "seq": seq}))
        pipe.set(f"{PREFIX}:weights:{model_id}", weights.tobytes())
        pipe.delete(*[vector_key(PREFIX, o) for named in per_request for o in named])
        pipe.execute()
    with db.transaction():
        head = db.one(COMPLETION_LOCK, {"lock": COLLECTION_LOCK, "chain": CHAIN})
        for digest in garbage:
            BLOBS.delete(digest)
        now = datetime.fromtimestamp(time.time(), UTC)
        params = {
            "ids": ids,
            "now": now,
            **audit_params(head, "deletion.completed", version_id, seq, ids, per_request),
        }
        run_parts(db, [*COMPLETE, *AUDIT], params)

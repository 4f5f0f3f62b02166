"""The skeleton's tables and its model: R1's shape (784 x 10 weights, one owner per sample, two bucket
blobs per owner and one approximator vector per owner in Redis)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import psycopg
import redis
from safetensors.numpy import save

from bench.skeleton import CHAIN, MODEL_ID, REQUESTS_CHAIN
from service.audit.chain import GENESIS
from service.storage.artifacts import LocalArtifactStore

FEATURES, CLASSES = 784, 10

DDL = """
CREATE TABLE models (id int PRIMARY KEY, seq int NOT NULL, version_id bigint, weights text NOT NULL,
                     manifest json);
ALTER TABLE models ALTER COLUMN manifest SET STORAGE EXTERNAL;
CREATE TABLE chain_heads (chain text PRIMARY KEY, seq bigint NOT NULL, hash text NOT NULL);
CREATE TABLE samples (model_id int, sample_id text, owner_id text, PRIMARY KEY (model_id, sample_id));
CREATE INDEX samples_owner ON samples (model_id, owner_id);
CREATE TABLE buckets (model_id int, owner_id text, kind text, blob text NOT NULL,
                      PRIMARY KEY (model_id, owner_id, kind));
CREATE TABLE requests (id bigserial PRIMARY KEY, model_id int NOT NULL, idempotency_key text NOT NULL UNIQUE,
                       body_hash bytea NOT NULL, owner_ids text[], state text NOT NULL, version_id bigint,
                       created_at timestamptz NOT NULL, completed_at timestamptz);
CREATE INDEX requests_open ON requests (model_id, id) WHERE state IN ('queued', 'applied');
CREATE TABLE history (request_id bigint NOT NULL, state text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX history_request ON history (request_id);
CREATE TABLE audit (id bigserial PRIMARY KEY, chain text NOT NULL, seq bigint NOT NULL, body jsonb NOT NULL,
                    hash text NOT NULL, UNIQUE (chain, seq));
CREATE TABLE versions (id bigserial PRIMARY KEY, model_id int NOT NULL, seq int NOT NULL, parent bigint,
                       weights text NOT NULL, certificate jsonb NOT NULL, garbage text[] NOT NULL,
                       created_at timestamptz NOT NULL, UNIQUE (model_id, seq));
CREATE TABLE ledger (id bigserial PRIMARY KEY, model_id int NOT NULL, version_id bigint NOT NULL,
                     epsilon double precision NOT NULL, deletions int NOT NULL);
CREATE TABLE tombstones (model_id int NOT NULL, sample_id text NOT NULL, version_id bigint NOT NULL);
"""


def owner_ids(n: int) -> list[str]:
    return [f"owner-{i:05d}" for i in range(n)]


def vector_key(prefix: str, owner_id: str) -> str:
    return f"{prefix}:vec:{MODEL_ID}:{owner_id}"


def create(
    dsn: str, redis_url: str, prefix: str, blobs: Path, owners: list[str], seed: int, manifest: bool
) -> None:
    """Create the tables and the model: initial weights, one sample and two bucket blobs per owner
    (its training row; its statistics), one approximator vector per owner in Redis. The buckets are
    rows of ``buckets``, or with ``manifest`` one JSON object on the model row (owner -> its two blobs),
    as the service stores them."""
    rng = np.random.default_rng(seed)
    store = LocalArtifactStore(blobs)
    weights = rng.normal(size=(CLASSES, FEATURES + 1)).astype(np.float32)
    hot = redis.Redis.from_url(redis_url)
    rows: list[tuple[int, str, str]] = []
    buckets: list[tuple[int, str, str, str]] = []
    with hot.pipeline(transaction=False) as pipe:
        for owner in owners:
            x = rng.random(FEATURES, dtype=np.float32)
            arrays = store.put(save({"x": x, "y": rng.integers(CLASSES, size=1)}))
            stats = store.put(save({"g": rng.normal(size=(CLASSES, FEATURES + 1)).astype(np.float32)}))
            buckets += [(MODEL_ID, owner, "arrays", arrays), (MODEL_ID, owner, "stats", stats)]
            rows.append((MODEL_ID, f"s-{owner}", owner))
            vector = (1e-3 * rng.normal(size=(CLASSES, FEATURES + 1))).astype(np.float32)
            pipe.set(vector_key(prefix, owner), vector.tobytes())
        pipe.execute()
    with psycopg.connect(dsn) as conn:
        conn.execute(DDL)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO samples VALUES (%s, %s, %s)", rows)
            if not manifest:
                cur.executemany("INSERT INTO buckets VALUES (%s, %s, %s, %s)", buckets)
        digest = store.put(save({"w": weights}))
        by_owner: dict[str, list[str]] = {}
        for _, owner, _, blob in buckets:
            by_owner.setdefault(owner, []).append(blob)
        conn.execute(
            "INSERT INTO models VALUES (%s, 0, NULL, %s, %s)",
            (MODEL_ID, digest, orjson.dumps(by_owner).decode() if manifest else None),
        )
        for chain in (CHAIN, REQUESTS_CHAIN):
            conn.execute("INSERT INTO chain_heads VALUES (%s, 0, %s)", (chain, GENESIS))
        conn.commit()
        conn.execute("ANALYZE")

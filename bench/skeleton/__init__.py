"""A skeleton of the deletion path: about the least any design of it can cost on this machine.

``python -m bench.skeleton`` measures what POST-to-completed costs when each of a deletion's three
transactions is written as the fewest plain SQL statements that still do its durable work, with no ORM,
no framework and no validation beyond what the path needs, on the same stack as ``bench.service``: an
ASGI app on uvicorn, a Celery worker (threads) with Redis as broker, Postgres, Redis and a directory of
content-addressed blobs in the service's own artifact store (fsynced), all sharing the machine's cores with the same open-loop load generator.

What each deletion does, as in the service (bench/README.md, "A skeleton of the deletion path", lists
what it leaves out):

- intake (the API): find the owner's samples; lock the model's requests chain head and take a request id;
  one statement inserts the request (``ON CONFLICT`` on its Idempotency-Key), its ``received`` and
  ``queued`` history and its audit event, and moves the chain head; commit; claim the model's pending
  job in Redis and, if this request took it, send the update task; answer 202;
- round (the worker, under the model's row lock): the queued requests; their owners' approximator
  vectors from Redis; the new weights (the previous plus the sum of the vectors: the Hessian-free
  update's additivity) written as a safetensors blob with two fsyncs; the chain head locked last; one
  statement inserts the version (its garbage: the owners' bucket blobs), the ledger charge, the
  tombstones, the history and audit events, deletes the owners' samples and bucket rows, marks the
  requests applied and moves the model and the chain head; commit;
- completion: publish the version's weights and pointer to Redis and drop the owners' vectors; unlink the
  garbage blobs; under the collection lock and the chain head, one statement marks the requests
  completed with their history and audit events; commit.

Nothing here is used by the service: it is a measurement of the design space, kept so that the figure
can be reproduced.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import orjson

from service.audit.chain import canonical_time, event_hash
from service.subjects import SubjectHasher

ENV_DSN = "SKELETON_DSN"  # psycopg conninfo of the skeleton's database
ENV_REDIS = "SKELETON_REDIS"  # redis:// URL: the broker and the hot store
ENV_BLOBS = "SKELETON_BLOBS"  # directory of the content-addressed blobs
ENV_PREFIX = "SKELETON_PREFIX"  # Redis key prefix and Celery queue name
ENV_VARIANTS = "SKELETON_VARIANTS"  # comma-separated names of VARIANTS to turn on
MODEL_ID = 1
CHAIN = f"model:{MODEL_ID}"  # the model's lifecycle: versions, deletions applied and completed
# What clients did, as the service keeps it (service.audit.service.requests_chain): a chain of its own,
# so that the intake and the worker never wait for each other's lock on one chain head.
REQUESTS_CHAIN = f"model:{MODEL_ID}:requests"
SUBJECTS = SubjectHasher(b"skeleton subject hash key")
COLLECTION_LOCK = 7_000_001  # the advisory lock garbage collection takes, as in service.storage.refs


# Each variant puts back one thing the service does that the skeleton does not, so that its cost can be
# read against the bare skeleton in one sitting (``--ladder``):
VARIANTS = {
    "split": "each data-modifying statement its own round trip instead of one WITH statement",
    "sqlalchemy": "the worker's statements through a SQLAlchemy Session and text() instead of psycopg",
    "fastapi": "the API's route through FastAPI with pydantic models instead of a bare ASGI app",
    "manifest": "the buckets as one JSON manifest on the model row, read and rewritten by every round",
}


def parse_variants(text: str) -> frozenset[str]:
    """Comma-separated variant names; ValueError, naming the known ones, for any other."""
    named = frozenset(v for v in text.split(",") if v)
    unknown = named - set(VARIANTS)
    if unknown:
        raise ValueError(f"unknown skeleton variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
    return named


def variants() -> frozenset[str]:
    """The variants this process runs with (:data:`VARIANTS`, from its environment)."""
    return parse_variants(os.environ.get(ENV_VARIANTS, ""))


def fused(parts: list[str], tail: str = "SELECT 1") -> str:
    """Independent data-modifying statements as one: ``WITH p0 AS (...), p1 AS (...) <tail>``. Postgres
    runs each exactly once, on one snapshot, whether or not the tail reads it."""
    return "WITH " + ",\n".join(f"p{i} AS ({part})" for i, part in enumerate(parts)) + "\n" + tail


def setting(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set (bench.skeleton's driver sets it for its processes)")
    return value


def owner_hashes(owners: list[str]) -> list[str]:
    """The keyed hashes the audit log stores instead of owner ids (the service's :class:`SubjectHasher`)."""
    return [SUBJECTS.owner(o) for o in owners]


def chain_events(
    chain: str, previous_seq: int, previous_hash: str, events: list[dict[str, Any]]
) -> tuple[list[int], list[str], list[str]]:
    """Sequence numbers, JSON bodies and hashes of ``events`` (``type``, ``request_id``, ``version_id``,
    ``payload``) appended after the chain head, hashed as the service hashes its audit events
    (:func:`service.audit.chain.event_hash`)."""
    at = datetime.now(UTC)
    seqs, bodies, hashes = [], [], []
    link = previous_hash
    for offset, event in enumerate(events, start=1):
        seq = previous_seq + offset
        link = event_hash(
            link,
            chain=chain,
            chain_seq=seq,
            at=at,
            event_type=event["type"],
            model_id=MODEL_ID,
            request_id=event["request_id"],
            version_id=event.get("version_id"),
            payload=event["payload"],
        )
        seqs.append(seq)
        bodies.append(orjson.dumps({**event, "at": canonical_time(at)}).decode())
        hashes.append(link)
    return seqs, bodies, hashes


def drop_from_manifest(manifest: Any, owners: list[str]) -> tuple[str, list[str]]:
    """The model's manifest without ``owners`` (re-encoded whole, as the service writes it) and their blobs."""
    buckets = manifest if isinstance(manifest, dict) else orjson.loads(manifest)
    garbage = [blob for owner in owners for blob in buckets.pop(owner, [])]
    return orjson.dumps(buckets).decode(), garbage

"""Erasure is complete: once the request is completed, the subject's ids, feature rows and vectors are in
no store (Postgres, Redis, the artifact store); the audit log keeps keyed hashes only."""

from __future__ import annotations

import io
import uuid

import numpy as np
import pytest
import redis
from sqlalchemy import inspect, text

from service.jobs.state import read_statistics
from service.runtime import Runtime
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration


def _csv(tag: str, n: int = 120, per_owner: int = 3) -> tuple[bytes, np.ndarray]:
    rng = np.random.default_rng(7)
    features = rng.normal(size=(n, 10)).astype(np.float32)
    labels = (features[:, 0] + features[:, 1] > 0).astype(int)
    out = io.StringIO()
    out.write("sample_id,owner_id," + ",".join(f"f{j}" for j in range(10)) + ",label\n")
    for i in range(n):
        cells = ",".join(repr(float(v)) for v in features[i])
        out.write(f"{tag}-s{i},{tag}-u{i // per_owner},{cells},{labels[i]}\n")
    return out.getvalue().encode(), features


def _all_rows_as_text(runtime: Runtime) -> str:
    parts = []
    with runtime.engine.connect() as conn:
        for table in inspect(conn).get_table_names():
            for (row,) in conn.execute(text(f"SELECT row_to_json(t)::text FROM {table} t")):
                parts.append(row)
    return "\n".join(parts)


def _redis_dump(redis_url: str) -> list[bytes]:
    client = redis.Redis.from_url(redis_url)
    out: list[bytes] = []
    for k in client.scan_iter(count=1000):
        out.append(k)
        kind = client.type(k)
        if kind == b"hash":
            for f, v in client.hgetall(k).items():
                out += [f, v]
        elif kind == b"string":
            out.append(client.get(k) or b"")
        elif kind == b"list":
            out += client.lrange(k, 0, -1)
        elif kind == b"set":
            out += list(client.smembers(k))
    return out


def test_the_subjects_data_is_gone_from_every_store(client: Client, runtime: Runtime, redis_url: str) -> None:
    tag = f"erase{uuid.uuid4().hex[:8]}"
    body, features = _csv(tag)
    r = client.http.post("/v1/datasets", files={"file": (f"{tag}.csv", body, "text/csv")})
    assert r.status_code == 201, r.text
    dataset_id = r.json()["id"]
    model_id = client.model(dataset_id, epochs=2)
    client.ready(model_id)

    owner, samples = f"{tag}-u5", [f"{tag}-s15", f"{tag}-s16", f"{tag}-s17"]
    rows = [features[i].tobytes() for i in (15, 16, 17)]
    with runtime.uow() as uow:
        stats = read_statistics(runtime.cache, uow.models.get(model_id).statistics)
    vectors = [stats.vectors[stats.sample_ids.index(s)].numpy().tobytes() for s in samples]
    secrets_ = [owner.encode(), *(s.encode() for s in samples), *rows, *vectors]

    # Before: the subject is everywhere.
    blobs = [runtime.artifacts.get(d) for d in runtime.artifacts.digests()]
    assert any(owner.encode() in b for b in blobs) and any(rows[0] in b for b in blobs)
    assert any(vectors[0] in b for b in blobs)
    assert any(vectors[0] in v for v in _redis_dump(redis_url))
    assert owner in _all_rows_as_text(runtime)

    request_id = client.delete(model_id, owner_ids=[owner])["id"]
    client.done(request_id)

    # After: in no blob (ids, raw feature rows, approximator vectors) ...
    blobs = [runtime.artifacts.get(d) for d in runtime.artifacts.digests()]
    leaks = [s for s in secrets_ for b in blobs if s in b]
    assert not leaks, f"{len(leaks)} traces of the subject remain in the artifact store"
    # ... not in Redis (keys, hash fields, values) ...
    dump = _redis_dump(redis_url)
    assert not [s for s in secrets_ for v in dump if s in v], "traces of the subject remain in Redis"
    # ... not in any Postgres row in plain text.
    everything = _all_rows_as_text(runtime)
    for s in (owner, *samples):
        assert s not in everything, f"{s} is still stored in Postgres"

    # The rest of the data is intact, and the dataset itself shrank too.
    dataset = client.http.get(f"/v1/datasets/{dataset_id}").json()
    assert (dataset["num_rows"], dataset["erased_rows"]) == (117, 3)
    assert client.http.get(f"/v1/models/{model_id}").json()["train_size"] == 117
    assert any(f"{tag}-s18".encode() in b for b in blobs)

    # The audit log knows the subject only by its keyed hash, and can still be searched by it.
    found = client.http.get("/v1/audit/events", params={"owner_id": owner}).json()["events"]
    assert {e["type"] for e in found} >= {"deletion.received", "deletion.applied", "deletion.completed"}
    assert all(e["request_id"] == request_id for e in found)
    received = next(e for e in found if e["type"] == "deletion.received")
    assert runtime.hasher.owner(owner) in received["payload"]["subject_hashes"]
    assert client.http.get("/v1/audit/events", params={"owner_id": f"{tag}-u6"}).json()["events"] == []


def test_an_owner_is_tombstoned_once_nothing_of_theirs_is_left(client: Client, runtime: Runtime) -> None:
    """Named whole, or every sample named one by one: tombstoned as an owner. One sample of three: not."""
    tag = f"tomb{uuid.uuid4().hex[:8]}"
    body, _ = _csv(tag, n=30)
    r = client.http.post("/v1/datasets", files={"file": (f"{tag}.csv", body, "text/csv")})
    assert r.status_code == 201, r.text
    model_id = client.model(r.json()["id"], epochs=1)
    client.ready(model_id)
    whole, by_samples, partly = f"{tag}-u0", f"{tag}-u1", f"{tag}-u2"
    r = client.http.post(
        f"/v1/models/{model_id}/deletions/bulk",
        json={
            "items": [
                {"owner_ids": [whole]},
                {"sample_ids": [f"{tag}-s3", f"{tag}-s4", f"{tag}-s5"]},  # all of u1's
                {"sample_ids": [f"{tag}-s6"]},  # one of u2's three
            ]
        },
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert r.status_code == 202, r.text
    for item in r.json()["results"]:
        client.done(item["id"])
    with runtime.uow() as uow:
        hashes = {runtime.hasher.owner(o): o for o in (whole, by_samples, partly)}
        tombstoned = set(uow.models.erased_among(model_id, list(hashes)))
    assert {hashes[h] for h in tombstoned} == {whole, by_samples}

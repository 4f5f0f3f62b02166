"""No plain subject id at rest once a subject is forgotten: a subject is forgotten (from a model, and from a
dataset no model uses), then named again (409s), next to ids never there (422s), single, bulk and
dataset-wide, each with an Idempotency-Key; afterwards every table of the database, every blob, Redis and
the logs (the API's and the worker's) are searched for the ids. The stored answers exist (a replay
returns them) and name the ids by position in the request."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import text

from service.runtime import Runtime
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration

_PER_OWNER = 3


def _csv(tag: str, n: int = 60) -> bytes:
    lines = ["sample_id,owner_id,f0,f1,f2,label"]
    for i in range(n):
        a, b, c = (i % 7) / 7.0, (i % 5) / 5.0, (i % 3) / 3.0
        lines.append(f"{_sample(tag, i)},{_owner(tag, i // _PER_OWNER)},{a},{b},{c},{int(a + b > 0.8)}")
    return ("\n".join(lines) + "\n").encode()


def _owner(tag: str, k: int) -> str:
    return f"{tag}.u{k:03d}@clinic.example"


def _sample(tag: str, i: int) -> str:
    return f"{tag}.row{i:04d}@clinic.example"


def _subject(tag: str, k: int) -> list[str]:
    """Owner ``k`` of the table and its samples."""
    return [_owner(tag, k), *(_sample(tag, i) for i in range(k * _PER_OWNER, (k + 1) * _PER_OWNER))]


def _upload(client: Client, tag: str) -> int:
    r = client.http.post("/v1/datasets", files={"file": (f"{tag}.csv", _csv(tag), "text/csv")})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _post(client: Client, path: str, body: dict[str, Any], key: str) -> Any:
    return client.http.post(path, json=body, headers={"Idempotency-Key": key})


def _twice(client: Client, path: str, body: dict[str, Any], status: int) -> dict[str, Any]:
    """Send ``body`` with a new key and again with the same key: the first answer is ``status`` (live), the
    second its replay (the stored copy), which names no id of the body; returns the replayed answer."""
    key = str(uuid.uuid4())
    first = _post(client, path, body, key)
    assert first.status_code == status, first.text
    replay = _post(client, path, body, key)
    assert replay.status_code == status, replay.text
    stored = replay.text
    named = [ids for item in body.get("items", [body]) for ids in item.values()]
    assert not [i for ids in named for i in ids if i in stored], stored
    return dict(replay.json())


def _rows_naming(runtime: Runtime, needles: list[str]) -> list[str]:
    """Every row of every table of the database (cast to text) that contains one of ``needles``."""
    hits: list[str] = []
    with runtime.engine.connect() as conn:
        tables = conn.execute(
            text(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
        ).scalars()
        for table in list(tables):
            for needle in needles:
                found = conn.execute(
                    text(f'SELECT t::text FROM "{table}" t WHERE strpos(t::text, :needle) > 0'),
                    {"needle": needle},
                ).scalars()
                hits += [f"{table}: {row[:300]}" for row in found]
    return hits


def _redis_values(redis_url: str) -> list[bytes]:
    client = redis.Redis.from_url(redis_url)
    out: list[bytes] = []
    for k in client.scan_iter(count=1000):
        out.append(k)
        kind = client.type(k)
        if kind == b"hash":
            out += [x for pair in client.hgetall(k).items() for x in pair]
        elif kind == b"string":
            out.append(client.get(k) or b"")
        elif kind == b"list":
            out += client.lrange(k, 0, -1)
        elif kind in (b"set", b"zset"):
            out += list(client.smembers(k)) if kind == b"set" else list(client.zrange(k, 0, -1))
    return out


def _worker_logs(tmp_path_factory: pytest.TempPathFactory) -> str:
    logs = sorted(tmp_path_factory.getbasetemp().glob("worker*/worker.log"))
    assert logs, "the session worker's log was not found"
    return "\n".join(Path(p).read_text(errors="replace") for p in logs)


def test_a_forgotten_subject_is_named_nowhere_at_rest(
    client: Client,
    runtime: Runtime,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    caplog.set_level(logging.INFO, logger="service")
    caplog.set_level(logging.INFO, logger="workers")
    tag = f"plain{uuid.uuid4().hex[:8]}"
    ghost_owner, ghost_sample = f"{tag}.ghost@clinic.example", f"{tag}.ghostrow@clinic.example"

    # A model's subject: forgotten with a key, then named again (409) and next to ids never there (422).
    dataset_id = _upload(client, tag)
    model_id = client.model(dataset_id, epochs=1)
    client.ready(model_id)
    gone = _subject(tag, 5)
    owner = gone[0]
    deletions = f"/v1/models/{model_id}/deletions"
    first = _post(client, deletions, {"owner_ids": [owner]}, str(uuid.uuid4()))
    assert first.status_code == 202, first.text
    client.done(first.json()["id"])

    again = _twice(client, deletions, {"owner_ids": [owner]}, 409)
    assert again["error"]["code"] == "already_forgotten"
    assert again["error"]["message"].startswith("owner owner_ids[0] was already forgotten by request")
    live = _post(client, deletions, {"owner_ids": [owner]}, str(uuid.uuid4()))
    assert owner in live.json()["error"]["message"]  # the live answer names it to the caller
    _twice(client, deletions, {"sample_ids": [gone[1]]}, 409)
    unknown = _twice(
        client, deletions, {"owner_ids": [_owner(tag, 6), ghost_owner], "sample_ids": [ghost_sample]}, 422
    )
    assert "owner_ids[1]" in unknown["error"]["message"] and "sample_ids[0]" in unknown["error"]["message"]
    bulk = _twice(
        client, f"{deletions}/bulk", {"items": [{"owner_ids": [owner]}, {"sample_ids": [ghost_sample]}]}, 207
    )
    assert [r["status"] for r in bulk["results"]] == [409, 422]
    _twice(client, f"/v1/datasets/{dataset_id}/deletions", {"owner_ids": [owner]}, 207)

    # A subject of a dataset no model uses: erased at once, then named again.
    other_tag = f"{tag}x"
    other = _upload(client, other_tag)
    erased = _subject(other_tag, 2)
    key = str(uuid.uuid4())
    r = _post(client, f"/v1/datasets/{other}/deletions", {"owner_ids": [erased[0]]}, key)
    assert r.status_code == 200 and r.json()["erased_rows"] == _PER_OWNER, r.text
    _twice(client, f"/v1/datasets/{other}/deletions", {"owner_ids": [erased[0]]}, 409)
    _twice(client, f"/v1/datasets/{other}/deletions", {"sample_ids": [ghost_sample, erased[2]]}, 422)

    # The 409s and 422s are stored (their replays above came from the table), by position.
    with runtime.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT response_status, response_body::text FROM idempotency_keys WHERE key IS NOT NULL")
        ).all()
    assert any(status == 409 and "owner_ids[0]" in body for status, body in stored)
    assert any(status == 422 and "sample_ids[0]" in body for status, body in stored)

    needles = [*gone, *erased, ghost_owner, ghost_sample]
    # The database: no row of any table names them.
    rows = _rows_naming(runtime, needles)
    assert not rows, "\n".join(rows)
    # The artifact store: no blob (the model's, the datasets' remaining rows) holds them ...
    blobs = [runtime.artifacts.get(d) for d in runtime.artifacts.digests()]
    assert any(_sample(tag, 0).encode() in b for b in blobs)  # the remaining rows are there
    assert not [n for n in needles for b in blobs if n.encode() in b], "a blob names a forgotten subject"
    # ... nor Redis ...
    values = _redis_values(redis_url)
    assert not [n for n in needles for v in values if n.encode() in v], "Redis names a forgotten subject"
    # ... nor the logs of the API (this process) and of the worker.
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    worker = _worker_logs(tmp_path_factory)
    for needle in needles:
        assert needle not in logged, f"the API logged {needle}"
        assert needle not in worker, f"the worker logged {needle}"

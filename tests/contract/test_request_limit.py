"""Request bodies are bounded (LETHE_MAX_REQUEST_BYTES, service.limits): 413 before the route reads them,
with or without a Content-Length; dataset uploads keep their own bound."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.runtime import Runtime
from service.settings import Settings
from tests.databases import fresh_database_url

LIMIT = 4096


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    var: Path = tmp_path_factory.mktemp("lethe-limits")
    settings = Settings(mode="embedded", var_dir=var, database_url=fresh_database_url(), demo_model=False, max_request_bytes=LIMIT)
    with TestClient(create_app(runtime=Runtime(settings))) as client:
        yield client


def _bundled_body(padding: int) -> bytes:
    """A valid bundled-dataset request, padded with whitespace to its size."""
    body = json.dumps({"name": "iris", "display_name": "bounded"}).encode()
    return body + b" " * padding


def _chunks(body: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def _count(client: TestClient) -> int:
    return len(client.get("/v1/datasets").json()["datasets"])


def test_a_body_over_the_limit_is_413_and_does_nothing(bounded: TestClient) -> None:
    before = _count(bounded)
    for content in (_bundled_body(LIMIT), _chunks(_bundled_body(LIMIT))):  # with a length, then chunked
        r = bounded.post(
            "/v1/datasets/bundled", content=content, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 413, r.text
        error = r.json()["error"]
        assert error["code"] == "payload_too_large"
        assert (
            f"{LIMIT:,} bytes (LETHE_MAX_REQUEST_BYTES)" in error["message"]
            and "split it" in error["message"]
        )
    assert _count(bounded) == before


def test_a_body_within_the_limit_is_served_with_or_without_a_length(bounded: TestClient) -> None:
    before = _count(bounded)
    for content in (_bundled_body(LIMIT // 2), _chunks(_bundled_body(LIMIT // 2))):
        r = bounded.post(
            "/v1/datasets/bundled", content=content, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 201, r.text
        assert r.json()["name"] == "bounded"
    assert _count(bounded) == before + 2


def test_dataset_uploads_keep_their_own_larger_bound(bounded: TestClient) -> None:
    rows = ["id,owner,y,a,b"] + [f"s{i},o{i // 2},{i % 2},{i * 0.5:.1f},{i % 7}" for i in range(400)]
    csv = "\n".join(rows).encode()
    assert len(csv) > LIMIT
    r = bounded.post(
        "/v1/datasets?id_column=id&owner_column=owner&label_column=y",
        content=csv,
        headers={"Content-Type": "text/csv"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["num_rows"] == 400

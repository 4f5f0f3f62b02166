"""openapi.yaml is committed and matches the app; the API answers with the documented error shape."""

from __future__ import annotations

from pathlib import Path

import yaml
from fastapi.testclient import TestClient

from service.openapi import dump, schema

SPEC = Path(__file__).resolve().parents[2] / "openapi.yaml"


def test_committed_openapi_matches_the_app() -> None:
    committed = yaml.safe_load(SPEC.read_text())
    current = yaml.safe_load(dump(schema()))
    assert committed == current, (
        "openapi.yaml is out of date with the app: regenerate it with `python -m service.openapi > openapi.yaml` "
        "and review the diff"
    )


def test_drift_is_detected() -> None:
    """Control: a schema that differs from the committed one does not compare equal."""
    current = yaml.safe_load(dump(schema()))
    current["paths"].pop("/healthz")
    assert yaml.safe_load(SPEC.read_text()) != current


def test_every_documented_error_uses_the_error_body() -> None:
    document = schema()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if status.startswith("4"):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorBody"), (method, path, status)


def test_errors_have_code_and_message(embedded: TestClient) -> None:
    cases = [
        (embedded.get("/v1/nothing-here"), 404),
        (embedded.delete("/v1/models"), 405),
        (embedded.get("/v1/models/0"), 422),
        (embedded.get("/v1/models/999999"), 404),
        (
            embedded.post("/v1/models", content=b"{not json", headers={"Content-Type": "application/json"}),
            400,
        ),
        (embedded.post("/v1/models", json={"name": "x"}), 422),
        (
            embedded.post("/v1/models/1/deletions", json={"owner_ids": []}, headers={"Idempotency-Key": "k"}),
            422,
        ),
        (embedded.post("/v1/models/1/predictions", json={"instances": [[1.0, 2.0]]}), 422),
    ]
    for response, status in cases:
        assert response.status_code == status, (response.request.url, response.text)
        error = response.json()["error"]
        assert error["code"] and len(error["message"]) > 10, error


def test_a_body_that_is_not_json_is_415_and_says_what_to_send(embedded: TestClient) -> None:
    # curl -d without a Content-Type header sends a form; FastAPI would answer "not a valid dictionary".
    for content_type in ("application/x-www-form-urlencoded", "text/plain; charset=utf-8"):
        r = embedded.post(
            "/v1/models/1/retrain", content=b'{"reason": "x"}', headers={"Content-Type": content_type}
        )
        assert r.status_code == 415, r.text
        message = r.json()["error"]["message"]
        assert (
            r.json()["error"]["code"] == "unsupported_media_type"
            and "Content-Type: application/json" in message
        )
    # JSON with a schema error is still the field's 422.
    r = embedded.post("/v1/models", content=b'{"name": 5}', headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"


def test_a_405_lists_the_methods_the_path_takes(embedded: TestClient) -> None:
    for method, path, allowed in (
        ("PUT", "/v1/models/1/weights", "GET"),
        ("PATCH", "/v1/models/1", "GET, DELETE"),
        ("DELETE", "/v1/models", "GET, POST"),
    ):
        r = embedded.request(method, path)
        assert r.status_code == 405 and r.headers["Allow"] == allowed, (method, path, r.headers)
        assert r.json()["error"]["message"].endswith(f"; use {allowed}")


def test_health_readiness_and_metrics(embedded: TestClient) -> None:
    assert embedded.get("/healthz").json() == {"status": "ok"}
    ready = embedded.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert set(ready.json()["checks"]) == {"database", "redis", "artifacts", "queue", "workers"}
    metrics = embedded.get("/metrics")
    assert metrics.status_code == 200 and "lethe_http_requests_total" in metrics.text
    assert "lethe_deletions_received_total" in metrics.text

"""Bearer tokens: with LETHE_API_TOKENS set, every /v1 route needs one of them, or, for a call that only
reads (x-lethe-access: read), one of LETHE_READ_TOKENS; probes and metrics never need a token."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.app import create_app
from service.audit.check import check
from service.runtime import Runtime
from service.settings import Settings
from tests.databases import fresh_database_url

TOKENS = ("a" * 24, "second-token-0123456789")
READ_TOKEN = "auditor-token-0123456789"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    var: Path = tmp_path_factory.mktemp("lethe-auth")
    settings = Settings(
        mode="embedded", var_dir=var, database_url=fresh_database_url(), demo_model=False, api_tokens=" , ".join(TOKENS), read_tokens=READ_TOKEN
    )
    with TestClient(create_app(runtime=Runtime(settings))) as client:
        yield client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _operations(client: TestClient, access: str) -> list[tuple[str, str]]:
    """(method, path with every parameter 1) of the app's /v1 operations the OpenAPI document marks
    ``x-lethe-access: access``."""
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    return [
        (method.upper(), re.sub(r"\{[^}]+\}", "1", path))
        for path, item in paths.items()
        if path.startswith("/v1/")
        for method, operation in item.items()
        if operation["x-lethe-access"] == access
    ]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/v1/datasets/1"),
        ("POST", "/v1/models/1/deletions"),
        ("DELETE", "/v1/models/1"),
        ("GET", "/v1/audit/verify"),
        ("POST", "/v1/datasets"),
    ],
)
def test_a_v1_request_without_a_known_token_is_401(guarded: TestClient, method: str, path: str) -> None:
    for headers, needle in (
        ({}, "Authorization: Bearer"),
        ({"Authorization": "Bearer nope-nope-nope-nope"}, "not one of"),
        ({"Authorization": f"Basic {TOKENS[0]}"}, "Authorization: Bearer"),
    ):
        r = guarded.request(method, path, headers=headers)
        assert r.status_code == 401, (method, path, headers, r.text)
        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "unauthorized" and needle in r.json()["error"]["message"]


def test_any_configured_token_is_accepted(guarded: TestClient) -> None:
    for token in TOKENS:
        r = guarded.get("/v1/models", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
    r = guarded.post(
        "/v1/datasets/bundled", json={"name": "iris"}, headers={"Authorization": f"Bearer {TOKENS[1]}"}
    )
    assert r.status_code == 201, r.text


def test_a_read_token_reads_and_predicts(guarded: TestClient) -> None:
    reads = _operations(guarded, "read")
    assert ("POST", "/v1/models/1/predictions") in reads and ("GET", "/v1/audit/events") in reads
    for method, path in reads:
        r = guarded.request(method, path, headers=_bearer(READ_TOKEN), json={"instances": [[0.0]]})
        # past the token check: an answer about the (missing) model, or the data itself
        assert r.status_code in (200, 404), (method, path, r.status_code, r.text)


def test_a_read_token_changes_nothing(guarded: TestClient) -> None:
    writes = _operations(guarded, "write")
    assert {
        ("POST", "/v1/models/1/deletions"),
        ("DELETE", "/v1/datasets/1"),
        ("POST", "/v1/datasets"),
    } <= set(writes)
    before = guarded.get("/v1/datasets", headers=_bearer(TOKENS[0])).json()
    for method, path in writes:
        r = guarded.request(
            method, path, headers={**_bearer(READ_TOKEN), "Idempotency-Key": "k-1"}, json={"name": "iris"}
        )
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        error = r.json()["error"]
        assert error["code"] == "read_only_token"
        assert f"not {method} {path}" in error["message"] and "LETHE_API_TOKENS" in error["message"]
    assert guarded.get("/v1/datasets", headers=_bearer(TOKENS[0])).json() == before


def test_an_auditor_checks_the_log_with_a_read_token(guarded: TestClient) -> None:
    made = guarded.post("/v1/datasets/bundled", json={"name": "iris"}, headers=_bearer(TOKENS[0]))
    assert made.status_code == 201, made.text
    guarded.headers.update(_bearer(READ_TOKEN))
    try:
        reports = check(guarded)
    finally:
        del guarded.headers["Authorization"]
    assert reports and all(r.ok for r in reports)


def test_the_document_says_which_token_each_call_needs(guarded: TestClient) -> None:
    paths = guarded.app.openapi()["paths"]  # type: ignore[attr-defined]
    for path, item in paths.items():
        for method, operation in item.items():
            if not path.startswith("/v1/"):
                assert "x-lethe-access" not in operation, (method, path)
                continue
            access = operation["x-lethe-access"]
            expected = "read" if method == "get" or path.endswith("/predictions") else "write"
            assert access == expected, (method, path)
            assert ("403" in operation["responses"]) == (access == "write"), (method, path)


def test_probes_and_metrics_need_no_token(guarded: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert guarded.get(path).status_code == 200, path


def test_weak_tokens_are_refused_at_start_up() -> None:
    with pytest.raises(ValidationError, match="shorter than 16 characters"):
        Settings(mode="embedded", api_tokens="short")
    with pytest.raises(ValidationError, match="whitespace"):
        Settings(mode="embedded", api_tokens="has a space in it, but long enough")
    assert Settings(mode="embedded").api_token_list == ()
    with pytest.raises(ValidationError, match="LETHE_READ_TOKENS: 1 token"):
        Settings(mode="embedded", api_tokens=TOKENS[0], read_tokens="short")


def test_read_tokens_need_full_tokens_and_a_role_each() -> None:
    with pytest.raises(ValidationError, match="LETHE_READ_TOKENS needs LETHE_API_TOKENS"):
        Settings(mode="embedded", read_tokens=READ_TOKEN)
    with pytest.raises(ValidationError, match="in both LETHE_API_TOKENS and LETHE_READ_TOKENS"):
        Settings(mode="embedded", api_tokens=",".join(TOKENS), read_tokens=f"{READ_TOKEN},{TOKENS[1]}")


def test_without_tokens_the_api_is_open(embedded: TestClient) -> None:
    assert embedded.get("/v1/models").status_code == 200

"""Bearer tokens (LETHE_API_TOKENS): when set, every /v1 route needs one; probes and metrics never do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.app import create_app
from service.runtime import Runtime
from service.settings import Settings

TOKENS = ("a" * 24, "second-token-0123456789")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    var: Path = tmp_path_factory.mktemp("lethe-auth")
    settings = Settings(mode="embedded", var_dir=var, demo_model=False, api_tokens=" , ".join(TOKENS))
    with TestClient(create_app(runtime=Runtime(settings))) as client:
        yield client


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


def test_probes_and_metrics_need_no_token(guarded: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert guarded.get(path).status_code == 200, path


def test_weak_tokens_are_refused_at_start_up() -> None:
    with pytest.raises(ValidationError, match="shorter than 16 characters"):
        Settings(mode="embedded", api_tokens="short")
    with pytest.raises(ValidationError, match="whitespace"):
        Settings(mode="embedded", api_tokens="has a space in it, but long enough")
    assert Settings(mode="embedded").api_token_list == ()


def test_without_tokens_the_api_is_open(embedded: TestClient) -> None:
    assert embedded.get("/v1/models").status_code == 200

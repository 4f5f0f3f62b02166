"""A bounded property-based run over the committed openapi.yaml against the embedded app: no input
the schema allows (or that schemathesis derives to break it) may produce a 5xx.

Bounded so the whole run takes well under two minutes: ``MAX_EXAMPLES`` cases per operation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from service.runtime import Runtime
from tests.contract.conftest import settle

SPEC = Path(__file__).resolve().parents[2] / "openapi.yaml"
MAX_EXAMPLES = 25

schema = schemathesis.openapi.from_path(SPEC)
SETTLE_SECONDS = 300
BUSY = ("queued", "training", "retraining")


@pytest.fixture(scope="module", autouse=True)
def settled(embedded: TestClient, embedded_runtime: Runtime) -> Iterator[None]:
    """After the last case, wait until the session's app has finished what the fuzzer started on it
    (registrations train, retrains run, on its in-process worker). Later modules patch job functions
    for the whole process (tests/contract/test_update_failures.py): a job of this app still running
    then would run the patched code against its own store and spoil their checks. The fuzzer's models are
    deleted first: a registration with the largest hyperparameters trains for tens of seconds, and a queued
    training of a deleted model ends at once."""
    yield
    for m in embedded.get("/v1/models", params={"limit": 500}).json()["models"]:
        if m["status"]["state"] in BUSY:
            embedded.delete(f"/v1/models/{m['id']}")
    deadline = time.monotonic() + SETTLE_SECONDS
    while busy := [
        m["id"]
        for m in embedded.get("/v1/models", params={"limit": 500}).json()["models"]
        if m["status"]["state"] in BUSY
    ]:
        assert time.monotonic() < deadline, f"models {busy} of the fuzzed app never settled"
        time.sleep(0.1)
    settle(embedded_runtime)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
def test_no_server_errors(case: schemathesis.Case, embedded_app: FastAPI, embedded: TestClient) -> None:
    response = case.call(app=embedded_app)
    case.validate_response(response, checks=[not_a_server_error])

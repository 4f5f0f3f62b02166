"""A bounded property-based run over the committed openapi.yaml against the embedded app: no input
the schema allows (or that schemathesis derives to break it) may produce a 5xx.

Bounded so the whole run takes well under two minutes: ``MAX_EXAMPLES`` cases per operation.
"""

from __future__ import annotations

from pathlib import Path

import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

SPEC = Path(__file__).resolve().parents[2] / "openapi.yaml"
MAX_EXAMPLES = 25

schema = schemathesis.openapi.from_path(SPEC)


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

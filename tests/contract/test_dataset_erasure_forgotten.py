"""POST /v1/datasets/{id}/deletions on a dataset no model uses: naming a subject erased before answers 409
already_forgotten (as a model's deletions do), a subject never there 422 unknown_subject (embedded app)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient

from service.runtime import Runtime
from tests.contract.conftest import api_error, forget_owner


def _dataset(client: TestClient) -> int:
    r = client.post("/v1/datasets/bundled", json={"name": "synthetic", "n": 40, "samples_per_owner": 2})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _erase(client: TestClient, dataset_id: int, **body: Any) -> Any:
    return client.post(
        f"/v1/datasets/{dataset_id}/deletions", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}
    )


def test_an_owner_erased_before_is_already_forgotten_and_a_stranger_unknown(client: TestClient) -> None:
    dataset_id = _dataset(client)
    first = _erase(client, dataset_id, owner_ids=["owner-00003"], sample_ids=["syn-00000"])
    assert first.status_code == 200 and first.json()["erased_rows"] == 3, first.text

    message = api_error(_erase(client, dataset_id, owner_ids=["owner-00003"]), 409, "already_forgotten")
    assert "'owner-00003'" in message and f"dataset {dataset_id}" in message
    sample = api_error(_erase(client, dataset_id, sample_ids=["syn-00000"]), 409, "already_forgotten")
    assert "'syn-00000'" in sample
    # A sample that left with its owner is forgotten too.
    api_error(_erase(client, dataset_id, sample_ids=["syn-00006"]), 409, "already_forgotten")

    unknown = api_error(_erase(client, dataset_id, owner_ids=["nobody"]), 422, "unknown_subject")
    assert "'nobody'" in unknown
    mixed = api_error(_erase(client, dataset_id, owner_ids=["owner-00003", "nobody"]), 422, "unknown_subject")
    assert "'nobody'" in mixed and "owner-00003" not in mixed  # only the id that never was is named
    # Nothing more was erased by the refused requests; a live owner still goes.
    assert client.get(f"/v1/datasets/{dataset_id}").json()["num_rows"] == 37
    assert _erase(client, dataset_id, owner_ids=["owner-00004"]).json()["erased_rows"] == 2


def test_erased_in_another_dataset_is_unknown_here(client: TestClient) -> None:
    one, other = _dataset(client), _dataset(client)  # the same synthetic ids in both
    assert _erase(client, one, owner_ids=["owner-00007"]).status_code == 200
    assert _erase(client, other, owner_ids=["owner-00007"]).status_code == 200  # still there: erased
    api_error(_erase(client, other, owner_ids=["owner-00007"]), 409, "already_forgotten")
    third = _dataset(client)
    still = _erase(client, third, owner_ids=["owner-00007"])
    assert still.status_code == 200  # a fresh dataset still holds it


def test_an_owner_forgotten_by_a_deleted_model_is_already_forgotten(
    fresh: tuple[TestClient, Runtime],
) -> None:
    client, _ = fresh
    request = forget_owner(client, "owner-00002")  # model 1 erases it from dataset 1 too
    assert client.delete("/v1/models/1").status_code == 200
    message = api_error(_erase(client, 1, owner_ids=["owner-00002"]), 409, "already_forgotten")
    assert f"request {request['id']}" in message
    api_error(_erase(client, 1, owner_ids=["owner-99999"]), 422, "unknown_subject")

"""Embedded mode: a collection graph whose every node a request deletes leaves whole, and its owner counts
as forgotten, as when the graph is named whole (the portable path wrote no tombstone for that owner)."""

from __future__ import annotations

import time
import uuid

from fastapi.testclient import TestClient

from tests.contract.conftest import api_error, forget
from tests.integration.test_graphs import _tu_text


def test_the_owner_of_a_graph_emptied_node_by_node_is_forgotten(client: TestClient) -> None:
    text = _tu_text(graphs=12)
    upload = client.post("/v1/datasets?format=tu", files={"file": ("g.txt", text.encode(), "text/plain")})
    assert upload.status_code == 201, upload.text
    body = {
        "name": "c",
        "dataset_id": upload.json()["id"],
        "method": "graph_classification_newton",
        "budget_policy": {"max_deletion_fraction": 0.9},
    }
    model = client.post("/v1/models", json=body)
    assert model.status_code == 202, model.text
    model_id = model.json()["id"]
    deadline = time.monotonic() + 120
    while client.get(f"/v1/models/{model_id}").json()["status"]["state"] != "ready":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sizes, line = [], 1  # each graph's node count, from its header line in the TU text
    lines = text.splitlines()
    while len(sizes) < 12:
        size = int(lines[line].split()[0])
        sizes.append(size)
        line += 1 + size
    forget(client, model_id, graph_nodes=[["5", str(v)] for v in range(sizes[5])])
    for subjects in ({"owner_ids": ["5"]}, {"graph_ids": ["5"]}):
        r = client.post(
            f"/v1/models/{model_id}/deletions", json=subjects, headers={"Idempotency-Key": str(uuid.uuid4())}
        )
        assert "already forgotten" in api_error(r, 409, "already_forgotten"), subjects

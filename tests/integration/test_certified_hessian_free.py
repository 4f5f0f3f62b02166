"""A certified Hessian-free model through the service: a hundred single deletions, each released as a
``certified`` version with the sigma fixed at registration, the noisy served weights as accurate on held-out
rows as the first release (docs/hessian_free.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.integration.conftest import Client
from unlearning.data.builtin import make_synthetic

pytestmark = pytest.mark.integration

_N, _SEED = 400, 9


def _held_out_accuracy(client: Client, model_id: int) -> float:
    # The bundled synthetic table draws its class centres first from the seed: a larger draw with the same
    # seed shares them, and its rows past the first _N are fresh samples of the same classes.
    rows = make_synthetic(3 * _N, 20, 4, _SEED)
    features, labels = rows.features[_N:], np.asarray(rows.labels[_N:])
    r = client.http.post(f"/v1/models/{model_id}/predictions", json={"instances": features.tolist()})
    assert r.status_code == 200, r.text
    predicted = np.asarray([p["label"] for p in r.json()["predictions"]])
    return float(np.mean(predicted == labels))


def test_a_hundred_certified_deletions_keep_sigma_and_accuracy(client: Client, service_env: dict[str, str]) -> None:
    r = client.http.post("/v1/datasets/bundled", json={"name": "synthetic", "n": _N, "seed": _SEED})
    assert r.status_code == 201, r.text
    body = {
        "name": "certified-hf",
        "dataset_id": int(r.json()["id"]),
        "method": "hessian_free",
        "hyperparameters": {"feature_scaling": "none"},
        "release_mode": "certified",
        "privacy": {"epsilon": 1.0, "delta": 1e-3},
        "budget_policy": {"max_deletion_fraction": 0.5},
    }
    r = client.http.post("/v1/models", json=body)
    assert r.status_code == 202, r.text
    model_id = int(r.json()["id"])
    client.ready(model_id, timeout=300)
    first = _held_out_accuracy(client, model_id)
    requests = [client.delete(model_id, sample_ids=[f"syn-{i:05d}"])["id"] for i in range(0, 200, 2)]
    done = [client.done(request_id, timeout=300) for request_id in requests]
    certificates = [d["version"]["certificate"] for d in done]
    assert {c["guarantee"] for c in certificates} == {"certified"}
    assert len({c["sigma"] for c in certificates}) == 1 and certificates[0]["sigma"] > 0
    assert {d["version"]["kind"] for d in done} == {"unlearned"}, "a retrain replaced the certified updates"
    last = _held_out_accuracy(client, model_id)
    assert first > 0.8 and last >= first - 0.02, (first, last)
    # An auditor with the deployment's credentials recomputes the served version's residual.
    audit = subprocess.run(
        [sys.executable, "-m", "service.residual_audit", str(model_id)],
        env={**os.environ, **service_env}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stderr
    result = json.loads(audit.stdout)
    assert result["within_cap"] is True and result["bound"] <= result["sensitivity_cap"], result

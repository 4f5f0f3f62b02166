"""A deletion round stores again only what the forget changed: the feature-scaling statistics a table
model carries through every forget keep their blobs (each round would otherwise encode, hash and write
them anew)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from service.db.tables import Model, ModelVersion
from service.jobs.drain import apply_deletions
from tests.integration.conftest import Deployment

pytestmark = pytest.mark.integration


def _current_artifacts(d: Deployment, model_id: int) -> tuple[int, dict[str, str]]:
    """(seq, artifacts) of the model's current version (superseded versions' blobs are purged)."""
    with d.runtime.uow() as uow:
        row = uow.session.execute(
            select(ModelVersion.seq, ModelVersion.artifacts)
            .join(Model, Model.current_version_id == ModelVersion.id)
            .where(Model.id == model_id)
        ).one()
        return int(row[0]), dict(row[1])


def test_the_scaling_statistics_keep_their_blobs_across_rounds(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    model_id = d.trained_model()
    seq, first = _current_artifacts(d, model_id)
    written: list[str] = []
    put = d.runtime.artifacts.put

    def recording_put(data: bytes) -> str:
        written.append(digest := put(data))
        return digest

    monkeypatch.setattr(d.runtime.artifacts, "put", recording_put)
    assert seq == 1 and {"feature_offset", "feature_scale"} <= set(first), first  # the table was scaled
    for owner in ("owner-00000", "owner-00001"):
        request_id = int(d.client.delete(model_id, owner_ids=[owner])["id"])
        apply_deletions(d.runtime, model_id)
        assert d.client.done(request_id)["state"] == "completed"
        seq, later = _current_artifacts(d, model_id)
        assert seq > 1
        assert later["feature_offset"] == first["feature_offset"]
        assert later["feature_scale"] == first["feature_scale"]
    assert written  # the rounds wrote their weights and buckets...
    assert not {first["feature_offset"], first["feature_scale"]} & set(written)  # ...not the statistics again

"""Production mode with the blobs in an S3 bucket (LETHE_ARTIFACT_URL): the API and a Celery worker in
another process share nothing but Postgres, Redis and the bucket; a trained model forgets an owner and
the owner's blobs leave the bucket. The bucket is served by moto's S3 server (tests/s3_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import stack
from service.storage.buckets import bucket_of
from service.storage.s3 import S3ArtifactStore
from tests.integration.conftest import deployment_of_its_own
from tests.s3_server import S3Server

pytestmark = pytest.mark.integration


def test_api_and_worker_share_blobs_through_the_bucket_and_erase_from_it(
    tmp_path: Path, s3: S3Server
) -> None:
    bucket = s3.bucket()
    with deployment_of_its_own(
        tmp_path, artifact_dir="", artifact_url=f"s3://{bucket}/blobs", s3_endpoint_url=s3.endpoint_url
    ) as d:
        assert isinstance(d.runtime.artifacts, S3ArtifactStore)
        with stack.celery_worker(d.env, tmp_path / "worker.log", name="s3-worker"):
            model_id = d.client.trained(n=90, samples_per_owner=3)  # trained by the worker, read by the API
            with d.runtime.uow() as uow:
                model = uow.models.get(model_id)
                assert model is not None and model.training is not None
                owner_bucket = model.training["buckets"][
                    bucket_of("owner-00004", int(model.training["num_buckets"]))
                ]
            assert d.runtime.artifacts.exists(owner_bucket)
            done = d.client.done(d.client.delete(model_id, owner_ids=["owner-00004"])["id"])
            assert done["version"]["seq"] == 2
            assert not d.runtime.artifacts.exists(owner_bucket)  # unlinked from the bucket by the worker
            weights = d.client.http.get(f"/v1/models/{model_id}/weights")
            assert weights.status_code == 200 and weights.headers["X-Model-Version"] == "2"
        assert not (tmp_path / "var" / "artifacts").exists()  # nothing went to a local directory
        assert "Traceback" not in (tmp_path / "worker.log").read_text()

"""The embedded app with its blobs in an S3 bucket (LETHE_ARTIFACT_URL): training, predictions and a
deletion work as on a directory, and the forgotten owner's blobs leave the bucket."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from service.app import create_app
from service.runtime import Runtime
from service.settings import Settings
from service.storage.buckets import bucket_of
from service.storage.s3 import S3ArtifactStore
from tests.contract.conftest import forget_owner, train_small_model
from tests.databases import fresh_database_url
from tests.s3_server import S3Server


def test_a_deletion_erases_the_owner_s_blobs_from_the_bucket(tmp_path: Path, s3: S3Server) -> None:
    bucket = s3.bucket()
    runtime = Runtime(
        Settings(
            mode="embedded",
            var_dir=tmp_path,
            database_url=fresh_database_url(),
            demo_model=False,
            artifact_url=f"s3://{bucket}/lethe",
            s3_endpoint_url=s3.endpoint_url,
        )
    )
    assert isinstance(runtime.artifacts, S3ArtifactStore)
    with TestClient(create_app(runtime=runtime)) as client:
        train_small_model(client)
        assert client.get("/readyz").json()["checks"]["artifacts"] == "ok"
        with runtime.uow() as uow:
            model = uow.models.get(1)
            assert model is not None and model.training is not None
            owner_bucket = model.training["buckets"][
                bucket_of("owner-00004", int(model.training["num_buckets"]))
            ]
            samples = uow.models.samples_of_owners(1, ["owner-00004"])["owner-00004"]
        keys = {o["Key"] for o in runtime.artifacts.client.list_objects_v2(Bucket=bucket)["Contents"]}
        assert f"lethe/{owner_bucket}" in keys and not (tmp_path / "artifacts").exists()
        assert client.post("/v1/models/1/predictions", json={"sample_ids": samples}).status_code == 200

        assert forget_owner(client, "owner-00004")["version"]["seq"] == 2
        assert not runtime.artifacts.exists(owner_bucket)  # gone from the bucket, not only unreferenced
        weights = client.get("/v1/models/1/weights")
        assert weights.status_code == 200 and weights.headers["X-Model-Version"] == "2"
